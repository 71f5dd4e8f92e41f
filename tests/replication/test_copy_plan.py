"""How copy ranges are grouped into Spark tasks and share a task's buffer budget (pure logic)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from mirrorflow.kafka.partition_reader import READER_DEFAULTS, tuned
from mirrorflow.kafka.transfer import WRITER_DEFAULTS
from mirrorflow.replication import copy_group
from mirrorflow.replication.copy_group import TASK_MEMORY_BYTES
from mirrorflow.replication.copy_plan import (
    idle_counts,
    reads_committed,
    spread,
    spread_quiet,
    summarise,
    totals_line,
)
from mirrorflow.replication.copy_quiet import classify
from mirrorflow.replication.copy_task import RECORD_OVERHEAD_BYTES, CopyResult, CopyTask, buffer_settings

MIB = 1024 * 1024

BASE = CopyTask(
    flow="A->B",
    source="A",
    target="B",
    topic="t",
    partition=0,
    remote_topic="A.t",
    end=None,
    run_seconds=1.0,
    exactly_once=True,
    start_at_latest=False,
    transactional_id="x",
    progress_topic="p",
    offset_map_topic="m",
    offset_syncs_topic=None,
    offset_syncs_on_target=False,
    offset_lag_max=100,
    provenance=False,
    timeout_s=1.0,
)


def ranges(n: int) -> list[CopyTask]:
    return [replace(BASE, partition=p) for p in range(n)]


def partitions(groups: list[list[CopyTask]]) -> list[list[int]]:
    return [[t.partition for t in g] for g in groups]


def test_one_range_per_task_while_slots_suffice() -> None:
    assert partitions(spread(ranges(3), slots=8, most_per_task=8)) == [[0], [1], [2]]


def test_more_partitions_than_slots_fill_every_slot_round_robin() -> None:
    assert partitions(spread(ranges(5), slots=2, most_per_task=8)) == [[0, 2, 4], [1, 3]]


def test_a_group_never_exceeds_the_limit() -> None:
    groups = spread(ranges(100), slots=4, most_per_task=8)
    assert len(groups) == 13
    assert max(len(g) for g in groups) <= 8
    assert sorted(t.partition for g in groups for t in g) == list(range(100))


@pytest.mark.parametrize("n", [0, 1, 7])
def test_every_range_lands_in_exactly_one_group(n: int) -> None:
    groups = spread(ranges(n), slots=3, most_per_task=2)
    assert sorted(t.partition for g in groups for t in g) == list(range(n))
    assert all(groups)


def test_a_single_range_keeps_the_full_buffers() -> None:
    batch_bytes, batch_records, reader, writer = buffer_settings(BASE)
    assert (batch_bytes, batch_records) == (64 * MIB, BASE.batch_records)
    assert reader == {
        "queued.max.messages.kbytes": 64 * 1024,  # librdkafka's own default
        "queued.min.messages": 100_000,  # librdkafka's own default: 64 MiB / 512 B is more
        "fetch.message.max.bytes": 8 * MIB,  # the transfer default: 131,072 records of 64 B
    }
    assert writer == {"queue.buffering.max.kbytes": 128 * 1024, "queue.buffering.max.messages": 100_000}


def test_ranges_sharing_a_task_share_its_buffer_budget_in_bytes_and_in_records() -> None:
    shared = replace(BASE, memory_bytes=TASK_MEMORY_BYTES // 8)
    batch_bytes, batch_records, reader, writer = buffer_settings(shared)
    assert batch_bytes == 8 * MIB
    assert reader["queued.max.messages.kbytes"] * 1024 + batch_bytes + writer["queue.buffering.max.kbytes"] * 1024 == (
        TASK_MEMORY_BYTES // 8
    )
    # Records count too (librdkafka's and Python's per-record cost): 8 MiB at 512 B a record.
    records = 8 * MIB // RECORD_OVERHEAD_BYTES
    assert (batch_records, reader["queued.min.messages"], writer["queue.buffering.max.messages"]) == (
        records,
        records,
        2 * records,
    )
    assert reader["fetch.message.max.bytes"] == MIB  # one fetch of 100 B records stays within the record cap
    # a smaller configured transaction stays smaller
    assert buffer_settings(replace(shared, batch_bytes=MIB)).batch_bytes == MIB
    # the byte-only baseline of the benchmarks
    unbounded = buffer_settings(replace(shared, record_overhead_bytes=0))
    assert unbounded.batch_records == BASE.batch_records and "queued.min.messages" not in unbounded.reader


def test_operator_settings_win_over_the_buffer_budget() -> None:
    _, _, reader, writer = buffer_settings(replace(BASE, memory_bytes=TASK_MEMORY_BYTES // 8))
    conf = {"queued.max.messages.kbytes": "2048", "queue.buffering.max.kbytes": "4096"}
    assert "queued.max.messages.kbytes" not in tuned(conf, {**READER_DEFAULTS, **reader})
    assert "queue.buffering.max.kbytes" not in tuned(conf, {**WRITER_DEFAULTS, **writer})


def test_copy_ranges_divides_the_task_budget_among_its_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def fake_copy_range(task: CopyTask, **_: object) -> None:
        seen.append(task.memory_bytes)

    monkeypatch.setattr(copy_group, "copy_range", fake_copy_range)
    copy_group.copy_ranges(ranges(4))
    assert seen == [TASK_MEMORY_BYTES // 4] * 4
    seen.clear()
    copy_group.copy_ranges(ranges(1))
    assert seen == [BASE.memory_bytes]


@pytest.mark.parametrize(
    ("exactly_once", "isolation", "committed"),
    [
        (True, None, True),
        (True, "read_uncommitted", True),  # a transaction on the target cannot make an aborted record right
        (False, None, True),  # at-least-once never copies aborted source records by default
        (False, "read_committed", True),
        (False, "read_uncommitted", False),  # the operator's explicit choice, as MM2 honours it
        (False, " READ_UNCOMMITTED ", False),
    ],
)
def test_source_isolation(exactly_once: bool, isolation: str | None, committed: bool) -> None:
    conf = {} if isolation is None else {"isolation.level": isolation}
    assert reads_committed(exactly_once, conf) is committed


def test_the_task_log_gets_totals_of_the_same_size_at_any_partition_count() -> None:
    """The copy job prints `totals_line` into the Airflow task log: 10,000 partitions must not make it grow (the
    full summary, one line per partition, is ~2 MB there and goes to the summary file only)."""

    def line(partitions: int) -> str:
        results = [CopyResult(f"t{p % 50}", p, f"A.t{p % 50}", 0, 10, 10, 10, 1000) for p in range(partitions)]
        return totals_line(summarise(results))

    small, large = line(10), line(10_000)
    assert len(large) < 50_000 and len(large) - len(small) < 20, (len(small), len(large))
    totals = json.loads(large)
    assert (totals["records"], totals["partitions"], totals["topics"]) == (100_000, 10_000, 50)
    assert "ranges" not in totals


def test_idle_partitions_and_the_spark_tasks_they_hold_are_counted() -> None:
    """A continuous run holds one core per Spark task for its whole length: a task whose partitions all copied
    nothing held its slot for nothing, and the summary says how many did."""

    def result(topic: str, partition: int, records: int) -> CopyResult:
        return CopyResult(topic, partition, f"A.{topic}", 0, records, records, records)

    groups = [[("busy", 0), ("quiet", 0)], [("quiet", 1), ("quiet", 2)], [("busy", 1)]]
    results = [result("busy", 0, 5), result("quiet", 0, 0), result("quiet", 1, 0), result("quiet", 2, 0)]
    results.append(result("busy", 1, 3))
    assert idle_counts(groups, results) == {"idle_partitions": 3, "idle_spark_tasks": 1}
    assert idle_counts([], []) == {"idle_partitions": 0, "idle_spark_tasks": 0}


def test_spread_never_makes_more_groups_than_a_continuous_copys_cores() -> None:
    """Review (issue 22): the cores win over `most_per_task` (tests/spark/test_standalone_sizing.py runs it)."""
    assert partitions(spread(ranges(2), slots=2, most_per_task=8, most_groups=1)) == [[0, 1]]
    assert [len(g) for g in spread(ranges(40), slots=2, most_per_task=8, most_groups=2)] == [20, 20]
    assert len(spread(ranges(40), slots=8, most_per_task=8, most_groups=None)) == 8


def test_quiet_partitions_share_one_task_and_busy_ones_the_other_slots() -> None:
    quiet = {("t", 1), ("t", 3), ("t", 4)}
    assert partitions(spread_quiet(ranges(5), quiet, slots=2, most_per_task=8)) == [[0, 2], [1, 3, 4]]
    assert partitions(spread_quiet(ranges(5), quiet, slots=3, most_per_task=8)) == [[0], [2], [1, 3, 4]]


def test_an_idle_flow_holds_one_task() -> None:
    every = {("t", p) for p in range(40)}
    assert len(spread_quiet(ranges(40), every, slots=8, most_per_task=8)) == 1
    assert len(spread_quiet(ranges(40), every, slots=8, most_per_task=8, most_groups=4)) == 1


def test_nothing_is_set_aside_without_quiet_partitions_or_a_second_slot() -> None:
    assert spread_quiet(ranges(5), set(), slots=2, most_per_task=8) == spread(ranges(5), 2, 8)
    assert spread_quiet(ranges(5), {("t", 0)}, slots=1, most_per_task=8) == spread(ranges(5), 1, 8)
    assert spread_quiet(ranges(5), {("t", 0)}, slots=4, most_per_task=8, most_groups=1) == spread(ranges(5), 4, 8, 1)


def test_the_quiet_task_counts_against_the_cores() -> None:
    quiet = {("t", p) for p in range(20, 40)}
    groups = spread_quiet(ranges(40), quiet, slots=8, most_per_task=8, most_groups=2)
    assert len(groups) == 2 and partitions(groups)[-1] == list(range(20, 40))
    assert sorted(t.partition for g in groups for t in g) == list(range(40))


def test_quiet_means_empty_or_nothing_produced_nor_copied_since_the_cutoff() -> None:
    source = {("t", 0): 100, ("t", 1): 100, ("t", 2): -1, ("t", 3): 5_000, ("t", 4): 300, ("t", 5): 100}
    remote = {("A.t", 0): 100, ("A.t", 1): 900, ("A.t", 2): -1, ("A.t", 3): 5_000, ("A.t", 4): 200, ("A.t", 5): 2_000}
    # 0: copied (at least once, same timestamp); 1: a marker committed after it; 2: empty; 3: produced after the
    # cutoff; 4: produced after the copy's last write (a backlog); 5: the copy wrote after the cutoff; 6: not listed.
    assert classify(ranges(7), source, remote, cutoff_ms=1_000) == {("t", 0), ("t", 1), ("t", 2)}


def test_a_source_said_empty_while_its_copy_writes_now_is_busy() -> None:
    """The deployed bench (session 21) saw a busy partition at 46k records/s classified quiet for one round at a
    time (the broker's newest-timestamp answer for it came back with no offset, read as "empty"), which
    regrouped every Spark task of the leased application at three rounds in a row: a source answer of "empty"
    counts only when the remote partition has had no write since the cutoff either."""
    source = {("t", 0): -1, ("t", 1): -1}
    remote = {("A.t", 0): 5_000, ("A.t", 1): -1}
    assert classify(ranges(2), source, remote, cutoff_ms=1_000) == {("t", 1)}

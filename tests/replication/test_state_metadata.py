"""The ranges of one Spark task share what they ask of the state topics' metadata (`LogCache.topic`,
`LogReader.counts_after`) and one client asking true ends (`LogCache.asker`): every metadata answer lists all of a
state topic's slots, so asking it at every read cost more than the state itself (issue 17). A count kept from
before a copy's fence must not decide what it reads after: a run fenced there may have grown the state topics and
moved the partition's state up (`copy_slots.after_fence`). Real brokers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from tests.kafka_helpers import KafkaKit, read_partition
from tests.replication.helpers import FAULT_KEYS
from tests.replication.test_state_shared_reads import PARTITIONS, SLOTS_FOR, planned, produce, slotted_flow
from tests.replication.test_state_slots import state_topics

import mirrorflow.kafka.compacted_log as compacted_log
from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.state_slots import head_slot
from mirrorflow.kafka.log_cache import LogCache
from mirrorflow.replication import copy_slots
from mirrorflow.replication.audit import audit_flow
from mirrorflow.replication.copy_group import copy_ranges
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_slots import state_reader
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.internal_topics import create_internal_topics

pytestmark = pytest.mark.integration

COMMITTED = {"isolation.level": "read_committed"}


class _Counting:
    """A consumer whose `list_topics(topic)` calls are counted per topic."""

    def __init__(self, inner: Any, asked: Counter[str]) -> None:
        self._inner, self._asked = inner, asked

    def list_topics(self, topic: str | None = None, *args: Any, **kwargs: Any) -> Any:
        self._asked[str(topic)] += 1
        return self._inner.list_topics(topic, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def count_metadata(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Metadata requests per topic that the state readers (`compacted_log`'s clients) make from now on."""
    asked: Counter[str] = Counter()
    real = compacted_log.make_consumer
    monkeypatch.setattr(compacted_log, "make_consumer", lambda *a, **k: _Counting(real(*a, **k), asked))
    return asked


@pytest.mark.timeout(600)
@pytest.mark.parametrize("other_run", ["older", "newer"])
def test_a_count_kept_from_before_a_growth_never_hides_the_moved_state(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch, other_run: str
) -> None:
    """A Spark task's cache holds the 4-slot count; the state topics then grow to 8 slots and another run copies
    the partition, moving its state up to its new head. The task's range, planned at 4 slots, then starts:
    - the other run is older (an interval copy): the range reads its progress ahead with the kept count (allowed
      up to `RECENT_COUNT_S` old, made to pass here), fences, and must resume from the moved progress: a chain
      read at 4 slots misses it and copies again what the other run committed (exactly-once duplicates);
    - the other run is newer (it claimed at the new head): the read ahead must see the claim and leave the
      partition without fencing; a count kept from the task's start (minutes old in a real run) missed it, and
      the range fenced the newer run and copied."""
    flow, _sep, topic, remote = slotted_flow(write_config, kafka, monkeypatch, "exactly-once")
    values: dict[int, list[bytes]] = {}
    produce(kafka, topic, values, 0, 30)
    assert sum(r.records for r in copy_ranges(planned(flow, topic, remote, continuous=False))) == 30 * PARTITIONS
    p = next(p for p in range(PARTITIONS) if head_slot(topic, p, 4) != head_slot(topic, p, 8))
    ours = replace(next(t for t in planned(flow, topic, remote, continuous=True) if t.partition == p), run_seconds=3)

    with LogCache() as cache:
        kept = state_reader(ours, cache)  # the task's first read ahead: the cache keeps the 4-slot count
        kept.reader.close()
        assert kept.progress is not None and kept.progress.next_upstream == 30

        with FlowClients(flow) as clients:
            create_internal_topics(flow, clients, source_partitions=2 * SLOTS_FOR)
        produce(kafka, topic, values, 30, 30)
        replanned = plan_copy(flow, [SourcePartitions(topic, remote, PARTITIONS)], interval=other_run == "older")
        other = next(t for t in replanned if t.partition == p)
        if other_run == "newer":
            other = replace(other, run_seconds=2, run_started_ms=ours.run_started_ms + 1)
        assert other.state_partitions == 8 and copy_ranges([other])[0].records == 30  # moved up to the 8-slot head

        produce(kafka, topic, values, 60, 30)
        if other_run == "older":
            monkeypatch.setattr(copy_slots, "RECENT_COUNT_S", 3600.0)  # the read ahead takes the kept count too
            assert [r.records for r in copy_ranges([ours], cache)] == [30], "resumed where the other run ended"
        else:
            monkeypatch.setattr(copy_slots, "RECENT_COUNT_S", 0.0)  # the kept count is older than the range
            left = copy_ranges([ours], cache)[0]
            assert (left.records, left.handed_over) == (0, True), "left to the newer run's claim"
            assert [r.records for r in copy_ranges([other])] == [30]
    copied = [m.value() for m in read_partition(kafka.consumer("B", COMMITTED), remote, p)]
    assert copied == values[p], "every record once, in order"
    report = audit_flow(flow, topics=topic)
    assert {k: report[k] for k in FAULT_KEYS} == dict.fromkeys(FAULT_KEYS, 0) and report["clean"] is True, report


@pytest.mark.timeout(600)
def test_a_tasks_ranges_ask_each_state_topics_metadata_about_once_each(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight continuous exactly-once ranges in one task (read ahead, fence, read after it, metrics) ask through
    the task's shared clients: each state topic once to connect the asker and once the first fetching client,
    then a count for the read ahead and one after a range's fence, shared by the ranges whose fences had ended by
    then (session 18: 4 per range and state topic, one per read and client, 72 for these 8 ranges; `make
    bench-state-metadata` counts the broker's side)."""
    flow, sep, topic, remote = slotted_flow(write_config, kafka, monkeypatch, "exactly-once")
    values: dict[int, list[bytes]] = {}
    produce(kafka, topic, values, 0, 10)
    tasks = [replace(t, run_seconds=2) for t in planned(flow, topic, remote, continuous=True)][:8]
    assert sum(r.records for r in copy_ranges(tasks)) == 10 * len(tasks)

    asked = count_metadata(monkeypatch)
    produce(kafka, topic, values, 10, 10)
    with LogCache() as cache:
        assert sum(r.records for r in copy_ranges(tasks, cache)) == 10 * len(tasks)
    print(f"metadata requests of {len(tasks)} ranges: {dict(asked)}; fetching clients made: {cache.clients_made}")
    for name in state_topics(sep)[:2]:
        assert 2 <= asked[name] <= len(tasks) + 3, (name, asked)
    assert 1 <= asked[state_topics(sep)[2]] <= len(tasks), asked

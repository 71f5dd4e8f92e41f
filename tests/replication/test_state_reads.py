"""Reading the replication state on real brokers: reads end at the true end of the committed log (an open
transaction is waited out, or fails clearly), every reader sees progress and map from one cut, and an
at-least-once copy writes its progress only after its map segments are delivered."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from tests.kafka_helpers import KafkaKit, create_topic, read_partition
from tests.replication.helpers import (
    KEEP_FOREVER,
    MAP_TOPIC,
    PROGRESS_TOPIC,
    a_to_b,
    committed_count,
    copy_all,
    copy_tasks,
    create_copy_topics,
    state_slot,
)

import mirrorflow.kafka.compacted_log as compacted_log
import mirrorflow.replication.offset_translation as offset_translation
import mirrorflow.replication.state_records as state_records
from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.state_tail import OffsetMapTail

pytestmark = pytest.mark.integration


def produce_values(kafka: KafkaKit, topic: str, first: int, count: int) -> None:
    """Records `v<first>`..: a record's value names its source offset on a fresh one-partition topic."""
    producer = kafka.producer("A")
    for i in range(first, first + count):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def target_values(kafka: KafkaKit, topic: str) -> dict[int, bytes]:
    """The committed records of `A.<topic>`-0 on B: downstream offset -> value."""
    consumer = kafka.consumer("B", {"isolation.level": "read_committed"})
    return {m.offset(): m.value() or b"" for m in read_partition(consumer, f"A.{topic}", 0)}


def duplicates_and_lost(values: dict[int, bytes], expected: int) -> tuple[int, int]:
    counts = Counter(values.values())
    duplicated = sum(n - 1 for n in counts.values() if n > 1)
    lost = sum(1 for i in range(expected) if f"v{i}".encode() not in counts)
    return duplicated, lost


def open_transaction(kafka: KafkaKit, topic: str, partition: int = 0) -> Producer:
    """A transaction left open on `topic`-`partition` of B, as a copy task killed after producing its progress record
    leaves one: a tombstone of a key no reader knows (state topics are compacted, and readers skip tombstones of
    progress), neither committed nor aborted."""
    producer = Producer(
        with_logger(
            {
                "bootstrap.servers": kafka.bootstrap("B"),
                "transactional.id": f"test-held-{uuid.uuid4().hex[:8]}",
                "transaction.timeout.ms": 300000,  # the test ends it, not the broker
            }
        )
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    delivered: list[Any] = []
    producer.produce(
        topic, key=b"held open by a test", value=None, partition=partition, on_delivery=lambda e, m: delivered.append(e)
    )
    assert producer.flush(30) == 0 and delivered == [None], delivered
    return producer


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


class Background:
    """`fn()` on a thread; `result()` joins it and re-raises what it raised."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._outcome: list[Any] = []
        self._thread = threading.Thread(target=lambda: self._run(fn), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._outcome.append(fn())
        except BaseException as err:
            self._outcome.append(err)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def result(self, timeout_s: float = 120.0) -> Any:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the background call did not end"
        if isinstance(self._outcome[0], BaseException):
            raise self._outcome[0]
        return self._outcome[0]


def test_restart_waits_for_an_open_transaction_on_the_progress_partition(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """Issue 17: a task restarting while another holds a transaction open on the shared progress partition must
    not resume from the stale progress below that transaction (duplicates in exactly-once mode)."""
    topic = kafka.topic("held")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config)
    produce_values(kafka, topic, 0, 10)
    # A continuous copy reads its state now, before the transaction opens, and then keeps committing.
    stop = threading.Event()
    task = copy_tasks(flow, topic, end=None, run_seconds=120.0)[0]
    running = Background(lambda: copy_range(task, stop=stop.is_set))
    wait_for(lambda: committed_count(kafka.clusters, f"A.{topic}", 0) == 10, "the first commit")
    held = open_transaction(kafka, PROGRESS_TOPIC, state_slot(kafka.admin("B"), PROGRESS_TOPIC, topic))
    try:
        produce_values(kafka, topic, 10, 10)  # committed by the running copy after the open transaction
        wait_for(lambda: committed_count(kafka.clusters, f"A.{topic}", 0) == 20, "the commit after the open one")
        stop.set()
        running.result()
        produce_values(kafka, topic, 20, 10)
        restart = Background(lambda: copy_all(flow, topic))
        time.sleep(3.0)  # a negative check: with the fix the copy stays blocked until the abort below
        blocked = restart.alive()
        copied_while_held = committed_count(kafka.clusters, f"A.{topic}", 0) - 20
    finally:
        held.abort_transaction(30)
    restart.result()
    duplicated, lost = duplicates_and_lost(target_values(kafka, topic), 30)
    assert (duplicated, lost) == (0, 0), f"{duplicated} duplicated and {lost} lost records on the target"
    assert blocked and copied_while_held == 0, "the restarted copy did not wait for the open transaction"


def test_a_read_blocked_by_an_open_transaction_fails_clearly(kafka: KafkaKit) -> None:
    """Past the wait bound, the read names the partition, the held offset and what to do; it returns nothing
    stale."""
    topic = kafka.topic("state")
    create_topic(kafka.admin("B"), topic, 1)
    committed = Producer(with_logger({"bootstrap.servers": kafka.bootstrap("B")}))
    committed.produce(topic, key=b"k", value=b"before", partition=0)
    assert committed.flush(30) == 0
    held = open_transaction(kafka, topic)
    try:
        committed.produce(topic, key=b"k", value=b"after", partition=0)
        assert committed.flush(30) == 0
        with pytest.raises(compacted_log.OpenTransactionError) as raised:
            list(compacted_log.read_to_end("B", {"bootstrap.servers": kafka.bootstrap("B")}, topic, wait_s=2.0))
    finally:
        held.abort_transaction(30)
    message = str(raised.value)
    assert f"{topic}-0 at offset 1" in message and "transaction.timeout.ms" in message
    assert "describe-producers" in message and f"abort --topic {topic} --partition 0 --start-offset 1" in message
    values = [v for *_, v, _ts in compacted_log.read_to_end("B", {"bootstrap.servers": kafka.bootstrap("B")}, topic)]
    assert values == [b"before", b"after"]


def test_translation_never_passes_a_batch_committed_between_the_two_reads(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17: a copy that commits between a reader's reads of the offset map and of the progress must not
    make the reader translate past records it has not seen (exact, or conservative: never beyond)."""
    topic = kafka.topic("cut")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config)
    produce_values(kafka, topic, 0, 10)
    assert copy_all(flow, topic) == 10
    produce_values(kafka, topic, 10, 10)
    real = state_records.read_to_end
    reads: list[str] = []

    def first_read_then_commit(cluster: str, conf: Any, state_topic: str, **kwargs: Any) -> Iterator[Any]:
        yield from real(cluster, conf, state_topic, **kwargs)
        reads.append(state_topic)
        if len(reads) == 1:
            assert copy_all(flow, topic) == 10  # a copy commits between the reader's two reads

    monkeypatch.setattr(state_records, "read_to_end", first_read_then_commit)
    maps = offset_translation.load_offset_maps(flow, topics=[topic])
    monkeypatch.undo()
    assert sorted(reads) == sorted([PROGRESS_TOPIC, MAP_TOPIC])
    assert_never_past(kafka, topic, maps, 20)


def assert_never_past(kafka: KafkaKit, topic: str, maps: offset_translation.FlowOffsetMaps, count: int) -> None:
    """Every offset below `count` translates exactly or conservatively (checked against the target's records)."""
    copies = target_values(kafka, topic)
    truth = {int(v[1:]): down for down, v in copies.items()}
    assert sorted(truth) == list(range(count))
    wrong = []
    for upstream in range(count):
        t = maps.translate(topic, 0, upstream)
        # Exact: the first record at or after the answer is the copy of `upstream` (a commit marker may lie
        # between). Conservative: at or before it. Past it: the group would skip records it never read.
        skipped = t.offset is not None and t.offset > truth[upstream]
        reread = t.offset is not None and any(t.offset <= down < truth[upstream] for down in copies)
        if skipped or (t.status == "exact" and reread):
            wrong.append((upstream, t.status, t.offset, truth[upstream]))
    assert not wrong, f"translated past uncopied records (upstream, status, offset, true offset): {wrong}"


def test_a_tailing_reader_keeps_the_cut_and_reads_only_what_was_added(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """The checkpoint emitter's reader (loaded once, then tailed): a copy committing between its two reads is
    translated conservatively, the next round reads only the records added since, and then agrees with a full
    read exactly."""
    topic = kafka.topic("tail")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config)
    produce_values(kafka, topic, 0, 10)
    assert copy_all(flow, topic) == 10
    produce_values(kafka, topic, 10, 10)
    tail = OffsetMapTail.for_flow(flow, timeout_s=30.0)
    try:
        real = tail._tail.read_new_all
        reads: list[str] = []

        def read_then_commit(state_topic: str) -> Any:
            found = real(state_topic)
            reads.append(state_topic)
            if len(reads) == 1:
                assert copy_all(flow, topic) == 10  # a copy commits between the reader's two reads
            return found

        tail._tail.read_new_all = read_then_commit  # type: ignore[method-assign]
        first = tail.load(topics=[topic])
        tail._tail.read_new_all = real  # type: ignore[method-assign]
        assert_never_past(kafka, topic, first, 20)
        loaded = tail.records_read
        second = tail.load(topics=[topic])
        # The progress record of the second copy only: its map segment was read in the first round already.
        assert tail.records_read - loaded == 1
        full = offset_translation.load_offset_maps(flow, topics=[topic])
        assert [second.translate(topic, 0, u) for u in range(22)] == [full.translate(topic, 0, u) for u in range(22)]
        assert second.translate(topic, 0, 15).status == "exact"
    finally:
        tail.close()


def set_topic_config(kafka: KafkaKit, topic: str, name: str, value: str | None) -> None:
    """Set (or, with None, delete) one config of `topic` on B."""
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    entry = ConfigEntry(name, value or "", incremental_operation=op)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in kafka.admin("B").incremental_alter_configs([resource]).values():
        future.result()


def test_at_least_once_crash_between_map_and_progress_leaves_no_gap(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """Issue 17: the broker refuses the offset-map segment (record too large for the map topic) while the records
    and the progress would be accepted. The copy must not store progress past a map it could not write: the
    re-run copies the range again and every offset of it translates exactly."""
    topic = kafka.topic("alos")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config, **{"mirrorflow.delivery": "at-least-once"})
    produce_values(kafka, topic, 0, 10)
    set_topic_config(kafka, MAP_TOPIC, "max.message.bytes", "8")
    try:
        try:
            copy_all(flow, topic)
            failure = None
        except MirrorflowError as err:
            failure = str(err)
    finally:
        set_topic_config(kafka, MAP_TOPIC, "max.message.bytes", None)
    copy_all(flow, topic)
    values = target_values(kafka, topic)
    assert duplicates_and_lost(values, 10)[1] == 0
    maps = offset_translation.load_offset_maps(flow, topics=[topic])
    gaps = []
    for upstream in range(10):
        t = maps.translate(topic, 0, upstream)
        if t.status != "exact" or t.offset is None or values.get(t.offset) != f"v{upstream}".encode():
            gaps.append((upstream, t.status, t.offset))
    assert not gaps, f"offsets that do not translate to their copy (upstream, status, offset): {gaps}"
    assert failure is not None and "offset-map" in failure, f"the failed map write was not reported: {failure}"

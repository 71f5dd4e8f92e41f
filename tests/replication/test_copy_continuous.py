"""Continuous copies on real brokers: a caught-up range commits at once instead of holding records for the
transaction limit, and its many small commits do not each write a metrics snapshot and an offset sync."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from tests.kafka_helpers import read_partition
from tests.replication.conftest import WriteConfig
from tests.replication.helpers import committed_count, continuous_tasks, hand_over_mid_copy, runner, start_feeder

import mirrorflow.replication.copy_loop as copy_loop
import mirrorflow.replication.copy_range as copy_range_module
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_sync import OffsetSync
from mirrorflow.kafka import transfer
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.kafka.metrics_store import read_snapshots
from mirrorflow.kafka.offsets import PartitionBounds, partition_bounds
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_loop import PUBLISH_INTERVAL_S
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyResult
from mirrorflow.replication.metrics import Snapshot, snapshot_key

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_caught_up_continuous_copy_commits_without_waiting_for_the_transaction_limit(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    source_topic: str,
    write_config: WriteConfig,
) -> None:
    topic = source_topic
    # A transaction could stay open for ten minutes: only the caught-up rule can make the records visible soon.
    (task,) = continuous_tasks(write_config, topic, 1, **{"mirrorflow.copy.transaction.max.ms": "600000"})
    assert task.batch_ms == 600000
    stop = threading.Event()
    commits: list[CopyResult] = []
    outcome: list[CopyResult | BaseException] = []

    def run() -> None:
        try:
            outcome.append(copy_range(task, on_batch=lambda r: commits.append(replace(r)), stop=stop.is_set))
        except BaseException as err:
            outcome.append(err)

    copier = threading.Thread(target=run)
    copier.start()
    try:
        producer = kafka_producer("A")
        for i in range(5):
            producer.produce(topic, key=b"k%d" % i, value=b"v", partition=0)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 60
        while committed_count(kafka_clusters, f"A.{topic}", 0) < 5:
            assert time.monotonic() < deadline, "records still uncommitted a minute after they were read"
            assert not outcome, f"the copy ended early: {outcome}"
    finally:
        stop.set()
        copier.join(60)
    assert not copier.is_alive(), "the copy did not stop when asked"
    (result,) = outcome
    assert isinstance(result, CopyResult)
    assert result.records == 5 and result.next_upstream == 5
    assert commits and commits[-1].records == 5


@pytest.mark.timeout(300)
def test_small_commits_share_offset_syncs_and_metrics_and_the_last_position_is_synced(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    source_topic: str,
    write_config: WriteConfig,
) -> None:
    topic = source_topic
    # At-least-once: no commit markers, so the records form one segment and only the lag rule and the "latest
    # position" sync add syncs (exactly-once starts a segment, with its sync, after every commit marker).
    # `transaction.min.ms` 0: a commit as soon as the copy has caught up, so that commits far outnumber publishes.
    keys = {"mirrorflow.delivery": "at-least-once", "mirrorflow.copy.transaction.min.ms": "0"}
    (task,) = continuous_tasks(write_config, topic, 1, **keys)
    task = replace(task, run_seconds=PUBLISH_INTERVAL_S * 6)
    outcome: list[CopyResult] = []
    copier = threading.Thread(target=lambda: outcome.append(copy_range(task)))
    copier.start()
    producer = kafka_producer("A")
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < PUBLISH_INTERVAL_S * 3:  # one record every 50 ms: a commit each
        producer.produce(topic, key=b"k%d" % sent, value=b"v", partition=0)
        producer.flush(10)
        sent += 1
        time.sleep(0.05)
    copier.join(120)
    (result,) = outcome
    assert result.records == sent
    # Caught up after nearly every record: many commits (flushes here), but syncs and snapshots about once a second.
    assert result.transactions >= sent // 3, result
    assert task.offset_syncs_topic is not None and task.metrics_topic is not None
    syncs = [
        OffsetSync.from_record(key, value)
        for _p, _o, key, value, _ts in read_to_end(
            "A", task.offset_syncs_producer, task.offset_syncs_topic, read_committed=False, timeout_s=30
        )
    ]
    ours = [(s.upstream_offset, s.downstream_offset) for s in syncs if (s.topic, s.partition) == (topic, 0)]
    assert len(ours) == result.offset_syncs
    assert 2 <= len(ours) <= 3 + 6 + 1, ours  # first record, ~1/s while copying, the last position at the end
    assert ours[0] == (0, 0) and ours[-1] == (sent - 1, sent - 1)
    stored = read_snapshots("B", task.target_consumer, task.metrics_topic, timeout_s=30)
    last = Snapshot.decode(stored[snapshot_key(task.remote_topic, 0)])
    assert last.values["record-count"] == sent  # the final snapshot holds every record


@pytest.mark.timeout(300)
def test_a_continuous_copy_fenced_by_the_next_run_ends_cleanly_and_loses_nothing(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    source_topic: str,
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The handover of continuous mode (issue 19): the next run's copy of a partition initialises the same
    transactional id and so fences the running one. The fenced run must end as a handed-over run (its result
    counts only what it committed, no error for Spark to retry: a retry would fence the new owner back), and the
    records on the target are the source's, each once, in order. The new copy reads the source bounds only after
    fencing and reading the progress; before, a progress the old run committed meanwhile lay beyond those bounds and
    the new copy refused to start ("the source topic was re-created")."""
    topic = source_topic
    (task,) = continuous_tasks(write_config, topic, 1)
    stop_new = threading.Event()
    old_commits: list[CopyResult] = []
    outcomes: dict[str, CopyResult | BaseException] = {}
    run = runner(task, outcomes)
    producing, sent, feeder = start_feeder(kafka_producer, topic, 0.002)
    old = threading.Thread(target=run, args=("old",), kwargs={"on_batch": lambda r: old_commits.append(replace(r))})
    old.start()
    deadline = time.monotonic() + 60
    while len(old_commits) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(old_commits) >= 5, "the first run never committed"

    def bounds_then_wait(*args: Any, **kwargs: Any) -> PartitionBounds:
        """Read the source bounds, then give the old run 3 s to commit past them: it can only if it is not
        fenced yet, and such a progress looked like a re-created source topic."""
        found = partition_bounds(*args, **kwargs)
        deadline = time.monotonic() + 3
        while old_commits[-1].next_upstream <= found.high_watermark and time.monotonic() < deadline:
            time.sleep(0.01)
        return found

    monkeypatch.setattr(copy_range_module, "partition_bounds", bounds_then_wait)
    new = threading.Thread(target=run, args=("new",), kwargs={"stop": stop_new.is_set})
    new.start()
    old.join(60)
    assert not old.is_alive(), "the fenced run did not end"
    ended = outcomes["old"]
    assert isinstance(ended, CopyResult), f"a fenced continuous run must end cleanly, not raise: {ended!r}"
    assert ended.handed_over
    assert ended.records == old_commits[-1].records, "the result counts only what the run committed"
    time.sleep(2)
    producing.clear()
    feeder.join(60)
    deadline = time.monotonic() + 60
    while committed_count(kafka_clusters, f"A.{topic}", 0) < len(sent) and time.monotonic() < deadline:
        time.sleep(0.5)
    stop_new.set()
    new.join(60)
    assert isinstance(outcomes["new"], CopyResult) and not outcomes["new"].handed_over, outcomes["new"]
    copied = [
        m.value() for m in read_partition(kafka_consumer("B", {"isolation.level": "read_committed"}), f"A.{topic}")
    ]
    assert copied == [f"r{i}".encode() for i in sent], "every record once, in order"


@pytest.mark.timeout(300)
def test_a_continuous_copy_fenced_by_its_own_transaction_timeout_fails_so_it_is_retried(
    kafka_producer: Callable[..., Producer],
    source_topic: str,
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No successor: the target's coordinator aborts a transaction held open past transaction.timeout.ms and
    bumps the producer's epoch, which librdkafka reports as a fence too. Taken for a handover, the partition
    stopped copying for the rest of the run with only an INFO line; without a successor's claim the copy fails,
    so that Spark retries it from the committed progress. Held here by a commit that waits 15 s (2 s timeout,
    the coordinator's sweep every 10 s)."""
    topic = source_topic
    (task,) = continuous_tasks(write_config, topic, 1)
    producer = kafka_producer("A")
    for i in range(100):
        producer.produce(topic, value=f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    real_producer, real_commit = transfer.make_producer, TargetWriter.commit

    def short_timeout(conf: Any, **settings: Any) -> Any:
        if "transactional.id" in settings:
            settings["transaction.timeout.ms"] = 2000
        return real_producer(conf, **settings)

    def held_commit(writer: TargetWriter) -> None:
        if writer.transactional and not held:
            held.append(True)
            time.sleep(15)
        real_commit(writer)

    held: list[bool] = []
    monkeypatch.setattr(transfer, "make_producer", short_timeout)
    monkeypatch.setattr(TargetWriter, "commit", held_commit)
    monkeypatch.setattr(copy_loop, "HANDOVER_CLAIM_WAIT_S", 3.0)
    with pytest.raises(MirrorflowError, match="no newer copy of the partition committed"):
        copy_range(task)
    assert held


class _UnknownOnAbort:
    """A fenced producer as librdkafka showed it once under load (Kafka 4.3, transaction version 2): EndTxn and
    the abort that probes for the fence both fail with "Unknown broker error", not `_FENCED`."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    def abort_transaction(self, *_args: Any) -> None:
        raise KafkaException(KafkaError(KafkaError.UNKNOWN, "EndTxn abort failed: Unknown broker error"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)


@pytest.mark.timeout(300)
def test_a_handed_over_run_whose_commit_fails_with_an_unknown_broker_error_still_ends_as_handed_over(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    source_topic: str,
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five boundaries under load (test_handover_boundaries.py) met it: the old run's EndTxn, racing the new
    run's InitProducerId, failed with an unknown broker error and the abort probing for the fence too, so the old
    run raised instead of ending as handed over (Spark would retry it and fence the new owner back). Interleaved
    here by hand: once the new run has committed its claim, the old run's next commit fails that way. The
    successor's claim settles it: the old run ends as handed over, and every record is on the target once."""
    topic = source_topic
    (task,) = continuous_tasks(write_config, topic, 1)
    claimed = threading.Event()
    writers: list[TargetWriter] = []  # the copies' transactional writers, old run's first
    real_init, real_commit = TargetWriter.__init__, TargetWriter.commit

    coming, parked = threading.Event(), threading.Event()

    def init(writer: TargetWriter, *args: Any, **kwargs: Any) -> None:
        if writers and kwargs.get("transactional_id"):  # the new run: it fences the old one only once the old
            # one waits in its next commit
            coming.set()
            assert parked.wait(60), "the old run never reached a commit"
        real_init(writer, *args, **kwargs)
        if writer.transactional:
            writers.append(writer)

    def commit(writer: TargetWriter) -> None:
        if coming.is_set() and writer is writers[0]:  # the old run: its records are produced, its EndTxn comes
            parked.set()  # after the new run's claim and fails as it did under load
            assert claimed.wait(60), "the new run never committed its claim"
            writer._producer = _UnknownOnAbort(writer._producer)
            error = KafkaError(KafkaError.UNKNOWN, "EndTxn commit failed: Unknown broker error")
            raise KafkaOperationError("B", "committing a transaction", error)
        real_commit(writer)
        if len(writers) > 1 and writer is writers[1]:
            claimed.set()

    monkeypatch.setattr(TargetWriter, "__init__", init)
    monkeypatch.setattr(TargetWriter, "commit", commit)
    outcomes: dict[str, CopyResult | BaseException] = {}
    hand_over_mid_copy(runner(task, outcomes), kafka_producer, kafka_clusters, kafka_consumer, topic)
    ended = outcomes["old"]
    assert isinstance(ended, CopyResult) and ended.handed_over, f"must end as handed over, not raise: {ended!r}"

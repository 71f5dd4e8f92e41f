"""The handover's claims and reads, on real brokers (from the review of session 14, issue 19): state read ahead of
the fence, the claim as its own first transaction, handing over on any error once a successor's claim is seen."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient
from tests.kafka_helpers import create_topic
from tests.replication.conftest import WriteConfig
from tests.replication.helpers import continuous_tasks, hand_over_mid_copy, runner
from tests.replication.test_copy_plan import ranges

import mirrorflow.replication.copy_loop as copy_loop
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.compacted_log import LogReader, StalledReadError
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_plan import spread_quiet
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_setup import load_progress
from mirrorflow.replication.copy_task import CopyResult

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_run_whose_own_first_commit_landed_before_an_error_is_not_taken_for_handed_over(
    kafka_producer: Callable[..., Producer],
    source_topic: str,
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A continuous exactly-once copy's first commit (its claim, now riding with records) reaches the broker, but
    the client reports an error (commit_transaction timing out while EndTxn goes on: librdkafka leaves it to the
    caller). Nobody fenced this run and no successor exists. `_claimant(0)`, asked before any fence
    probe, reads the run's OWN progress: its epoch equals the run's and the run counted no commit, so it takes it
    for "a successor that started from the same progress" and ends the run as handed over: the partition is not
    copied for the rest of the run (nobody else copies it) and the committed batch is missing from the counts.
    Before the change a non-fence error raised (Spark retries from the committed progress)."""
    topic = source_topic
    (task,) = continuous_tasks(write_config, topic, 1)
    producer = kafka_producer("A")
    for i in range(50):
        producer.produce(topic, value=f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    real_commit = TargetWriter.commit
    landed: list[bool] = []

    def commit_then_time_out(writer: TargetWriter) -> None:
        real_commit(writer)
        if writer.transactional and not landed:
            landed.append(True)
            raise KafkaOperationError("B", "committing a transaction", KafkaError(KafkaError._TIMED_OUT))

    monkeypatch.setattr(TargetWriter, "commit", commit_then_time_out)
    outcome: Any
    try:
        outcome = copy_range(task)
    except MirrorflowError as err:
        outcome = err
    assert landed
    stored, _ = load_progress(task)
    assert stored is not None and stored.epoch == 0, stored  # the run's own claim, nobody else's
    assert isinstance(outcome, MirrorflowError), (
        f"no successor exists, yet the run ended as handed over after its own commit: {outcome!r}"
    )


@pytest.mark.timeout(300)
def test_a_slow_first_data_transaction_of_the_successor_still_lets_the_fenced_run_hand_over(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    source_topic: str,
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The successor fences the running copy, then its first transaction takes longer than the fenced run waits
    for a claim (modelled by a first `forward` that takes 6 s against a 3 s wait: large records to a slow
    target, or an operator's `mirrorflow.copy.transaction.max.ms` of tens of seconds with a backlog). The claim
    is its own small transaction, committed before any record is read, so the fenced run sees it and ends as
    handed over. With the claim riding in the first data transaction (session 14, for a while) the fenced run
    raised "no newer copy of the partition committed": Spark retried the old run's task, whose retry fenced the
    successor (and with first transactions longer than the wait, each fenced the other in turn)."""
    topic = source_topic
    (task,) = continuous_tasks(write_config, topic, 1)
    writers: list[TargetWriter] = []
    real_init, real_forward = TargetWriter.__init__, TargetWriter.forward
    slowed: list[bool] = []

    def init(writer: TargetWriter, *args: Any, **kwargs: Any) -> None:
        real_init(writer, *args, **kwargs)
        if writer.transactional:
            writers.append(writer)

    def forward(writer: TargetWriter, *args: Any, **kwargs: Any) -> Any:
        if len(writers) > 1 and writer is writers[1] and not slowed:
            slowed.append(True)
            time.sleep(6)
        return real_forward(writer, *args, **kwargs)

    monkeypatch.setattr(TargetWriter, "__init__", init)
    monkeypatch.setattr(TargetWriter, "forward", forward)
    monkeypatch.setattr(copy_loop, "HANDOVER_CLAIM_WAIT_S", 3.0)
    outcomes: dict[str, Any] = {}
    hand_over_mid_copy(runner(task, outcomes), kafka_producer, kafka_clusters, kafka_consumer, topic)
    ended = outcomes["old"]
    assert isinstance(ended, CopyResult) and ended.handed_over, f"must end as handed over, not raise: {ended!r}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_a_read_ahead_cut_short_by_an_open_transaction_then_a_tail_read_equals_one_full_read(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    kafka_admin: Callable[..., AdminClient],
    unique_topic: Callable[..., str],
    outcome: str,
) -> None:
    """Sound (checked): the remembering reader's first read stops at an open transaction (its short wait ends
    it, as `state_reader`'s 5 s does), records committed after that transaction are not remembered, and once the
    transaction commits or aborts (the fence), a tail read folds to what one full read sees: the remembered
    position never passes the last stable offset."""
    topic = unique_topic("remember")
    create_topic(kafka_admin("B"), topic, 2)
    conf = {"bootstrap.servers": kafka_clusters.bootstrap("B")}

    def txn(tid: str) -> Producer:
        producer = kafka_producer("B", {"transactional.id": f"{topic}-{tid}"})
        producer.init_transactions(30)
        producer.begin_transaction()
        return producer

    first = txn("one")
    for i in range(5):
        first.produce(topic, key=f"k{i}".encode(), value=b"v1", partition=i % 2)
    first.commit_transaction(30)
    held = txn("held")  # the predecessor's transaction, open across the read ahead
    held.produce(topic, key=b"k1", value=b"held", partition=1)
    held.produce(topic, key=b"k5", value=b"held", partition=0)
    held.flush(30)
    later = txn("later")  # committed behind the open one: must not be passed over
    later.produce(topic, key=b"k2", value=b"later", partition=0)
    later.produce(topic, key=b"k3", value=None, partition=1)
    later.commit_transaction(30)
    reader = LogReader("B", conf, timeout_s=30, wait_s=2, remember=True)
    with pytest.raises(StalledReadError):
        list(reader.read(topic))
    if outcome == "commit":
        held.commit_transaction(30)
    else:
        held.abort_transaction(30)
    last = txn("last")
    last.produce(topic, key=b"k0", value=b"last", partition=0)
    last.commit_transaction(30)
    reader.wait_s = 60
    tail = list(reader.read(topic))
    reader.close()
    with LogReader("B", conf, timeout_s=30, remember=False) as fresh:
        full = list(fresh.read(topic))

    def fold(records: list[Any]) -> dict[tuple[int, bytes], bytes | None]:
        out: dict[tuple[int, bytes], bytes | None] = {}
        for p, _o, key, value, _ts in sorted(records, key=lambda r: (r[0], r[1])):
            out[(p, key)] = value
        return out

    assert fold(tail) == fold(full)
    assert (fold(full).get((0, b"k5")) == b"held") == (outcome == "commit")


def test_spread_quiet_places_every_range_exactly_once_within_the_cores() -> None:
    """Sound (checked): grouping quiet ranges never drops or repeats a range, and never makes more groups than a
    continuous copy's cores (exhaustive over small shapes)."""
    for n in range(0, 9):
        tasks = ranges(n)
        for mask in range(2**n):
            quiet = {("t", p) for p in range(n) if mask >> p & 1}
            for slots, per_task, cores in itertools.product(range(1, 5), range(1, 4), [None, 1, 2, 3]):
                groups = spread_quiet(tasks, quiet, slots, per_task, cores)
                placed = sorted(t.partition for g in groups for t in g)
                assert placed == list(range(n)), (n, quiet, slots, per_task, cores, groups)
                assert all(groups), "no empty Spark task"
                if cores is not None:
                    assert len(groups) <= max(cores, 1)

"""A caught-up continuous copy commits at most once per `mirrorflow.copy.transaction.min.ms` (issue 19).

Committing as soon as the reader had caught up made a copy of a steady trickle commit at every fetch (44 times a
second per partition at 500 records/s on the deployed-path benchmark): each commit writes a progress record, a map
run and a marker to each of two state slots, and every copy start reads the slots' uncleaned tail, so the run
boundary's reads grew with the commit rate (20,000 records, 1-1.5 s per read). Real brokers: a producer writes a
record every 5 ms while the copy runs; consecutive transactions holding records must lie at least the interval
apart, and every record is copied once. A loaded partition's transaction commits once it holds
`mirrorflow.copy.transaction.min.records` (32, session 17): the second test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from confluent_kafka import Producer
from tests.replication.conftest import WriteConfig
from tests.replication.helpers import committed_count, continuous_tasks, start_copy, start_feeder

from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_task import LINGER_RECORDS, CopyResult, buffer_settings

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_caught_up_copy_commits_at_most_once_per_commit_interval(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    source_topic: str,
    write_config: WriteConfig,
) -> None:
    # The trickle stays below 32 records a transaction; min.records 0 keeps a delivery burst on a loaded host from
    # ending one early.
    (task,) = continuous_tasks(write_config, source_topic, 1, **{"mirrorflow.copy.transaction.min.records": "0"})
    assert task.batch_min_ms == 100, "the default interval: Kafka Streams' exactly-once commit.interval.ms"
    assert task.linger_records == 0
    commits: list[tuple[float, int]] = []  # (when, transactions so far) at every commit
    stop, outcomes, copier = start_copy(task, lambda r: commits.append((time.monotonic(), r.transactions)))
    producing, sent, feeder = start_feeder(kafka_producer, source_topic, 0.005)
    try:
        time.sleep(4)
    finally:
        producing.clear()
        feeder.join(60)
    try:
        deadline = time.monotonic() + 60
        while committed_count(kafka_clusters, f"A.{source_topic}", 0) < len(sent):
            assert time.monotonic() < deadline, "records still uncommitted a minute after they were sent"
            assert not outcomes, f"the copy ended early: {outcomes}"
    finally:
        stop.set()
        copier.join(60)
    result = outcomes["copy"]
    assert isinstance(result, CopyResult), result
    assert result.records == len(sent)
    with_records = [(t, n) for (t, n), (_, before) in zip(commits[1:], commits, strict=False) if n > before]
    assert len(with_records) >= 2
    span = with_records[-1][0] - with_records[0][0]
    # Each transaction holding records stays open the interval from its first record: n of them span >= (n-1) x it.
    most = span / (task.batch_min_ms / 1000) + 2
    assert len(with_records) <= most, (
        f"{len(with_records)} transactions with records in {span:.2f} s: more than one per "
        f"{task.batch_min_ms} ms ({len(sent)} records)"
    )


@pytest.mark.timeout(300)
def test_a_loaded_partition_commits_once_caught_up_without_waiting_the_interval(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    source_topic: str,
    write_config: WriteConfig,
) -> None:
    """Holding a loaded partition's transaction open for the interval stalled the copy (8 partitions at 2,000
    records/s each, one process: p99 1.1-5 s against 0.1 s without the interval). A transaction holding
    `LINGER_RECORDS` commits as soon as the reader has caught up: with a 30 s interval, 500 waiting records are
    committed long before it ends (the old rule held them the whole 30 s). Only the last open transaction may
    still wait, when it holds fewer than `LINGER_RECORDS`. The clock starts at the copy's first commit (its
    claim), not before its set-up."""
    (task,) = continuous_tasks(
        write_config,
        source_topic,
        1,
        **{"mirrorflow.copy.transaction.min.ms": "30000", "mirrorflow.copy.transaction.max.ms": "45000"},
    )
    assert task.batch_min_ms == 30000
    assert task.linger_records == LINGER_RECORDS == 32, "the default of mirrorflow.copy.transaction.min.records"
    producer = kafka_producer("A")
    for i in range(500):
        producer.produce(source_topic, value=f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    first_commit = threading.Event()
    stop, outcomes, copier = start_copy(task, lambda _r: first_commit.set())
    try:
        assert first_commit.wait(120), f"the copy did not commit its claim: {outcomes}"
        started = time.monotonic()
        while (committed := committed_count(kafka_clusters, f"A.{source_topic}", 0)) < 500 - LINGER_RECORDS:
            assert not outcomes, f"the copy ended early: {outcomes}"
            waited = time.monotonic() - started
            assert waited < 20, f"{committed} of 500 records committed after {waited:.0f} s (interval 30 s)"
            time.sleep(0.2)
    finally:
        stop.set()
        copier.join(60)
    result = outcomes["copy"]
    assert isinstance(result, CopyResult), result
    assert result.records == 500


@pytest.mark.timeout(300)
def test_a_continuous_runs_first_transaction_with_records_closes_early_on_a_backlog(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    source_topic: str,
    write_config: WriteConfig,
) -> None:
    """At a run boundary the new run starts behind by the handover's backlog, and its first transaction with
    records held up to `batch_ms` of it (500 ms) before anything reached the target. That one now closes after
    `FIRST_TRANSACTION_MS`: on a backlog of 120,000 records, with a one-minute transaction limit and no record cap,
    it holds fewer than half of them (it held them all before), and every record is still copied once."""
    backlog = 120_000
    (task,) = continuous_tasks(write_config, source_topic, 1, **{"mirrorflow.copy.transaction.max.ms": "60000"})
    task = replace(task, batch_records=10 * backlog)
    assert buffer_settings(task).batch_records >= backlog and task.batch_ms == 60000
    producer = kafka_producer("A", {"linger.ms": 50, "batch.size": 1_000_000})
    for i in range(backlog):
        while True:
            try:
                producer.produce(source_topic, value=b"%099d" % i, partition=0)
                break
            except BufferError:  # the producer's queue is full: let it deliver
                producer.poll(0.1)
    assert producer.flush(60) == 0
    copied: list[int] = []
    stop, outcomes, copier = start_copy(task, lambda r: copied.append(r.records))
    try:
        deadline = time.monotonic() + 120
        while committed_count(kafka_clusters, f"A.{source_topic}", 0) < backlog:
            assert not outcomes, f"the copy ended early: {outcomes}"
            assert time.monotonic() < deadline, "the backlog was not copied within two minutes"
            time.sleep(0.5)
    finally:
        stop.set()
        copier.join(60)
    result = outcomes["copy"]
    assert isinstance(result, CopyResult) and result.records == backlog, result
    first = next(n for n in copied if n)
    assert first < backlog // 2, f"the first transaction with records held {first} of the {backlog} waiting"

"""Fault matrix, brokers: the target or the source broker is restarted (SIGKILL, or SIGTERM) while a copy runs.

The copy either rides through (librdkafka retries) or fails with a clear error, and a re-run completes; either
way the audit then finds every record once, in its partition and in order. These tests stop brokers, so they
run on clusters of their own, never on the session's A and B. `make test` runs SIGKILL of each broker in
exactly-once mode, one round each; `make test-faults` (MIRRORFLOW_FAULT_TRIALS set) adds SIGTERM, at-least-once
and more rounds.
"""

from __future__ import annotations

import os
import random
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from tests.replication.helpers import FAULT_KEYS

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.clients import admin_client
from mirrorflow.local.broker import BrokerStartError
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.audit import audit_flow
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration
FULL = bool(os.environ.get("MIRRORFLOW_FAULT_TRIALS"))
ROUNDS = 3 if FULL else 1
PARTITIONS = 3
PER_ROUND = 60_000  # records per round, over all partitions: a copy of small batches lasting seconds
BATCH = 300

# (which broker, how it stops, delivery mode)
SCENARIOS = [("target", "kill", "exactly-once"), ("source", "kill", "exactly-once")]
if FULL:
    SCENARIOS += [
        ("target", "term", "exactly-once"),
        ("source", "term", "exactly-once"),
        ("target", "kill", "at-least-once"),
        ("source", "kill", "at-least-once"),
    ]


@pytest.fixture(scope="module")
def fault_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusters]:
    """Clusters A and B of this module alone: its tests restart them."""
    clusters = LocalClusters(tmp_path_factory.mktemp("fault-kafka"), tie_to_parent=True)
    try:
        clusters.start("A", "B")
        yield clusters
    finally:
        clusters.down()


def restart(clusters: LocalClusters, alias: str, kill: bool) -> None:
    """`clusters.restart`, waiting while the broker's port is still held: on loopback, a client reconnecting to
    a closed port in the ephemeral range can briefly connect to itself and hold the port."""
    clusters.stop(alias, kill=kill)
    deadline = time.monotonic() + 120
    while True:
        try:
            clusters.start(alias)
            return
        except BrokerStartError as err:
            if not err.port_conflict or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def write_flow(tmp_path: Path, clusters: LocalClusters, topic: str, delivery: str) -> Flow:
    path = tmp_path / "mm2.properties"
    flow_lines = (
        "admin.timeout.ms = 30000\n"
        "A->B.enabled = true\n"
        f"A->B.topics = {topic}\n"
        "A->B.heartbeats.replication.enabled = false\n"
        f"A->B.mirrorflow.delivery = {delivery}\n"
    )
    path.write_text(mm2_config_text(clusters.bootstraps(), flow_lines))
    return load_config(path).flow("A->B")


def produce_round(bootstrap: str, topic: str, round_no: int) -> None:
    producer = Producer(with_logger({"bootstrap.servers": bootstrap, "linger.ms": 50}))
    for i in range(PER_ROUND):
        while True:
            try:
                producer.produce(topic, key=f"{round_no}-{i}".encode(), value=b"v" * 200, partition=i % PARTITIONS)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
    assert producer.flush(60) == 0


@dataclass
class Round:
    """What one round saw: whether the fault landed mid-copy, whether the copy rode through, and timings."""

    mid_copy: bool
    errors: list[str]
    restart_s: float
    total_s: float


def copy_through_restart(
    tasks: list[CopyTask], clusters: LocalClusters, alias: str, kill: bool, rng: random.Random
) -> Round:
    """Run every task (one thread each, like executors); after a random number of committed batches, restart
    `alias`. Returns once every task has finished or failed."""
    started = time.monotonic()
    trigger = threading.Event()
    after = rng.randint(1, 6)

    def on_batch(result: CopyResult) -> None:
        if result.transactions >= after or result.records >= PER_ROUND // PARTITIONS // 4:
            trigger.set()

    with ThreadPoolExecutor(max_workers=len(tasks), thread_name_prefix="copy") as pool:
        futures: list[Future[CopyResult]] = [pool.submit(copy_range, t, on_batch=on_batch) for t in tasks]
        while not trigger.wait(0.05) and not all(f.done() for f in futures):
            pass
        time.sleep(rng.uniform(0.0, 0.3))
        mid_copy = not all(f.done() for f in futures)
        before = time.monotonic()
        restart(clusters, alias, kill)
        restart_s = time.monotonic() - before
        errors = []
        for f in futures:
            err = f.exception(timeout=600)
            if err is not None:
                # A clear error: Mirrorflow's own, naming the cluster that failed.
                assert isinstance(err, MirrorflowError), "".join(traceback.format_exception(err))
                assert "cluster '" in str(err), str(err)
                errors.append(str(err))
    return Round(mid_copy, errors, restart_s, time.monotonic() - started)


def copy_all(flow: Flow, topic: str) -> int:
    tasks = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", PARTITIONS)], interval=True)
    return sum(copy_range(t).records for t in tasks)


@pytest.mark.timeout(600 + 300 * ROUNDS)  # a broker restart takes a minute or more when the machine is busy
@pytest.mark.parametrize(("role", "how", "delivery"), SCENARIOS)
def test_a_broker_restart_mid_copy_loses_nothing(
    tmp_path: Path, fault_clusters: LocalClusters, role: str, how: str, delivery: str
) -> None:
    alias = "B" if role == "target" else "A"
    fault_clusters.start("A", "B")  # both up, whatever an earlier test of this module left behind
    topic = f"restart-{role}-{how}-{delivery}-{uuid.uuid4().hex[:6]}"
    admin = admin_client({"bootstrap.servers": fault_clusters.bootstrap("A")})  # alive until the future resolves
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={"retention.ms": "-1"})])[topic].result(60)
    flow = write_flow(tmp_path, fault_clusters, topic, delivery)
    run_control_plane(flow)
    rng = random.Random(topic)
    rounds: list[Round] = []
    for round_no in range(ROUNDS):
        produce_round(fault_clusters.bootstrap("A"), topic, round_no)
        tasks = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", PARTITIONS)], interval=True)
        tasks = [replace(t, batch_records=BATCH, batch_ms=100) for t in tasks]
        outcome = copy_through_restart(tasks, fault_clusters, alias, how == "kill", rng)
        if outcome.errors:
            copy_all(flow, topic)  # the re-run an operator (or Airflow's retry) would start
        rounds.append(outcome)
        print(f"{role} {how} {delivery} round {round_no}: {outcome}")
    assert any(r.mid_copy for r in rounds), "no restart landed while the copy was running"

    report = audit_flow(flow, topics=topic, timeout_s=60)
    faults = {k: report[k] for k in FAULT_KEYS}
    print(f"{role} {how} {delivery}: audit {faults}, checked {report['checked']}")
    assert report["checked"] == ROUNDS * PER_ROUND and report["not_yet_copied"] == 0, report
    if delivery == "exactly-once":
        assert faults == dict.fromkeys(FAULT_KEYS, 0), report
    else:
        assert (report["lost"], report["misplaced"], report["unexpected"]) == (0, 0, 0), report

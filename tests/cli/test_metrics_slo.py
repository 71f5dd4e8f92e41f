"""Replication SLOs on real clusters: a flow held back while producers keep writing goes out of its 1 s RPO
(`metrics show` exits 3 and prints since when, the Prometheus gauge reads 1), is within it again once the copy
catches up, and a fresh `mirrorflow metrics show` process knows when a breach began from the state kept on the
target's metrics topic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.cli.cli_helpers import cli

from mirrorflow.cli.metrics_cmd import EXIT_SLO_BREACHED, FlowCollector
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.kafka.metrics_store import MetricsPublisher, read_snapshots
from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.slo import slo_key

pytestmark = pytest.mark.integration
KEEP = {"retention.ms": "-1"}


def config_text(kafka_clusters: LocalClusters, topic: str, targets: str) -> str:
    return (
        "clusters = A, B\n"
        f"A.bootstrap.servers = {kafka_clusters.bootstrap('A')}\n"
        f"B.bootstrap.servers = {kafka_clusters.bootstrap('B')}\n"
        f"A->B.enabled = true\nA->B.topics = {topic}\n{targets}"
        # The session's clusters are shared: other tests' heartbeats on A are not this flow's lag.
        "A->B.heartbeats.replication.enabled = false\n"
        "replication.factor = 1\ncheckpoints.topic.replication.factor = 1\n"
        "heartbeats.topic.replication.factor = 1\noffset-syncs.topic.replication.factor = 1\n"
        "admin.timeout.ms = 30000\n"
    )


def create_topics(kafka_admin: Callable[..., AdminClient], topic: str) -> None:
    kafka_admin("A").create_topics([NewTopic(topic, 2, 1, config=KEEP)])[topic].result()
    kafka_admin("B").create_topics([NewTopic(f"A.{topic}", 2, 1, config=KEEP)])[f"A.{topic}"].result()
    for name in ("mirrorflow-progress.A.internal", "mirrorflow-offset-map.A.internal"):
        create_compacted_topic(kafka_admin("B"), "B", name, 1, 30)
    create_compacted_topic(kafka_admin("A"), "A", "mm2-offset-syncs.B.internal", 1, 30)


def forget_stored_breach(flow: Flow) -> None:
    publisher = MetricsPublisher("B", flow.target_producer.librdkafka(), "mirrorflow-metrics.A.internal")
    publisher.publish(slo_key(flow.name), None)
    publisher.close(30)
    assert publisher.failures == 0


def copy_all(flow: Flow, topic: str) -> int:
    """One interval copy of every partition up to its end now: what a held-back flow's next DAG run does."""
    return sum(
        copy_range(t).records for t in plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", 2)], interval=True)
    )


def scrape(flow: Flow) -> dict[str, float]:
    return {
        s.name: s.value
        for f in FlowCollector([flow]).collect()
        for s in f.samples
        if s.name.startswith("mirrorflow_flow_")
    }


class SteadyProducer(threading.Thread):
    """Writes a record to each partition every 20 ms until stopped; `first_ms` is its first record's timestamp."""

    def __init__(self, producer: Producer, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer, self.topic = producer, topic
        self.stop = threading.Event()
        self.first_ms: int | None = None
        self.unflushed = -1

    def run(self) -> None:
        while not self.stop.is_set():
            now = int(time.time() * 1000)
            self.first_ms = self.first_ms or now
            for partition in (0, 1):
                self.producer.produce(self.topic, value=b"v", partition=partition, timestamp=now)
            self.producer.poll(0)
            self.stop.wait(0.02)
        self.unflushed = self.producer.flush(30)


def test_held_back_flow_breaches_its_rpo_then_recovers(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = unique_topic("slo")
    config = tmp_path / "mm2.properties"
    config.write_text(config_text(kafka_clusters, topic, "A->B.mirrorflow.rpo.target.seconds = 1\n"))
    flow = load_config(config).flow("A->B")
    create_topics(kafka_admin, topic)
    producer = kafka_producer("A", {"linger.ms": 5})
    for partition in (0, 1):
        producer.produce(topic, value=b"first", partition=partition)
    assert producer.flush(30) == 0
    assert copy_all(flow, topic) == 2

    code, out, _ = cli(capsys, "metrics", "show", str(config))
    assert code == 0 and "A->B is within its SLO: RPO 0.0 s <= target 1 s" in out, out

    # Held back: producers keep writing while no copy runs.
    steady = SteadyProducer(producer, topic)
    steady.start()
    try:
        while steady.first_ms is None or time.time() * 1000 < steady.first_ms + 2500:
            time.sleep(0.05)
        code, out, _ = cli(capsys, "metrics", "show", str(config))
        samples = scrape(flow)
    finally:
        steady.stop.set()
        steady.join(30)
    assert steady.first_ms is not None and steady.unflushed == 0
    assert code == EXIT_SLO_BREACHED, out
    since_s = steady.first_ms / 1000 + 1  # the first uncopied record turned 1 s old then
    shown = time.strftime("%H:%M:%S UTC", time.gmtime(since_s))
    assert f"A->B is outside its SLO since {shown}" in out and "> target 1 s" in out, out
    assert samples["mirrorflow_flow_slo_breached"] == 1
    assert samples["mirrorflow_flow_rpo_target_seconds"] == 1
    assert samples["mirrorflow_flow_rpo_seconds"] >= 2.5
    assert samples["mirrorflow_flow_slo_breached_since_timestamp_seconds"] == pytest.approx(since_s, abs=0.001)
    stored = read_snapshots("B", flow.target_consumer.librdkafka(), "mirrorflow-metrics.A.internal", 30)
    assert json.loads(stored[slo_key("A->B")])["since_ms"] == steady.first_ms + 1000

    # The next run of the copy catches up: within the SLO again, and the stored breach is removed.
    assert copy_all(flow, topic) > 100
    code, out, _ = cli(capsys, "metrics", "show", str(config))
    assert code == 0 and "A->B is within its SLO" in out, out
    samples = scrape(flow)
    assert samples["mirrorflow_flow_slo_breached"] == 0
    assert "mirrorflow_flow_slo_breached_since_timestamp_seconds" not in samples
    stored = read_snapshots("B", flow.target_consumer.librdkafka(), "mirrorflow-metrics.A.internal", 30)
    assert slo_key("A->B") not in stored


def test_a_fresh_process_knows_since_when(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A lag-in-records breach has no timestamp to date it: its start is when a reader first saw it, which a
    later `mirrorflow metrics show` process reads back from the target instead of using its own clock."""
    topic = unique_topic("slolag")
    config = tmp_path / "mm2.properties"
    config.write_text(config_text(kafka_clusters, topic, "A->B.mirrorflow.lag.target.records = 5\n"))
    flow = load_config(config).flow("A->B")
    create_topics(kafka_admin, topic)
    producer = kafka_producer("A")
    producer.produce(topic, value=b"first", partition=0)
    assert producer.flush(30) == 0
    assert copy_all(flow, topic) == 1  # partition 1 is empty: never copied, so not shown (docs/metrics.md)
    for _ in range(10):
        producer.produce(topic, value=b"held back", partition=0)
    assert producer.flush(30) == 0

    seen_ms = int(time.time() * 1000)
    code, out, _ = cli(capsys, "metrics", "show", str(config), "--json")
    assert code == EXIT_SLO_BREACHED
    assert {(r["partition"], r["lag_records"]) for r in json.loads(out) if r["source_topic"] == topic} == {(0, 10)}
    stored = read_snapshots("B", flow.target_consumer.librdkafka(), "mirrorflow-metrics.A.internal", 30)
    since_ms = json.loads(stored[slo_key("A->B")])["since_ms"]
    assert seen_ms <= since_ms <= int(time.time() * 1000)
    time.sleep(max(0.0, since_ms / 1000 + 1.1 - time.time()))  # the fresh process's clock reads a later second

    env = dict(os.environ, NO_COLOR="1")
    done = subprocess.run(
        [sys.executable, "-m", "mirrorflow", "metrics", "show", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == EXIT_SLO_BREACHED, done.stdout + done.stderr
    shown = time.strftime("%H:%M:%S UTC", time.gmtime(since_ms / 1000))
    assert f"A->B is outside its SLO since {shown}" in done.stdout, done.stdout
    assert "lag 10 records > target 5" in done.stdout


def test_a_flow_that_never_copied_is_outside_its_rpo(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A flow whose copy never ran (or fails from its first run) has no progress record: its selected source
    partitions with records waiting count from their log start, so its RPO grows and `metrics show` exits 3
    instead of reporting a flow that has copied nothing as within its SLO. An empty partition is not shown."""
    topic = unique_topic("slonever")
    config = tmp_path / "mm2.properties"
    config.write_text(config_text(kafka_clusters, topic, "A->B.mirrorflow.rpo.target.seconds = 1\n"))
    create_topics(kafka_admin, topic)
    forget_stored_breach(load_config(config).flow("A->B"))  # an earlier test's flow A->B may have left one
    producer = kafka_producer("A")
    written_ms = int(time.time() * 1000)
    for _ in range(3):
        producer.produce(topic, value=b"never copied", partition=0, timestamp=written_ms)
    assert producer.flush(30) == 0
    time.sleep(max(0.0, written_ms / 1000 + 1.5 - time.time()))

    code, out, err = cli(capsys, "metrics", "show", str(config), "--json")
    assert code == EXIT_SLO_BREACHED, out + err
    rows = [r for r in json.loads(out) if r["source_topic"] == topic]
    assert [(r["partition"], r["lag_records"]) for r in rows] == [(0, 3)], rows
    shown = time.strftime("%H:%M:%S UTC", time.gmtime(written_ms / 1000 + 1))
    assert f"A->B is outside its SLO since {shown}" in err, err


def test_a_topic_the_flow_no_longer_copies_is_not_its_lag(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The progress of a topic dropped from `A->B.topics` stays on the target; the records written to it since
    are not the flow's lag, so they never put the flow outside its SLO."""
    dropped, kept = unique_topic("slodropped"), unique_topic("slokept")
    config = tmp_path / "mm2.properties"
    config.write_text(config_text(kafka_clusters, dropped, ""))
    create_topics(kafka_admin, dropped)
    create_topics(kafka_admin, kept)
    producer = kafka_producer("A")
    producer.produce(dropped, value=b"copied", partition=0)
    assert producer.flush(30) == 0
    assert copy_all(load_config(config).flow("A->B"), dropped) == 1
    for _ in range(10):
        producer.produce(dropped, value=b"no longer this flow's", partition=0)
    assert producer.flush(30) == 0

    config.write_text(config_text(kafka_clusters, kept, "A->B.mirrorflow.lag.target.records = 5\n"))
    forget_stored_breach(load_config(config).flow("A->B"))  # an earlier test's flow A->B may have left one
    code, out, err = cli(capsys, "metrics", "show", str(config), "--json")
    assert code == 0, out + err
    assert [r for r in json.loads(out) if r["source_topic"] == dropped] == []
    assert "A->B is within its SLO: lag 0 records <= target 5" in err, err

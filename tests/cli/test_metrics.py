"""`mirrorflow metrics show/serve` after a real copy: MM2's metric names and tags, counts, latencies and live lag,
both as JSON and scraped from the Prometheus endpoint of a separate process (whose target address comes only
from an Airflow connection, as the exporter runs beside Airflow)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from mirrorflow.cli.app import main
from mirrorflow.config.loader import load_config
from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range

pytestmark = pytest.mark.integration
MIRRORFLOW = Path(sys.executable).with_name("mirrorflow")
KEEP = {"retention.ms": "-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exited:
        code = exited.code if isinstance(exited.code, int) else 1
    return code, capsys.readouterr().out


def produce(producer: Producer, topic: str, partition: int, n: int, ts: int, size: int) -> None:
    for i in range(n):
        producer.produce(topic, key=b"k%d" % i, value=b"x" * size, partition=partition, timestamp=ts + i)
    assert producer.flush(30) == 0


def test_metrics_show_and_serve_after_a_copy(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = unique_topic("metrics")
    config = tmp_path / "mm2.properties"
    config.write_text(
        "clusters = A, B\n"
        f"A.bootstrap.servers = {kafka_clusters.bootstrap('A')}\n"
        f"B.bootstrap.servers = {kafka_clusters.bootstrap('B')}\n"
        f"A->B.enabled = true\nA->B.topics = {topic}\n"
        "replication.factor = 1\ncheckpoints.topic.replication.factor = 1\n"
        "heartbeats.topic.replication.factor = 1\noffset-syncs.topic.replication.factor = 1\n"
        "admin.timeout.ms = 30000\n"
    )
    flow = load_config(config).flow("A->B")
    kafka_admin("A").create_topics([NewTopic(topic, 2, 1, config=KEEP)])[topic].result()
    kafka_admin("B").create_topics([NewTopic(f"A.{topic}", 2, 1, config=KEEP)])[f"A.{topic}"].result()
    for name in ("mirrorflow-progress.A.internal", "mirrorflow-offset-map.A.internal"):
        create_compacted_topic(kafka_admin("B"), "B", name, 1, 30)
    create_compacted_topic(kafka_admin("A"), "A", "mm2-offset-syncs.B.internal", 1, 30)

    ten_s_ago = int(time.time() * 1000) - 10_000
    produce(kafka_producer("A"), topic, 0, 150, ten_s_ago, 100)
    produce(kafka_producer("A"), topic, 1, 40, ten_s_ago, 7)
    tasks = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", 2)], interval=True)
    assert sum(copy_range(t).records for t in tasks) == 190
    # Not copied yet: lag of 30 records on partition 0, the oldest two minutes old.
    two_min_ago = int(time.time() * 1000) - 120_000
    produce(kafka_producer("A"), topic, 0, 30, two_min_ago, 1)

    code, out = cli(capsys, "metrics", "show", str(config), "--json")
    assert code == 0, out
    rows = {r["partition"]: r for r in json.loads(out) if r["topic"] == f"A.{topic}"}
    assert set(rows) == {0, 1}
    p0, p1 = rows[0], rows[1]
    assert (p0["source"], p0["target"], p0["source_topic"]) == ("A", "B", topic)
    assert p0["metrics"]["record-count"] == 150 and p0["metrics"]["byte-count"] == 150 * 100
    assert p1["metrics"]["record-count"] == 40 and p1["metrics"]["byte-count"] == 40 * 7
    for m in (p0["metrics"], p1["metrics"]):
        assert 10_000 <= m["replication-latency-ms-min"] <= m["replication-latency-ms-avg"]
        assert m["replication-latency-ms-avg"] <= m["replication-latency-ms-max"] < 120_000
        assert 10_000 <= m["record-age-ms-min"] <= m["record-age-ms-max"] <= m["replication-latency-ms-max"]
    assert (p0["lag_records"], p1["lag_records"]) == (30, 0)
    assert 120 <= p0["lag_seconds"] < 300 and p1["lag_seconds"] == 0

    code, out = cli(capsys, "metrics", "show", str(config))
    assert code == 0 and f"A.{topic}" in out and "LAG" in out

    # The exporter as deployed beside Airflow: B's address (as any credential) only in an Airflow connection.
    connected = tmp_path / "connected.properties"
    connected.write_text(
        config.read_text().replace(kafka_clusters.bootstrap("B"), "127.0.0.1:2") + "B.mirrorflow.connection = m_b\n"
    )
    conn = {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_clusters.bootstrap("B")}}
    port = free_port()
    server = subprocess.Popen(
        [str(MIRRORFLOW), "metrics", "serve", str(connected), "--port", str(port), "--address", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "AIRFLOW_CONN_M_B": json.dumps(conn)},
    )
    try:
        text = scrape(f"http://127.0.0.1:{port}/metrics", server)
    finally:
        server.terminate()
        server.wait(10)
    samples: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("topic") == f"A.{topic}":
                assert (s.labels["source"], s.labels["target"]) == ("A", "B")
                samples[(s.name, s.labels["partition"])] = s.value
    prefix = "kafka_connect_mirror_mirrorsourceconnector_"
    assert samples[(prefix + "record_count", "0")] == 150
    assert samples[(prefix + "byte_count", "1")] == 280
    assert samples[(prefix + "replication_latency_ms_max", "0")] >= 10_000
    assert samples[("mirrorflow_replication_lag_records", "0")] == 30
    assert samples[("mirrorflow_replication_lag_seconds", "0")] >= 120
    assert samples[("mirrorflow_replication_lag_records", "1")] == 0
    assert len({name for name, _ in samples}) == 14


def scrape(url: str, server: subprocess.Popen[Any]) -> str:
    deadline = time.monotonic() + 60
    while True:
        if server.poll() is not None:
            raise AssertionError(f"metrics serve exited: {server.stderr.read().decode() if server.stderr else ''}")
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return str(response.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)

"""`mirrorflow run` without Airflow: `--once` is one full control-plane cycle and exits 0; `--for` repeats the
steps at MM2's intervals (heartbeats every `emit.heartbeats.interval.seconds`, for flows and heartbeat-only
pairs alike)."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from tests.cli.cli_helpers import MIRRORFLOW, cli, write_config
from tests.kafka_helpers import commit_when_ready

from mirrorflow.core.heartbeat import Heartbeat
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.local.cluster import LocalClusters


def heartbeats_since(clusters: LocalClusters, alias: str, since_ms: int) -> list[Heartbeat]:
    conf = {"bootstrap.servers": clusters.bootstrap(alias)}
    found = [Heartbeat.from_record(k, v) for _, _, k, v, _ in read_to_end(alias, conf, "heartbeats", timeout_s=30)]
    return [h for h in found if h.timestamp >= since_ms]


@pytest.mark.integration
def test_run_once_exits_0_after_one_full_cycle(
    kafka_clusters: LocalClusters, tmp_path: Path, unique_topic: Any
) -> None:
    tag = unique_topic("once")
    config = write_config(tmp_path / "mm2.properties", kafka_clusters, f"A->B.enabled = true\nA->B.topics = {tag}\n")
    subprocess.run(
        [str(MIRRORFLOW), "run", str(config), "--once"], capture_output=True, text=True, timeout=120, check=True
    )  # the internal topics exist from here on, whichever test ran first
    admin = admin_client({"bootstrap.servers": kafka_clusters.bootstrap("A")})
    admin.create_topics([NewTopic(tag, 2, 1)])[tag].result(30)
    producer = Producer(with_logger({"bootstrap.servers": kafka_clusters.bootstrap("A")}))
    for i in range(300):
        producer.produce(tag, key=str(i).encode(), value=b"v" * 10, partition=i % 2)
    assert producer.flush(30) == 0

    result = subprocess.run(
        [str(MIRRORFLOW), "run", str(config), "--once", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    reports = {r["flow"]: r for r in json.loads(result.stdout)["flows"]}
    assert set(reports) == {"A->B", "B->A"}, "the enabled flow and MM2's heartbeat-only pair"
    flow = reports["A->B"]
    # MM2's checkpoint connector runs after the copy (group offset sync is off by default, as in MM2)
    assert flow["steps"] == ["topics", "configs", "acls", "heartbeat", "copy", "checkpoints"]
    assert [c["name"] for c in flow["topics"]["created"]] == [f"A.{tag}"]
    ours = [r for r in flow["copy"]["ranges"] if r["topic"] == tag]  # heartbeats are replicated too
    assert sorted(r["partition"] for r in ours) == [0, 1]
    assert sum(r["records"] for r in ours) == 300, "the copy ran to the source ends seen at its start"
    assert flow["heartbeat"]["emitted"] is True
    pair = reports["B->A"]
    assert pair["steps"] == ["topics", "heartbeat"] and pair["plan"] is None
    assert pair["heartbeat"]["target"] == "A"


@pytest.mark.integration
def test_run_no_copy_still_emits_checkpoints_of_what_was_copied(
    kafka_clusters: LocalClusters, tmp_path: Path, unique_topic: Any
) -> None:
    """Checkpoints are a step of their own, not a tail of the copy: after a copy and a commit on the source,
    `run --no-copy` emits the group's checkpoint (it emitted none when checkpoints rode on the copy step)."""
    tag, group = unique_topic("nocopy"), unique_topic("g-nocopy")
    config = write_config(
        tmp_path / "mm2.properties",
        kafka_clusters,
        f"A->B.enabled = true\nA->B.topics = {tag}\nA->B.groups = {group}\n",
    )
    admin = admin_client({"bootstrap.servers": kafka_clusters.bootstrap("A")})
    admin.create_topics([NewTopic(tag, 1, 1)])[tag].result(30)
    producer = Producer(with_logger({"bootstrap.servers": kafka_clusters.bootstrap("A")}))
    for i in range(50):
        producer.produce(tag, value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    copied = subprocess.run(
        [str(MIRRORFLOW), "run", str(config), "--flow", "A->B", "--once"], capture_output=True, text=True, timeout=300
    )
    assert copied.returncode == 0, copied.stderr[-3000:]
    commit_when_ready({"bootstrap.servers": kafka_clusters.bootstrap("A")}, group, TopicPartition(tag, 0, 30))

    result = subprocess.run(
        [str(MIRRORFLOW), "run", str(config), "--flow", "A->B", "--once", "--no-copy", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [flow] = json.loads(result.stdout)["flows"]
    assert "copy" not in flow["steps"] and "checkpoints" in flow["steps"], flow["steps"]
    emitted = [c for c in flow["checkpoints"]["emitted"] if c["group"] == group]
    assert [(c["topic"], c["upstream_offset"], c["downstream_offset"]) for c in emitted] == [(f"A.{tag}", 30, 30)]


@pytest.mark.integration
def test_run_for_repeats_heartbeats_at_their_interval(
    kafka_clusters: LocalClusters, tmp_path: Path, unique_topic: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tag = unique_topic("for")
    config = write_config(
        tmp_path / "mm2.properties",
        kafka_clusters,
        f"A->B.enabled = true\nA->B.topics = {tag}\nemit.heartbeats.interval.seconds = 1\n",
    )
    # A first cycle creates the topics and waits out a fresh broker's coordinator load; the timed run follows.
    assert cli(capsys, "run", str(config), "--once", "--no-copy")[0] == 0
    started_ms = int(time.time() * 1000)
    began = time.monotonic()

    code, out, err = cli(capsys, "run", str(config), "--for", "3.5", "--no-copy")

    elapsed = time.monotonic() - began
    assert code == 0, err
    assert 3.5 <= elapsed < 20
    assert "done: 1 flows, 1 heartbeat-only pairs" in out
    to_b = [
        h
        for h in heartbeats_since(kafka_clusters, "B", started_ms)
        if (h.source_cluster_alias, h.target_cluster_alias) == ("A", "B")
    ]
    to_a = [
        h
        for h in heartbeats_since(kafka_clusters, "A", started_ms)
        if (h.source_cluster_alias, h.target_cluster_alias) == ("B", "A")
    ]
    # Repeated at the interval, never faster; a cycle slowed by a busy machine may skip one tick.
    assert 2 <= len(to_b) <= 5, to_b
    assert 2 <= len(to_a) <= 5, to_a
    gaps = [b.timestamp - a.timestamp for a, b in itertools.pairwise(to_b)]
    assert all(900 <= gap <= 2600 for gap in gaps), gaps


def test_once_and_for_exclude_each_other(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "mm2.properties"
    config.write_text("clusters = A, B\nA.bootstrap.servers = x:1\nB.bootstrap.servers = y:1\nA->B.enabled = true\n")
    code, _, err = cli(capsys, "run", str(config), "--once", "--for", "5")
    assert code == 2
    assert "--once and --for" in err


@pytest.mark.integration
def test_run_once_on_a_terminal_shows_the_copy_progress(
    kafka_clusters: LocalClusters, tmp_path: Path, unique_topic: Any
) -> None:
    tag = unique_topic("tty")
    admin = admin_client({"bootstrap.servers": kafka_clusters.bootstrap("A")})
    admin.create_topics([NewTopic(tag, 3, 1)])[tag].result(30)
    producer = Producer(with_logger({"bootstrap.servers": kafka_clusters.bootstrap("A")}))
    for i in range(30):
        producer.produce(tag, value=b"v", partition=i % 3)
    assert producer.flush(30) == 0
    body = f"A->B.enabled = true\nA->B.topics = {tag}\nA->B.heartbeats.replication.enabled = false\n"
    config = write_config(tmp_path / "mm2.properties", kafka_clusters, body)
    command = f"{MIRRORFLOW} run {config} --flow 'A->B' --once"
    # `script` gives the command a pseudo-terminal, as an operator's shell would.
    done = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "copy A->B" in done.stdout and "3/3" in done.stdout, done.stdout[-2000:]

"""`mirrorflow reset` end to end, as an operator meets it: a copied source topic is deleted and re-created with
more records, the copy stops with the recovery command, the dry run changes nothing, the reset (here deleting the
remote topic too) lets the next cycle copy the new topic afresh, and `mirrorflow audit` is clean. The cycles run
in-process (the control plane's topic sync, then the copy without Spark) to keep the test short; on Spark the
same error ends `mirrorflow run --once` with exit code 1 (`copy_job.python_error_line` carries the message)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.cli.cli_helpers import cli, write_config
from tests.kafka_helpers import create_topic, recreate_topic
from tests.replication.helpers import KEEP_FOREVER, copy_all

from mirrorflow.config.loader import load_config
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration


def test_recreated_topic_error_reset_and_clean_audit(
    kafka_clusters: LocalClusters,
    tmp_path: Path,
    unique_topic: Any,
    kafka_admin: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = unique_topic("reset")
    body = f"A->B.enabled = true\nA->B.topics = {topic}\nA->B.heartbeats.replication.enabled = false\n"
    config = write_config(tmp_path / "mm2.properties", kafka_clusters, body)
    create_topic(kafka_admin("A"), topic, 1, KEEP_FOREVER)
    producer = Producer(with_logger({"bootstrap.servers": kafka_clusters.bootstrap("A")}))

    def produce(count: int, tag: str) -> None:
        for i in range(count):
            producer.produce(topic, key=f"k{i}".encode(), value=f"{tag}-{i}".encode(), partition=0)
        assert producer.flush(30) == 0

    flow = load_config(config).flow("A->B")

    def cycle() -> int:
        """The control plane (creates the remote topic), then the copy: the records copied."""
        run_control_plane(flow, steps={"topics"})
        return copy_all(flow, topic)

    produce(100, "old")
    assert cycle() == 100
    recreate_topic(kafka_admin("A"), topic, 1, KEEP_FOREVER)
    produce(300, "new")

    with pytest.raises(MirrorflowError) as stopped:
        cycle()
    assert "was deleted and re-created" in str(stopped.value)
    assert f"mirrorflow reset CONFIG --flow 'A->B' --topic {topic}" in str(stopped.value)

    code, out, err = cli(capsys, "reset", str(config), "--flow", "A->B", "--topic", topic, "--dry-run")
    assert code == 0, err
    assert "[dry run]" in out and "would remove 1 progress record(s), 1 offset-map segment(s)" in out
    code, out, err = cli(capsys, "reset", str(config), "--flow", "A->B", "--topic", topic, "--dry-run")
    assert "would remove 1 progress record(s), 1 offset-map segment(s)" in out, "the dry run changed nothing"

    code, out, err = cli(capsys, "reset", str(config), "--flow", "A->B", "--topic", topic, "--delete-remote-topic")
    assert code == 0, err
    assert "removed 1 progress record(s), 1 offset-map segment(s)" in out
    assert f"remote topic A.{topic}: deleted" in out

    assert cycle() == 300

    code, out, err = cli(capsys, "audit", str(config), "--flow", "A->B", "--topics", topic, "--json")
    report = json.loads(out)
    assert code == 0, (out, err)
    assert (report["clean"], report["checked"], report["lost"], report["duplicated"]) == (True, 300, 0, 0)

"""The copy job as Airflow runs it: `spark-submit spark_jobs/mirrorflow_copy.py`, on real Spark and real brokers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.config.loader import load_config
from mirrorflow.config.overrides import CLUSTER_SETTINGS_ENV
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def write_config(tmp_path: Path, clusters: LocalClusters, topic: str) -> Path:
    path = tmp_path / "mm2.properties"
    path.write_text(
        mm2_config_text({a: clusters.bootstrap(a) for a in ("A", "B")}) + "A->B.enabled = true\n"
        f"A->B.topics = {topic}\n"
        "A->B.mirrorflow.copy.mode = interval\n"
    )
    return path


def spark_submit_command(*args: str) -> list[str]:
    """The copy job's spark-submit on `local[2]` with this interpreter's Spark (run with `spark_env()`)."""
    bin_dir = Path(sys.executable).parent
    return [
        str(bin_dir / "spark-submit"),
        "--master",
        "local[2]",
        str(REPO / "spark_jobs" / "mirrorflow_copy.py"),
        *args,
    ]


def spark_env(extra_env: dict[str, str] | None = None) -> dict[str, str]:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYSPARK_PYTHON": sys.executable}
    return {**env, **(extra_env or {})}


def spark_submit(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = spark_submit_command(*args)
    return subprocess.run(command, env=spark_env(extra_env), capture_output=True, text=True, timeout=600)


def test_spark_submit_copies_every_partition(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
) -> None:
    topic = unique_topic("spark")
    kafka_admin("A").create_topics([NewTopic(topic, 4, 1)])[topic].result()
    producer = kafka_producer("A")
    for i in range(2000):
        producer.produce(topic, key=str(i).encode(), value=b"x" * 100, partition=i % 4)
    assert producer.flush(30) == 0
    config = write_config(tmp_path, kafka_clusters, topic)
    run_control_plane(load_config(config).flow("A->B"))

    # The job gets B's address only from the environment, as Airflow hands it credentials from connections:
    # the file the job reads points B at a closed port.
    job_config = tmp_path / "job-mm2.properties"
    job_config.write_text(config.read_text().replace(kafka_clusters.bootstrap("B"), "127.0.0.1:1"))
    settings = {CLUSTER_SETTINGS_ENV: json.dumps({"B": {"bootstrap.servers": kafka_clusters.bootstrap("B")}})}
    summary_file = tmp_path / "summary.json"
    done = spark_submit(str(job_config), "--flow", "A->B", "--summary-file", str(summary_file), extra_env=settings)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(summary_file.read_text())
    ours = [r for r in summary["ranges"] if r["topic"] == topic]  # `heartbeats` replicate as well
    assert sum(r["records"] for r in ours) == 2000
    assert sorted(r["partition"] for r in ours) == [0, 1, 2, 3]
    # Five ranges (four partitions and `heartbeats`) on local[2]: two Spark tasks, each copying in threads.
    assert summary["spark_tasks"] == 2
    target = kafka_admin("B")
    offsets = {p: target.list_topics(f"A.{topic}", timeout=10).topics[f"A.{topic}"].partitions[p] for p in range(4)}
    assert len(offsets) == 4
    consumer_conf = {"bootstrap.servers": kafka_clusters.bootstrap("B"), "group.id": "check"}
    from confluent_kafka import Consumer

    check = Consumer(with_logger(consumer_conf))
    try:
        for p in range(4):
            low, high = check.get_watermark_offsets(TopicPartition(f"A.{topic}", p), timeout=10)
            # 500 records plus the commit marker of the one transaction that carried them
            assert (low, high) == (0, 501)
    finally:
        check.close()


def test_spark_submit_reports_an_unknown_flow_clearly(tmp_path: Path, kafka_clusters: LocalClusters) -> None:
    config = write_config(tmp_path, kafka_clusters, "nothing")
    done = spark_submit(str(config), "--flow", "B->A")
    assert done.returncode == 2
    output = done.stdout + done.stderr  # spark-submit passes the Python driver's stderr to its stdout
    assert "flow 'B->A' is not enabled" in output
    assert "Traceback" not in output


def test_an_idle_continuous_flow_holds_one_spark_task(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    unique_topic: Callable[..., str],
) -> None:
    """Issue 19: four empty partitions on local[2] held two Spark tasks (and so two cores) for the whole run;
    quiet partitions (`replication/copy_quiet.py`) now share one."""
    topic = unique_topic("idle")
    kafka_admin("A").create_topics([NewTopic(topic, 4, 1)])[topic].result()
    config = tmp_path / "mm2.properties"
    config.write_text(
        write_config(tmp_path, kafka_clusters, topic).read_text().replace("interval", "continuous")
        + "A->B.heartbeats.replication.enabled = false\n"
    )
    run_control_plane(load_config(config).flow("A->B"))
    summary_file = tmp_path / "summary.json"
    args = ("--flow", "A->B", "--run-seconds", "3", "--summary-file", str(summary_file))
    done = spark_submit(str(config), *args)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(summary_file.read_text())
    assert summary["mode"] == "continuous" and len(summary["ranges"]) == 4
    assert (summary["spark_tasks"], summary["quiet_partitions"], summary["idle_partitions"]) == (1, 4, 4), summary

"""The copy on a real Spark standalone cluster (master + one worker on loopback, from the pyspark installation).

The executors get Mirrorflow the way a real cluster's machines would: the package as a `--py-files` zip and
confluent-kafka/pydantic in a packed venv on `--archives env.tar.gz#env` (`mirrorflow.spark.packaging`). The
daemons run without the dev venv's PYSPARK_PYTHON or PYTHONPATH, and the job's summary names, per executor,
the interpreter and package files it ran, so a copy that silently used the dev venv fails the test.

Cost on 2 cores: cluster start ~15 s, each of the two submits (spark-submit directly, then through the
Airflow copy operator) ~20-45 s; the packed env is built once per machine
(~10 s with PyPI reachable) and cached under ~/.cache/mirrorflow/spark-env.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.kafka_helpers import KafkaKit, read_partition
from tests.spark.copy_probe import copy_operator
from tests.spark.standalone import BIN, Standalone

from mirrorflow.config.loader import load_config
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.copy_plan import copyable, plan_copy
from mirrorflow.replication.copy_setup import load_progress
from mirrorflow.replication.discovery import discover
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import run_control_plane
from mirrorflow.spark.packaging import cluster_submit_args, package_py_files, packed_env

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 3
PER_PARTITION = 200


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the package zip, the packed executor env) as any cluster submit ships them."""
    return package_py_files(tmp_path_factory.mktemp("py-files")), packed_env()


def write_config(path: Path, clusters: LocalClusters, topic: str) -> Path:
    path.write_text(
        mm2_config_text({a: clusters.bootstrap(a) for a in ("A", "B")}) + "A->B.enabled = true\n"
        f"A->B.topics = {topic}\n"
        "A->B.heartbeats.replication.enabled = false\n"
        "A->B.mirrorflow.copy.mode = interval\n"
    )
    return path


def produce_source(admin: AdminClient, producer: Producer, topic: str) -> None:
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={"retention.ms": "-1"})])[topic].result()
    for i in range(PARTITIONS * PER_PARTITION):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}".encode() * 8,
            partition=i % PARTITIONS,
            timestamp=1_600_000_000_000 + i,
            headers=[("n", str(i).encode())],
        )
    assert producer.flush(30) == 0


def read_all(consumer: Consumer, topic: str, partition: int) -> list[tuple[int, bytes, bytes, int, list[Any]]]:
    """Every committed record of one partition: (offset, key, value, timestamp, headers)."""
    return [
        (m.offset(), m.key(), m.value(), m.timestamp()[1], m.headers())
        for m in read_partition(consumer, topic, partition)
    ]


def spark_submit(master: str, py_files: Path, archive: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYTHONPATH")}
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    command = [str(BIN / "spark-submit"), "--master", master, "--driver-memory", "512m", "--executor-memory", "512m"]
    command += [*cluster_submit_args(py_files, archive), str(REPO / "spark_jobs" / "mirrorflow_copy.py"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


def test_the_copy_runs_on_a_standalone_cluster_with_shipped_code_and_env(
    tmp_path: Path,
    standalone: Standalone,
    shipped: tuple[Path, Path],
    kafka: KafkaKit,
) -> None:
    topic = kafka.topic("standalone")
    produce_source(kafka.admin("A"), kafka.producer("A"), topic)
    config = write_config(tmp_path / "mm2.properties", kafka.clusters, topic)
    flow = load_config(config).flow("A->B")
    run_control_plane(flow)
    summary_file = tmp_path / "summary.json"
    py_files, archive = shipped
    done = spark_submit(
        standalone.master,
        py_files,
        archive,
        str(config),
        "--flow",
        "A->B",
        "--master",
        standalone.master,
        "--summary-file",
        str(summary_file),
    )
    logs = standalone.log_tails()
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{logs}"
    summary = json.loads(summary_file.read_text())
    print(json.dumps(summary["executors"], indent=1))

    # The executors ran the shipped env's Python, Mirrorflow from the zip, confluent-kafka from the env.
    assert summary["executors"], summary
    for runtime in summary["executors"]:
        env_root = Path(runtime["python"]).parent.parent
        assert env_root.name == "env" and standalone.work_dir in env_root.parents, runtime
        assert runtime["mirrorflow"].endswith("mirrorflow.zip/mirrorflow/__init__.py"), runtime
        for package in ("confluent_kafka", "pydantic"):
            assert Path(runtime[package]).is_relative_to(env_root / "lib"), runtime

    # The copy is exact: every record at its own offset, and the stored progress agrees.
    assert summary["records"] == PARTITIONS * PER_PARTITION
    assert sorted((r["partition"], r["start"], r["next_upstream"]) for r in summary["ranges"]) == [
        (p, 0, PER_PARTITION) for p in range(PARTITIONS)
    ]
    source, target = kafka.consumer("A"), kafka.consumer("B")
    for partition in range(PARTITIONS):
        upstream = read_all(source, topic, partition)
        downstream = read_all(target, f"A.{topic}", partition)
        assert len(upstream) == len(downstream) == PER_PARTITION
        for (offset, key, value, ts, headers), (d_offset, d_key, d_value, d_ts, d_headers) in zip(
            upstream, downstream, strict=True
        ):
            assert (d_offset, d_key, d_value, d_ts) == (offset, key, value, ts)
            assert headers[0] in (d_headers or []), (headers, d_headers)
    with FlowClients(flow) as clients:
        tasks = plan_copy(flow, copyable(discover(flow, clients)), interval=True)
    progress = {task.partition: load_progress(task)[0] for task in tasks if task.topic == topic}
    assert sorted(progress) == list(range(PARTITIONS))
    for stored in progress.values():
        assert stored is not None
        assert (stored.next_upstream, stored.records_copied) == (PER_PARTITION, PER_PARTITION), stored


def test_the_airflow_copy_task_ships_the_same_way_to_the_cluster(
    tmp_path: Path,
    standalone: Standalone,
    kafka: KafkaKit,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = kafka.topic("standalone-op")
    produce_source(kafka.admin("A"), kafka.producer("A"), topic)
    config = write_config(tmp_path / "mm2.properties", kafka.clusters, topic)
    run_control_plane(load_config(config).flow("A->B"))
    monkeypatch.setenv("AIRFLOW_CONN_MIRRORFLOW_SPARK", json.dumps({"conn_type": "spark", "host": standalone.master}))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    operator = copy_operator(config, "A->B", driver_memory="512m", executor_memory="512m")
    result = operator.execute({})
    assert result is not None
    assert (result["records"], result["master"], result["partitions"]) == (
        PARTITIONS * PER_PARTITION,
        standalone.master,
        PARTITIONS,
    )
    apps = sorted(standalone.work_dir.glob("app-*"))
    assert apps and list(apps[-1].glob("*/env/bin/python")), apps  # this submit's executor unpacked the env

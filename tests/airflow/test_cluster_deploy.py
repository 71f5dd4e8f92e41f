"""Spark's cluster deploy mode, as YARN or Kubernetes run it: the driver starts elsewhere, in a working directory
holding the files shipped with `--files`, and nothing it writes locally reaches the Airflow task.

No YARN or Kubernetes runs here, so the provider's spark-submit is replaced by a stand-in driver that does what
those clusters do with the command line the operator built: a fresh directory with the `--files` copied in, the
application started there (on `local[2]`, the only part changed). The copy, the config reaching the driver by
basename, and the totals coming back through the target cluster are all real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.spark.copy_probe import copy_operator

from mirrorflow.airflow.spark import local_env
from mirrorflow.kafka.tail_record import find_near_end
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text

pytestmark = pytest.mark.integration
RECORDS = 40


def test_a_cluster_mode_driver_gets_the_config_by_files_and_returns_its_totals_through_kafka(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
) -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from mirrorflow.airflow.tasks import load_flow
    from mirrorflow.replication.flow_cycle import run_control_plane

    topic = unique_topic("deploy")
    kafka_admin("A").create_topics([NewTopic(topic, 2, 1)])[topic].result()
    producer = kafka_producer("A")
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    config = tmp_path / "conf" / "mm2.properties"
    config.parent.mkdir()
    config.write_text(
        mm2_config_text({a: kafka_clusters.bootstrap(a) for a in ("A", "B")})
        + f"A->B.enabled = true\nA->B.topics = {topic}\nA->B.heartbeats.replication.enabled = false\n"
        "A->B.mirrorflow.copy.mode = interval\n"
    )
    run_control_plane(load_flow(str(config), "A->B"))
    spark_conn = {"conn_type": "spark", "host": "k8s://https://127.0.0.1:6443", "extra": {"deploy-mode": "cluster"}}
    monkeypatch.setenv("AIRFLOW_CONN_MIRRORFLOW_SPARK", json.dumps(spark_conn))
    seen: dict[str, Any] = {}

    def driver_in_the_cluster(self: Any, _context: Any) -> None:
        args = list(self.application_args)
        seen.update(args=list(args), files=self.files)
        workdir = tmp_path / f"driver-{uuid.uuid4().hex[:6]}"  # nothing of the task's directory is there
        workdir.mkdir()
        for shipped in filter(None, (self.files or "").split(",")):
            shutil.copy(shipped, workdir)
        args[args.index("--master") + 1] = "local[2]"
        env = {**os.environ, **local_env(), **(self.env_vars or {})}
        done = subprocess.run(
            ["spark-submit", "--master", "local[2]", self.application, *args],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]

    monkeypatch.setattr(SparkSubmitOperator, "execute", driver_in_the_cluster)
    result = copy_operator(config, "A->B").execute({})

    assert seen["args"][0] == "mm2.properties" and seen["files"] == str(config), seen
    key = seen["args"][seen["args"].index("--summary-key") + 1]
    assert result is not None and (result["records"], result["partitions"]) == (RECORDS, 2), result
    assert result["master"] == "k8s://https://127.0.0.1:6443"
    # read once, then tombstoned: a year of runs leaves no summaries behind
    metrics = "mirrorflow-metrics.A.internal"
    conf = {"bootstrap.servers": kafka_clusters.bootstrap("B")}
    assert find_near_end("B", conf, metrics, b"summary/" + key.encode(), 0, 30) is None


def test_cluster_deploy_mode_where_spark_runs_python_drivers_only_in_the_task_fails_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (issue 22): Spark runs a Python application's driver in the cluster on YARN and Kubernetes only;
    `deploy-mode: cluster` on a local (or standalone) master made spark-submit refuse the job, and the task was
    retried with backoff as if the cluster had been down."""
    from airflow.sdk.exceptions import AirflowFailException

    config = tmp_path / "mm2.properties"
    config.write_text(mm2_config_text({"A": "127.0.0.1:1", "B": "127.0.0.1:2"}, "A->B.enabled = true\n"))
    spark_conn = {"conn_type": "spark", "host": "local[1]", "extra": {"deploy-mode": "cluster"}}
    monkeypatch.setenv("AIRFLOW_CONN_MIRRORFLOW_SPARK", json.dumps(spark_conn))
    with pytest.raises(AirflowFailException, match=r"deploy-mode.*cluster.*local\[1\].*YARN and Kubernetes"):
        copy_operator(config, "A->B").execute({})


def test_the_operators_own_deploy_mode_ships_the_config_as_the_connections_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kafka_clusters: LocalClusters
) -> None:
    """Review (issue 22): the Spark provider lets an operator's `deploy_mode=` win over the connection's
    `deploy-mode`, but only the connection was read here, so a hand-written DAG's cluster-mode copy got neither
    the config by `--files` nor its basename: its driver could not open the path of this worker."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    config = tmp_path / "conf" / "mm2.properties"
    config.parent.mkdir()
    bootstraps = {a: kafka_clusters.bootstrap(a) for a in ("A", "B")}
    config.write_text(mm2_config_text(bootstraps, "A->B.enabled = true\nA->B.topics = none-here\n"))
    monkeypatch.setenv("AIRFLOW_CONN_MIRRORFLOW_SPARK", json.dumps({"conn_type": "spark", "host": "yarn"}))
    seen: dict[str, Any] = {}

    def submitted(self: Any, _context: Any) -> None:
        seen.update(args=list(self.application_args), files=self.files)

    monkeypatch.setattr(SparkSubmitOperator, "execute", submitted)
    copy_operator(config, "A->B", deploy_mode="cluster").execute({})
    assert seen["args"][0] == "mm2.properties" and seen["files"] == str(config), seen


def test_cluster_deploy_mode_refuses_to_ship_a_config_with_secrets_in_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kafka_clusters: LocalClusters
) -> None:
    """Review (issue 22): in cluster deploy mode the config goes to the cluster's storage with `--files` (YARN's
    staging directory; on Kubernetes `spark.kubernetes.file.upload.path`, an object store Spark never cleans), so
    a password written in it was copied there. Secrets must be references then (`${env:...}` from a Kubernetes
    Secret, `${file:...}` on the driver's machine); the refusal names key and line, never the value."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowFailException

    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="mf" password='
    config = tmp_path / "mm2.properties"
    config.write_text(
        mm2_config_text({a: kafka_clusters.bootstrap(a) for a in ("A", "B")}, "A->B.enabled = true\n")
        + f'B.sasl.jaas.config = {jaas}"hunter2-in-clear";\n'
    )
    line = config.read_text().splitlines().index(f'B.sasl.jaas.config = {jaas}"hunter2-in-clear";') + 1
    spark_conn = {"conn_type": "spark", "host": "k8s://https://127.0.0.1:6443", "extra": {"deploy-mode": "cluster"}}
    monkeypatch.setenv("AIRFLOW_CONN_MIRRORFLOW_SPARK", json.dumps(spark_conn))
    submitted: list[Any] = []
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, _context: submitted.append(self.files))
    with pytest.raises(AirflowFailException, match=rf"B\.sasl\.jaas\.config \(line {line}\)") as refused:
        copy_operator(config, "A->B").execute({})
    assert "hunter2-in-clear" not in str(refused.value) and submitted == []

    monkeypatch.setenv("MF_TEST_PW", "hunter2-from-env")
    config.write_text(config.read_text().replace('"hunter2-in-clear"', '"${env:MF_TEST_PW}"'))
    copy_operator(config, "A->B", deploy_mode="cluster").execute({})
    assert submitted == [str(config)]

"""A failing step fails the DAG run, and the task log says why (here: the target cluster cannot be reached)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.airflow.notify_probe import NOTIFY_FILE_ENV

from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text

pytestmark = pytest.mark.integration


def test_an_unreachable_target_fails_the_run_with_the_reason_in_the_log(
    airflow_db: None,
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    dag_bag: Callable[..., Any],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tmp_path / "mm2.properties"
    body = "A->B.enabled = true\nA->B.mirrorflow.copy.mode = interval\nadmin.timeout.ms = 3000\n"
    # B points at a port nothing listens on.
    config.write_text(mm2_config_text({"A": kafka_clusters.bootstrap("A"), "B": "127.0.0.1:1"}, body))
    bag = dag_bag(config)
    assert bag.import_errors == {}
    dag = bag.dags["mirrorflow__A__B"]
    for task in dag.tasks:
        task.retries = 0  # the factory's retries with backoff would only delay the verdict here

    dag_run = dag.test()

    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    assert dag_run.state == "failed", states
    assert states["discover"] == "failed"
    assert states["copy"] != "success", "nothing downstream of a failed step runs"
    out, err = capfd.readouterr()
    assert "cluster 'B'" in out + err, "the task log names the cluster that failed"
    alert = "Mirrorflow alert: DAG mirrorflow__A__B, task discover"
    assert any(alert in r.getMessage() and "cluster 'B'" in r.getMessage() for r in caplog.records), (
        "the default notifier logs the failure and its reason"
    )


def test_an_operator_error_fails_at_once_and_is_not_retried(
    airflow_db: None,
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    dag_bag: Callable[..., Any],
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A missing Airflow connection cannot heal by itself: the task fails on its first try, whatever the
    retries, instead of backing off for minutes before it says why."""
    config = tmp_path / "mm2.properties"
    body = (
        "A->B.enabled = true\nA->B.mirrorflow.copy.mode = interval\n"
        "A.mirrorflow.connection = mirrorflow_no_such_connection\n"
        "mirrorflow.airflow.retries = 2\nmirrorflow.airflow.retry.delay.seconds = 1\n"
        "mirrorflow.airflow.failure.notifier = tests.airflow.notify_probe.record\n"
    )
    alerts = tmp_path / "alerts.jsonl"
    monkeypatch.setenv(NOTIFY_FILE_ENV, str(alerts))
    config.write_text(mm2_config_text({"A": kafka_clusters.bootstrap("A"), "B": kafka_clusters.bootstrap("B")}, body))
    bag = dag_bag(config)
    assert bag.import_errors == {}
    dag = bag.dags["mirrorflow__A__B"]
    assert dag.get_task("discover").retries == 2

    dag_run = dag.test()

    discover = next(ti for ti in dag_run.get_task_instances() if ti.task_id == "discover")
    assert dag_run.state == "failed"
    assert str(discover.state) == "failed"
    assert discover.try_number == 1, "an operator error must not be retried"
    out, err = capfd.readouterr()
    assert "mirrorflow_no_such_connection" in out + err, "the task log names the missing connection"
    assert "not retried" in out + err
    called = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert [(c["task"], c["try"]) for c in called] == [("discover", 1)], "the operator's notifier, once"
    assert "mirrorflow_no_such_connection" in called[0]["error"]

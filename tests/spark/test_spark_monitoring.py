"""Spark's own monitoring of a copy: a flow turns the event log on through `mirrorflow.spark.conf.*`, the copy
task (as Airflow runs it, through spark-submit) writes it, and Spark's History Server lists the copy as a
completed application with its jobs, read through its REST API. Cost: ~40 s (one local copy, one History
Server start)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic
from tests.kafka_helpers import KafkaKit
from tests.spark.copy_probe import copy_operator
from tests.spark.standalone import get_json, history_server

from mirrorflow.config.loader import load_config
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
APP = "mirrorflow-copy A->B"


def completed_copy(url: str) -> dict[str, Any] | None:
    for app in get_json(f"{url}/applications") or []:
        if app["name"] == APP and app["attempts"] and all(a["completed"] for a in app["attempts"]):
            found: dict[str, Any] = app
            return found
    return None


def test_a_copy_s_event_log_is_written_and_the_history_server_shows_it(
    tmp_path: Path, kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = kafka.topic("events")
    kafka.admin("A").create_topics([NewTopic(topic, 2, 1)])[topic].result()
    producer = kafka.producer("A")
    for i in range(100):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    events = tmp_path / "spark-events"
    events.mkdir()
    config = tmp_path / "mm2.properties"
    config.write_text(
        mm2_config_text({a: kafka.bootstrap(a) for a in ("A", "B")})
        + f"A->B.enabled = true\nA->B.topics = {topic}\nA->B.mirrorflow.copy.mode = interval\n"
        "A->B.mirrorflow.spark.master = local[2]\nheartbeats.replication.enabled = false\n"
        "A->B.mirrorflow.spark.conf.spark.eventLog.enabled = true\n"
        f"A->B.mirrorflow.spark.conf.spark.eventLog.dir = {events.as_uri()}\n"
    )
    run_control_plane(load_config(config).flow("A->B"))
    monkeypatch.delenv("AIRFLOW_CONN_MIRRORFLOW_SPARK", raising=False)
    operator = copy_operator(config, "A->B", spark_master="local[2]", explicit_master=True)
    result = operator.execute({})
    assert result is not None and result["records"] == 100, result
    logs = list(events.iterdir())
    assert len(logs) == 1, logs

    with history_server(tmp_path, events) as url:
        deadline = time.monotonic() + 60
        while (app := completed_copy(url)) is None and time.monotonic() < deadline:
            time.sleep(1)
        assert app is not None, get_json(f"{url}/applications")
        jobs = get_json(f"{url}/applications/{app['id']}/jobs")
        assert jobs and {job["status"] for job in jobs} == {"SUCCEEDED"}, jobs

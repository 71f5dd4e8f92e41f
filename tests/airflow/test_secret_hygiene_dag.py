"""Secrets never reach Airflow's logs, its metadata DB (XCom, rendered fields, ...) or the dashboard's data.

A flow DAG runs end to end with `dag.test()` (real spark-submit, local[2]) on the session's clusters, with a
config carrying credentials everywhere one can be written: a SCRAM `sasl.jaas.config` in the file, a TLS key
password through `${file:...}`, and a SASL password in the Airflow connection of the target cluster. The
session's clusters are PLAINTEXT, where librdkafka ignores SASL and key passwords, so the secrets travel every
path (config → tasks → Spark job → clients) without needing secured brokers; secured brokers are exercised in
tests/replication/test_security_live.py. Afterwards the raw bytes of the Airflow DB, every log file under
AIRFLOW_HOME, the captured output and the dashboard's JSON are searched for each secret value.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

import pytest

from mirrorflow.local.cluster import LocalClusters

pytestmark = pytest.mark.integration
RECORDS = 40


def test_a_flow_dag_run_leaks_no_secret(
    airflow_db: None,
    live_flow: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    kafka_clusters: LocalClusters = live_flow.clusters
    sasl_password, key_password, connection_password = (f"mfleak{secrets.token_hex(10)}" for _ in range(3))
    topic = live_flow.source_topic("hygiene")
    producer = live_flow.producer("A")
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0

    secret_file = live_flow.tmp_path / "secrets.properties"
    secret_file.write_text(f"key.password={key_password}\n")
    config = live_flow.tmp_path / "mm2.properties"
    config.write_text(
        live_flow.config_text() + "A->B.enabled = true\n"
        f"A->B.topics = {topic}\n"
        "A->B.heartbeats.replication.enabled = false\n"
        "A->B.mirrorflow.copy.mode = interval\n"
        "A->B.mirrorflow.spark.master = local[2]\n"
        "mirrorflow.schedule = 10m\n"
        "A.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="mf" password="{sasl_password}";\n'
        f"B.ssl.key.password = ${{file:{secret_file}:key.password}}\n"
        "B.mirrorflow.connection = kafka_b_hygiene\n"
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_B_HYGIENE",
        json.dumps(
            {
                "conn_type": "kafka",
                "extra": {"bootstrap.servers": kafka_clusters.bootstrap("B"), "sasl.password": connection_password},
            }
        ),
    )
    dag_run = live_flow.dag(config).test()
    assert dag_run.state == "success", live_flow.states(dag_run)

    xcom_values = live_flow.xcoms(dag_run, key=None)  # every key: a secret must hide in none of them
    assert xcom_values["copy"]["records"] == RECORDS, "the copy ran with the secret-bearing clients"

    from mirrorflow.airflow import dashboard

    monkeypatch.setenv("MIRRORFLOW_CONFIG", str(config))
    data = dashboard.snapshot()
    assert [f["flow"] for f in data["flows"]] == ["A->B"] and data["flows"][0]["error"] is None, data

    home = Path(os.environ["AIRFLOW_HOME"])
    db_bytes = b"".join(p.read_bytes() for p in home.glob("airflow.db*"))
    log_text = "".join(p.read_text(errors="replace") for p in home.rglob("*.log") if p.is_file())
    out, err = capsys.readouterr()
    searched = {
        "xcom": json.dumps(xcom_values, default=str),
        "airflow db": db_bytes.decode("latin-1"),
        "log files": log_text,
        "captured output": out + err,
        "captured logs": caplog.text,
        "dashboard json": json.dumps(data),
    }
    assert "spark-submit" in caplog.text + out + err, "the Spark job's command and output were captured"
    for secret in (sasl_password, key_password, connection_password):
        leaks = [name for name, text in searched.items() if secret in text]
        assert not leaks, f"a secret ({secret[:8]}...) appears in: {leaks}"

"""Cluster credentials from Airflow connections of the Kafka provider (`<alias>.mirrorflow.connection`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from mirrorflow.airflow.connections import cluster_settings, merged_client
from mirrorflow.airflow.tasks import load_flow
from mirrorflow.config.client_config import ClientConfig
from mirrorflow.core.errors import UsageError

FILE_CLIENT = ClientConfig.from_mapping(
    {
        "bootstrap.servers": "file:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="file-user" '
        'password="file-pw";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/file/ca.pem",
        "ssl.keystore.type": "JKS",
        "ssl.keystore.location": "/file/keystore.jks",
        "linger.ms": "7",
    }
)
CONNECTION = {
    "bootstrap.servers": "conn:9093",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "conn-user",
    "sasl.password": "conn-pw",
    "ssl.ca.location": "/conn/ca.pem",
    "ssl.key.location": "/conn/client.key",
    "ssl.certificate.location": "/conn/client.pem",
    "ssl.key.password": "conn-key-pw",
}


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_connection_settings_win_and_their_java_counterparts_step_aside() -> None:
    merged = merged_client(FILE_CLIENT, {**CONNECTION, "group.id": "airflow", "error_cb": "pkg.cb", "log_cb": "x.y"})
    conf = merged.librdkafka()
    assert {key: conf[key] for key in CONNECTION} == CONNECTION
    assert conf["linger.ms"] == "7"
    assert conf["security.protocol"] == "SASL_SSL"
    assert "group.id" not in conf and "log_cb" not in conf  # Mirrorflow's own group ids and logger
    assert conf["error_cb"] == "pkg.cb"  # a named callback travels by name (the hook vetted it)
    assert "ssl.keystore.location" not in conf
    assert merged.masked()["sasl.password"] == "***"
    assert merged.masked()["ssl.key.password"] == "***"
    assert "conn-pw" not in merged.model_dump_json()


def test_a_pkcs12_keystore_from_the_connection_survives_translation() -> None:
    extra = {"ssl.keystore.location": "/conn/client.p12", "ssl.keystore.password": "p12-pw"}
    conf = merged_client(FILE_CLIENT, extra).librdkafka()
    assert {key: conf[key] for key in extra} == extra


def _config(write: Callable[..., Path]) -> Path:
    return write(
        "clusters = A, B\n"
        "A.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:2\n"
        "A.mirrorflow.connection = kafka_a\n"
        "A->B.enabled = true\n"
    )


def test_a_flow_takes_credentials_from_an_airflow_connection(
    write_config: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_A", json.dumps({"conn_type": "kafka", "extra": CONNECTION}))
    records = Records()
    logger = logging.getLogger("mirrorflow.airflow.connections")
    monkeypatch.setattr(logger, "disabled", False)  # Airflow's logging setup varies with what ran before
    monkeypatch.setattr(logger, "level", logging.INFO)
    logger.addHandler(records)
    try:
        flow = load_flow(str(_config(write_config)), "A->B")
    finally:
        logger.removeHandler(records)
    for client in (flow.source_admin, flow.source_consumer, flow.source_producer):
        assert client.librdkafka()["sasl.password"] == "conn-pw"
        assert client.librdkafka()["bootstrap.servers"] == "conn:9093"
    assert flow.target_admin.librdkafka() == {"bootstrap.servers": "127.0.0.1:2"}
    assert cluster_settings(flow) == {"A": CONNECTION}
    assert "conn-pw" not in flow.to_json()
    logged = "\n".join(records.lines)
    assert "takes bootstrap.servers" in logged and "from Airflow connection 'kafka_a'" in logged
    assert "conn-pw" not in logged and "conn-key-pw" not in logged


def test_a_missing_connection_says_how_to_define_it(
    write_config: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_A", raising=False)
    with pytest.raises(UsageError, match=r"'kafka_a'.*is not defined.*AIRFLOW_CONN_KAFKA_A"):
        load_flow(str(_config(write_config)), "A->B")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, "has no extra JSON"),
        ({"config": {"bootstrap.servers": "x:1"}}, "nests its settings under 'config'"),
    ],
)
def test_a_connection_without_flat_librdkafka_settings_is_refused(
    write_config: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, extra: dict[str, object], message: str
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_A", json.dumps({"conn_type": "kafka", "extra": extra}))
    with pytest.raises(UsageError, match=message):
        load_flow(str(_config(write_config)), "A->B")

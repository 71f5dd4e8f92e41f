"""Settings laid over a loaded flow (Airflow connections → the copy job's environment)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirrorflow.config.loader import load_config
from mirrorflow.config.overrides import CLUSTER_SETTINGS_ENV, cluster_settings_from_env, with_cluster_settings
from mirrorflow.core.errors import UsageError


def test_settings_reach_the_clients_of_the_side_they_name(tmp_path: Path) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = true\n")
    flow = load_config(path).flow("A->B")
    env = {CLUSTER_SETTINGS_ENV: json.dumps({"B": {"bootstrap.servers": "b:2", "sasl.password": "s3cret"}})}

    merged = with_cluster_settings(flow, cluster_settings_from_env(env))

    assert merged.target_producer.librdkafka()["bootstrap.servers"] == "b:2"
    assert merged.target_admin.librdkafka()["sasl.password"] == "s3cret"
    assert merged.source_consumer.librdkafka()["bootstrap.servers"] == "a:1", "the other side is untouched"
    assert "s3cret" not in merged.target_producer.masked().values()


def test_unset_means_nothing_and_a_bad_value_is_refused_without_echoing_it() -> None:
    assert cluster_settings_from_env({}) == {}
    with pytest.raises(UsageError) as refused:
        cluster_settings_from_env({CLUSTER_SETTINGS_ENV: '["sasl.password=s3cret"]'})
    assert "s3cret" not in str(refused.value)

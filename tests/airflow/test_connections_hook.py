"""Connections are read through the Kafka provider's hook (`KafkaBaseHook._build_config`, provider 2.1.0 pinned):
its callback allowlist and its Amazon MSK IAM token apply to Mirrorflow's clients too. The live proof (an
`oauth_cb` authenticating the control plane and the Spark copy) is in tests/replication/test_security_live.py;
these check the mapping of what the hook builds to names that can travel."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mirrorflow.airflow.connections import _callback_names, connection_extra
from mirrorflow.core.errors import UsageError
from mirrorflow.kafka.callbacks import resolve_callbacks
from mirrorflow.local.properties import mm2_config_text

MSK = "b-1.demo.abcde1.c2.kafka.eu-west-3.amazonaws.com:9098"


def _connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: dict[str, str]) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kafka", "extra": extra}))


def test_the_provider_hook_still_builds_the_config_mirrorflow_reads() -> None:
    from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

    assert callable(getattr(KafkaBaseHook, "_build_config", None)), "the pinned provider's hook changed"


def test_a_callback_outside_the_allowlist_is_refused_with_the_setting_to_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _connection(monkeypatch, "k_cb", {"bootstrap.servers": "h:9092", "error_cb": "builtins.print"})
    monkeypatch.delenv("AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST", raising=False)
    with pytest.raises(UsageError, match=r"k_cb.*callback_allowlist"):
        connection_extra("k_cb")
    monkeypatch.setenv("AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST", "builtins.print")
    settings = connection_extra("k_cb")
    assert settings["error_cb"] == "builtins.print"
    assert resolve_callbacks(settings)["error_cb"] is print


def test_msk_iam_needs_the_signer_and_the_error_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("airflow.providers.apache.kafka")
    extra = {"bootstrap.servers": MSK, "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}
    _connection(monkeypatch, "k_msk", extra)
    try:
        import aws_msk_iam_sasl_signer  # noqa: F401
    except ImportError:
        with pytest.raises(UsageError, match=r"k_msk.*msk"):
            connection_extra("k_msk")
    else:
        assert connection_extra("k_msk")["oauth_cb"] == "msk-iam:eu-west-3"


def test_the_msk_token_the_hook_adds_travels_by_name_and_resolves_to_the_signer() -> None:
    extra = {"bootstrap.servers": MSK, "sasl.mechanism": "OAUTHBEARER"}
    names = _callback_names("k_msk", extra, {**extra, "oauth_cb": lambda _config: ("t", 0.0)})
    assert names == {"oauth_cb": "msk-iam:eu-west-3"}
    with pytest.raises(UsageError, match="aws-msk-iam-sasl-signer-python"):
        resolve_callbacks(names)


def test_a_callback_the_hook_adds_for_another_cloud_is_refused_with_the_way_out() -> None:
    extra = {"bootstrap.servers": "bootstrap.c.managedkafka.eu.cloud.goog:9092"}
    with pytest.raises(UsageError, match="name a function of your own"):
        _callback_names("k_gmk", extra, {**extra, "oauth_cb": lambda _config: ("t", 0.0)})


def test_an_unknown_callback_name_is_a_clear_error() -> None:
    with pytest.raises(UsageError, match=r"stats_cb = no\.such\.module\.fn"):
        resolve_callbacks({"stats_cb": "no.such.module.fn"})


def commit_probe(_err: object, _partitions: object) -> None:
    """An `on_commit` a connection may name (allowlisted in the tests that use it)."""


PROBE = "tests.airflow.test_connections_hook.commit_probe"


def test_an_allowlisted_callback_that_cannot_be_imported_is_a_usage_error_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review (issue 22): the provider's hook imports each allowlisted name; one that is not importable here
    (a typo, a package missing on this worker) escaped as its raw ImportError, without the connection's name,
    and was retried with backoff like a broker outage."""
    from airflow.sdk.exceptions import AirflowFailException

    from mirrorflow.airflow.tasks import fail_fast

    for name in ("no_such_module_mf.token", "os.no_such_function_mf"):
        _connection(monkeypatch, "k_gone", {"bootstrap.servers": "h:9092", "oauth_cb": name})
        monkeypatch.setenv("AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST", name)
        with pytest.raises(AirflowFailException, match=rf"'k_gone'.*oauth_cb.*{name}.*not retried"):
            fail_fast(connection_extra)("k_gone")


@pytest.mark.integration
def test_a_consumer_callback_from_a_connection_does_not_break_the_sides_producers_and_admins(
    monkeypatch: pytest.MonkeyPatch, write_config: Any, kafka_clusters: Any, unique_topic: Any
) -> None:
    """Review (issue 22): a connection's settings go to every client of its side, but librdkafka refuses
    `on_commit` outside a consumer ("No such configuration property"), so every producer and admin of the side
    failed to start, and each task was retried."""
    from mirrorflow.airflow import tasks

    monkeypatch.setenv("AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST", PROBE)
    _connection(monkeypatch, "k_commit", {"bootstrap.servers": kafka_clusters.bootstrap("B"), "on_commit": PROBE})
    topic = unique_topic("oncommit")
    bootstraps = {"A": kafka_clusters.bootstrap("A"), "B": "127.0.0.1:2"}  # B's address only in the connection
    config = write_config(
        mm2_config_text(bootstraps, f"A->B.enabled = true\nA->B.topics = {topic}\nB.mirrorflow.connection = k_commit\n")
    )
    summary = tasks.sync_topics(str(config), "A->B")
    assert summary["flow"] == "A->B", summary

"""MM2's precedence rules, ported from MirrorMakerConfigTest and MirrorConnectorConfigTest
(docs/mm2-reference.md §9)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mirrorflow.config.issues import Issue
from mirrorflow.config.model import MirrorConfig
from mirrorflow.config.precedence import (
    cluster_aliases,
    connector_settings,
    flow_client,
    herder_pairs,
)

Load = Callable[..., MirrorConfig]
Errors = Callable[..., list[Issue]]


def _values(entries: dict[str, tuple[str, str]]) -> dict[str, str]:
    return {k: v for k, (v, _) in entries.items()}


def test_cluster_config_properties() -> None:
    raw = {
        "clusters": "a, b",
        "a.bootstrap.servers": "servers-one",
        "b.bootstrap.servers": "servers-two",
        "security.protocol": "SSL",
        "replication.factor": "4",
    }
    settings = _values(connector_settings(raw, "a", "b"))
    assert settings["source.cluster.bootstrap.servers"] == "servers-one"
    assert settings["target.cluster.bootstrap.servers"] == "servers-two"
    assert settings["security.protocol"] == "SSL"
    assert settings["replication.factor"] == "4"


def test_replication_config_properties() -> None:
    settings = _values(connector_settings({"clusters": "a, b", "a->b.tasks.max": "123"}, "a", "b"))
    assert settings["tasks.max"] == "123"
    assert settings["enabled"] == "false"  # MM2's putIfAbsent
    assert (settings["source.cluster.alias"], settings["target.cluster.alias"]) == ("a", "b")


def test_includes_connector_config_properties() -> None:
    raw = {
        "clusters": "a, b",
        "tasks.max": "100",
        "topics": "topic-1",
        "groups": "group-2",
        "replication.policy.separator": "__",
        "config.properties.exclude": "property-3",
        "metric.reporters": "FakeMetricsReporter",
        "topic.filter.class": "org.apache.kafka.connect.mirror.DefaultTopicFilter",
        "xxx": "yyy",
        "use.defaults.from": "source",  # not in any connector ConfigDef: dropped at the top level
    }
    settings = _values(connector_settings(raw, "source", "target"))
    for key in ("tasks.max", "topics", "groups", "replication.policy.separator", "config.properties.exclude",
                "metric.reporters", "topic.filter.class"):  # fmt: skip
        assert settings[key] == raw[key]
    assert "xxx" not in settings
    assert "use.defaults.from" not in settings


def test_includes_topic_filter_properties(load: Load) -> None:
    config = load(
        """
        clusters = source, target
        source.bootstrap.servers = s:9092
        target.bootstrap.servers = t:9092
        source->target.enabled = true
        source->target.topics = topic1, topic2
        source->target.topics.exclude = topic3
        """
    )
    flow = config.flow("source->target")
    assert flow.topics == ("topic1", "topic2")
    assert flow.topics_exclude == ("topic3",)
    assert flow.settings["topics"] == "topic1, topic2"


def test_client_config_properties(load: Load) -> None:
    config = load(
        """
        clusters = a, b
        config.providers = fake
        config.providers.fake.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider
        replication.policy.separator = __
        ssl.truststore.password = secret1
        ssl.key.password = ${fake:SECRET_TWO}
        security.protocol = SSL
        a.security.protocol = PLAINTEXT
        a.producer.security.protocol = SSL
        a.bootstrap.servers = one:9092, two:9092
        b.bootstrap.servers = three:9092
        metrics.reporter = FakeMetricsReporter
        a.metrics.reporter = FakeMetricsReporter
        b->a.metrics.reporter = FakeMetricsReporter
        a.xxx = yyy
        xxx = zzz
        a->b.enabled = true
        """,
        environ={"SECRET_TWO": "secret2"},
    )
    a = config.clusters["a"]
    assert a.replication_policy_separator == "__"
    assert a.policy().format_remote_topic("b", "topic1") == "b__topic1"
    assert a.admin.get("bootstrap.servers") == "one:9092, two:9092"
    assert a.admin.get("security.protocol") == "PLAINTEXT"
    assert a.producer.get("security.protocol") == "SSL"
    for client in (a.admin, a.producer, a.consumer, config.clusters["b"].admin):
        assert "xxx" not in client.masked()
        assert "metric.reporters" not in client.masked()
        assert "metrics.reporter" not in client.masked()
    assert a.admin.secrets["ssl.truststore.password"].get_secret_value() == "secret1"
    assert a.admin.secrets["ssl.key.password"].get_secret_value() == "secret2"  # resolved via the provider
    assert a.admin.masked()["ssl.key.password"] == "***"


def test_lazy_config_resolution(load: Load) -> None:
    """Connector settings keep provider references as written; clients get resolved values."""
    config = load(
        """
        clusters = a, b
        a.bootstrap.servers = a:9092
        b.bootstrap.servers = b:9092
        config.providers = env
        config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider
        a.consumer.client.id = ${env:CLIENT}
        a->b.enabled = true
        """,
        environ={"CLIENT": "resolved-id"},
    )
    flow = config.flow("a->b")
    assert flow.settings["source.consumer.client.id"] == "${env:CLIENT}"
    assert flow.source_consumer.get("client.id") == "resolved-id"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, 6),  # testClusterPairsWithDefaultSettings
        ({"emit.heartbeats.enabled": "false"}, 0),  # testEmptyClusterPairsWithGloballyDisabledHeartbeats
        ({"a->b.emit.heartbeats.enabled": "false", "a->c.emit.heartbeats.enabled": "false"}, 4),
    ],
)
def test_cluster_pairs(extra: dict[str, str], expected: int) -> None:
    raw = {"clusters": "a, b, c", **extra}
    assert len(herder_pairs(raw, cluster_aliases(raw))) == expected


def test_cluster_pairs_with_globally_disabled_heartbeats() -> None:
    raw = {
        "clusters": "a, b, c, d, e, f",
        "emit.heartbeats.enabled": "false",
        "a->b.enabled": "true",
        "a->c.enabled": "true",
        "a->d.enabled": "true",
        "a->e.enabled": "false",
        "a->f.enabled": "false",
    }
    pairs = herder_pairs(raw, cluster_aliases(raw))
    assert pairs == [("a", "b"), ("a", "c"), ("a", "d")]
    assert ("b", "a") not in pairs


def test_cluster_pairs_with_globally_disabled_heartbeats_central_local() -> None:
    raw = {
        "clusters": "central, local_one, local_two, beats_emitter",
        "emit.heartbeats.enabled": "false",
        "central->local_one.enabled": "true",
        "central->local_two.enabled": "true",
        "beats_emitter->central.emit.heartbeats.enabled": "true",
    }
    assert herder_pairs(raw, cluster_aliases(raw)) == [
        ("central", "local_one"),
        ("central", "local_two"),
        ("beats_emitter", "central"),
    ]


@pytest.mark.parametrize("key", ["security.protocol", "a.security.protocol", "a.consumer.security.protocol"])
def test_invalid_security_protocol(config_errors: Errors, key: str) -> None:
    issues = config_errors(
        f"""
        clusters = a, b
        a.bootstrap.servers = a:9092
        b.bootstrap.servers = b:9092
        a->b.enabled = true
        {key} = abc
        """
    )
    assert [(i.key, i.line) for i in issues] == [(key, 5)]
    assert "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL" in issues[0].problem


def test_case_insensitive_security_protocol(load: Load) -> None:
    config = load(
        """
        clusters = a, b
        a.bootstrap.servers = a:9092
        b.bootstrap.servers = b:9092
        a.security.protocol = sasl_ssl
        a->b.enabled = true
        """
    )
    flow = config.flow("a->b")
    assert flow.settings["source.cluster.security.protocol"] == "sasl_ssl"  # kept as written, like MM2
    assert flow.source_consumer.get("security.protocol") == "SASL_SSL"
    assert config.clusters["a"].admin.get("security.protocol") == "SASL_SSL"


# MirrorConnectorConfigTest: client configs inside a connector.


def test_source_consumer_config() -> None:
    settings = {
        "consumer.max.poll.interval.ms": ("120000", ""),
        "source.cluster.bootstrap.servers": ("localhost:2345", ""),
        "source.cluster.replication.factor": ("3", ""),  # not a connection key: filtered out
        "consumer.poll.timeout.ms": ("500", ""),  # a connector key, not a consumer setting
    }
    assert _values(flow_client(settings, "source", "consumer")) == {
        "auto.offset.reset": "earliest",
        "bootstrap.servers": "localhost:2345",
        "enable.auto.commit": "false",
        "max.poll.interval.ms": "120000",
    }
    settings["consumer.enable.auto.commit"] = ("true", "")
    settings["consumer.auto.offset.reset"] = ("latest", "")
    consumer = _values(flow_client(settings, "source", "consumer"))
    assert consumer["enable.auto.commit"] == "false"  # forced
    assert consumer["auto.offset.reset"] == "latest"  # only a default


def test_source_consumer_config_with_source_prefix() -> None:
    settings = {
        "consumer.auto.offset.reset": ("latest", ""),
        "source.consumer.auto.offset.reset": ("none", ""),
        "source.cluster.bootstrap.servers": ("localhost:2345", ""),
    }
    assert _values(flow_client(settings, "source", "consumer"))["auto.offset.reset"] == "none"


@pytest.mark.parametrize(
    ("side", "role", "key"),
    [
        ("source", "producer", "acks"),
        ("source", "admin", "request.timeout.ms"),
        ("target", "admin", "retries"),
    ],
)
def test_producer_and_admin_configs(side: str, role: str, key: str) -> None:
    settings = {f"{side}.cluster.bootstrap.servers": ("localhost:2345", ""), f"{role}.{key}": ("1", "")}
    assert _values(flow_client(settings, side, role)) == {"bootstrap.servers": "localhost:2345", key: "1"}
    settings[f"{side}.{role}.{key}"] = ("2", "")
    assert _values(flow_client(settings, side, role))[key] == "2"


def test_cluster_consumer_setting_beats_flow_consumer_setting(load: Load) -> None:
    """In dedicated mode `A.consumer.x` (-> source.consumer.x) wins over `A->B.consumer.x` (-> consumer.x)."""
    config = load(
        """
        clusters = a, b
        a.bootstrap.servers = a:9092
        b.bootstrap.servers = b:9092
        a->b.enabled = true
        a->b.consumer.max.poll.records = 10
        a.consumer.max.poll.records = 20
        a->b.consumer.fetch.min.bytes = 5
        security.protocol = SSL
        a.security.protocol = PLAINTEXT
        a.consumer.security.protocol = SASL_PLAINTEXT
        b.producer.linger.ms = 7
        a->b.producer.override.linger.ms = 9
        """
    )
    flow = config.flow("a->b")
    assert flow.source_consumer.get("max.poll.records") == "20"
    assert flow.source_consumer.get("fetch.min.bytes") == "5"
    assert flow.source_consumer.get("security.protocol") == "SASL_PLAINTEXT"  # a.consumer.k > a.k > k
    assert flow.source_admin.get("security.protocol") == "PLAINTEXT"
    assert flow.target_admin.get("security.protocol") == "SSL"
    assert flow.target_consumer.get("enable.auto.commit") == "false"
    assert flow.target_producer.get("linger.ms") == "9"  # Connect's producer.override wins
    assert "linger.ms" not in flow.source_producer.masked()

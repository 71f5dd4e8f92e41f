"""Flows as loaded: the `--clusters` subset, key classification, our own keys, JSON shipping, secrets."""

from __future__ import annotations

import json
from collections.abc import Callable

from mirrorflow.config.issues import Issue
from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.replication_policy import IdentityReplicationPolicy

Load = Callable[..., MirrorConfig]

THREE = """
clusters = a, b, c
a.bootstrap.servers = a:9092
b.bootstrap.servers = b:9092
c.bootstrap.servers = c:9092
a->b.enabled = true
b->a.enabled = true
a->c.enabled = true
"""

SECRET_FILE = """
clusters = src, dst
src.bootstrap.servers = src:9093
dst.bootstrap.servers = dst:9093
src.security.protocol = SASL_SSL
src.sasl.mechanism = SCRAM-SHA-512
src.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="mirror" password="pw-\\\\"quoted\\\\"-42";
dst.ssl.truststore.type = PEM
dst.ssl.truststore.location = /etc/ssl/ca.pem
dst.ssl.keystore.password = ks-pass-77
src->dst.enabled = true
"""


def test_clusters_subset_keeps_flows_whose_target_is_listed(load: Load) -> None:
    full = load(THREE)
    assert [f.name for f in full.flows] == ["a->b", "a->c", "b->a"]
    subset = load(THREE, clusters=["a,b"])
    assert [f.name for f in subset.flows] == ["a->b", "b->a"]
    assert subset.heartbeat_pairs == (("a", "b"), ("b", "a"), ("c", "a"), ("c", "b"))
    assert [f.name for f in subset.heartbeat_flows] == ["a->b", "b->a", "c->a", "c->b"]
    assert [f.enabled for f in subset.heartbeat_flows] == [True, True, False, False]


def test_heartbeat_pairs_follow_emit_heartbeats(load: Load) -> None:
    config = load(THREE + "emit.heartbeats.enabled = false\nc->b.emit.heartbeats.enabled = true\n")
    assert config.heartbeat_pairs == (("a", "b"), ("a", "c"), ("b", "a"), ("c", "b"))


def test_ignored_and_unknown_keys(load: Load) -> None:
    config = load(
        THREE
        + "tasks.max = 8\n"
        + "dedicated.mode.enable.internal.rest = true\n"
        + "a.offset.storage.topic = mm2-offsets\n"
        + "a->b.transforms = drop\n"
        + "a->b.transforms.drop.type = Filter\n"
        + "a->b.sync.group.offsets = true\n"
        + "consumer.max.poll.records = 500\n"
        + "a.replication.factor = 3\n"
    )
    assert config.ignored_keys == (
        "tasks.max",
        "dedicated.mode.enable.internal.rest",
        "a.offset.storage.topic",
    )
    by_key = {w.key: w for w in config.warnings}
    assert by_key["a->b.sync.group.offsets"].fix == "did you mean a->b.sync.group.offsets.enabled?"
    assert "a->b.transforms" not in by_key, "transforms are applied (config/transform_specs.py), not ignored"
    assert "a.consumer.max.poll.records" not in by_key["consumer.max.poll.records"].fix
    assert "<alias>.consumer.max.poll.records" in by_key["consumer.max.poll.records"].fix
    assert "no effect per cluster" in by_key["a.replication.factor"].problem


def test_legacy_blacklist_names(load: Load) -> None:
    config = load(THREE + "topics.blacklist = old-.*\na->b.topics.exclude = new-.*\ngroups.blacklist = g1\n")
    assert config.flow("a->b").topics_exclude == ("new-.*",)
    assert config.flow("a->c").topics_exclude == ("old-.*",)
    assert config.flow("a->c").groups_exclude == ("g1",)
    warnings = {(w.key, w.problem) for w in config.warnings}
    assert ("topics.blacklist", "topics.blacklist is ignored because topics.exclude is also set") in warnings
    assert any(k == "groups.blacklist" and "3.x name of groups.exclude" in p for k, p in warnings)


def test_mirrorflow_keys(load: Load) -> None:
    config = load(
        THREE
        + "mirrorflow.delivery = at-least-once\n"
        + "a->b.mirrorflow.delivery = exactly-once\n"
        + "mirrorflow.copy.run.seconds = 120\n"
        + "mirrorflow.schedule = */5 * * * *\n"
        + "a->c.mirrorflow.provenance.headers = true\n"
        + "mirrorflow.spark.master = spark://spark:7077\n"
        + "a.mirrorflow.connection = kafka_a\n"
        + "c.mirrorflow.connection = kafka_c\n"
    )
    ab, ac = config.flow("a->b"), config.flow("a->c")
    assert (ab.delivery, ac.delivery) == ("exactly-once", "at-least-once")
    assert ab.copy_run_seconds == 120 and ab.schedule == "*/5 * * * *"
    assert (ab.provenance_headers, ac.provenance_headers) == (False, True)
    assert ab.spark_master == "spark://spark:7077"
    assert (ab.source_connection, ab.target_connection, ac.target_connection) == ("kafka_a", None, "kafka_c")
    assert config.clusters["a"].connection == "kafka_a"
    defaults = config.flow("b->a")
    assert (defaults.copy_mode, defaults.delivery) == ("continuous", "at-least-once")


def test_mirrorflow_key_mistakes_are_errors(config_errors: Callable[..., list]) -> None:  # type: ignore[type-arg]
    issues = config_errors(THREE + "mirrorflow.delivry = exactly-once\nmirrorflow.connection = x\n")
    assert [(i.line, i.key) for i in issues] == [(8, "mirrorflow.delivry"), (9, "mirrorflow.connection")]
    assert issues[0].fix == "did you mean mirrorflow.delivery?"


def test_defaults_match_mm2_4x(load: Load) -> None:
    """The defaults of Kafka 4.3.1, the MM2 we run beside (KAFKA-17200 narrowed topics.exclude in 4.1)."""
    flow = load(THREE).flow("a->b")
    assert flow.topics == (".*",)
    assert flow.topics_exclude == ("mm2.*\\.internal", ".*\\.replica", "__.*")
    assert flow.groups_exclude == ("console-consumer-.*", "connect-.*", "__.*")
    assert "min.insync.replicas" in flow.config_properties_exclude
    assert "log.message.timestamp.after.max.ms" in flow.config_properties_exclude
    assert (flow.replication_factor, flow.offset_syncs_topic_replication_factor) == (2, 3)
    assert (flow.refresh_topics_interval_seconds, flow.emit_checkpoints_interval_seconds) == (600, 60)
    assert (flow.sync_group_offsets_enabled, flow.sync_group_offsets_interval_seconds) == (False, 60)
    assert (flow.emit_heartbeats_interval_seconds, flow.offset_lag_max, flow.admin_timeout_ms) == (
        1,
        100,
        60000,
    )
    assert flow.effective_settings()["sync.group.offsets.enabled"] == "false"


def test_policy_knows_its_source_alias(load: Load) -> None:
    identity = "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
    flow = load(THREE + identity + "mirrorflow.provenance.headers = true\n").flow("a->b")
    policy = flow.policy()
    assert isinstance(policy, IdentityReplicationPolicy)
    assert policy.topic_source("orders") == "a"
    assert (
        load(THREE + "replication.policy.separator = _\n").flow("a->b").policy().format_remote_topic("a", "t") == "a_t"
    )


def test_secrets_are_masked_and_ship_only_on_request(load: Load) -> None:
    flow = load(SECRET_FILE).flow("src->dst")
    dumped = json.dumps(flow.model_dump(mode="json"))
    text = repr(flow) + str(flow) + dumped + flow.to_json() + json.dumps(flow.settings)
    for secret in ("pw-", "ks-pass-77"):
        assert secret not in text
    assert flow.settings["source.cluster.sasl.jaas.config"] == "***"
    assert flow.source_consumer.masked()["sasl.jaas.config"] == "***"

    shipped = Flow.from_json(flow.to_json(reveal_secrets=True))
    assert shipped == flow
    assert shipped.source_consumer.librdkafka()["sasl.password"] == 'pw-"quoted"-42'
    masked_copy = Flow.from_json(flow.to_json())
    assert masked_copy.source_consumer.secrets["sasl.jaas.config"].get_secret_value() == "***"


def test_librdkafka_translation(load: Load) -> None:
    config = load(
        SECRET_FILE
        + "src.consumer.key.deserializer = org.example.D\n"
        + "dst.producer.buffer.memory = 1\n"
        + "dst.producer.max.request.size = 2000000\n"
    )
    flow = config.flow("src->dst")
    consumer = flow.source_consumer.librdkafka()
    assert consumer["sasl.username"] == "mirror"
    assert consumer["sasl.mechanism"] == "SCRAM-SHA-512"
    assert consumer["enable.auto.commit"] == "false"
    assert "sasl.jaas.config" not in consumer and "key.deserializer" not in consumer
    producer = flow.target_producer.librdkafka()
    assert producer["ssl.ca.location"] == "/etc/ssl/ca.pem"
    assert producer["message.max.bytes"] == "2000000"
    assert "buffer.memory" not in producer and "ssl.truststore.location" not in producer
    warnings = {w.key: w.problem for w in config.warnings}
    assert "buffer.memory dropped" in warnings["dst.producer.buffer.memory"]
    assert "key.deserializer dropped" in warnings["src.consumer.key.deserializer"]


def test_jks_stores_are_refused_with_the_conversion_to_make(config_errors: Callable[..., list[Issue]]) -> None:
    """librdkafka cannot read JKS: dropping the store would only move the failure to an opaque TLS handshake."""
    issues = config_errors(
        THREE + "b.ssl.truststore.location = /etc/ssl/truststore.jks\nb.security.protocol = SSL\n"
        "b.ssl.keystore.location = /etc/ssl/keystore.jks\nb.ssl.keystore.password = ks-pass-77\n"
    )
    by_key = {issue.key: issue for issue in issues}
    assert by_key["b.ssl.truststore.location"].line == 8
    assert "JKS truststore cannot be read by librdkafka" in by_key["b.ssl.truststore.location"].problem
    assert "ssl.truststore.type = PEM" in by_key["b.ssl.truststore.location"].fix
    assert "keytool -importkeystore" in by_key["b.ssl.keystore.location"].fix
    assert all("ks-pass-77" not in f"{issue.problem} {issue.fix}" for issue in issues)


def test_pkcs12_keystore_and_pem_truststore_are_accepted(load: Load) -> None:
    config = load(
        THREE + "b.security.protocol = SSL\nb.ssl.truststore.type = PEM\nb.ssl.truststore.location = /ca.pem\n"
        "b.ssl.keystore.type = PKCS12\nb.ssl.keystore.location = /k.p12\nb.ssl.keystore.password = ks-pass-77\n"
    )
    conf = config.flow("a->b").target_producer.librdkafka()
    assert conf["ssl.ca.location"] == "/ca.pem" and conf["ssl.keystore.location"] == "/k.p12"

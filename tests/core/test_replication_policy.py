"""ReplicationPolicy (docs/mm2-reference.md §3, as in the pinned Kafka 4.3.1): ReplicationPolicyTest, MirrorClientTest
identity cases, MirrorSourceConfigTest.testOffsetSyncsTopic, and loading `replication.policy.class`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mirrorflow.core.errors import UsageError
from mirrorflow.core.replication_policy import (
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    ReplicationPolicy,
    load_replication_policy,
)

DEFAULT = DefaultReplicationPolicy()
SEPARATOR_KEY = "replication.policy.separator"
FLAG_KEY = "replication.policy.internal.topic.separator.enabled"


def test_internal_topic() -> None:  # ReplicationPolicyTest.testInternalTopic (4.1+, KAFKA-17200)
    assert DEFAULT.is_internal_topic("__consumer_offsets")
    assert DEFAULT.is_internal_topic(".hiddentopic")
    assert DEFAULT.is_internal_topic("mm2-offsets.CLUSTER.internal")
    assert DEFAULT.is_internal_topic("source1.checkpoints.internal")
    assert not DEFAULT.is_internal_topic("mm2-offsets_CLUSTER_internal")
    assert not DEFAULT.is_internal_topic("mm2-offsets-CLUSTER-internal")  # internal in MM2 4.0, not since 4.1
    assert not DEFAULT.is_internal_topic("orders.internal")  # user topics that only look internal
    assert not DEFAULT.is_internal_topic("orders-internal")


def test_offset_syncs_topic_should_be_effected_by_internal_topic_separator_enabled() -> None:
    disabled = DefaultReplicationPolicy.from_settings({SEPARATOR_KEY: "__", FLAG_KEY: "false"})
    enabled = DefaultReplicationPolicy.from_settings({SEPARATOR_KEY: "__", FLAG_KEY: "true"})
    assert disabled.offset_syncs_topic("CLUSTER") == "mm2-offset-syncs.CLUSTER.internal"
    assert enabled.offset_syncs_topic("CLUSTER") == "mm2-offset-syncs__CLUSTER__internal"


def test_checkpoints_topic_should_be_effected_by_internal_topic_separator_enabled() -> None:
    disabled = DefaultReplicationPolicy.from_settings({SEPARATOR_KEY: "__", FLAG_KEY: "false"})
    enabled = DefaultReplicationPolicy.from_settings({SEPARATOR_KEY: "__", FLAG_KEY: "true"})
    assert disabled.checkpoints_topic("CLUSTER") == "CLUSTER.checkpoints.internal"
    assert enabled.checkpoints_topic("CLUSTER") == "CLUSTER__checkpoints__internal"
    assert enabled.is_checkpoints_topic("CLUSTER__checkpoints__internal")
    assert not enabled.is_checkpoints_topic("CLUSTER.checkpoints.internal")


def test_heartbeats_topic_should_not_be_effected_by_internal_topic_separator_config() -> None:
    for flag in ("true", "false"):
        policy = DefaultReplicationPolicy.from_settings({SEPARATOR_KEY: "__", FLAG_KEY: flag})
        assert policy.heartbeats_topic() == "heartbeats"


def test_separator_flag_is_only_read_with_a_separator_like_mm2() -> None:
    policy = DefaultReplicationPolicy.from_settings({FLAG_KEY: "false"})
    assert policy.offset_syncs_topic("A") == "mm2-offset-syncs.A.internal"
    with pytest.raises(UsageError, match=FLAG_KEY):
        DefaultReplicationPolicy.from_settings({SEPARATOR_KEY: "_", FLAG_KEY: "yes"})


def test_offset_syncs_topic_names() -> None:  # MirrorSourceConfigTest.testOffsetSyncsTopic (names only)
    assert DEFAULT.offset_syncs_topic("target2") == "mm2-offset-syncs.target2.internal"
    assert DEFAULT.offset_syncs_topic("source1") == "mm2-offset-syncs.source1.internal"


def test_remote_topic_naming_and_chains() -> None:
    assert DEFAULT.format_remote_topic("source2", "source1.topic") == "source2.source1.topic"
    assert DEFAULT.topic_source("source2.source1.topic") == "source2"
    assert DEFAULT.upstream_topic("source2.source1.topic") == "source1.topic"
    assert DEFAULT.original_topic("source2.source1.topic") == "topic"
    assert DEFAULT.topic_source("topic") is None
    assert DEFAULT.upstream_topic("topic") is None


@pytest.mark.parametrize(
    ("topic", "source", "upstream"),
    [
        ("a.", None, None),
        (".b", "", "b"),
        ("a..b", "a", ".b"),
        ("a.b.", "a", "b."),
        (".", None, None),
        ("", None, None),
    ],
)
def test_topic_source_follows_java_split_semantics(topic: str, source: str | None, upstream: str | None) -> None:
    assert DEFAULT.topic_source(topic) == source
    assert DEFAULT.upstream_topic(topic) == upstream


def test_separator_is_literal_not_a_regex() -> None:
    policy = DefaultReplicationPolicy(separator="|")
    assert policy.topic_source("a|b") == "a"
    assert policy.topic_source("ab") is None


def test_empty_separator_is_refused() -> None:
    with pytest.raises(UsageError, match="must not be empty"):
        DefaultReplicationPolicy.from_settings({SEPARATOR_KEY: ""})


def test_is_heartbeat_topic() -> None:  # MirrorClientTest.testIsHeartbeatTopic
    for topic in ("heartbeats", "source1.heartbeats", "source2.source1.heartbeats"):
        assert DEFAULT.is_heartbeats_topic(topic), topic
    for topic in ("heartbeats!", "!heartbeats", "source1heartbeats", "source1-heartbeats"):
        assert not DEFAULT.is_heartbeats_topic(topic), topic


def test_is_checkpoint_topic() -> None:  # MirrorClientTest.testIsCheckpointTopic
    assert DEFAULT.is_checkpoints_topic("source1.checkpoints.internal")
    for topic in (
        "checkpoints.internal",
        "checkpoints-internal",
        "checkpoints.internal!",
        "!checkpoints.internal",
        "source1checkpointsinternal",
    ):
        assert not DEFAULT.is_checkpoints_topic(topic), topic


def test_identity_replication_topic_source() -> None:  # MirrorClientTest.testIdentityReplicationTopicSource
    policy = IdentityReplicationPolicy.from_settings({"source.cluster.alias": "primary"})
    assert policy.format_remote_topic("primary", "topic1") == "topic1"
    assert policy.topic_source("topic1") == "primary"
    assert policy.format_remote_topic("backup", "heartbeats") == "backup.heartbeats"
    assert policy.topic_source("backup.heartbeats") == "backup"


def test_identity_replication_without_alias_and_original_topic() -> None:
    policy = IdentityReplicationPolicy()
    assert policy.topic_source("topic1") is None
    assert policy.upstream_topic("topic1") == "topic1"
    assert policy.original_topic("a.b.topic1") == "a.b.topic1"
    assert policy.original_topic("backup.primary.heartbeats") == "heartbeats"


def test_builtin_java_class_names_map_to_ours() -> None:
    default = load_replication_policy(
        " org.apache.kafka.connect.mirror.DefaultReplicationPolicy ", {SEPARATOR_KEY: "_"}
    )
    assert isinstance(default, DefaultReplicationPolicy)
    assert default.format_remote_topic("A", "t") == "A_t"
    identity = load_replication_policy(
        "org.apache.kafka.connect.mirror.IdentityReplicationPolicy", {"source.cluster.alias": "A"}
    )
    assert isinstance(identity, IdentityReplicationPolicy)
    assert identity.topic_source("t") == "A"


@pytest.fixture
def policy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "custom_policies_for_test.py").write_text(
        textwrap.dedent(
            """
            from mirrorflow.core.replication_policy import ReplicationPolicy

            class Suffix(ReplicationPolicy):
                def __init__(self, settings):
                    self.marker = settings.get("suffix.marker", "@")
                def format_remote_topic(self, source_alias, topic):
                    return f"{topic}{self.marker}{source_alias}"
                def topic_source(self, topic):
                    return topic.rsplit(self.marker, 1)[1] if self.marker in topic else None
                def upstream_topic(self, topic):
                    return topic.rsplit(self.marker, 1)[0] if self.marker in topic else None

            class NoArgs(Suffix):
                def __init__(self):
                    self.marker = "~"

            class Broken(Suffix):
                def __init__(self, settings):
                    raise RuntimeError("boom")

            class NotAPolicy:
                pass

            not_a_class = 42
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "custom_policies_for_test"


def test_custom_python_policy_gets_settings_and_interface_defaults(policy_module: str) -> None:
    policy = load_replication_policy(f"{policy_module}.Suffix", {"suffix.marker": "#"})
    assert isinstance(policy, ReplicationPolicy)
    assert policy.format_remote_topic("A", "orders") == "orders#A"
    assert policy.original_topic("orders#A#B") == "orders"
    assert policy.is_heartbeats_topic("heartbeats#A")
    assert policy.checkpoints_topic("A") == "A.checkpoints.internal"
    assert load_replication_policy(f"{policy_module}.NoArgs", {}).format_remote_topic("A", "t") == "t~A"


@pytest.mark.parametrize(
    ("class_name", "message"),
    [
        ("com.acme.kafka.MyPolicy", "cannot import module 'com.acme.kafka'.*port it to Python"),
        ("NoDots", "expected a Python class path"),
        ("{module}.Missing", "has no attribute 'Missing'"),
        ("{module}.not_a_class", "is not a class"),
        ("{module}.Broken", "constructing it failed: RuntimeError: boom"),
        ("{module}.NotAPolicy", "lacks ReplicationPolicy methods"),
    ],
)
def test_bad_policy_class_is_a_usage_error_naming_it(policy_module: str, class_name: str, message: str) -> None:
    name = class_name.format(module=policy_module)
    with pytest.raises(UsageError, match=message) as caught:
        load_replication_policy(name, {})
    assert f"replication.policy.class={name!r}" in str(caught.value)

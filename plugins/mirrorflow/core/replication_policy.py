"""MM2's `ReplicationPolicy`: how remote topics and MM2's internal topics are named and recognised.

Behaviour of the MM2 release Mirrorflow pins (Kafka 4.3.1, checked against its jar; docs/mm2-reference.md §3 is 4.0):
* Remote topic = `<source alias><separator><topic>` (Default). Identity keeps the name, except for heartbeats.
* `topic_source` splits on the literal separator like Java's `String.split` (trailing empty parts dropped):
  fewer than two parts => not a remote topic (None); `".b"` has source `""`.
* `original_topic` follows `upstream_topic` until it returns None or the same name.
* Internal: `__*`, `.*`, MM2's own `mm2*<I>internal` and checkpoints topics `*<I>checkpoints<I>internal`;
  I is the separator if `replication.policy.internal.topic.separator.enabled` (default), else `.`.
  Since KAFKA-17200 (Kafka 4.1) a user topic ending in `.internal` or `-internal` is NOT internal: MM2 4.0
  treated every `*.internal`/`*-internal` name as internal, 4.1+ replicates them.
* `heartbeats` is never renamed by the separator settings.

A custom policy is any object with these methods; subclassing `ReplicationPolicy` inherits MM2's interface
defaults so only `format_remote_topic`, `topic_source` and `upstream_topic` must be written (as in Java).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

from mirrorflow.core.errors import UsageError
from mirrorflow.core.plugin_class import load_plugin

SEPARATOR_KEY = "replication.policy.separator"
INTERNAL_TOPIC_SEPARATOR_ENABLED_KEY = "replication.policy.internal.topic.separator.enabled"
SOURCE_CLUSTER_ALIAS_KEY = "source.cluster.alias"
DEFAULT_SEPARATOR = "."
JAVA_DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
JAVA_IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


@runtime_checkable
class ReplicationPolicy(Protocol):
    """MM2's `ReplicationPolicy` interface; the bodies below are Java's interface defaults."""

    def format_remote_topic(self, source_alias: str, topic: str) -> str: ...

    def topic_source(self, topic: str) -> str | None: ...

    def upstream_topic(self, topic: str) -> str | None: ...

    def original_topic(self, topic: str) -> str:
        seen = {topic}
        while True:
            upstream = self.upstream_topic(topic)
            if upstream is None or upstream in seen:  # `in seen` also stops where Java would recurse forever
                return topic
            seen.add(upstream)
            topic = upstream

    def heartbeats_topic(self) -> str:
        return "heartbeats"

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"mm2-offset-syncs.{cluster_alias}.internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}.checkpoints.internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.heartbeats_topic() == self.original_topic(topic)

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(".checkpoints.internal")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return (topic.startswith("mm2") and topic.endswith(".internal")) or self.is_checkpoints_topic(topic)

    def is_internal_topic(self, topic: str) -> bool:
        return self.is_mm2_internal_topic(topic) or topic.startswith("__") or topic.startswith(".")


class DefaultReplicationPolicy(ReplicationPolicy):
    """MM2's `DefaultReplicationPolicy`: remote names are prefixed with the source alias and the separator."""

    def __init__(self, separator: str = DEFAULT_SEPARATOR, internal_topic_separator_enabled: bool = True) -> None:
        if not separator:
            raise UsageError(f"{SEPARATOR_KEY} must not be empty: every topic name would look remote")
        self.separator = separator
        self.internal_separator = separator if internal_topic_separator_enabled else DEFAULT_SEPARATOR

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> DefaultReplicationPolicy:
        return cls(*_separator_settings(settings))

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        parts = topic.split(self.separator)
        while parts and not parts[-1]:
            parts.pop()
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(self.separator) :]

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        i = self.internal_separator
        return f"mm2-offset-syncs{i}{cluster_alias}{i}internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        i = self.internal_separator
        return f"{cluster_alias}{i}checkpoints{i}internal"

    def is_checkpoints_topic(self, topic: str) -> bool:
        i = self.internal_separator
        return topic.endswith(f"{i}checkpoints{i}internal")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        internal_suffix = f"{self.internal_separator}internal"
        return (topic.startswith("mm2") and topic.endswith(internal_suffix)) or self.is_checkpoints_topic(topic)

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(separator={self.separator!r}, internal_separator={self.internal_separator!r})"


class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """MM2's `IdentityReplicationPolicy`: topics keep their names, so names cannot reveal origin or cycles.

    Anything ending in `heartbeats` is still named the Default way, so heartbeat chains keep working.
    """

    def __init__(
        self,
        source_cluster_alias: str | None = None,
        separator: str = DEFAULT_SEPARATOR,
        internal_topic_separator_enabled: bool = True,
    ) -> None:
        super().__init__(separator, internal_topic_separator_enabled)
        self.source_cluster_alias = source_cluster_alias

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> IdentityReplicationPolicy:
        return cls(settings.get(SOURCE_CLUSTER_ALIAS_KEY), *_separator_settings(settings))

    def _looks_like_heartbeat(self, topic: str) -> bool:
        return topic.endswith(self.heartbeats_topic())

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return super().format_remote_topic(source_alias, topic) if self._looks_like_heartbeat(topic) else topic

    def topic_source(self, topic: str) -> str | None:
        return super().topic_source(topic) if self._looks_like_heartbeat(topic) else self.source_cluster_alias

    def upstream_topic(self, topic: str) -> str | None:
        return super().upstream_topic(topic) if self._looks_like_heartbeat(topic) else topic


def _separator_settings(settings: Mapping[str, str]) -> tuple[str, bool]:
    """MM2's `DefaultReplicationPolicy.configure`: the flag is read only when a separator is configured."""
    if SEPARATOR_KEY not in settings:
        return DEFAULT_SEPARATOR, True
    flag = settings.get(INTERNAL_TOPIC_SEPARATOR_ENABLED_KEY)
    enabled = True if flag is None else _parse_boolean(INTERNAL_TOPIC_SEPARATOR_ENABLED_KEY, flag)
    return settings[SEPARATOR_KEY], enabled


def _parse_boolean(key: str, value: str) -> bool:
    normalized = value.strip().lower()
    if normalized not in ("true", "false"):
        raise UsageError(f"{key}={value!r}: expected true or false")
    return normalized == "true"


_BUILTIN_POLICIES: Mapping[str, Callable[[Mapping[str, str]], ReplicationPolicy]] = {
    JAVA_DEFAULT_POLICY: DefaultReplicationPolicy.from_settings,
    JAVA_IDENTITY_POLICY: IdentityReplicationPolicy.from_settings,
}


def load_replication_policy(class_name: str, settings: Mapping[str, str]) -> ReplicationPolicy:
    """Build the policy named by `replication.policy.class` (`plugin_class.load_plugin`): MM2's two Java class
    names map to our implementations, anything else is the Python path of the user's class."""
    return load_plugin(
        "replication.policy.class",
        class_name,
        settings,
        builtins=_BUILTIN_POLICIES,
        protocol=ReplicationPolicy,  # type: ignore[type-abstract]
        example="mypackage.policies.MyPolicy",
        lacks="subclass mirrorflow.core.replication_policy.ReplicationPolicy and implement format_remote_topic, "
        "topic_source and upstream_topic",
    )

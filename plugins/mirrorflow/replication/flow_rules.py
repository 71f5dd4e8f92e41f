"""MM2's per-flow rules, built once from a `Flow`: naming policy, topic filter, config-property filter, and the
`shouldReplicateTopic` decision every step shares (discovery, ACL sync, the copy).

One addition to MM2 (its own internal topics are protected by name; ours are not recognised by MM2's policy
since Kafka 4.1, KAFKA-17200): Mirrorflow's and MM2's internal topics (progress, offset map, metrics, bootstrap
redirect, offset syncs, checkpoints, dead-letter queue) are never replicated, whatever the filter or the policy
class says (`topic_selection.is_never_replicated`), so a chain A->B->C does not copy A->B's bookkeeping into C.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorflow.config.model import Flow
from mirrorflow.core.config_property_filter import ConfigPropertyFilter, DefaultConfigPropertyFilter
from mirrorflow.core.replication_policy import DEFAULT_SEPARATOR, ReplicationPolicy
from mirrorflow.core.topic_filter import TopicFilter
from mirrorflow.core.topic_selection import is_never_replicated, should_replicate_topic


@dataclass(frozen=True)
class FlowRules:
    source: str
    target: str
    policy: ReplicationPolicy
    topic_filter: TopicFilter
    config_filter: ConfigPropertyFilter
    heartbeats_replication_enabled: bool
    internal_separator: str
    """Separator of internal topic names (MM2's `replication.policy.internal.topic.separator.enabled`)."""

    @classmethod
    def of(cls, flow: Flow) -> FlowRules:
        return cls(
            source=flow.source,
            target=flow.target,
            policy=flow.policy(),
            topic_filter=flow.topic_filter(),
            config_filter=DefaultConfigPropertyFilter(
                ", ".join(flow.config_properties_exclude), flow.use_defaults_from
            ),
            heartbeats_replication_enabled=flow.heartbeats_replication_enabled,
            internal_separator=internal_separator(flow),
        )

    def should_replicate_topic(self, topic: str) -> bool:
        """MM2's `shouldReplicateTopic` (filter or heartbeats, not internal, not a cycle), minus our own topics."""
        return not is_never_replicated(topic, policy=self.policy) and should_replicate_topic(
            topic,
            policy=self.policy,
            topic_filter=self.topic_filter,
            target_alias=self.target,
            heartbeats_replication_enabled=self.heartbeats_replication_enabled,
        )

    def remote_topic(self, topic: str) -> str:
        return self.policy.format_remote_topic(self.source, topic)

    def is_flow_target_topic(self, topic: str) -> bool:
        """MM2's known target topics: named as coming from the source, except the flow's checkpoints topic."""
        return self.policy.topic_source(topic) == self.source and topic != self.policy.checkpoints_topic(self.source)


def internal_separator(flow: Flow) -> str:
    """The separator MM2 puts into `<alias>.checkpoints.internal`-style names; our internal topics use it too."""
    return flow.replication_policy_separator if flow.internal_topic_separator_enabled else DEFAULT_SEPARATOR

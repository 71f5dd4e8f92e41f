"""Which topics a flow copies and how checkpointed partitions are named (MM2's `MirrorSourceConnector.
shouldReplicateTopic`/`isCycle` and `MirrorCheckpointTask.renameTopicPartition`).

Rules (docs/mm2-reference.md §3, §5.4):
* replicate(t) = (filter accepts t OR (heartbeats replication enabled AND t is a heartbeats topic))
  AND t is not internal AND t is not a cycle.
* cycle(t): some alias in t's chain of sources (`A.B.x` => A, then B) equals the target alias. A flow
  A->B therefore never copies `B.x`, `A.B.x`, ... back into B. Identity names carry no chain, so only
  heartbeats cycles are detected under IdentityReplicationPolicy.
* A checkpoint for upstream partition (t, p) names the downstream partition: if t came from the target,
  its original name there (`B.x` -> `x`); otherwise the remote name (`x` -> `A.x`).
"""

from __future__ import annotations

from mirrorflow.core.replication_policy import ReplicationPolicy
from mirrorflow.core.topic_filter import TopicFilter


def is_cycle(topic: str, *, policy: ReplicationPolicy, target_alias: str) -> bool:
    seen = {topic}
    while True:
        source = policy.topic_source(topic)
        if source is None:
            return False
        if source == target_alias:
            return True
        upstream = policy.upstream_topic(topic)
        if upstream is None or upstream in seen:  # Java recurses; a name seen twice cannot reach the target
            return False
        seen.add(upstream)
        topic = upstream


def should_replicate_topic(
    topic: str,
    *,
    policy: ReplicationPolicy,
    topic_filter: TopicFilter,
    target_alias: str,
    heartbeats_replication_enabled: bool = True,
) -> bool:
    selected = topic_filter.should_replicate_topic(topic) or (
        heartbeats_replication_enabled and policy.is_heartbeats_topic(topic)
    )
    return (
        selected
        and not policy.is_internal_topic(topic)
        and not is_cycle(topic, policy=policy, target_alias=target_alias)
    )


def rename_topic_partition(topic: str, *, policy: ReplicationPolicy, source_alias: str, target_alias: str) -> str:
    """The downstream topic of an upstream topic's checkpoints; the partition number never changes."""
    if policy.topic_source(topic) == target_alias:
        return policy.original_topic(topic)
    return policy.format_remote_topic(source_alias, topic)

"""Which topics a flow copies and how checkpointed partitions are named (MM2's `MirrorSourceConnector.
shouldReplicateTopic`/`isCycle` and `MirrorCheckpointTask.renameTopicPartition`).

Rules (docs/mm2-reference.md §3, §5.4):
* replicate(t) = (filter accepts t OR (heartbeats replication enabled AND t is a heartbeats topic))
  AND t is not internal AND t is not a cycle.
* cycle(t): some alias in t's chain of sources (`A.B.x` => A, then B) equals the target alias. A flow
  A->B therefore never copies `B.x`, `A.B.x`, ... back into B. Identity names carry no chain, so only
  heartbeats cycles are detected under IdentityReplicationPolicy.
* Beyond MM2 (`is_never_replicated`): the internal topics of Mirrorflow and MM2 are never replicated, whatever
  the filter or the policy class says (a custom policy may not recognise them; identity names would even land
  on the target's own internal topic of the same name), nor is a remote copy of one made before this rule.
* A checkpoint for upstream partition (t, p) names the downstream partition: if t came from the target,
  its original name there (`B.x` -> `x`); otherwise the remote name (`x` -> `A.x`).
"""

from __future__ import annotations

from mirrorflow.core.bootstrap_redirect import BOOTSTRAP_TOPIC
from mirrorflow.core.replication_policy import DefaultReplicationPolicy, ReplicationPolicy
from mirrorflow.core.topic_filter import TopicFilter

# Mirrorflow's own topics: progress, offset map and metrics (`mirrorflow-<what><I><alias><I>internal` for any
# separator I) and the failover's bootstrap redirect topic (`mirrorflow.bootstrap`, one per cluster).
MIRRORFLOW_PREFIX = "mirrorflow"
# MM2's `mm2*internal` (Connect's configs/offsets/status, offset syncs, the dead-letter queue
# `mm2-dlq.<alias>.internal`) under any separator; its checkpoints topics are recognised by the policies.
# `heartbeats` is not internal: MM2 replicates it on purpose.
MM2_PREFIX = "mm2"


def _is_internal_name(topic: str, policy: ReplicationPolicy) -> bool:
    if topic == BOOTSTRAP_TOPIC or policy.is_internal_topic(topic):
        return True
    if not topic.endswith("internal") or topic == "internal":
        return False
    stem = topic[: -len("internal")]  # ends with the internal separator, whatever it is
    return stem.startswith((MIRRORFLOW_PREFIX, MM2_PREFIX))


def is_never_replicated(topic: str, *, policy: ReplicationPolicy) -> bool:
    """An internal topic of Mirrorflow or MM2 (heartbeats excepted), or a remote copy of one: bookkeeping of
    one flow that no other flow may copy, whatever its topic filter or replication policy. Remote names are
    read with the flow's policy and with MM2's default one (a copy an earlier Default-policy hop made)."""
    if policy.is_heartbeats_topic(topic):
        return False
    return any(_carries_internal_name(topic, p) for p in (policy, DefaultReplicationPolicy()))


def _carries_internal_name(topic: str, policy: ReplicationPolicy) -> bool:
    """The name, or an upstream name it carries (`B.mirrorflow-metrics.A.internal`), is internal."""
    seen: set[str] = set()
    name: str | None = topic
    while name is not None and name not in seen:
        if _is_internal_name(name, policy):
            return True
        seen.add(name)
        name = policy.upstream_topic(name) if policy.topic_source(name) is not None else None
    return False


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

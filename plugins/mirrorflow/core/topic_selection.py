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

# The bookkeeping names of Mirrorflow and MM2 under any separator I: `<stem><I>...<I>internal`. Only these stems
# count, so a user topic such as `mirrorflow-orders.internal` or `mm2data-internal` stays data (MM2 4.1+ copies
# it); MM2's own `mm2*.internal` rule and its checkpoints topics come from the policy. `heartbeats` is not
# internal: MM2 replicates it on purpose.
INTERNAL_STEMS = (
    "mirrorflow-progress",  # core/progress.py
    "mirrorflow-offset-map",  # core/offset_map.py
    "mirrorflow-metrics",  # replication/metrics.py
    "mirrorflow-runbook",  # core/runbook_record.py
    "mm2-offset-syncs",
    "mm2-dlq",  # core/transforms.py: the dead-letter queue
    "mm2-configs",  # Connect's topics in dedicated mode
    "mm2-offsets",
    "mm2-status",
)


def _is_internal_name(topic: str, policy: ReplicationPolicy) -> bool:
    if topic == BOOTSTRAP_TOPIC or policy.is_internal_topic(topic):
        return True
    if not topic.endswith("internal"):
        return False
    for stem in INTERNAL_STEMS:
        rest = topic[len(stem) : -len("internal")]  # `<I>...<I>` or just `<I>`: separators around the alias
        if topic.startswith(stem) and rest and not rest[0].isalnum() and not rest[-1].isalnum():
            return True
    return False


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

"""MM2's `MirrorClient` / `RemoteClusterUtils` logic over a cluster's topic names (docs/mm2-reference.md §7).

The Kafka calls (listing topics, reading checkpoints) live in `mirrorflow.kafka`; this is what MM2 computes
from the names:
* heartbeat topics: `policy.is_heartbeats_topic`; checkpoint topics: `policy.is_checkpoints_topic`.
* hops from an upstream alias: follow a topic's chain of sources, counting, until the alias is found
  (-1 if it ends or an alias repeats); replication hops = the minimum over heartbeat topics, -1 if none.
* upstream clusters: every alias in every heartbeat topic's chain.
* remote topics: not internal and with a source; `source` limits them to topics directly from that alias.
"""

from __future__ import annotations

from collections.abc import Iterable

from mirrorflow.core.replication_policy import ReplicationPolicy


def heartbeat_topics(topics: Iterable[str], policy: ReplicationPolicy) -> set[str]:
    return {topic for topic in topics if policy.is_heartbeats_topic(topic)}


def checkpoint_topics(topics: Iterable[str], policy: ReplicationPolicy) -> set[str]:
    return {topic for topic in topics if policy.is_checkpoints_topic(topic)}


def count_hops(topic: str, upstream_alias: str, policy: ReplicationPolicy) -> int:
    """Hops from `upstream_alias` along `topic`'s chain (MirrorClient.countHopsForTopic); -1 if none."""
    visited: set[str] = set()
    current: str | None = topic
    hops = 0
    while current is not None:
        hops += 1
        source = policy.topic_source(current)
        if source is None:
            return -1
        if source == upstream_alias:
            return hops
        if source in visited:  # a policy that cannot prevent cycles (Identity): we would never get there
            return -1
        visited.add(source)
        current = policy.upstream_topic(current)
    return -1


def replication_hops(topics: Iterable[str], upstream_alias: str, policy: ReplicationPolicy) -> int:
    hops = [count_hops(topic, upstream_alias, policy) for topic in heartbeat_topics(topics, policy)]
    return min((h for h in hops if h != -1), default=-1)


def _all_sources(topic: str, policy: ReplicationPolicy) -> set[str]:
    sources: set[str] = set()
    current: str | None = topic
    source = policy.topic_source(topic)
    while source is not None and source not in sources:
        sources.add(source)
        current = policy.upstream_topic(current) if current is not None else None
        source = policy.topic_source(current) if current is not None else None
    return sources


def upstream_clusters(topics: Iterable[str], policy: ReplicationPolicy) -> set[str]:
    return {alias for topic in heartbeat_topics(topics, policy) for alias in _all_sources(topic, policy)}


def remote_topics(topics: Iterable[str], policy: ReplicationPolicy, source: str | None = None) -> set[str]:
    remote = {t for t in topics if not policy.is_internal_topic(t) and policy.topic_source(t) is not None}
    return remote if source is None else {t for t in remote if policy.topic_source(t) == source}

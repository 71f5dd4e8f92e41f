"""Discovery (MM2's `MirrorSourceConnector` topic refresh, docs/mm2-reference.md §4.2): which source topics a flow
copies, where they land, and what the target lacks.

* Source side: every source topic `shouldReplicateTopic` accepts (filter or heartbeats, not internal, not a
  cycle), with its partition count.
* Target side: the flow's known target topics are those named as coming from the source
  (`topic_source == source`), except the flow's own checkpoints topic.
* A source topic whose remote name is not a known target topic must be created with the source partition
  count; one with fewer remote partitions than source partitions must grow. Nothing ever shrinks, and a
  source topic deleted later is never deleted on the target.
`plan_topics` is the pure part (tested without Kafka); `discover` lists both clusters and calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from mirrorflow.config.model import Flow
from mirrorflow.kafka.topics import list_topic_partitions
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_rules import FlowRules

TopicAction = Literal["create", "grow", "none"]


@dataclass(frozen=True)
class TopicPlan:
    """One replicated source topic; `remote_partitions` is None while the remote topic does not exist."""

    topic: str
    remote_topic: str
    partitions: int
    remote_partitions: int | None
    action: TopicAction


@dataclass(frozen=True)
class FlowPlan:
    flow: str
    source: str
    target: str
    topics: tuple[TopicPlan, ...]
    """Replicated source topics, sorted by name."""
    target_topics: tuple[str, ...]
    """The flow's known target topics (named as from the source), sorted."""

    def to_create(self) -> tuple[TopicPlan, ...]:
        return tuple(t for t in self.topics if t.action == "create")

    def to_grow(self) -> tuple[TopicPlan, ...]:
        return tuple(t for t in self.topics if t.action == "grow")

    def replicated(self) -> tuple[TopicPlan, ...]:
        """MM2's "topics being replicated": source topics whose remote topic exists (config sync runs on them)."""
        return tuple(t for t in self.topics if t.remote_partitions is not None)


def plan_topics(
    rules: FlowRules, source_topics: Mapping[str, int], target_topics: Mapping[str, int], *, flow: str = ""
) -> FlowPlan:
    """The flow's topics given each cluster's `{topic: partition count}`."""
    known = {t: n for t, n in target_topics.items() if rules.is_flow_target_topic(t)}
    planned: list[TopicPlan] = []
    for topic in sorted(source_topics):
        if not rules.should_replicate_topic(topic):
            continue
        partitions = source_topics[topic]
        remote = rules.remote_topic(topic)
        remote_partitions = known.get(remote)
        action: TopicAction = "none"
        if remote_partitions is None:
            action = "create"
        elif remote_partitions < partitions:
            action = "grow"
        planned.append(TopicPlan(topic, remote, partitions, remote_partitions, action))
    return FlowPlan(
        flow=flow or f"{rules.source}->{rules.target}",
        source=rules.source,
        target=rules.target,
        topics=tuple(planned),
        target_topics=tuple(sorted(known)),
    )


def discover(flow: Flow, clients: FlowClients, *, rules: FlowRules | None = None) -> FlowPlan:
    """List both clusters and plan the flow's topics. Reads only."""
    rules = rules or FlowRules.of(flow)
    source_topics = list_topic_partitions(clients.source_admin, flow.source, clients.timeout_s)
    target_topics = list_topic_partitions(clients.target_admin, flow.target, clients.timeout_s)
    return plan_topics(rules, source_topics, target_topics, flow=flow.name)

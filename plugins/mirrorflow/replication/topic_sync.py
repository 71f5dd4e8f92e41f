"""Remote topic creation and growth (MM2's `computeAndCreateTopicPartitions`, docs/mm2-reference.md §4.2).

* A missing remote topic is created with the source partition count, `replication.factor` (-1 = the target
  broker's default) and the source configs filtered by `target_config(..., incremental=False)`.
* A remote topic with fewer partitions than its source grows to the source count. Nothing shrinks, nothing
  is deleted: a topic deleted at the source stays on the target.
A remote topic created meanwhile by someone else counts as present ("exists"), so two runs never fight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mirrorflow.config.model import Flow
from mirrorflow.kafka.topics import NewTopicSpec, create_partitions, create_topics, describe_topic_configs
from mirrorflow.replication.config_sync import new_topic_configs
from mirrorflow.replication.discovery import FlowPlan
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_rules import FlowRules

Outcome = Literal["created", "exists", "planned"]


@dataclass(frozen=True)
class CreatedTopic:
    name: str
    source_topic: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)
    outcome: Outcome = "created"


@dataclass(frozen=True)
class GrownTopic:
    name: str
    source_topic: str
    partitions_before: int
    partitions_after: int
    outcome: Literal["grown", "planned"] = "grown"


@dataclass(frozen=True)
class TopicSyncReport:
    flow: str
    dry_run: bool
    created: tuple[CreatedTopic, ...]
    grown: tuple[GrownTopic, ...]


def sync_topics(
    flow: Flow,
    clients: FlowClients,
    plan: FlowPlan,
    *,
    dry_run: bool = False,
    rules: FlowRules | None = None,
) -> TopicSyncReport:
    rules = rules or FlowRules.of(flow)
    missing = plan.to_create()
    configs = (
        describe_topic_configs(clients.source_admin, flow.source, [t.topic for t in missing], clients.timeout_s)
        if missing
        else {}
    )
    specs = [
        NewTopicSpec(
            t.remote_topic,
            t.partitions,
            flow.replication_factor,
            new_topic_configs(configs.get(t.topic, {}), rules.config_filter),
        )
        for t in missing
    ]
    outcomes: dict[str, str | None] = {}
    grow = {t.remote_topic: t.partitions for t in plan.to_grow()}
    if not dry_run:
        outcomes = create_topics(clients.target_admin, flow.target, specs, clients.timeout_s)
        create_partitions(clients.target_admin, flow.target, grow, clients.timeout_s)
    created = tuple(
        CreatedTopic(
            name=spec.name,
            source_topic=t.topic,
            partitions=spec.partitions,
            replication_factor=spec.replication_factor,
            configs=dict(spec.configs),
            outcome="planned" if dry_run else ("exists" if outcomes.get(spec.name) else "created"),
        )
        for spec, t in zip(specs, missing, strict=True)
    )
    grown = tuple(
        GrownTopic(t.remote_topic, t.topic, t.remote_partitions or 0, t.partitions, "planned" if dry_run else "grown")
        for t in plan.to_grow()
    )
    return TopicSyncReport(flow.name, dry_run, created, grown)

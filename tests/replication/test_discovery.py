"""Discovery given the clusters' topic lists (MM2's refresh and computeAndCreateTopicPartitions, §4.2)."""

from __future__ import annotations

import pytest

from mirrorflow.config.model import Flow
from mirrorflow.core.replication_policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from mirrorflow.core.topic_selection import is_never_replicated
from mirrorflow.replication.discovery import TopicPlan, plan_topics
from mirrorflow.replication.flow_rules import FlowRules


def rules(source: str = "A", target: str = "B", **fields: object) -> FlowRules:
    return FlowRules.of(Flow(source=source, target=target, name=f"{source}->{target}", **fields))  # type: ignore[arg-type]


def test_missing_remote_topics_are_created_and_smaller_ones_grow() -> None:
    plan = plan_topics(
        rules(),
        {"orders": 3, "payments": 4, "events": 2},
        {"A.orders": 3, "A.payments": 2, "A.events": 5, "other": 1},
    )
    assert plan.topics == (
        TopicPlan("events", "A.events", 2, 5, "none"),  # never shrinks
        TopicPlan("orders", "A.orders", 3, 3, "none"),
        TopicPlan("payments", "A.payments", 4, 2, "grow"),
    )
    assert plan.to_create() == ()
    assert [t.topic for t in plan.to_grow()] == ["payments"]
    assert plan.target_topics == ("A.events", "A.orders", "A.payments")


def test_new_topic_is_planned_with_source_partitions() -> None:
    plan = plan_topics(rules(), {"orders": 6}, {})
    assert plan.to_create() == (TopicPlan("orders", "A.orders", 6, None, "create"),)
    assert plan.replicated() == ()


def test_cycles_internal_and_filtered_topics_are_not_selected() -> None:
    source = {
        "B.orders": 1,  # came from the target
        "C.B.orders": 1,  # target in its chain
        "C.orders": 1,  # from a third cluster: replicated as A.C.orders
        "__consumer_offsets": 50,
        "mm2-offset-syncs.B.internal": 1,
        "B.checkpoints.internal": 1,
        "mirrorflow-progress.C.internal": 1,
        "mirrorflow-offset-map.C.internal": 1,
        "heartbeats": 1,
        "C.heartbeats": 1,
        "B.heartbeats": 1,
        "skipped": 1,
    }
    plan = plan_topics(rules(topics=("C\\..*", "nothing")), source, {})
    assert [t.topic for t in plan.topics] == ["C.heartbeats", "C.orders", "heartbeats"]
    assert [t.remote_topic for t in plan.topics] == ["A.C.heartbeats", "A.C.orders", "A.heartbeats"]


def test_heartbeats_follow_heartbeats_replication_enabled() -> None:
    plan = plan_topics(rules(topics=("orders",), heartbeats_replication_enabled=False), {"heartbeats": 1}, {})
    assert plan.topics == ()


def test_target_topics_exclude_the_flows_checkpoints_and_other_sources() -> None:
    plan = plan_topics(rules(), {}, {"A.checkpoints.internal": 1, "A.x": 1, "C.x": 1, "x": 1})
    assert plan.target_topics == ("A.x",)


def test_identity_policy_keeps_names() -> None:
    identity = rules(replication_policy_class="org.apache.kafka.connect.mirror.IdentityReplicationPolicy")
    plan = plan_topics(identity, {"orders": 2, "heartbeats": 1}, {"orders": 1})
    assert plan.topics == (
        TopicPlan("heartbeats", "A.heartbeats", 1, None, "create"),
        TopicPlan("orders", "orders", 2, 1, "grow"),
    )


def test_custom_separator() -> None:
    plan = plan_topics(rules(replication_policy_separator="__"), {"orders": 1, "B__x": 1}, {"A__orders": 1})
    assert plan.topics == (TopicPlan("orders", "A__orders", 1, 1, "none"),)


@pytest.mark.parametrize(
    "topic",
    [
        "mirrorflow-progress.A.internal",
        "mirrorflow-offset-map__A__internal",
        "mirrorflow-metrics.A.internal",
        "mirrorflow.bootstrap",
        "mm2-dlq.A.internal",
        "mm2-dlq__A__internal",
        "mm2-offset-syncs_B_internal",
        "mm2-configs.A.internal",
        "A.checkpoints.internal",
        "B.mirrorflow-metrics.A.internal",
        "C.B.mirrorflow.bootstrap",
        "B.mm2-offset-syncs.C.internal",
    ],
)
def test_internal_topic_names_are_never_replicated(topic: str) -> None:
    for policy in (DefaultReplicationPolicy(), IdentityReplicationPolicy(source_cluster_alias="A")):
        assert is_never_replicated(topic, policy=policy), (topic, policy)


@pytest.mark.parametrize(
    "topic", ["mirrorflow-orders", "orders.internal", "orders-checkpoints-internal", "heartbeats", "B.heartbeats", "x"]
)
def test_user_topics_and_heartbeats_stay_replicable(topic: str) -> None:
    assert not is_never_replicated(topic, policy=DefaultReplicationPolicy())


def test_mirrorflow_bookkeeping_is_never_replicated_even_if_the_filter_allows_it() -> None:
    everything = rules(topics=(".*",), topics_exclude=())
    source = {"mirrorflow-progress.C.internal": 1, "mirrorflow-offset-map.C.internal": 1, "orders.internal": 1}
    plan = plan_topics(everything, source, {})
    assert [t.topic for t in plan.topics] == ["orders.internal"]  # Kafka 4.1+: a user topic, replicated

"""Internal topics are never replicated, on real brokers, whatever the topic filter or replication policy.

A flow's bookkeeping (progress, offset map, metrics, the failover's `mirrorflow.bootstrap`, offset syncs,
checkpoints, the dead-letter queue) belongs to that flow and cluster: a chain A->B->C whose B->C filter accepts
everything must not create `B.mirrorflow-metrics.A.internal` on C, and under IdentityReplicationPolicy a copy
would even write into the target's own internal topic of the same name. Heartbeats are the exception: MM2
replicates them on purpose (that is how C learns A is two hops upstream).
"""

from __future__ import annotations

from typing import Any

import pytest

from mirrorflow.core.bootstrap_redirect import BOOTSTRAP_TOPIC
from mirrorflow.core.transforms import default_dead_letter_topic
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.discovery import discover
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane
from mirrorflow.replication.internal_topics import flow_internal_topics
from mirrorflow.replication.metrics import metrics_topic

pytestmark = pytest.mark.integration

# A custom filter that accepts every internal-looking name (MM2's default `topics.exclude` is cleared too),
# without copying every topic the session's other tests left on the cluster.
EVERYTHING_INTERNAL = r".*internal, mirrorflow.*, mm2.*, .*\.bootstrap"


def internal_topics_of(source: str) -> list[str]:
    """The internal topics a flow `<source>->X` leaves on X, beyond those the control plane creates."""
    return [metrics_topic(source), BOOTSTRAP_TOPIC, default_dead_letter_topic(source)]


def visible(topics: Any, alias: str, expected: set[str]) -> set[str]:
    """The cluster's topic names once they include `expected` (a single KRaft node lists new topics late)."""
    names: set[str] = topics.names(alias)
    assert expected <= names, sorted(expected - names)
    return names


def create_all(clusters: LocalClusters, alias: str, names: list[str]) -> None:
    admin = admin_client({"bootstrap.servers": clusters.bootstrap(alias)})
    for name in names:
        create_compacted_topic(admin, alias, name, 1, 30)


def test_a_chain_never_copies_the_first_hops_internal_topics(
    kafka_cluster_c: LocalClusters, write_config: Any, unique_topic: Any, topics: Any, eventually: Any
) -> None:
    tag = unique_topic("chain")
    config = write_config(
        f"A->B.enabled = true\nB->C.enabled = true\nA->B.topics = {tag}\n"
        f"B->C.topics = .*{tag}, {EVERYTHING_INTERNAL}\nB->C.topics.exclude = \n",
        aliases=("A", "B", "C"),
    )
    topics.create("A", tag)
    run_control_plane(config.flow("A->B"), steps={TOPICS})  # A.<tag>, heartbeats and A->B's internal topics on B
    create_all(kafka_cluster_c, "B", internal_topics_of("A"))
    expected_on_b = {f"A.{tag}", "heartbeats", metrics_topic("A"), BOOTSTRAP_TOPIC, "mirrorflow-progress.A.internal"}
    on_b = eventually(lambda: visible(topics, "B", expected_on_b))  # B->C's discovery must see them all
    # The first hop's bookkeeping on B. Not every "*internal" name on B: other tests leave topics there under
    # their own policies (a custom separator's `A-s-checkpoints-s-internal` is a user topic to B->C's default
    # policy, as to MM2's since KAFKA-17200), and which of them exist depends on the order tests run in.
    first_hop = {
        t.name for t in flow_internal_topics(config.flow("A->B")) if t.cluster == "B" and t.purpose != "heartbeats"
    }
    bookkeeping = (first_hop | set(internal_topics_of("A"))) & on_b
    assert len(bookkeeping) >= 6, sorted(bookkeeping)

    run_control_plane(config.flow("B->C"), steps={TOPICS})

    # the user topic and heartbeats are replicated along the chain (heartbeats on purpose), bookkeeping is not
    on_c = eventually(lambda: visible(topics, "C", {f"B.A.{tag}", "B.heartbeats"}))
    assert sorted(f"B.{t}" for t in bookkeeping if f"B.{t}" in on_c) == []


def test_identity_policy_never_selects_internal_topics(
    kafka_clusters: LocalClusters, write_config: Any, unique_topic: Any, topics: Any, eventually: Any
) -> None:
    tag = unique_topic("identity")
    config = write_config(
        "A->B.enabled = true\n"
        "A->B.replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
        f"A->B.topics = {tag}, {EVERYTHING_INTERNAL}\nA->B.topics.exclude = \n"
    )
    flow = config.flow("A->B")
    topics.create("A", tag)
    run_control_plane(flow, steps={TOPICS})  # creates the offset-syncs topic on A
    internal = [*internal_topics_of("B"), "mirrorflow-progress.B.internal", "mm2-offset-syncs.B.internal"]
    create_all(kafka_clusters, "A", internal)
    eventually(lambda: visible(topics, "A", {tag, *internal}))  # discovery must see what it has to refuse
    clients = FlowClients(flow)
    try:
        plan = discover(flow, clients)
    finally:
        clients.close()
    # MM2 replicates heartbeat topics whatever the filter (another test of the session may have made one on A).
    assert [t.topic for t in plan.topics if t.topic != "heartbeats"] == [tag]

"""Heartbeats through a chain A->B->C on real brokers (MM2's testReplication heartbeat checks): every herder pair
writes MM2-format heartbeats, the remote heartbeat topics appear along the chain, and C's MirrorClient queries
see A two hops and B one hop upstream.

The record copy is not part of the control plane, so this test copies the heartbeat records along the chain
itself (same key, value, timestamp and partition, as the copy engine does).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer

from mirrorflow.core.heartbeat import Heartbeat
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.flow_cycle import HEARTBEAT, TOPICS, run_control_plane, run_heartbeat_pair
from mirrorflow.replication.mirror_client import MirrorClient

pytestmark = pytest.mark.integration


def records(clusters: LocalClusters, alias: str, topic: str) -> list[tuple[int, bytes | None, bytes | None, int]]:
    conf = {"bootstrap.servers": clusters.bootstrap(alias)}
    return [(p, k, v, ts) for p, _, k, v, ts in read_to_end(alias, conf, topic, timeout_s=30)]


def mirror_records(clusters: LocalClusters, source: str, topic: str, target: str, remote: str) -> None:
    producer = Producer(with_logger({"bootstrap.servers": clusters.bootstrap(target), "linger.ms": 0}))
    for partition, key, value, timestamp in records(clusters, source, topic):
        producer.produce(remote, key=key, value=value, partition=partition, timestamp=timestamp)
    assert producer.flush(30) == 0


def heartbeats(clusters: LocalClusters, alias: str, topic: str) -> set[tuple[Heartbeat, int, int]]:
    """(decoded heartbeat, partition, record timestamp) of every record of a heartbeats topic."""
    return {(Heartbeat.from_record(k, v), p, ts) for p, k, v, ts in records(clusters, alias, topic)}


def test_heartbeats_and_topology_through_a_three_cluster_chain(
    kafka_cluster_c: LocalClusters, write_config: Any, unique_topic: Any, topics: Any
) -> None:
    nothing = unique_topic("none")  # only heartbeats travel: they are replicated whatever the filter says
    config = write_config(
        f"A->B.enabled = true\nB->C.enabled = true\nA->B.topics = {nothing}\nB->C.topics = {nothing}\n",
        aliases=("A", "B", "C"),
    )
    enabled = {f.name for f in config.flows}
    assert enabled == {"A->B", "B->C"}
    pairs = [f for f in config.heartbeat_flows if f.name not in enabled]
    assert {f.name for f in pairs} == {"B->A", "A->C", "C->A", "C->B"}, "MM2 runs a heartbeat herder per pair"
    now = int(time.time() * 1000)

    for pair in pairs:
        report = run_heartbeat_pair(pair, now_ms=now)
        assert report.heartbeat is not None and report.heartbeat.emitted
    a_to_b = run_control_plane(config.flow("A->B"), steps={TOPICS, HEARTBEAT}, now_ms=now)
    assert a_to_b.plan is not None
    assert [(t.topic, t.remote_topic) for t in a_to_b.plan.topics] == [("heartbeats", "A.heartbeats")]
    mirror_records(kafka_cluster_c, "A", "heartbeats", "B", "A.heartbeats")
    b_to_c = run_control_plane(config.flow("B->C"), steps={TOPICS, HEARTBEAT}, now_ms=now)
    assert b_to_c.plan is not None
    assert [(t.topic, t.remote_topic) for t in b_to_c.plan.topics] == [
        ("A.heartbeats", "B.A.heartbeats"),
        ("heartbeats", "B.heartbeats"),
    ]
    mirror_records(kafka_cluster_c, "B", "heartbeats", "C", "B.heartbeats")
    mirror_records(kafka_cluster_c, "B", "A.heartbeats", "C", "B.A.heartbeats")

    # MM2 format: partition 0, record timestamp = the heartbeat's milliseconds.
    assert (Heartbeat("B", "C", now), 0, now) in heartbeats(kafka_cluster_c, "C", "heartbeats")
    assert (Heartbeat("A", "C", now), 0, now) in heartbeats(kafka_cluster_c, "C", "heartbeats")
    assert (Heartbeat("A", "B", now), 0, now) in heartbeats(kafka_cluster_c, "C", "B.heartbeats")
    assert (Heartbeat("C", "B", now), 0, now) in heartbeats(kafka_cluster_c, "C", "B.heartbeats")
    assert (Heartbeat("B", "A", now), 0, now) in heartbeats(kafka_cluster_c, "C", "B.A.heartbeats")
    assert (Heartbeat("C", "A", now), 0, now) in heartbeats(kafka_cluster_c, "C", "B.A.heartbeats")

    with MirrorClient.for_cluster(config.clusters["C"]) as c:
        assert {"heartbeats", "B.heartbeats", "B.A.heartbeats"} <= c.heartbeat_topics()
        assert c.upstream_clusters() == {"A", "B"}
        assert c.replication_hops("B") == 1
        assert c.replication_hops("A") == 2
        assert c.replication_hops("C") == -1
        assert "B.checkpoints.internal" in c.checkpoint_topics()
        assert {"B.heartbeats", "B.A.heartbeats"} <= c.remote_topics("B")
        assert not {t for t in c.remote_topics() if t.startswith("A.")}
    with MirrorClient.for_cluster(config.clusters["B"]) as b:
        assert b.replication_hops("A") == 1
        assert "A" in b.upstream_clusters()
    assert topics.partitions("B", "heartbeats") == 1
    assert topics.configs("B", "heartbeats")["cleanup.policy"][0] == "compact"

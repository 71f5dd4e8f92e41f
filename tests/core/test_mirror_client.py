"""MirrorClientTest (connect-mirror-client) over topic-name lists."""

from __future__ import annotations

from mirrorflow.core.remote_topology import (
    checkpoint_topics,
    count_hops,
    heartbeat_topics,
    remote_topics,
    replication_hops,
    upstream_clusters,
)
from mirrorflow.core.replication_policy import DefaultReplicationPolicy, IdentityReplicationPolicy

DEFAULT = DefaultReplicationPolicy()
IDENTITY = IdentityReplicationPolicy(source_cluster_alias="source")


def test_count_hops_for_topic() -> None:  # MirrorClientTest.countHopsForTopicTest
    assert count_hops("topic", "source", DEFAULT) == -1
    assert count_hops("source", "source", DEFAULT) == -1
    assert count_hops("sourcetopic", "source", DEFAULT) == -1
    assert count_hops("source1.topic", "source2", DEFAULT) == -1
    assert count_hops("source1.topic", "source1", DEFAULT) == 1
    assert count_hops("source2.source1.topic", "source2", DEFAULT) == 1
    assert count_hops("source2.source1.topic", "source1", DEFAULT) == 2
    assert count_hops("source3.source2.source1.topic", "source1", DEFAULT) == 3
    assert count_hops("source3.source2.source1.topic", "source4", DEFAULT) == -1


def test_count_hops_stops_on_identity_cycles() -> None:
    assert count_hops("topic", "source", IDENTITY) == 1
    assert count_hops("topic", "elsewhere", IDENTITY) == -1


def test_heartbeat_topics() -> None:  # MirrorClientTest.heartbeatTopicsTest
    topics = [
        "topic1",
        "topic2",
        "heartbeats",
        "source1.heartbeats",
        "source2.source1.heartbeats",
        "source3.heartbeats",
    ]
    assert heartbeat_topics(topics, DEFAULT) == {
        "heartbeats",
        "source1.heartbeats",
        "source2.source1.heartbeats",
        "source3.heartbeats",
    }


def test_checkpoints_topics() -> None:  # MirrorClientTest.checkpointsTopicsTest
    topics = [
        "topic1",
        "topic2",
        "checkpoints.internal",
        "source1.checkpoints.internal",
        "source2.source1.checkpoints.internal",
        "source3.checkpoints.internal",
    ]
    assert checkpoint_topics(topics, DEFAULT) == {
        "source1.checkpoints.internal",
        "source2.source1.checkpoints.internal",
        "source3.checkpoints.internal",
    }


def test_replication_hops() -> None:  # MirrorClientTest.replicationHopsTest
    topics = [
        "topic1",
        "topic2",
        "heartbeats",
        "source1.heartbeats",
        "source1.source2.heartbeats",
        "source3.heartbeats",
    ]
    assert replication_hops(topics, "source1", DEFAULT) == 1
    assert replication_hops(topics, "source2", DEFAULT) == 2
    assert replication_hops(topics, "source3", DEFAULT) == 1
    assert replication_hops(topics, "source4", DEFAULT) == -1


UPSTREAM_TOPICS = [
    "topic1",
    "topic2",
    "heartbeats",
    "source1.heartbeats",
    "source1.source2.heartbeats",
    "source3.source4.source5.heartbeats",
]


def test_upstream_clusters() -> None:  # MirrorClientTest.upstreamClustersTest
    sources = upstream_clusters(UPSTREAM_TOPICS, DEFAULT)
    assert sources == {"source1", "source2", "source3", "source4", "source5"}
    assert "" not in sources


def test_identity_replication_upstream_clusters() -> None:  # MirrorClientTest.testIdentityReplicationUpstreamClusters
    assert upstream_clusters(UPSTREAM_TOPICS, IDENTITY) == {
        "source1",
        "source2",
        "source3",
        "source4",
        "source5",
    }


def test_remote_topics() -> None:  # MirrorClientTest.remoteTopicsTest
    topics = [
        "topic1",
        "topic2",
        "topic3",
        "source1.topic4",
        "source1.source2.topic5",
        "source3.source4.source5.topic6",
    ]
    assert remote_topics(topics, DEFAULT) == {
        "source1.topic4",
        "source1.source2.topic5",
        "source3.source4.source5.topic6",
    }


def test_remote_topics_from_one_source_are_direct_hops_only() -> None:
    topics = [
        "source1.topic4",
        "source1.source2.topic5",
        "source2.topic7",
        "topic1",
        "source1.checkpoints.internal",
    ]
    assert remote_topics(topics, DEFAULT, source="source1") == {"source1.topic4", "source1.source2.topic5"}
    assert remote_topics(topics, DEFAULT, source="source2") == {"source2.topic7"}


def test_identity_replication_remote_topics() -> None:  # MirrorClientTest.testIdentityReplicationRemoteTopics
    topics = ["topic1", "topic2", "topic3", "heartbeats", "backup.heartbeats"]
    assert remote_topics(topics, IDENTITY) == {"topic1", "topic2", "topic3", "backup.heartbeats"}


def test_remote_topics_separator() -> None:  # MirrorClientTest.remoteTopicsSeparatorTest
    policy = DefaultReplicationPolicy.from_settings({"replication.policy.separator": "__"})
    topics = [
        "topic1",
        "topic2",
        "topic3",
        "source1__topic4",
        "source1__source2__topic5",
        "source3__source4__source5__topic6",
    ]
    assert remote_topics(topics, policy) == {
        "source1__topic4",
        "source1__source2__topic5",
        "source3__source4__source5__topic6",
    }

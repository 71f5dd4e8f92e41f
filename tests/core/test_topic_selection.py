"""MirrorSourceConnector.shouldReplicateTopic/isCycle and MirrorCheckpointTask.renameTopicPartition cases."""

from __future__ import annotations

from mirrorflow.core.replication_policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from mirrorflow.core.topic_filter import DefaultTopicFilter
from mirrorflow.core.topic_selection import (
    is_cycle,
    is_never_replicated,
    rename_topic_partition,
    should_replicate_topic,
)


class Everything:
    def should_replicate_topic(self, topic: str) -> bool:
        return True


class Nothing:
    def should_replicate_topic(self, topic: str) -> bool:
        return False


def test_replicates_heartbeats_by_default() -> None:  # testReplicatesHeartbeatsByDefault
    policy, topic_filter = DefaultReplicationPolicy(), DefaultTopicFilter()
    for topic in ("heartbeats", "us-west.heartbeats"):
        assert should_replicate_topic(topic, policy=policy, topic_filter=topic_filter, target_alias="target")


def test_replicates_heartbeats_despite_filter() -> None:  # testReplicatesHeartbeatsDespiteFilter
    policy = DefaultReplicationPolicy()
    for topic in ("heartbeats", "us-west.heartbeats"):
        assert should_replicate_topic(topic, policy=policy, topic_filter=Nothing(), target_alias="target")
    underscore = DefaultReplicationPolicy(separator="_")
    assert should_replicate_topic("heartbeats", policy=underscore, topic_filter=Nothing(), target_alias="target")
    assert not should_replicate_topic(
        "us-west.heartbeats", policy=underscore, topic_filter=Nothing(), target_alias="target"
    )


def test_does_not_replicate_heartbeats_when_disabled() -> None:  # testDoesNotReplicateHeartbeatsWhenDisabled
    policy, topic_filter = DefaultReplicationPolicy(), DefaultTopicFilter("orders")
    for topic in ("heartbeats", "us-west.heartbeats"):
        assert not should_replicate_topic(
            topic,
            policy=policy,
            topic_filter=topic_filter,
            target_alias="target",
            heartbeats_replication_enabled=False,
        )


def test_replicates_heartbeats_when_disabled_but_filter_allows() -> None:
    # testReplicatesHeartbeatsWhenDisabledButFilterAllows
    policy = DefaultReplicationPolicy()
    for topic in ("heartbeats", "us-west.heartbeats"):
        assert should_replicate_topic(
            topic,
            policy=policy,
            topic_filter=Everything(),
            target_alias="target",
            heartbeats_replication_enabled=False,
        )


def test_no_cycles() -> None:  # testNoCycles
    policy = DefaultReplicationPolicy()

    def replicate(topic: str) -> bool:
        return should_replicate_topic(topic, policy=policy, topic_filter=Everything(), target_alias="target")

    for topic in (
        "target.topic1",
        "target.source.topic1",
        "source.target.topic1",
        "source.target.source.topic1",
    ):
        assert not replicate(topic), topic
    for topic in (
        "topic1",
        "source.topic1",
        "othersource.topic1",
        "othertarget.topic1",
        "other.another.topic1",
    ):
        assert replicate(topic), topic


def test_identity_replication() -> None:  # testIdentityReplication
    policy = IdentityReplicationPolicy()

    def replicate(topic: str) -> bool:
        return should_replicate_topic(topic, policy=policy, topic_filter=Everything(), target_alias="target")

    for topic in (
        "target.topic1",
        "target.source.topic1",
        "source.target.topic1",
        "topic1",
        "othersource.topic1",
    ):
        assert replicate(topic), topic
    for topic in ("target.heartbeats", "target.source.heartbeats", "source.target.heartbeats"):
        assert not replicate(topic), topic  # heartbeat cycles are still detected
    for topic in ("heartbeats", "othersource.heartbeats"):
        assert replicate(topic), topic


def test_internal_topics_are_never_replicated() -> None:
    policy = DefaultReplicationPolicy()
    for topic in ("__consumer_offsets", ".hidden", "mm2-offsets.A.internal", "source.checkpoints.internal"):
        assert not should_replicate_topic(topic, policy=policy, topic_filter=Everything(), target_alias="t")


def test_never_replicated_matches_the_internal_templates_not_lookalikes() -> None:
    """Only the names Mirrorflow and MM2 really give their bookkeeping are refused, under any separator; a user
    topic that merely starts with `mirrorflow` or `mm2` and ends in `internal` is data (MM2 4.1+ copies it)."""
    dot, underscore = DefaultReplicationPolicy(), DefaultReplicationPolicy(separator="_")
    internal = {
        dot: (
            "mirrorflow-progress.A.internal",
            "mirrorflow-offset-map.A.internal",
            "mirrorflow-metrics.A.internal",
            "mirrorflow-runbook.internal",
            "mirrorflow.bootstrap",
            "mm2-offset-syncs.B.internal",
            "mm2-dlq.A.internal",
            "mm2-configs.A.internal",
            "B.mirrorflow-metrics.A.internal",
        ),
        underscore: ("mirrorflow-progress_A_internal", "mm2-offset-syncs_B_internal", "mm2-status_A_internal"),
    }
    data = {
        dot: ("mirrorflow-orders.internal", "mirrorflowinternal", "mirrorflow-progressive-internal", "orders.internal"),
        underscore: ("mm2data-internal", "mirrorflow-orders_internal"),
    }
    for policy, topics in internal.items():
        for topic in topics:
            assert is_never_replicated(topic, policy=policy), topic
    for policy, topics in data.items():
        for topic in topics:
            assert not is_never_replicated(topic, policy=policy), topic


def test_is_cycle_with_null_upstream_topic() -> None:  # testIsCycleWithNullUpstreamTopic
    class SourceButNoUpstream(DefaultReplicationPolicy):
        def upstream_topic(self, topic: str) -> str | None:
            return None

    assert not is_cycle("source.topic", policy=SourceButNoUpstream(), target_alias="target")


def test_downstream_topic_renaming() -> None:  # MirrorCheckpointTaskTest.testDownstreamTopicRenaming
    policy = DefaultReplicationPolicy()

    def rename(topic: str) -> str:
        return rename_topic_partition(topic, policy=policy, source_alias="source1", target_alias="target2")

    assert rename("topic3") == "source1.topic3"
    assert rename("target2.topic3") == "topic3"
    assert rename("source6.topic7") == "source1.source6.topic7"

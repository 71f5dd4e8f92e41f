"""Topic discovery and creation on real brokers (MM2's testReplication topic parts, testRefreshTopicPartitions):
new source topics appear remotely with the source partition count and filtered configs, partitions added at
the source follow, a dry run changes nothing, and a second run has nothing left to do."""

from __future__ import annotations

from typing import Any

import pytest

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane
from mirrorflow.replication.internal_topics import (
    STATE_TOPIC_CONFIGS,
    InternalTopic,
    configure_state_topics,
    flow_internal_topics,
)

pytestmark = pytest.mark.integration


def test_new_source_topics_appear_remotely_with_partitions_and_filtered_configs(
    write_config: Any, topics: Any, unique_topic: Any, eventually: Any
) -> None:
    prefix = unique_topic("new")
    flow = write_config(f"A->B.enabled = true\nA->B.topics = {prefix}.*\n").flow("A->B")
    topics.create(
        "A",
        f"{prefix}-x",
        3,
        {"cleanup.policy": "compact", "retention.ms": "3600000", "message.timestamp.type": "LogAppendTime"},
    )
    topics.create("A", f"{prefix}-y", 1)
    topics.create("A", f"other-{prefix}", 1)

    made = {f"{prefix}-x", f"{prefix}-y", f"other-{prefix}"}
    eventually(lambda: _assert_equal(made & topics.names("A"), made))  # a fresh KRaft node lists new topics late

    report = run_control_plane(flow)

    assert report.topics is not None
    # Only this test's topics: the flow also replicates `heartbeats`, which other tests on the worker's shared
    # clusters may have created on A first (A.heartbeats then appears here; seen in a fresh-clone make test).
    assert {(c.name, c.partitions, c.outcome) for c in report.topics.created if prefix in c.name} == {
        (f"A.{prefix}-x", 3, "created"),
        (f"A.{prefix}-y", 1, "created"),
    }
    assert eventually(lambda: topics.partitions("B", f"A.{prefix}-x")) == 3
    assert topics.partitions("B", f"A.{prefix}-y") == 1
    assert f"A.other-{prefix}" not in topics.names("B")
    remote = topics.configs("B", f"A.{prefix}-x")
    assert remote["cleanup.policy"] == ("compact", "DYNAMIC_TOPIC_CONFIG")
    assert remote["retention.ms"] == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert remote["message.timestamp.type"] == ("CreateTime", "DEFAULT_CONFIG"), "excluded by default"
    assert remote["min.insync.replicas"][1] != "DYNAMIC_TOPIC_CONFIG"

    assert report.internal_topics is not None
    wanted = {(t.cluster, t.name) for t in flow_internal_topics(flow)}
    assert {t.name for t in report.internal_topics.created} | set(report.internal_topics.present) == {
        name for _, name in wanted
    }  # other tests may have created some of them on these shared clusters
    slots = {t.name: t.partitions for t in flow_internal_topics(flow)}
    for cluster, name in wanted:
        assert topics.configs(cluster, name)["cleanup.policy"][0] == "compact"
        count = topics.partitions(cluster, name)
        if slots[name] == 1:
            assert count == 1
        else:  # a state topic: one partition per slot, a power of two (other tests' flows may have grown it)
            assert count >= slots[name] and count & (count - 1) == 0

        if slots[name] > 1:  # a state topic: segment settings, so the log cleaner bounds what a copy start reads
            configs = topics.configs(cluster, name)
            assert {k: configs[k] for k in STATE_TOPIC_CONFIGS} == {
                k: (v, "DYNAMIC_TOPIC_CONFIG") for k, v in STATE_TOPIC_CONFIGS.items()
            }
        else:  # MM2's own topics keep the broker's defaults, as MM2 leaves them
            assert topics.configs(cluster, name)["segment.ms"][1] != "DYNAMIC_TOPIC_CONFIG"

    again = run_control_plane(flow)
    assert again.topics is not None and again.configs is not None and again.internal_topics is not None
    assert [c for c in again.topics.created if prefix in c.name] == [] and again.topics.grown == ()
    assert again.configs.topics == ()
    assert again.internal_topics.created == () and again.internal_topics.configured == ()


def test_state_topics_of_an_older_version_get_segment_settings_and_an_operators_own_value_stays(
    write_config: Any, topics: Any, unique_topic: Any, eventually: Any
) -> None:
    """A state topic created without segment settings (an older version, or by hand) gets them at the next
    cycle's topic step; a key the topic sets itself is the operator's choice and is kept; a dry run only says."""
    flow = write_config("A->B.enabled = true\n").flow("A->B")
    old, tuned = unique_topic("old-progress"), unique_topic("tuned-progress")
    topics.create("B", old, 1, {"cleanup.policy": "compact"})
    topics.create("B", tuned, 1, {"cleanup.policy": "compact", "segment.ms": "3600000"})
    state = [InternalTopic(name, "B", "target", "progress", 1) for name in (old, tuned)]
    with FlowClients(flow) as clients:
        admin, timeout = clients.target_admin, clients.timeout_s
        planned = configure_state_topics(admin, "B", state, True, timeout)
        assert topics.configs("B", old)["segment.ms"][1] != "DYNAMIC_TOPIC_CONFIG", "a dry run changes nothing"
        done = configure_state_topics(admin, "B", state, False, timeout)
        assert done == planned
        assert {(name, key) for name, key, _ in done} == {(old, k) for k in STATE_TOPIC_CONFIGS} | {
            (tuned, k) for k in STATE_TOPIC_CONFIGS if k != "segment.ms"
        }
        # A broker describes what its metadata image holds, which can trail an alter it just acknowledged.
        eventually(lambda: _assert_equal(configure_state_topics(admin, "B", state, True, timeout), []))
        assert configure_state_topics(admin, "B", state, False, timeout) == [], "set once"
    for name, segment_ms in ((old, STATE_TOPIC_CONFIGS["segment.ms"]), (tuned, "3600000")):
        configs = topics.configs("B", name)
        assert configs["segment.ms"] == (segment_ms, "DYNAMIC_TOPIC_CONFIG")
        assert configs["segment.bytes"] == (STATE_TOPIC_CONFIGS["segment.bytes"], "DYNAMIC_TOPIC_CONFIG")


SESSION_13_CONFIGS = {
    "segment.ms": "600000",
    "segment.bytes": str(16 * 1024 * 1024),
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": "3600000",
    "min.compaction.lag.ms": "900000",
}
"""What sessions 13 and 14 created the state topics with (topic-level settings, like an operator's own)."""


def test_state_topics_of_a_previous_release_get_todays_times_and_an_operators_own_value_stays(
    write_config: Any, topics: Any, unique_topic: Any, eventually: Any
) -> None:
    """Session 15 shortened segment.ms and min.compaction.lag.ms. Topics created by sessions 13-14 carry the old
    values at topic level, where the topic step used to take them for an operator's choice and keep them (a start
    then still read 25 minutes of commits). A previous release's default is ours to update; any other value the
    topic sets stays; a dry run only says."""
    assert SESSION_13_CONFIGS != STATE_TOPIC_CONFIGS, "this test is about topics from before the change"
    flow = write_config("A->B.enabled = true\n").flow("A->B")
    released, tuned = unique_topic("s13-progress"), unique_topic("s13-tuned-map")
    topics.create("B", released, 2, {"cleanup.policy": "compact", **SESSION_13_CONFIGS})
    tuned_lag = "1800000"  # an operator's own, kept
    topics.create(
        "B", tuned, 2, {"cleanup.policy": "compact", **SESSION_13_CONFIGS, "min.compaction.lag.ms": tuned_lag}
    )
    state = [
        InternalTopic(name, "B", "target", purpose, 1, 2)
        for name, purpose in ((released, "progress"), (tuned, "offset-map"))
    ]
    for name in (released, tuned):  # a broker describes a topic once its metadata image has it (seen failing)
        eventually(lambda name=name: topics.configs("B", name))
    new = {k: v for k, v in STATE_TOPIC_CONFIGS.items() if SESSION_13_CONFIGS.get(k) != v}
    with FlowClients(flow) as clients:
        admin, timeout = clients.target_admin, clients.timeout_s
        planned = configure_state_topics(admin, "B", state, True, timeout)
        assert topics.configs("B", released)["segment.ms"][0] == "600000", "a dry run changes nothing"
        done = configure_state_topics(admin, "B", state, False, timeout)
        assert done == planned
        assert sorted(done) == sorted(
            [(released, k, v) for k, v in new.items()]
            + [(tuned, k, v) for k, v in new.items() if k != "min.compaction.lag.ms"]
        )
        eventually(lambda: _assert_equal(configure_state_topics(admin, "B", state, True, timeout), []))
        assert configure_state_topics(admin, "B", state, False, timeout) == [], "set once"
    for name, lag in ((released, STATE_TOPIC_CONFIGS["min.compaction.lag.ms"]), (tuned, tuned_lag)):
        configs = topics.configs("B", name)
        assert configs["min.compaction.lag.ms"] == (lag, "DYNAMIC_TOPIC_CONFIG")
        assert configs["segment.ms"] == (STATE_TOPIC_CONFIGS["segment.ms"], "DYNAMIC_TOPIC_CONFIG")
        for key in ("segment.bytes", "min.cleanable.dirty.ratio", "delete.retention.ms"):
            assert configs[key] == (STATE_TOPIC_CONFIGS[key], "DYNAMIC_TOPIC_CONFIG")


def test_partitions_added_at_the_source_appear_remotely(
    write_config: Any, topics: Any, unique_topic: Any, eventually: Any
) -> None:
    name = unique_topic("grow")
    flow = write_config(f"A->B.enabled = true\nA->B.topics = {name}\n").flow("A->B")
    topics.create("A", name, 2)
    run_control_plane(flow, steps={TOPICS})
    assert eventually(lambda: topics.partitions("B", f"A.{name}")) == 2

    topics.add_partitions("A", name, 5)
    eventually(lambda: _assert_equal(topics.partitions("A", name), 5))
    report = run_control_plane(flow, steps={TOPICS})

    assert report.topics is not None
    assert [(g.name, g.partitions_before, g.partitions_after) for g in report.topics.grown] == [(f"A.{name}", 2, 5)]
    assert eventually(lambda: _assert_equal(topics.partitions("B", f"A.{name}"), 5)) is None


def test_a_dry_run_reports_the_same_work_and_changes_nothing(write_config: Any, topics: Any, unique_topic: Any) -> None:
    name = unique_topic("dry")
    flow = write_config(f"A->B.enabled = true\nA->B.topics = {name}\n").flow("A->B")
    topics.create("A", name, 4, {"retention.ms": "7200000"})

    def ours(alias: str) -> set[str]:
        """The cluster's topics but other tests' (`unique_topic` names carry "-test-"): tests on this xdist
        worker's clusters may still create theirs meanwhile; this flow's and the internal topics stay."""
        return {t for t in topics.names(alias) if name in t or "-test-" not in t}

    before_a, before_b = ours("A"), ours("B")

    with FlowClients(flow) as clients:
        planned = run_control_plane(flow, clients, dry_run=True)

    assert (ours("A"), ours("B")) == (before_a, before_b)
    assert planned.topics is not None and planned.heartbeat is not None
    [created] = planned.topics.created
    assert (created.name, created.partitions, created.outcome) == (f"A.{name}", 4, "planned")
    assert created.configs == {"retention.ms": "7200000"}
    assert not planned.heartbeat.emitted

    done = run_control_plane(flow)
    assert done.topics is not None
    assert [(c.name, c.partitions, c.configs) for c in done.topics.created] == [
        (created.name, created.partitions, created.configs)
    ]


def _assert_equal(actual: object, expected: object) -> None:
    assert actual == expected


def test_a_state_topic_on_a_cluster_that_refuses_one_setting_still_gets_the_others(
    write_config: Any, topics: Any, unique_topic: Any, eventually: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster that refuses one of the settings (a managed cluster whose policy fixes a minimum `segment.ms`,
    played here by a value the broker finds invalid) refused the whole set: a topic it created without them (the
    fallback of `create_compacted_topic`) kept `min.compaction.lag.ms` = 0 at every cycle, and readers raced the
    cleaner at each roll (review of session 15, whose 2-minute roll is below such minimums). Each key is then set on
    its own: the refused one is left, the lag set."""
    monkeypatch.setitem(STATE_TOPIC_CONFIGS, "segment.ms", "-5")
    flow = write_config("A->B.enabled = true\n").flow("A->B")
    name = unique_topic("refused-map")
    topics.create("B", name, 2, {"cleanup.policy": "compact"})
    state = [InternalTopic(name, "B", "target", "offset-map", 1, 2)]
    eventually(lambda: topics.configs("B", name))
    with FlowClients(flow) as clients:
        done = configure_state_topics(clients.target_admin, "B", state, False, clients.timeout_s)
    assert sorted(done) == sorted((name, k, v) for k, v in STATE_TOPIC_CONFIGS.items() if k != "segment.ms")
    lag = STATE_TOPIC_CONFIGS["min.compaction.lag.ms"]
    eventually(lambda: _assert_equal(topics.configs("B", name)["min.compaction.lag.ms"], (lag, "DYNAMIC_TOPIC_CONFIG")))
    assert topics.configs("B", name)["segment.ms"][1] != "DYNAMIC_TOPIC_CONFIG"


def test_internal_topics_created_by_the_brokers_defaults_are_compacted_and_a_deleting_state_topic_is_refused(
    write_config: Any, topics: Any, unique_topic: Any, eventually: Any
) -> None:
    """A write that comes before the topic step (the broker auto-creates the topic, `cleanup.policy` = its default
    `delete`) left an internal topic that deletes old records: for a state topic, the progress of a partition idle
    longer than the retention, whose copy then starts over. The topic step makes such a topic compacted; a state
    topic whose own setting is `delete` is the operator's and is refused with the fix, as Kafka Connect refuses
    an offsets topic that is not compacted. Before, the topic step left both as they were."""
    flow = write_config("A->B.enabled = true\n").flow("A->B")
    auto, auto_checkpoints, deleting = unique_topic("auto-progress"), unique_topic("auto-ckpt"), unique_topic("del-map")
    topics.create("B", auto, 2, {})  # as the broker's auto-creation makes it
    topics.create("B", auto_checkpoints, 1, {})
    topics.create("B", deleting, 2, {"cleanup.policy": "delete"})
    for name in (auto, auto_checkpoints, deleting):
        eventually(lambda name=name: topics.configs("B", name))
    found = [
        InternalTopic(auto, "B", "target", "progress", 1, 2),
        InternalTopic(auto_checkpoints, "B", "target", "checkpoints", 1),
    ]
    with FlowClients(flow) as clients:
        admin, timeout = clients.target_admin, clients.timeout_s
        done = configure_state_topics(admin, "B", found, False, timeout)
        assert {(auto, "cleanup.policy", "compact"), (auto_checkpoints, "cleanup.policy", "compact")} <= set(done)
        refused = [InternalTopic(deleting, "B", "target", "offset-map", 1, 2)]
        with pytest.raises(MirrorflowError, match=rf"state topic '{deleting}'.*cleanup.policy=delete.*kafka-configs"):
            configure_state_topics(admin, "B", refused, False, timeout)
    for name in (auto, auto_checkpoints):
        eventually(lambda name=name: _assert_equal(topics.configs("B", name)["cleanup.policy"][0], "compact"))
    assert topics.configs("B", deleting)["cleanup.policy"][0] == "delete", "the operator's setting is not changed"

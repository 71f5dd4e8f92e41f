"""Topic config sync on real brokers: MM2's testSyncTopicConfigs, testReplicateTargetDefault and
testReplicateSourceDefault (docs/mm2-reference.md §9), through the flow's loaded config."""

from __future__ import annotations

from typing import Any

import pytest

from mirrorflow.replication.config_sync import DELETE, SET, ConfigDiff
from mirrorflow.replication.flow_cycle import CONFIGS, TOPICS, run_control_plane

pytestmark = pytest.mark.integration

DEFAULT_RETENTION_MS = "604800000"


def test_excluded_target_override_is_kept_and_other_drift_is_re_synced(
    write_config: Any, topics: Any, unique_topic: Any, eventually: Any
) -> None:  # testSyncTopicConfigs
    name = unique_topic("cfg")
    remote = f"A.{name}"
    flow = write_config(
        f"A->B.enabled = true\nA->B.topics = {name}\nA->B.config.properties.exclude = delete\\\\.retention\\\\..*\n"
    ).flow("A->B")
    assert flow.config_properties_exclude == ("delete\\.retention\\..*",)
    topics.create("A", name, 1, {"delete.retention.ms": "1000", "retention.bytes": "1000"})
    run_control_plane(flow, steps={TOPICS})
    created = eventually(lambda: topics.configs("B", remote))
    assert created["retention.bytes"] == ("1000", "DYNAMIC_TOPIC_CONFIG")
    assert created["delete.retention.ms"][1] == "DEFAULT_CONFIG", "an excluded property is not copied"

    topics.alter("B", remote, {"delete.retention.ms": "2000", "retention.bytes": "2000"})
    eventually(lambda: _equal(topics.configs("B", remote)["retention.bytes"][0], "2000"))
    report = run_control_plane(flow, steps={CONFIGS})

    assert report.configs is not None
    # Other tests share the session's clusters (e.g. their `heartbeats`), so look at this test's topic only.
    [drift] = [t for t in report.configs.topics if t.topic == name]
    assert (drift.topic, drift.remote_topic) == (name, remote)
    assert drift.changes == (ConfigDiff("retention.bytes", SET, "2000", "1000"),)
    synced = eventually(lambda: _checked(topics.configs("B", remote), "retention.bytes", "1000"))
    assert synced["delete.retention.ms"] == ("2000", "DYNAMIC_TOPIC_CONFIG")


def test_removing_a_source_override_reverts_the_target_to_its_default(
    write_config: Any, topics: Any, unique_topic: Any, eventually: Any
) -> None:  # testReplicateTargetDefault
    name = unique_topic("tgtdef")
    remote = f"A.{name}"
    flow = write_config(f"A->B.enabled = true\nA->B.topics = {name}\n").flow("A->B")
    topics.create("A", name, 1, {"retention.ms": "1000"})
    run_control_plane(flow, steps={TOPICS})
    assert eventually(lambda: topics.configs("B", remote))["retention.ms"] == ("1000", "DYNAMIC_TOPIC_CONFIG")

    topics.alter("A", name, delete=["retention.ms"])
    eventually(lambda: _equal(topics.configs("A", name)["retention.ms"][1], "DEFAULT_CONFIG"))
    report = run_control_plane(flow, steps={CONFIGS})

    assert report.configs is not None
    [ours] = [t for t in report.configs.topics if t.topic == name]  # heartbeats replicate too
    assert ours.changes == (ConfigDiff("retention.ms", DELETE, "1000", None),)
    reverted = eventually(lambda: _checked(topics.configs("B", remote), "retention.ms", DEFAULT_RETENTION_MS))
    assert reverted["retention.ms"][1] == "DEFAULT_CONFIG"


def test_use_defaults_from_source_writes_the_source_default_over_a_target_override(
    write_config: Any, topics: Any, unique_topic: Any, eventually: Any
) -> None:  # testReplicateSourceDefault
    name = unique_topic("srcdef")
    remote = f"A.{name}"
    flow = write_config(f"A->B.enabled = true\nA->B.topics = {name}\nA->B.use.defaults.from = source\n").flow("A->B")
    topics.create("A", name, 1, {"retention.bytes": "1000"})
    run_control_plane(flow, steps={TOPICS})
    eventually(lambda: topics.configs("B", remote))
    topics.alter("B", remote, {"retention.ms": "1234", "message.timestamp.type": "LogAppendTime"})
    eventually(lambda: _checked(topics.configs("B", remote), "retention.ms", "1234"))

    report = run_control_plane(flow, steps={CONFIGS})

    assert report.configs is not None
    [ours] = [t for t in report.configs.topics if t.topic == name]  # heartbeats replicate too
    changes = {c.key: c for c in ours.changes}
    assert changes["retention.ms"] == ConfigDiff("retention.ms", SET, "1234", DEFAULT_RETENTION_MS)
    assert "message.timestamp.type" not in changes
    synced = eventually(lambda: _checked(topics.configs("B", remote), "retention.ms", DEFAULT_RETENTION_MS))
    assert synced["retention.ms"][1] == "DYNAMIC_TOPIC_CONFIG", "written explicitly, as the source's default"
    assert synced["retention.bytes"] == ("1000", "DYNAMIC_TOPIC_CONFIG")
    assert synced["message.timestamp.type"] == ("LogAppendTime", "DYNAMIC_TOPIC_CONFIG"), "excluded: untouched"
    again = run_control_plane(flow, steps={CONFIGS})
    assert again.configs is not None and [t for t in again.configs.topics if t.topic == name] == []


def test_config_sync_can_be_turned_off(write_config: Any, topics: Any, unique_topic: Any, eventually: Any) -> None:
    name = unique_topic("cfgoff")
    flow = write_config(f"A->B.enabled = true\nA->B.topics = {name}\nA->B.sync.topic.configs.enabled = false\n").flow(
        "A->B"
    )
    topics.create("A", name, 1)
    run_control_plane(flow, steps={TOPICS})
    eventually(lambda: topics.configs("B", f"A.{name}"))
    topics.alter("B", f"A.{name}", {"retention.ms": "1234"})
    report = run_control_plane(flow, steps={CONFIGS})
    assert report.configs is not None and not report.configs.enabled and report.configs.topics == ()
    assert eventually(lambda: topics.configs("B", f"A.{name}"))["retention.ms"][0] == "1234"


def _equal(actual: object, expected: object) -> None:
    assert actual == expected


def _checked(configs: dict[str, tuple[str | None, str]], key: str, value: str) -> dict[str, tuple[str | None, str]]:
    assert configs[key][0] == value, configs[key]
    return configs

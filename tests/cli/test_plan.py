"""`mirrorflow plan` against live clusters: it shows topics to create and grow, config drift, ACLs and internal
topics to create, changes nothing, and `run --once` then does exactly that. Exit codes: 2 for config errors, 1
with one clear line for an unreachable cluster."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)
from tests.cli.cli_helpers import MIRRORFLOW, cli, write_config
from tests.kafka_helpers import Topics
from tests.replication.conftest import retry_until_passes

from mirrorflow.local.cluster import LocalClusters


def snapshot(admin: AdminClient, tag: str) -> dict[str, Any]:
    """Everything plan might touch on one cluster: topics (partitions, configs) carrying the tag, internal
    topics, and the topic ACLs."""
    metadata = admin.list_topics(timeout=30).topics
    names = sorted(t for t in metadata if tag in t or t.endswith("internal") or t.endswith("heartbeats"))
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in names if tag in t]
    configs = {
        r.name: {k: e.value for k, e in f.result(30).items()} for r, f in admin.describe_configs(resources).items()
    }
    acl_filter = AclBindingFilter(
        ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    acls = sorted(str(b) for b in admin.describe_acls(acl_filter).result(30))
    return {"topics": {t: len(metadata[t].partitions) for t in names}, "configs": configs, "acls": acls}


@pytest.mark.integration
def test_plan_changes_nothing_and_run_once_then_does_what_it_showed(
    kafka_clusters: LocalClusters, tmp_path: Path, unique_topic: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tag = unique_topic("plan")
    config = write_config(tmp_path / "mm2.properties", kafka_clusters, f"A->B.enabled = true\nA->B.topics = {tag}.*\n")
    topics = Topics(kafka_clusters)
    a, b = topics.admin("A"), topics.admin("B")
    existing, new = f"{tag}-existing", f"{tag}-new"
    topics.create("A", existing, 1, {"retention.ms": "3600000"})
    assert cli(capsys, "run", str(config), "--flow", "A->B", "--once")[0] == 0
    # Now make work for the plan: a new topic, a grown topic with config drift, an ACL.
    topics.create("A", new, 2, {"cleanup.policy": "compact"})
    topics.add_partitions("A", existing, 3)
    topics.alter("A", existing, set_={"retention.ms": "7200000"})
    acl = AclBinding(
        ResourceType.TOPIC,
        new,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )
    a.create_acls([acl])[acl].result(30)

    def settled() -> dict[str, Any]:
        """The broker applies an ACL through its metadata log: wait until describe shows it (and the grown topic)."""
        seen = snapshot(a, tag)
        assert seen["acls"] and seen["topics"][existing] == 3, seen
        return seen

    before = (retry_until_passes(settled), snapshot(b, tag))

    code, out, err = cli(capsys, "plan", str(config), "--json")
    assert code == 0, err
    text_code, text, _ = cli(capsys, "plan", str(config), "--flow", "A->B")

    assert (snapshot(a, tag), snapshot(b, tag)) == before, "plan must not change anything"
    assert text_code == 0
    [flow] = [f for f in json.loads(out)["flows"] if f["flow"] == "A->B"]
    assert flow["dry_run"] is True
    assert [(c["name"], c["partitions"], c["configs"]) for c in flow["topics"]["created"]] == [
        (f"A.{new}", 2, {"cleanup.policy": "compact"})
    ]
    assert [(g["name"], g["partitions_before"], g["partitions_after"]) for g in flow["topics"]["grown"]] == [
        (f"A.{existing}", 1, 3)
    ]
    [drift] = flow["configs"]["topics"]
    assert (drift["remote_topic"], drift["changes"]) == (
        f"A.{existing}",
        [{"key": "retention.ms", "op": "SET", "old": "3600000", "new": "7200000"}],
    )
    [added] = flow["acls"]["added"]
    assert (added["resource_name"], added["operation"], added["principal"]) == (f"A.{new}", "READ", "User:alice")
    assert f"would create topic B:A.{new} from {new} (2 partitions, replication factor 1)" in text
    assert f"would add partitions to B:A.{existing}: 1 -> 3" in text
    assert "      retention.ms: 3600000 -> 7200000" in text
    assert f"would add ACL on B: ALLOW READ on TOPIC A.{new} (LITERAL) for User:alice from host *" in text
    pending_internal = [(t["cluster"], t["name"]) for t in flow["internal_topics"]["created"]]
    assert not any(name in before[0 if cluster == "A" else 1]["topics"] for cluster, name in pending_internal)

    run = subprocess.run(
        [str(MIRRORFLOW), "run", str(config), "--flow", "A->B", "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert f"created topic B:A.{new}" in run.stdout
    after_b = snapshot(b, tag)
    assert after_b["topics"][f"A.{new}"] == 2 and after_b["topics"][f"A.{existing}"] == 3
    assert after_b["configs"][f"A.{existing}"]["retention.ms"] == "7200000"
    assert after_b["configs"][f"A.{new}"]["cleanup.policy"] == "compact"
    assert any(f"A.{new}" in line and "READ" in line for line in after_b["acls"])
    for cluster, name in pending_internal:
        assert name in snapshot(a if cluster == "A" else b, tag)["topics"]

    code, text, _ = cli(capsys, "plan", str(config), "--flow", "A->B")
    assert code == 0
    assert text.splitlines()[1:] == ["  no changes"], text


def test_config_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("clusters = A, B\nA.bootstrap.servers = x:1\nB.bootstrap.servers = y:1\nA->B.enabled = maybe\n")
    code, _, err = cli(capsys, "plan", str(bad))
    assert code == 2
    assert "A->B.enabled" in err and "Traceback" not in err


def test_unknown_flow_exits_2_and_names_the_enabled_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "mm2.properties"
    config.write_text("clusters = A, B\nA.bootstrap.servers = x:1\nB.bootstrap.servers = y:1\nA->B.enabled = true\n")
    code, _, err = cli(capsys, "plan", str(config), "--flow", "B->A")
    assert code == 2
    assert "--flow B->A" in err and "enabled flows: A->B" in err


def test_unreachable_cluster_exits_1_with_one_clear_message(tmp_path: Path) -> None:
    config = tmp_path / "mm2.properties"
    config.write_text(
        "clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:2\n"
        "A->B.enabled = true\nadmin.timeout.ms = 2000\n"
    )
    result = subprocess.run(
        [str(MIRRORFLOW), "plan", str(config)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: listing topics on cluster 'A' failed"), result.stderr
    assert "bootstrap.servers" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr

"""The failover runbook on real clusters A and B: a planned failover with an ACL fence that drains the rest,
commits exact offsets on B (a consumer there resumes with 0 re-reads and 0 skips), resumes after an injected
failure; a dry run that changes nothing; a fence that does not hold is rolled back."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from tests.kafka_helpers import KafkaKit, read_contents
from tests.replication.helpers import commit_offsets, copy_all, failover_config

from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.acl_rules import AclBinding
from mirrorflow.core.bootstrap_redirect import BOOTSTRAP_TOPIC, decode_redirect, resolve
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.acls import delete_acls, describe_topic_acls
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.kafka.group_coordinator import committed_offsets
from mirrorflow.replication.failover.options import FailoverOptions
from mirrorflow.replication.failover.runbook import FailoverFailed, run_failover
from mirrorflow.replication.failover.state import StateStore
from mirrorflow.replication.failover.step import Outcome
from mirrorflow.replication.failover.steps import STEPS
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane
from mirrorflow.replication.pause_markers import paused_flows

pytestmark = pytest.mark.integration


def _produce(producer: Producer, topic: str, start: int, count: int) -> None:
    for i in range(start, start + count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0


def _setup(write_config: Callable[..., MirrorConfig], kafka: KafkaKit) -> tuple[MirrorConfig, str, str]:
    """A 2-partition topic with 40 records on A; 30 copied to B; one group of A part-way through."""
    topic = kafka.topic("fo")
    prefix = f"fo-{uuid.uuid4().hex[:8]}-"
    config = failover_config(write_config, kafka.admin("A"), topic, 2, f"{prefix}.*")
    flow = config.flow("A->B")
    producer = kafka.producer("A")
    _produce(producer, topic, 0, 30)
    run_control_plane(flow, steps={TOPICS})
    assert copy_all(flow, topic, 2) == 30
    _produce(producer, topic, 30, 10)  # not copied yet: the drain must copy them
    commit_offsets(kafka.admin("A"), prefix + "g1", {(topic, 0): 4, (topic, 1): 18})
    commit_offsets(kafka.admin("A"), prefix + "g2", {(topic, 0): 17})  # past the copy (15) before the drain
    return config, topic, prefix


def _options(config: MirrorConfig, prefix: str, tmp_path: Path, **settings: Any) -> FailoverOptions:
    """A failover of `_setup`'s groups from A to B, its state under `tmp_path`, with this test's `settings`."""
    return FailoverOptions(
        config=config.path, primary="A", dr="B", groups=f"{prefix}.*", state_dir=str(tmp_path / "state"), **settings
    )


def test_planned_failover_with_acl_fence_resumes_and_consumers_resume_exactly(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    config, topic, prefix = _setup(write_config, kafka)
    principal = f"User:fo-{uuid.uuid4().hex[:6]}"
    options = _options(
        config,
        prefix,
        tmp_path,
        fence="acl",
        fence_principals=(principal,),
        fence_verify_seconds=1.0,
        redirect="topic",
        max_lag_records=1000,
    )
    # A failure injected at the commit step: every earlier step is recorded as done.
    calls: list[str] = []

    def broken(ctx: Any) -> Outcome:
        calls.append("commit")
        raise MirrorflowError("injected failure")

    steps = [(name, broken if name == "commit_offsets" else run) for name, run in STEPS]
    with pytest.raises(FailoverFailed) as failed:
        run_failover(options, steps=steps)
    assert "commit_offsets" in str(failed.value) and "injected failure" in str(failed.value)
    state = StateStore(tmp_path / "state").load()
    assert state is not None
    statuses = {s.name: s.status for s in state.steps.values()}
    assert statuses["drain"] == "done" and statuses["commit_offsets"] == "failed"
    assert state.step("drain").result["copied_records"] == 10

    report = run_failover(options)  # resumes at the failed step
    state = StateStore(tmp_path / "state").load()
    assert state is not None and state.completed()
    assert state.step("preflight").attempts == 1 and state.step("drain").attempts == 1
    assert state.step("commit_offsets").attempts == 2
    assert report["completed"] and report["fence"] == {"method": "acl", "status": "fenced"}
    assert report["data_loss_bound_records"] == 0 and report["rto_seconds"] > 0
    assert {"kind", "mode", "steps", "groups", "partitions", "redirect", "dry_run"} <= set(report)
    assert [s["name"] for s in report["steps"]] == [name for name, _ in STEPS]
    assert all(p["records_at_risk"] == 0 and p["copied_to"] == p["source_end"] for p in report["partitions"])

    # The fence is in place (and is ours to lift); the flow is marked paused.
    acls = describe_topic_acls(kafka.admin("A"), "A", 10)
    ours = [b for b in acls if b.principal == principal]
    assert {(b.resource_name, b.operation, b.permission_type) for b in ours} == {(topic, "WRITE", "DENY")}
    assert delete_acls(kafka.admin("A"), "A", ours, 10) == 1
    assert paused_flows(tmp_path)["A->B"].exists()

    # Offsets on B: committed, and a consumer there reads exactly what the group had not read on A.
    remote = f"A.{topic}"
    source_reader = kafka.consumer("A", {"fetch.wait.max.ms": 10})
    target_reader = kafka.consumer("B", {"fetch.wait.max.ms": 10})
    rows = {(g["group"], g["partition"]): g for g in report["groups"]}
    expected = {(prefix + "g1", 0): 4, (prefix + "g1", 1): 18, (prefix + "g2", 0): 17}
    assert {k: v["upstream_offset"] for k, v in rows.items()} == expected
    for (group, partition), upstream in expected.items():
        on_b = committed_offsets(kafka.admin("B"), "B", group, 10)[(remote, partition)].offset
        assert on_b == rows[(group, partition)]["translated_offset"]
        unread = read_contents(source_reader, topic, partition, upstream)
        resumed = read_contents(target_reader, remote, partition, on_b)
        assert resumed == unread and resumed, f"{group} {remote}-{partition}: 0 duplicates, 0 gaps"
        assert rows[(group, partition)]["lag"] == len(unread) and rows[(group, partition)]["records_at_risk"] == 0

    # The redirect record, as a client reads it.
    records = read_to_end("B", {"bootstrap.servers": config.clusters["B"].bootstrap_servers or ""}, BOOTSTRAP_TOPIC)
    found = resolve([decode_redirect(k, v) for _p, _o, k, v, _ts in records], prefix + "g1")
    assert (
        found is not None and found.cluster == "B" and found.bootstrap_servers == config.clusters["B"].bootstrap_servers
    )

    # Done is done: a third run changes nothing and reports the same offsets.
    again = run_failover(options)
    assert again["groups"] == report["groups"] and calls == ["commit"]
    assert (tmp_path / "state" / "report.md").read_text().startswith("# Failover A -> B (planned)")


def _snapshot(kafka_admin: Callable[..., AdminClient], group: str, topic: str) -> dict[str, Any]:
    admin_a, admin_b = kafka_admin("A"), kafka_admin("B")
    return {
        "acls": sorted(map(repr, describe_topic_acls(admin_a, "A", 10))),
        "topics_a": sorted(admin_a.list_topics(timeout=10).topics),
        "topics_b": sorted(admin_b.list_topics(timeout=10).topics),
        "group_b": committed_offsets(admin_b, "B", group, 10),
    }


def test_dry_run_changes_nothing(tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit) -> None:
    config, topic, prefix = _setup(write_config, kafka)
    reader = kafka.consumer("B", {"fetch.wait.max.ms": 10})
    before = _snapshot(kafka.admin, prefix + "g1", topic)
    copied_before = [len(read_contents(reader, f"A.{topic}", p, 0)) for p in range(2)]
    options = _options(
        config,
        prefix,
        tmp_path,
        fence="acl",
        fence_principals=("User:dry",),
        redirect="file",
        redirect_target=str(tmp_path / "redirect.json"),
        dry_run=True,
    )
    report = run_failover(options)
    assert report["dry_run"] and not report["completed"]
    assert {s["status"] for s in report["steps"]} <= {"planned", "skipped"}
    steps = {s["name"]: s["detail"] for s in report["steps"]}
    assert [b["resource_name"] for b in steps["fence"]["would_create"]] == [topic]
    assert sum(steps["drain"]["would_copy"].values()) == 10
    assert {(r["group"], r["partition"]) for r in steps["commit_offsets"]["offsets"]} == {
        (prefix + "g1", 0),
        (prefix + "g1", 1),
        (prefix + "g2", 0),
    }
    assert report["data_loss_bound_records"] == 0 and report["fence"]["status"] == "would fence"
    assert _snapshot(kafka.admin, prefix + "g1", topic) == before
    assert [len(read_contents(reader, f"A.{topic}", p, 0)) for p in range(2)] == copied_before
    assert not (tmp_path / "state").exists() and not (tmp_path / "redirect.json").exists()


@pytest.mark.parametrize("method", ["acl", "command"])
def test_a_fence_that_does_not_hold_is_rolled_back(
    method: str, tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """On PLAINTEXT every client is User:ANONYMOUS, a super user: a deny ACL for another principal cannot stop
    this producer, nor does a command that stops nothing, so the end offsets keep moving and the runbook must
    undo its fence: delete its ACLs, or run the `--unfence-command`."""
    config, topic, prefix = _setup(write_config, kafka)
    principal = f"User:fo-{uuid.uuid4().hex[:6]}"
    stop = threading.Event()
    producer = kafka.producer("A", {"linger.ms": 0})

    def keep_writing() -> None:
        i = 100
        while not stop.is_set():
            producer.produce(topic, value=b"late%d" % i, partition=i % 2)
            producer.poll(0)
            i += 1
            time.sleep(0.02)
        producer.flush(10)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    options = _options(
        config,
        prefix,
        tmp_path,
        fence=method,
        fence_principals=(principal,) if method == "acl" else (),
        fence_command="echo fenced" if method == "command" else None,
        unfence_command=f"touch {tmp_path / 'unfenced'}" if method == "command" else None,
        fence_verify_seconds=1.0,
    )
    try:
        with pytest.raises(FailoverFailed) as failed:
            run_failover(options)
    finally:
        stop.set()
        writer.join()
    message = str(failed.value)
    undone = "1 deny-WRITE ACLs deleted" if method == "acl" else "the unfence command ran"
    assert "verify_fence" in message and "writes did not stop" in message and undone in message
    assert (tmp_path / "unfenced").exists() == (method == "command")
    assert failed.value.exit_code == 1
    assert not [b for b in describe_topic_acls(kafka.admin("A"), "A", 10) if b.principal == principal]
    state = StateStore(tmp_path / "state").load()
    assert state is not None
    assert state.step("fence").status == "pending" and state.step("verify_fence").status == "failed"
    assert failed.value.report["fence"]["status"] == "unfenced"


def test_acl_fence_bindings_are_created_once_and_deleted_exactly(
    kafka_admin: Callable[..., AdminClient], unique_topic: Callable[..., str]
) -> None:
    from mirrorflow.replication.failover.fencing import apply_acl_fence, fence_bindings, roll_back_acl_fence

    topic = unique_topic("fence")
    admin = kafka_admin("A")
    bindings = fence_bindings([topic, topic], ["User:x1", "User:x2"])
    assert len(bindings) == 2
    assert len(apply_acl_fence(admin, "A", bindings, 10)) == 2

    def visible(wanted: list[AclBinding]) -> None:
        """ACLs reach the broker's cache after the controller commits them: wait until describe shows them."""
        deadline = time.monotonic() + 30
        while sorted((b for b in describe_topic_acls(admin, "A", 10) if b.resource_name == topic), key=repr) != wanted:
            assert time.monotonic() < deadline, describe_topic_acls(admin, "A", 10)
            time.sleep(0.3)

    visible(sorted(bindings, key=repr))
    assert apply_acl_fence(admin, "A", bindings, 10) == [], "already there: nothing new to roll back"
    other = AclBinding("TOPIC", topic, "LITERAL", "User:keep", "*", "WRITE", "DENY")
    apply_acl_fence(admin, "A", [other], 10)
    visible(sorted([*bindings, other], key=repr))
    assert roll_back_acl_fence(admin, "A", bindings, 10) == 2
    visible([other])
    delete_acls(admin, "A", [other], 10)

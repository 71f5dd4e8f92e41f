"""Edge cases of the failover runbook on real clusters A and B (issue 18): a group with no translation does not
block the others, a partition that lost every record to retention before the flow started, a transaction left
open across the fence."""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from tests.cli.cli_helpers import cli
from tests.kafka_helpers import KafkaKit, create_topic, read_contents
from tests.replication.helpers import commit_offsets, copy_all, failover_config
from tests.replication.test_provenance_live import copy_once

from mirrorflow.config.model import MirrorConfig
from mirrorflow.kafka.group_coordinator import committed_offsets
from mirrorflow.replication.failover import fencing
from mirrorflow.replication.failover.options import FailoverOptions
from mirrorflow.replication.failover.report import render_markdown
from mirrorflow.replication.failover.runbook import run_failover
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane

pytestmark = pytest.mark.integration


def _produce(producer: Producer, topic: str, partition: int, count: int) -> None:
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def _delete_below(kafka: KafkaKit, topic: str, partition: int, offset: int) -> None:
    """What retention does: the partition's records below `offset` are gone."""
    admin = kafka.admin("A")
    [future] = admin.delete_records([TopicPartition(topic, partition, offset)]).values()
    assert future.result(30).low_watermark == offset


def _flow_with_groups(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, partitions: int, counts: dict[int, int]
) -> tuple[MirrorConfig, str, str]:
    """A topic on A with `counts[p]` records per partition, mirrored A->B with the groups `<prefix>.*`."""
    topic = kafka.topic("foe")
    prefix = f"foe-{uuid.uuid4().hex[:8]}-"
    config = failover_config(write_config, kafka.admin("A"), topic, partitions, f"{prefix}.*")
    producer = kafka.producer("A")
    for partition, count in counts.items():
        _produce(producer, topic, partition, count)
    return config, topic, prefix


def _options(
    config: MirrorConfig, prefix: str, tmp_path: Path, name: str = "state", **settings: Any
) -> FailoverOptions:
    return FailoverOptions(
        config=config.path, primary="A", dr="B", groups=f"{prefix}.*", state_dir=str(tmp_path / name), **settings
    )


def _copy(config: MirrorConfig, topic: str, partitions: int) -> int:
    flow = config.flow("A->B")
    run_control_plane(flow, steps={TOPICS})
    return copy_all(flow, topic, partitions)


def test_a_stale_group_is_reported_and_skipped_while_the_others_move(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit, capsys: pytest.CaptureFixture[str]
) -> None:
    # Records 0-29 deleted before the flow ever ran: the copy starts at 30, the offset map at 30.
    config, topic, prefix = _flow_with_groups(write_config, kafka, 1, {0: 60})
    _delete_below(kafka, topic, 0, 30)
    assert _copy(config, topic, 1) == 30
    stale, good = prefix + "stale", prefix + "good"
    commit_offsets(kafka.admin("A"), stale, {(topic, 0): 5})  # below the log start and the copied history
    commit_offsets(kafka.admin("A"), good, {(topic, 0): 40})
    command = ["failover", str(config.path), "--primary", "A", "--dr", "B", "--groups", f"{prefix}.*"]

    code, out, err = cli(capsys, *command, "--state-dir", str(tmp_path / "state"))
    assert code == 0, err
    assert f"skipped group {stale}: no exact translation for {topic}-0 at 5" in err
    assert "## Skipped groups" in out and f"| {stale} | {topic} | 0 | 5 | before-history |" in out
    assert "must read with isolation.level=read_committed" in out  # the target consumers' contract
    report = json.loads((tmp_path / "state" / "report.json").read_text())
    assert report["completed"]
    assert [(g["group"], g["partition"], g["translated_offset"]) for g in report["groups"]] == [(good, 0, 10)]
    assert report["skipped_groups"] == [
        {"group": stale, "topic": topic, "partition": 0, "upstream_offset": 5, "reason": "before-history"}
    ]
    on_b = {
        g: {tp: o.offset for tp, o in committed_offsets(kafka.admin("B"), "B", g, 10).items()} for g in (good, stale)
    }
    assert on_b == {good: {(f"A.{topic}", 0): 10}, stale: {}}

    code, _out, err = cli(capsys, *command, "--state-dir", str(tmp_path / "strict"), "--strict-groups")
    assert code == 1 and "preflight' refused: no exact translation for " + stale in err, err


def test_a_partition_emptied_by_retention_before_the_flow_does_not_block_the_drain_or_count_at_risk(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    # Partition 1 lost all its 100 records before the flow started: the copy never writes progress for it.
    config, topic, prefix = _flow_with_groups(write_config, kafka, 2, {0: 20, 1: 100})
    _delete_below(kafka, topic, 1, 100)
    assert _copy(config, topic, 2) == 20
    commit_offsets(kafka.admin("A"), prefix + "svc", {(topic, 0): 12})

    ledger = run_failover(_options(config, prefix, tmp_path, "unplanned", mode="unplanned", dry_run=True))
    assert {(p["partition"], p["records_at_risk"]) for p in ledger["partitions"]} == {(0, 0), (1, 0)}
    assert ledger["data_loss_bound_records"] == 0

    report = run_failover(_options(config, prefix, tmp_path))
    assert report["completed"]
    assert {(p["partition"], p["source_end"], p["records_at_risk"]) for p in report["partitions"]} == {
        (0, 20, 0),
        (1, 100, 0),
    }
    assert [(g["partition"], g["translated_offset"]) for g in report["groups"]] == [(0, 12)]


def _transaction_open_at_the_fence(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit, wait_s: float
) -> tuple[str, FailoverOptions, Producer, Callable[[], tuple[int, int]]]:
    """10 records copied, then an application's transaction of 5 records left open on A; the failover options
    (a command fence: the application's other producers are stopped) and a count of (records on A, on B), both
    read_committed."""
    config, topic, prefix = _flow_with_groups(write_config, kafka, 1, {0: 10})
    assert _copy(config, topic, 1) == 10
    commit_offsets(kafka.admin("A"), prefix + "svc", {(topic, 0): 5})
    txn = kafka.producer("A", {"transactional.id": f"{prefix}app"})
    txn.init_transactions(30)
    txn.begin_transaction()
    _produce(txn, topic, 0, 5)
    options = _options(
        config,
        prefix,
        tmp_path,
        fence="command",
        fence_command="true",
        fence_verify_seconds=0.5,
        open_transaction_wait_seconds=wait_s,
    )

    def counts() -> tuple[int, int]:
        on_a = read_contents(kafka.consumer("A", {"isolation.level": "read_committed"}), topic, 0)
        on_b = read_contents(kafka.consumer("B", {"isolation.level": "read_committed"}), f"A.{topic}", 0)
        return len(on_a), len(on_b)

    return topic, options, txn, counts


def test_a_transaction_still_open_after_the_wait_is_counted_at_risk(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    _topic, options, txn, counts = _transaction_open_at_the_fence(tmp_path, write_config, kafka, wait_s=2.0)
    report = run_failover(options)
    txn.commit_transaction(30)  # after the cutover: these records never reach B

    assert report["completed"] and report["fence"]["status"] == "fenced"
    on_a, on_b = counts()
    assert (on_a, on_b) == (15, 10)
    [partition] = report["partitions"]
    assert partition["records_at_risk"] == on_a - on_b, partition
    assert report["data_loss_bound_records"] == on_a - on_b
    assert [(g["upstream_offset"], g["records_at_risk"]) for g in report["groups"]] == [(5, on_a - on_b)]


def test_a_transaction_committed_while_verify_fence_waits_is_drained(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    _topic, options, txn, counts = _transaction_open_at_the_fence(tmp_path, write_config, kafka, wait_s=120.0)
    steps: queue.Queue[str] = queue.Queue()
    result: dict[str, Any] = {}

    def run() -> None:
        result["report"] = run_failover(options, on_step=lambda name, _status, _result: steps.put(name))

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    assert steps.get(timeout=120) == "preflight" and steps.get(timeout=120) == "fence"
    # verify_fence cannot end while the transaction is open (it would end within ~1 s without the wait).
    with pytest.raises(queue.Empty):
        steps.get(timeout=5)
    txn.commit_transaction(30)
    runner.join(180)

    report = result["report"]
    assert report["completed"] and report["fence"]["status"] == "fenced"
    assert counts() == (15, 15)
    assert [p["records_at_risk"] for p in report["partitions"]] == [0]
    assert report["data_loss_bound_records"] == 0


def _identity_both_ways(write_config: Callable[..., MirrorConfig], kafka: KafkaKit) -> tuple[MirrorConfig, str, str]:
    """A topic of the same name on A and B, flows A->B and B->A under IdentityReplicationPolicy (provenance
    headers keep each flow from copying the other's copies), and the groups `<prefix>.*`."""
    topic = kafka.topic("foi")
    prefix = f"foi-{uuid.uuid4().hex[:8]}-"
    for alias in ("A", "B"):
        create_topic(kafka.admin(alias), topic, 1)
    config = write_config(
        "A->B.enabled = true\nB->A.enabled = true\n"
        f"topics = {topic}\ngroups = {prefix}.*\nheartbeats.replication.enabled = false\n"
        "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
        "mirrorflow.provenance.headers = true\n"
    )
    return config, topic, prefix


def _fail_back(
    tmp_path: Path, kafka: KafkaKit, config: MirrorConfig, topic: str, prefix: str, positions: dict[str, int]
) -> dict[str, tuple[list[tuple[Any, Any]], list[tuple[Any, Any]], str]]:
    """Commit each group at its position on B, fail back, and return per group (what it had not read on B,
    what it reads on A from where it resumes, the translation's status)."""
    for name, offset in positions.items():
        commit_offsets(kafka.admin("B"), prefix + name, {(topic, 0): offset})
    report = run_failover(_options(config, prefix, tmp_path, direction="failback"))
    assert report["completed"]
    home = {g["group"][len(prefix) :]: (g["translated_offset"], g["status"]) for g in report["groups"]}
    assert set(home) == set(positions)
    reader = {alias: kafka.consumer(alias, {"isolation.level": "read_committed"}) for alias in ("A", "B")}
    return {
        name: (
            [(k, v) for k, v, _h in read_contents(reader["B"], topic, 0, offset)],
            [(k, v) for k, v, _h in read_contents(reader["A"], topic, 0, home[name][0])],
            home[name][1],
        )
        for name, offset in positions.items()
    }


def test_identity_policy_failback_brings_groups_home_exactly_from_both_origins(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    # Identity names both ways: B's `topic` holds copies of A's records (0-9, then the copy's commit marker) and
    # B's own records written after the failover; failing back, the B->A flow copies only B's own (provenance).
    config, topic, prefix = _identity_both_ways(write_config, kafka)
    _produce(kafka.producer("A"), topic, 0, 10)
    assert copy_once(config.flow("A->B")) == 10
    _produce(kafka.producer("B"), topic, 0, 10)
    assert copy_once(config.flow("B->A")) == 10
    positions = {"a-origin": 4, "first-b": 11, "b-origin": 15, "read-all": 21}  # offsets on B (10 is a marker)
    for name, (unread, resumed, status) in _fail_back(tmp_path, kafka, config, topic, prefix, positions).items():
        # 0 re-read, 0 skipped: what the group reads on A from its new position is what it had not read on B.
        assert resumed == unread, f"{name}: at {positions[name]} on B"
        assert status == "exact", name


def test_identity_policy_failback_with_interleaved_origins_skips_nothing(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    # A's records 10-14 were not copied before B took writes (an unplanned failover), and were copied to B only
    # after B's own records: A holds a0-a14 then copies of b0-b9; B holds a0-a9, a marker, b0-b9, then a10-a14.
    config, topic, prefix = _identity_both_ways(write_config, kafka)
    producer = kafka.producer("A")
    _produce(producer, topic, 0, 10)
    assert copy_once(config.flow("A->B")) == 10
    for i in range(5):
        producer.produce(topic, key=b"late", value=f"a-late-{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    for i in range(10):
        kafka.producer("B").produce(topic, key=b"b", value=f"b-{i}".encode(), partition=0)
    assert kafka.producer("B").flush(30) == 0
    assert copy_once(config.flow("B->A")) == 10
    assert copy_once(config.flow("A->B")) == 5
    positions = {"a-origin": 4, "first-b": 11, "b-origin": 15, "a-late": 21, "read-all": 27}
    outcome = _fail_back(tmp_path, kafka, config, topic, prefix, positions)
    for name, (unread, resumed, status) in outcome.items():
        assert not [r for r in unread if r not in resumed], f"{name}: records skipped (status {status})"
        rereads = len(resumed) - len(unread)
        assert (status == "re-read") == (rereads > 0), (name, rereads, status)
    assert [outcome[n][2] == "re-read" for n in positions] == [False, False, True, True, False]


def test_the_unplanned_ledger_counts_records_above_an_open_transaction_at_risk(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    # The old primary still answers: an application's transaction is open on it, with committed records after.
    topic, options, txn, counts = _transaction_open_at_the_fence(tmp_path, write_config, kafka, wait_s=1.0)
    _produce(kafka.producer("A"), topic, 0, 3)
    report = run_failover(dataclasses.replace(options, mode="unplanned", fence="none", fence_command=None))
    txn.commit_transaction(30)  # after the cutover: none of these 8 records reached B

    on_a, on_b = counts()
    assert (on_a, on_b) == (18, 10)
    [partition] = report["partitions"]
    assert report["data_loss_bound_records"] == on_a - on_b
    assert (partition["records_at_risk"], partition["above_last_stable_offset"]) == (8, 8), partition
    assert f"| {topic} | 0 | 10 | 10 | 8 | 8 | 0 |" in render_markdown(report)


def test_a_transaction_ending_inside_the_verify_window_does_not_roll_the_fence_back(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Still open after the bounded wait, the application's transaction aborts while verify_fence watches the high
    # watermarks: its abort marker moves them by 1, which is not a write that got through the fence.
    _topic, options, txn, counts = _transaction_open_at_the_fence(tmp_path, write_config, kafka, wait_s=0.5)
    windows: list[float] = []

    def abort_in_the_first_window(seconds: float) -> None:
        if not windows:
            txn.abort_transaction(30)
        windows.append(seconds)
        time.sleep(seconds)

    verify = fencing.verify_writes_stopped
    monkeypatch.setattr(
        fencing,
        "verify_writes_stopped",
        lambda sample, seconds: verify(sample, seconds, sleep=abort_in_the_first_window),
    )
    report = run_failover(options)

    assert report["completed"] and report["fence"]["status"] == "fenced", report
    assert len(windows) == 2  # the window that saw the marker, and one that proves the writes stopped
    assert counts() == (10, 10)
    assert report["data_loss_bound_records"] == 0


def test_records_lost_to_retention_before_the_copy_read_them_are_in_the_markdown_ledger(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    config, topic, prefix = _flow_with_groups(write_config, kafka, 1, {0: 10})
    assert _copy(config, topic, 1) == 10
    _produce(kafka.producer("A"), topic, 0, 10)
    _delete_below(kafka, topic, 0, 15)  # 10-14 went to retention before the copy read them

    ledger = run_failover(_options(config, prefix, tmp_path, mode="unplanned", dry_run=True))
    [partition] = ledger["partitions"]
    assert (partition["records_at_risk"], partition["lost_to_retention"]) == (5, 5), partition
    assert f"| {topic} | 0 | 20 | 10 | 5 | 0 | 5 |" in render_markdown(ledger)


def test_a_position_committed_just_before_the_state_check_is_the_one_moved(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: commit_offsets read the positions, then checked the groups were idle; a consumer that committed and
    left in between was moved with its older position (re-reads). Interleaved by hand: the commit lands right
    before the source state check."""
    from mirrorflow.replication.failover import group_offsets

    config, topic, prefix = _flow_with_groups(write_config, kafka, 1, {0: 20})
    assert _copy(config, topic, 1) == 20
    group = prefix + "late"
    commit_offsets(kafka.admin("A"), group, {(topic, 0): 5})
    real_describe = group_offsets.describe_group_states
    moved: list[bool] = []

    def commit_then_describe(admin: Any, cluster: str, groups: Any, timeout_s: float) -> Any:
        if cluster == "A" and not moved:
            moved.append(True)
            commit_offsets(kafka.admin("A"), group, {(topic, 0): 12})  # its last commit, then it left
        return real_describe(admin, cluster, groups, timeout_s)

    monkeypatch.setattr(group_offsets, "describe_group_states", commit_then_describe)
    assert run_failover(_options(config, prefix, tmp_path))["completed"]
    on_b = committed_offsets(kafka.admin("B"), "B", group, 10)
    assert {tp: o.offset for tp, o in on_b.items()} == {(f"A.{topic}", 0): 12}

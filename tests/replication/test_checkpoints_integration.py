"""Checkpoints on real brokers: a copied topic (plain and transactional partitions), source groups at the
start, the end, the middle and inside transaction-marker and aborted-record gaps. A consumer on the target
that seeks to the checkpointed offsets reads exactly what the source group had not read yet."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from tests.kafka_helpers import KafkaKit, read_contents
from tests.replication.helpers import a_to_b, commit_offsets, copy_all

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.checkpoint import Checkpoint
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.replication.checkpoint_store import CheckpointStore
from mirrorflow.replication.checkpoints import emit_checkpoints
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane

pytestmark = pytest.mark.integration


def make_flow(write_config: Callable[..., MirrorConfig], topic: str, groups: str, **keys: str) -> Flow:
    return a_to_b(write_config, topics=topic, groups=groups, **keys)


def produce_source(kafka_producer: Callable[..., Producer], topic: str) -> None:
    """p0: 20 plain records (0..19). p1, transactional: 0..4 committed, 5 marker, 6..8 aborted, 9 marker,
    10..13 committed, 14 marker, 15..17 committed, 18 marker (end 19). p2: empty."""
    plain = kafka_producer("A")
    for i in range(20):
        plain.produce(topic, key=f"k{i}".encode(), value=f"p0-{i}".encode(), partition=0, headers=[("i", b"%d" % i)])
    assert plain.flush(30) == 0
    txn: Any = kafka_producer("A", {"transactional.id": f"ckpt-{uuid.uuid4()}"})
    txn.init_transactions(30)
    for batch, (count, keep) in enumerate([(5, True), (3, False), (4, True), (3, True)]):
        txn.begin_transaction()
        for i in range(count):
            txn.produce(topic, key=b"t", value=f"p1-{batch}-{i}".encode(), partition=1)
        txn.flush(30)  # aborted records must reach the log (an abort would purge unsent ones)
        if keep:
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)


def test_checkpoints_translate_exactly_stay_monotonic_and_follow_rewinds(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    topic = kafka.topic("ckpt")
    prefix = f"ckpt-{uuid.uuid4().hex[:8]}-"
    kafka.admin("A").create_topics([NewTopic(topic, 3, 1)])[topic].result()
    produce_source(kafka.producer, topic)
    layout = kafka.consumer("A", {"isolation.level": "read_uncommitted"})
    assert layout.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (0, 19), "p1 layout as documented"
    flow = make_flow(write_config, topic, f"{prefix}.*")
    run_control_plane(flow, steps={TOPICS})
    assert copy_all(flow, topic, 3) == 20 + 12

    source_admin = kafka.admin("A")
    positions = {
        "zero": {0: 0, 1: 0, 2: 0},
        "end": {0: 20, 1: 19},
        "mid": {0: 7, 1: 5},  # p1: on the commit marker of the first transaction
        "aborted": {0: 13, 1: 7},  # p1: inside the aborted records
        "abort-marker": {0: 1, 1: 9},
        "late-marker": {0: 19, 1: 14},
        "in-txn": {1: 11},
    }
    for name, offsets in positions.items():
        commit_offsets(source_admin, prefix + name, {(topic, p): o for p, o in offsets.items()})
    commit_offsets(source_admin, f"other-{uuid.uuid4().hex[:6]}", {(topic, 0): 3})  # not selected by `groups`

    report = emit_checkpoints(flow)
    remote = f"A.{topic}"
    emitted = {(e.group, e.partition): e for e in report.emitted if e.group.startswith(prefix)}
    expected_keys = {(prefix + n, p) for n, offsets in positions.items() for p in offsets if p != 2}
    assert set(emitted) == expected_keys, "one checkpoint per copied partition; none for the empty partition"
    assert all(e.topic == remote for e in emitted.values())
    assert any(u.partition == 2 and u.reason == "not-copied" for u in report.untranslated)
    assert report.checkpoint_latency_ms and report.checkpoint_latency_ms["max"] >= 0
    assert all(e.latency_ms is not None and e.latency_ms >= 0 for e in emitted.values())

    # 0 re-reads, 0 skips: the target from the checkpoint holds exactly the source's unread records.
    source_reader = kafka.consumer("A", {"isolation.level": "read_committed", "fetch.wait.max.ms": 10})
    target_reader = kafka.consumer("B", {"isolation.level": "read_committed", "fetch.wait.max.ms": 10})
    for (group, p), e in sorted(emitted.items()):
        assert e.upstream_offset == positions[group.removeprefix(prefix)][p]
        unread = read_contents(source_reader, topic, p, e.upstream_offset)
        resumed = read_contents(target_reader, remote, p, e.downstream_offset)
        assert resumed == unread, f"{group} {remote}-{p} from {e.downstream_offset}"

    # The records are MM2's bytes, on partition 0, stamped with the listing time.
    stored = [
        (part, Checkpoint.from_record(k, v), ts)
        for part, _o, k, v, ts in read_to_end("B", flow.target_consumer.librdkafka(), "A.checkpoints.internal")
        if Checkpoint.from_record(k, v).consumer_group_id.startswith(prefix)
    ]
    assert len(stored) == len(emitted)
    for part, checkpoint, ts in stored:
        e = emitted[(checkpoint.consumer_group_id, checkpoint.partition)]
        assert (part, ts) == (0, report.listed_ms)
        assert (checkpoint.topic, checkpoint.upstream_offset, checkpoint.downstream_offset) == (
            remote,
            e.upstream_offset,
            e.downstream_offset,
        )

    # Nothing changed: nothing re-emitted (the store is read back from the topic).
    again = emit_checkpoints(flow)
    assert not [e for e in again.emitted if e.group.startswith(prefix)]
    assert again.not_more_recent >= len(emitted)

    # The source moves on, one group follows it, another rewinds: both are emitted.
    more = kafka.producer("A")
    for i in range(20, 25):
        more.produce(topic, key=f"k{i}".encode(), value=f"p0-{i}".encode(), partition=0, headers=[("i", b"%d" % i)])
    assert more.flush(30) == 0
    assert copy_all(flow, topic, 3) == 5
    commit_offsets(source_admin, prefix + "mid", {(topic, 0): 22})
    commit_offsets(source_admin, prefix + "end", {(topic, 0): 3})
    store = CheckpointStore.for_flow(flow)
    third = emit_checkpoints(flow, store=store)
    moved = {(e.group.removeprefix(prefix), e.partition): e for e in third.emitted if e.group.startswith(prefix)}
    assert set(moved) == {("mid", 0), ("end", 0)}
    assert moved[("end", 0)].downstream_offset < emitted[(prefix + "end", 0)].downstream_offset, "a rewind re-emits"
    for key, e in moved.items():
        group = prefix + key[0]
        assert store.last(group, remote, 0) is not None
        assert read_contents(target_reader, remote, 0, e.downstream_offset) == read_contents(
            source_reader, topic, 0, e.upstream_offset
        )
    assert not [e for e in emit_checkpoints(flow, store=store).emitted if e.group.startswith(prefix)]

    # Across every round: per (group, partition), downstream only goes back when the group went back upstream.
    history: dict[tuple[str, int], list[Checkpoint]] = {}
    for _p, _o, k, v, _ts in read_to_end("B", flow.target_consumer.librdkafka(), "A.checkpoints.internal"):
        c = Checkpoint.from_record(k, v)
        if c.consumer_group_id.startswith(prefix):
            history.setdefault((c.consumer_group_id, c.partition), []).append(c)
    for series in history.values():
        for before, after in itertools.pairwise(series):
            assert after.downstream_offset > before.downstream_offset or after.upstream_offset < before.upstream_offset


def test_disabled_emission_writes_nothing(
    write_config: Callable[..., MirrorConfig], unique_topic: Callable[..., str]
) -> None:
    flow = make_flow(write_config, unique_topic("off"), ".*", **{"emit.checkpoints.enabled": "false"})
    report = emit_checkpoints(flow)
    assert (report.enabled, report.emitted, report.groups) == (False, (), ())

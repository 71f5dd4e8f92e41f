"""State slots (core/state_slots.py, replication/copy_slots.py): a copy reads only its partition's slot of each
state topic, and a flow whose state topics grow (the one-partition topics of older versions included) moves each
partition's state to its new slot at its first commit, with nothing lost or copied twice and translation exact.
The state topics of these tests get their own names (a separator of their own), so they start with one partition
as an older version created them, whatever the session's other tests did to the shared ones."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from tests.kafka_helpers import KafkaKit, create_topic, read_partition
from tests.replication.helpers import KEEP_FOREVER, a_to_b

import mirrorflow.core.state_slots as state_slots
import mirrorflow.replication.copy_slots as copy_slots
from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import decode_segment_key, offset_map_topic
from mirrorflow.core.progress import decode_progress_key, progress_topic
from mirrorflow.core.state_slots import check_count, head_slot, sized_state_partitions, slot_chain, slot_hash
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.kafka.metrics_store import read_snapshots
from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.internal_topics import create_internal_topics
from mirrorflow.replication.metrics import Snapshot, metrics_topic, snapshot_key
from mirrorflow.replication.offset_translation import load_offset_maps

_SEPARATORS = itertools.count()


def test_a_partitions_chain_holds_every_head_it_had_while_its_topic_doubled() -> None:
    for topic, partition in [("orders", 0), ("orders", 7), ("a.b-c", 123)]:
        for count in (1, 2, 4, 64, 4096):
            chain = slot_chain(topic, partition, count)
            heads = {head_slot(topic, partition, 2**k) for k in range(13) if 2**k <= count}
            assert chain[0] == head_slot(topic, partition, count) and chain[-1] == 0
            assert set(chain) == heads and chain == sorted(chain, reverse=True)
    assert slot_hash("t", 1) == slot_hash("t", 1) != slot_hash("t", 2)


def test_state_topics_are_sized_in_powers_of_two_and_refuse_other_counts() -> None:
    sizes = (0, 1, 32, 33, 2000, 100_000, 10**6)
    assert [sized_state_partitions(n) for n in sizes] == [4, 4, 4, 8, 256, 4096, 4096]
    # `mirrorflow.state.partitions.max`: an operator's higher cap; one that is no power of two is rounded down
    assert [sized_state_partitions(n, 16384) for n in sizes] == [4, 4, 4, 8, 256, 16384, 16384]
    assert sized_state_partitions(10**6, 5000) == 4096
    assert check_count(8, "t") == 8
    with pytest.raises(MirrorflowError, match="power of two"):
        check_count(6, "mirrorflow-progress.A.internal")


def own_flow(write_config: Callable[..., MirrorConfig], **keys: str) -> tuple[Flow, str]:
    """The A->B flow with a separator of its own (so state topics of its own); the separator."""
    sep = f"-s{next(_SEPARATORS)}x{id(write_config) % 10_000}-"
    return a_to_b(write_config, **{"replication.policy.separator": sep, **keys}), sep


def state_topics(sep: str) -> tuple[str, str, str]:
    return progress_topic("A", sep), offset_map_topic("A", sep), metrics_topic("A", sep)


def live_keys(flow: Flow, topic: str) -> dict[tuple[int, bytes], bytes]:
    """{(partition, key): value} of the live records of a state topic on B (tombstones applied)."""
    live: dict[tuple[int, bytes], bytes] = {}
    for p, _o, key, value, _ts in read_to_end("B", flow.target_consumer.librdkafka(), topic):
        assert key is not None
        if value is None:
            live.pop((p, key), None)
        else:
            live[(p, key)] = value
    return live


def copy_once(flow: Flow, topic: str, remote: str, partitions: int) -> int:
    tasks = plan_copy(flow, [SourcePartitions(topic, remote, partitions)], interval=True)
    return sum(copy_range(task).records for task in tasks)


@pytest.mark.integration
@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_state_in_the_one_partition_topics_of_an_older_version_moves_to_its_slots_and_nothing_is_lost(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, delivery: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upgrade: the first start reads the chain and moves the state up; once the move is durable, starts read
    each partition's head slot alone."""
    monkeypatch.setattr(state_slots, "SLOTS_ON", True)
    flow, sep = own_flow(write_config, **{"mirrorflow.delivery": delivery})
    topic, partitions = kafka.topic("slots"), 6
    remote = f"A{sep}{topic}"
    create_topic(kafka.admin("A"), topic, partitions, KEEP_FOREVER)
    create_topic(kafka.admin("B"), remote, partitions, KEEP_FOREVER)
    progress_name, map_name, metrics_name = state_topics(sep)
    for name in (progress_name, map_name, metrics_name):  # what an older version created: one partition each
        create_compacted_topic(kafka.admin("B"), "B", name, 1, 30)
    source = kafka.producer("A")
    values = {p: [f"{p}-{i}".encode() * 3 for i in range(80)] for p in range(partitions)}
    for p in range(partitions):
        for value in values[p][:40]:
            source.produce(topic, value=value, partition=p)
    assert source.flush(30) == 0
    assert copy_once(flow, topic, remote, partitions) == 40 * partitions
    assert {p for p, _key in live_keys(flow, progress_name)} == {0}, "one partition: the old layout"

    with FlowClients(flow) as clients:  # the upgrade: the cycle's topic step grows the state topics
        report = create_internal_topics(flow, clients, source_partitions=partitions)
    assert {name for name, _before, _after in report.grown} == {progress_name, map_name, metrics_name}
    heads = {p: head_slot(topic, p, 4) for p in range(partitions)}
    assert set(heads.values()) - {0}, "some partition must move for this test to mean anything"

    for p in range(partitions):
        for value in values[p][40:]:
            source.produce(topic, value=value, partition=p)
    assert source.flush(30) == 0
    assert copy_once(flow, topic, remote, partitions) == 40 * partitions

    committed = {"isolation.level": "read_committed"}
    maps = load_offset_maps(flow, topics=[topic])
    for p in range(partitions):
        target = read_partition(kafka.consumer("B", committed), remote, p)
        assert [m.value() for m in target] == values[p], f"partition {p}: every record once, in order"
        downstream = {m.value(): m.offset() for m in target}
        for u in (0, 39, 40, 79):
            found = maps.translate(topic, p, u)
            assert (found.offset, found.status) == (downstream[values[p][u]], "exact"), (p, u)
    progress_slots = {decode_progress_key(key): slot for slot, key in live_keys(flow, progress_name)}
    assert progress_slots == {(topic, p): heads[p] for p in range(partitions)}, "each progress only at its head"
    map_slots = {(slot, decode_segment_key(key)[:2]) for slot, key in live_keys(flow, map_name)}
    assert map_slots == {(heads[p], (topic, p)) for p in range(partitions)}, "each map only at its head"
    snapshots = read_snapshots("B", flow.target_consumer.librdkafka(), metrics_name, 30)
    for p in range(partitions):
        stored = Snapshot.decode(snapshots[snapshot_key(remote, p)]).values
        assert stored["byte-count"] == sum(len(v) for v in values[p]), "the byte count continues across the move"
    asked = watch_reads(monkeypatch)
    assert copy_once(flow, topic, remote, partitions) == 0
    assert {(name, tuple(slots)) for name, slots in asked} == {
        (name, (heads[p],)) for name in (progress_name, map_name, metrics_name) for p in range(partitions)
    }, "settled: each start reads its head slot alone"


@pytest.mark.integration
def test_a_copy_reads_only_its_own_chain_of_slots_of_each_state_topic(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow, sep = own_flow(write_config)
    topic, partitions = kafka.topic("ownslot"), 8
    remote = f"A{sep}{topic}"
    create_topic(kafka.admin("A"), topic, partitions, KEEP_FOREVER)
    create_topic(kafka.admin("B"), remote, partitions, KEEP_FOREVER)
    monkeypatch.setattr(state_slots, "SLOTS_ON", True)
    with FlowClients(flow) as clients:
        create_internal_topics(flow, clients, source_partitions=64)  # 8 slots
    source = kafka.producer("A")
    for p in range(partitions):
        source.produce(topic, value=b"x", partition=p)
    assert source.flush(30) == 0
    assert copy_once(flow, topic, remote, partitions) == partitions

    asked = watch_reads(monkeypatch)
    source.produce(topic, value=b"y", partition=5)
    assert source.flush(30) == 0
    task = plan_copy(flow, [SourcePartitions(topic, remote, partitions)], interval=True)[5]
    assert copy_range(task).records == 1
    head = [head_slot(topic, 5, 8)]  # settled there by the first run: not the chain (heads at 8, 4, 2 and 1 slots)
    assert sorted(asked) == sorted((name, head) for name in state_topics(sep)), "its own head slot only"


def watch_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[int]]]:
    """The (state topic, slots) of every read the copy makes of its state from now on."""
    asked: list[tuple[str, list[int]]] = []
    real = copy_slots.read_to_end  # type: ignore[attr-defined]

    def watched(cluster: str, conf: Any, name: str, **kwargs: Any) -> Any:
        chosen = kwargs["partitions"]

        def record(count: int) -> list[int]:
            picked = list(chosen(count))
            asked.append((name, picked))
            return picked

        return real(cluster, conf, name, **{**kwargs, "partitions": record})

    monkeypatch.setattr(copy_slots, "read_to_end", watched)
    return asked

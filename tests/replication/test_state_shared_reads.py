"""The ranges of one Spark task share their state reads (`kafka/log_cache.py`, `replication/copy_group.py`): a
slot holding the state of several of the task's ranges is fetched from its start once per task, then only tailed,
and every range still resumes exactly (every record once, in order, audit clean). Real brokers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.kafka_helpers import KafkaKit, create_topic, read_partition
from tests.replication.helpers import FAULT_KEYS, KEEP_FOREVER
from tests.replication.test_state_slots import own_flow, state_topics

import mirrorflow.core.state_slots as state_slots
import mirrorflow.kafka.compacted_log as compacted_log
from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.state_slots import head_slot
from mirrorflow.kafka.log_cache import LogCache
from mirrorflow.replication.audit import audit_flow
from mirrorflow.replication.copy_group import copy_ranges
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_task import CopyTask
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.internal_topics import create_internal_topics

pytestmark = pytest.mark.integration

PARTITIONS = 16
SLOTS_FOR = 32
"""Source partitions the state topics are sized for: 4 slots, so about 4 of the 16 partitions share each."""


def watch_fetches(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, int]]:
    """How many times each (topic, partition) is fetched from its start (offset 0) from now on."""
    from_start: Counter[tuple[str, int]] = Counter()
    real = compacted_log.consume_to

    def counted(reader: Any, cluster: str, topic: str, ends: dict[int, int], *args: Any) -> Iterator[Any]:
        starts = args[1] if len(args) > 1 and args[1] else {}
        from_start.update((topic, p) for p in ends if not starts.get(p, 0))
        yield from real(reader, cluster, topic, ends, *args)

    monkeypatch.setattr(compacted_log, "consume_to", counted)
    return from_start


def slotted_flow(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch, delivery: str
) -> tuple[Flow, str, str, str]:
    """A flow of its own with 4-slot state topics and a 16-partition topic: (flow, separator, topic, remote)."""
    monkeypatch.setattr(state_slots, "SLOTS_ON", True)
    flow, sep = own_flow(write_config, **{"mirrorflow.delivery": delivery})
    topic = kafka.topic("shared")
    remote = f"A{sep}{topic}"
    create_topic(kafka.admin("A"), topic, PARTITIONS, KEEP_FOREVER)
    create_topic(kafka.admin("B"), remote, PARTITIONS, KEEP_FOREVER)
    with FlowClients(flow) as clients:
        create_internal_topics(flow, clients, source_partitions=SLOTS_FOR)
    return flow, sep, topic, remote


def planned(flow: Flow, topic: str, remote: str, *, continuous: bool) -> list[CopyTask]:
    tasks = plan_copy(flow, [SourcePartitions(topic, remote, PARTITIONS)], interval=not continuous, run_seconds=4)
    assert tasks[0].state_partitions == 4
    return tasks


def produce(kafka: KafkaKit, topic: str, values: dict[int, list[bytes]], first: int, count: int) -> None:
    source = kafka.producer("A")
    for p in range(PARTITIONS):
        for i in range(first, first + count):
            value = f"{p}-{i}".encode()
            values.setdefault(p, []).append(value)
            source.produce(topic, value=value, partition=p)
    assert source.flush(30) == 0


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("delivery", "continuous"), [("exactly-once", False), ("at-least-once", False), ("exactly-once", True)]
)
def test_a_tasks_ranges_fetch_their_shared_slot_once_and_resume_exactly(
    write_config: Callable[..., MirrorConfig],
    kafka: KafkaKit,
    monkeypatch: pytest.MonkeyPatch,
    delivery: str,
    continuous: bool,
) -> None:
    flow, sep, topic, remote = slotted_flow(write_config, kafka, monkeypatch, delivery)
    values: dict[int, list[bytes]] = {}
    produce(kafka, topic, values, 0, 30)
    assert sum(r.records for r in copy_ranges(planned(flow, topic, remote, continuous=continuous))) == 30 * 16

    slot = Counter(head_slot(topic, p, 4) for p in range(PARTITIONS)).most_common(1)[0][0]
    mates = [p for p in range(PARTITIONS) if head_slot(topic, p, 4) == slot]
    assert len(mates) >= 3, "the test needs several partitions in one slot"
    names = state_topics(sep)

    # Today's cost, as the task of each range alone (or a round-robin task of ranges of different slots) paid it:
    # every range fetches the slot from its start.
    produce(kafka, topic, values, 30, 30)
    fetched = watch_fetches(monkeypatch)
    for task in planned(flow, topic, remote, continuous=continuous):
        if task.partition in mates:
            assert copy_ranges([task])[0].records == 30
    assert {name: fetched[(name, slot)] for name in names} == dict.fromkeys(names, len(mates))

    # One Spark task of the slot's ranges: the slot is fetched from its start once, then tailed.
    produce(kafka, topic, values, 60, 30)
    fetched.clear()
    tasks = [t for t in planned(flow, topic, remote, continuous=continuous) if t.partition in mates]
    with LogCache() as cache:
        assert [r.records for r in copy_ranges(tasks, cache)] == [30] * len(mates)
    assert {name: fetched[(name, slot)] for name in names} == dict.fromkeys(names, 1), "one fetch per slot"
    assert cache.fetches < 3 * len(mates), "the other reads were tails (or nothing new at all)"
    assert cache.kept_records() <= 3 * PARTITIONS + 20, "the cache holds the slot's live keys, no history"

    # Every other range, and then all of them again with nothing new, in one task: still exact.
    others = [t for t in planned(flow, topic, remote, continuous=continuous) if t.partition not in mates]
    assert sum(r.records for r in copy_ranges(others)) == 60 * len(others)
    assert sum(r.records for r in copy_ranges(planned(flow, topic, remote, continuous=continuous))) == 0
    committed = {"isolation.level": "read_committed"}
    for p in range(PARTITIONS):
        copied = [m.value() for m in read_partition(kafka.consumer("B", committed), remote, p)]
        assert copied == values[p], f"partition {p}: every record once, in order"
    report = audit_flow(flow, topics=topic)
    assert {k: report[k] for k in FAULT_KEYS} == dict.fromkeys(FAULT_KEYS, 0) and report["clean"] is True, report

"""The audit on real brokers: a clean copy audits to zero faults, and each fault written straight into the
remote topic (or into the progress topic) is found exactly once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.replication.helpers import FAULT_KEYS, state_slot

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.core.progress import Progress, encode_progress
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.audit import audit_flow
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range

pytestmark = pytest.mark.integration

KEEP_FOREVER = {"retention.ms": "-1"}
OLD = int(time.time() * 1000) - 30 * 24 * 3600 * 1000


def write_config(tmp_path: Path, clusters: LocalClusters, topic: str) -> Path:
    path = tmp_path / "mm2.properties"
    path.write_text(
        "clusters = A, B\n"
        f"A.bootstrap.servers = {clusters.bootstrap('A')}\n"
        f"B.bootstrap.servers = {clusters.bootstrap('B')}\n"
        "A->B.enabled = true\n"
        f"A->B.topics = {topic}\n"
        "replication.factor = 1\n"
        "checkpoints.topic.replication.factor = 1\n"
        "heartbeats.topic.replication.factor = 1\n"
        "offset-syncs.topic.replication.factor = 1\n"
        "admin.timeout.ms = 30000\n"
    )
    return path


PROGRESS = "mirrorflow-progress.A.internal"


def prepare_target(flow: Flow, topic: str, partitions: int) -> None:
    target_admin = admin_client(flow.target_admin.librdkafka())
    target_admin.create_topics([NewTopic(f"A.{topic}", partitions, 1, config=KEEP_FOREVER)])["A." + topic].result()
    for name in ("mirrorflow-progress.A.internal", "mirrorflow-offset-map.A.internal"):
        create_compacted_topic(target_admin, "B", name, 1, 30)
    create_compacted_topic(admin_client(flow.source_admin.librdkafka()), "A", "mm2-offset-syncs.B.internal", 1, 30)


def produce(producer: Producer, topic: str, partitions: int, count: int) -> None:
    for i in range(count):
        headers = [("h", f"{i}".encode()), ("empty", None)] if i % 3 == 0 else None
        value = None if i % 17 == 0 else f"value-{i}".encode() * (1 + i % 5)
        key = f"k{i % 50}".encode() if i % 7 else None
        producer.produce(topic, key=key, value=value, partition=i % partitions, timestamp=_ts(i), headers=headers)
    assert producer.flush(30) == 0


def run_interval(flow: Flow, topic: str, partitions: int) -> int:
    tasks = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", partitions)], interval=True)
    return sum(copy_range(t).records for t in tasks)


def copied_topic(
    tmp_path: Path, clusters: LocalClusters, admin: AdminClient, producer: Producer, topic: str, count: int
) -> tuple[Path, Flow]:
    """A 3-partition topic of `count` records, copied A->B by the copy engine; the config path and the flow."""
    admin.create_topics([NewTopic(topic, 3, 1, config=KEEP_FOREVER)])[topic].result()
    path = write_config(tmp_path, clusters, topic)
    flow = load_config(path).flow("A->B")
    prepare_target(flow, topic, 3)
    produce(producer, topic, 3, count)
    assert run_interval(flow, topic, 3) == count
    return path, flow


def faults(report: dict[str, object]) -> dict[str, object]:
    return {k: report[k] for k in FAULT_KEYS}


def test_audit_clean_then_each_injected_fault(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
) -> None:
    topic = unique_topic("audit")
    _, flow = copied_topic(tmp_path, kafka_clusters, kafka_admin("A"), kafka_producer("A"), topic, 600)

    clean = audit_flow(flow, topics=topic)
    assert faults(clean) == dict.fromkeys(FAULT_KEYS, 0)
    assert clean["checked"] == 600 and clean["not_yet_copied"] == 0 and clean["clean"] is True
    assert clean["latency"]["measurable"] in (True, False)

    target = kafka_producer("B")
    remote = f"A.{topic}"
    # a duplicate of an existing record, in its own partition
    target.produce(remote, key=b"k1", value=b"value-1" * 2, partition=1, timestamp=_ts(1))
    assert target.flush(30) == 0
    dup = audit_flow(flow, topics=topic)
    assert faults(dup) == {**dict.fromkeys(FAULT_KEYS, 0), "duplicated": 1}, dup

    # lost: a source record the progress topic claims was copied
    source = kafka_producer("A")
    source.produce(topic, key=b"late", value=b"never copied", partition=0, timestamp=_ts(9999))
    assert source.flush(30) == 0
    pending = audit_flow(flow, topics=topic)
    assert pending["not_yet_copied"] == 1 and pending["lost"] == 0
    key, value = encode_progress(Progress(topic, 0, 201, 10**6, 201, 0, int(time.time() * 1000)))
    target.produce(PROGRESS, key=key, value=value, partition=state_slot(kafka_admin("B"), PROGRESS, topic))
    # misplaced: a record produced at the source partition 0 and "copied" into remote partition 2
    source.produce(topic, key=b"moved", value=b"m", partition=0, timestamp=_ts(10000))
    assert source.flush(30) == 0
    key, value = encode_progress(Progress(topic, 0, 202, 10**6, 202, 0, int(time.time() * 1000)))
    target.produce(PROGRESS, key=key, value=value, partition=state_slot(kafka_admin("B"), PROGRESS, topic))
    target.produce(remote, key=b"moved", value=b"m", partition=2, timestamp=_ts(10000))
    assert target.flush(30) == 0

    found = audit_flow(flow, topics=topic)
    assert faults(found) == {**dict.fromkeys(FAULT_KEYS, 0), "duplicated": 1, "lost": 1, "misplaced": 1}, found
    assert found["checked"] == 602 and found["not_yet_copied"] == 0
    assert found["clean"] is False


def _ts(i: int) -> int:
    return OLD + i * 1000

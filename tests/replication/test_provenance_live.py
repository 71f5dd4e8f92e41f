"""Active/active with identity topic names: names cannot show where a record came from, so the provenance header
does. Copying both ways, round after round, must converge and never loop (docs/design.md §1.6)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.core.provenance import ORIGIN_HEADER
from mirrorflow.kafka.sample_data import read_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.copy_plan import copyable, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.discovery import discover
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration


def copy_once(flow: Flow) -> int:
    run_control_plane(flow)
    with FlowClients(flow) as clients:
        plan = discover(flow, clients)
    ours = [s for s in copyable(plan) if s.topic == flow.topics[0]]
    return sum(copy_range(task).records for task in plan_copy(flow, ours, interval=True))


def test_identity_active_active_with_provenance_headers_does_not_loop(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
) -> None:
    topic = unique_topic("aa")
    for alias in ("A", "B"):
        kafka_admin(alias).create_topics([NewTopic(topic, 2, 1)])[topic].result()
    path = tmp_path / "mm2.properties"
    path.write_text(
        mm2_config_text({a: kafka_clusters.bootstrap(a) for a in ("A", "B")})
        + "A->B.enabled = true\nB->A.enabled = true\n"
        f"topics = {topic}\n"
        "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
        "mirrorflow.provenance.headers = true\n"
    )
    config = load_config(path)
    a_to_b, b_to_a = config.flow("A->B"), config.flow("B->A")
    for alias, count in (("A", 100), ("B", 50)):
        producer = kafka_producer(alias)
        for i in range(count):
            producer.produce(topic, key=f"{alias}{i}".encode(), value=b"v", partition=i % 2)
        assert producer.flush(30) == 0

    copied = [(copy_once(a_to_b), copy_once(b_to_a)) for _ in range(3)]

    assert copied[0] == (100, 50), "each side's own records cross once"
    assert copied[1:] == [(0, 0), (0, 0)], "the copies of copies are dropped, so nothing more crosses"
    for alias in ("A", "B"):
        records = [r for part in read_topic(kafka_clusters.bootstrap(alias), topic).values() for r in part]
        assert len(records) == 150, f"{alias} holds its own records and the other side's, once each"
        origins = Counter(dict(headers).get(ORIGIN_HEADER) for _key, _value, headers, _ts in records)
        other = b"B" if alias == "A" else b"A"
        assert origins[other] == (50 if alias == "A" else 100), "copied records carry their origin"

"""An unplanned failover with the primary really down: a pair of clusters of this test's own (`P`, `D`), a flow
P->D copied part-way with checkpoints, records produced on P after the copy, then P's broker killed.

The runbook must finish without P (offsets from D's checkpoints, an RPO ledger that says "unknown" where only P
could tell), commit the translated offsets on D, and report the old primary as unfenced. Once P is back, the
ledger computed again must name exactly the records that were never copied.

The state is in Kafka (the runbook topic on D): written while P's cluster.id was unknown, it must still pause the
flow and resume as the same runbook once P is back.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.config.loader import load_config
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.group_coordinator import committed_offsets
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.checkpoints import emit_checkpoints
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.failover.options import FailoverOptions
from mirrorflow.replication.failover.report import render_markdown
from mirrorflow.replication.failover.runbook import run_failover
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import TOPICS, flow_paused, run_control_plane
from mirrorflow.replication.remote_cluster_utils import translate_group

pytestmark = pytest.mark.integration

COPIED = 30  # 15 per partition reach D
LATE = 12  # 6 per partition written on P after the last copy: lost with P
GROUP_AT = {0: 4, 1: 12}


@pytest.fixture
def own_clusters(tmp_path: Path) -> Iterator[LocalClusters]:
    """P and D beside the session's A and B (which this test never touches); always stopped at the end."""
    clusters = LocalClusters.up(["P", "D"], tmp_path / "kafka", tie_to_parent=True)
    try:
        yield clusters
    finally:
        clusters.down()


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer(with_logger({"bootstrap.servers": bootstrap}))
    for i in range(start, start + count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0


def _commit(admin: AdminClient, group: str, offsets: list[TopicPartition]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])[group].result()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_unplanned_failover_with_the_primary_killed(tmp_path: Path, own_clusters: LocalClusters) -> None:
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    group = f"unpl-{uuid.uuid4().hex[:6]}"
    bootstraps = {alias: own_clusters.bootstrap(alias) for alias in ("P", "D")}
    path = tmp_path / "mm2.properties"
    path.write_text(
        mm2_config_text(bootstraps, "admin.timeout.ms = 20000\n")
        + f"P->D.enabled = true\nP->D.topics = {topic}\nP->D.groups = unpl-.*\n"
    )
    config = load_config(path)
    flow = config.flow("P->D")
    admin_p = admin_client({"bootstrap.servers": bootstraps["P"]})
    admin_d = admin_client({"bootstrap.servers": bootstraps["D"]})
    admin_p.create_topics([NewTopic(topic, 2, 1)])[topic].result()

    # Copied part-way, the group committed inside the copied range, checkpoints emitted on D.
    _produce(bootstraps["P"], topic, 0, COPIED)
    run_control_plane(flow, steps={TOPICS})
    tasks = plan_copy(flow, [SourcePartitions(topic, f"P.{topic}", 2)], interval=True)
    assert sum(copy_range(t).records for t in tasks) == COPIED
    _commit(admin_p, group, [TopicPartition(topic, p, o) for p, o in GROUP_AT.items()])
    with FlowClients(flow) as clients:
        assert group in emit_checkpoints(flow, clients).groups
    expected = {(t.topic, t.partition): t.offset for t in translate_group(config, group, "P", "D")}
    live = {(t.topic, t.partition): t.offset for t in translate_group(config, group, "P", "D", live=True)}
    assert expected == live and set(expected) == {(f"P.{topic}", 0), (f"P.{topic}", 1)}

    # More on P that is never copied; then P dies.
    _produce(bootstraps["P"], topic, COPIED, LATE)
    own_clusters.stop("P", kill=True)
    assert not own_clusters.is_up("P")

    options = FailoverOptions(config=str(path), primary="P", dr="D", groups=group, mode="unplanned")
    started = time.monotonic()
    report = run_failover(options)
    took = time.monotonic() - started
    assert took < 120, f"the runbook waited on the dead primary for {took:.0f} s"

    steps = {s["name"]: s for s in report["steps"]}
    assert report["completed"] and report["mode"] == "unplanned"
    assert steps["preflight"]["detail"]["source_reachable"] is False
    assert steps["fence"]["status"] == "skipped" and report["fence"]["status"] == "unfenced"
    assert steps["final_checkpoint"]["status"] == "skipped"
    assert report["data_loss_bound_records"] == "unknown"
    ledger = {(p["topic"], p["partition"]): p for p in report["partitions"]}
    assert set(ledger) == {(topic, 0), (topic, 1)}
    for p in ledger.values():  # what D holds is known; what P held past it died with P
        assert p["copied_to"] == COPIED // 2 and p["source_end"] is None and p["records_at_risk"] == "unknown"
    assert {(g["partition"], g["status"], g["records_at_risk"]) for g in report["groups"]} == {
        (0, "checkpoint", "unknown"),
        (1, "checkpoint", "unknown"),
    }
    markdown = render_markdown(report)
    assert "unfenced" in markdown and "data-loss bound (records): unknown" in markdown
    assert "mirrorflow-runbook.internal on 'D'" in report["state_dir"]

    # The translated offsets are committed on D, exactly what the checkpoints said before P died.
    on_d = committed_offsets(admin_d, "D", group, 10)
    assert {tp: o.offset for tp, o in on_d.items()} == expected

    # P is back: the flow stays paused, though the marker was written without P's cluster.id.
    own_clusters.start("P")
    with FlowClients(flow) as clients:
        assert "paused by a failover P->D" in str(flow_paused(flow, clients, None))
    # The ledger computed again (a fresh dry run reads P's end offsets now) names the late records.
    again = run_failover(replace(options, dry_run=True, restart=True))
    recheck = {
        (p["topic"], p["partition"]): p
        for s in again["steps"]
        if s["name"] == "drain"
        for p in s["detail"]["partitions"]
    }
    assert {tp: p["records_at_risk"] for tp, p in recheck.items()} == {(topic, 0): LATE // 2, (topic, 1): LATE // 2}
    assert {tp: p["copied_to"] for tp, p in recheck.items()} == {tp: p["copied_to"] for tp, p in ledger.items()}
    assert {tp: p["source_end"] for tp, p in recheck.items()} == {tp: (COPIED + LATE) // 2 for tp in recheck}
    # The same failover again resumes the stored runbook: every step done once, nothing run again.
    before_ms = time.time_ns() // 1_000_000
    resumed = run_failover(options)
    assert resumed["completed"] and {s["attempts"] for s in resumed["steps"]} == {1}
    assert all(s["started_ms"] < before_ms for s in resumed["steps"]), "steps of the stored runbook, not new ones"

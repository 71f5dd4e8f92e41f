"""MM2's heartbeat emission (MirrorHeartbeatTask, docs/mm2-reference.md §6): one `Heartbeat(source, target, now)` record
into the target's `heartbeats` topic, partition 0, record timestamp = the heartbeat's own milliseconds.

It runs for every pair MM2 would run a heartbeat herder for (`MirrorConfig.heartbeat_flows`), enabled flows or
not. Downstream clusters learn their upstream topology from replicated copies of these topics (`A.heartbeats`,
`B.A.heartbeats`), which is what `replication_hops` and `upstream_clusters` read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mirrorflow.config.model import Flow
from mirrorflow.core.heartbeat import Heartbeat
from mirrorflow.kafka.produce import OutgoingRecord
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_rules import FlowRules

HEARTBEAT_PARTITION = 0


@dataclass(frozen=True)
class HeartbeatReport:
    source: str
    target: str
    topic: str
    timestamp_ms: int
    emitted: bool
    offset: int | None = None


def heartbeat_record(heartbeat: Heartbeat, topic: str) -> OutgoingRecord:
    return OutgoingRecord(
        topic=topic,
        partition=HEARTBEAT_PARTITION,
        key=heartbeat.record_key(),
        value=heartbeat.record_value(),
        timestamp_ms=heartbeat.timestamp,
    )


def emit_heartbeat(
    flow: Flow,
    clients: FlowClients,
    *,
    now_ms: int | None = None,
    dry_run: bool = False,
    rules: FlowRules | None = None,
) -> HeartbeatReport:
    """Write one heartbeat for `flow`'s pair; the `heartbeats` topic must exist (`create_internal_topics`)."""
    topic = (rules or FlowRules.of(flow)).policy.heartbeats_topic()
    heartbeat = Heartbeat(flow.source, flow.target, time.time_ns() // 1_000_000 if now_ms is None else now_ms)
    if dry_run:
        return HeartbeatReport(flow.source, flow.target, topic, heartbeat.timestamp, False)
    [offset] = clients.target_writer.write([heartbeat_record(heartbeat, topic)])
    return HeartbeatReport(flow.source, flow.target, topic, heartbeat.timestamp, True, offset)

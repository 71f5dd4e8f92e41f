"""Liveness of a flow beside its lag: how old the pair's latest heartbeat and the flow's latest checkpoint are,
and the one-word state an operator scans for (ok / lagging / stale heartbeat / unreachable).

Both ages are read from the target, where MM2 writes them: the `heartbeats` topic (records of every pair into
the target, so only this pair's key counts) and `<source>.checkpoints.internal`. They are the record timestamps
of the newest records, so they keep growing while nothing runs: a stopped flow shows up even when it has no lag.
Checkpoints are only written when a group's committed offsets move, so an old checkpoint alone is not an alarm.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mirrorflow.core.heartbeat import Heartbeat
from mirrorflow.core.wire import WireFormatError
from mirrorflow.kafka.compacted_log import read_to_end

if TYPE_CHECKING:
    from mirrorflow.config.model import Flow
    from mirrorflow.replication.metrics import PartitionView

log = logging.getLogger(__name__)

OK, LAGGING, STALE_HEARTBEAT, UNREACHABLE = "ok", "lagging", "stale heartbeat", "unreachable"
LAGGING_AFTER_S = 60.0  # oldest uncopied record older than this: the flow is behind
STALE_FLOOR_S = 900.0  # heartbeats come once per DAG run in interval mode: allow a 10-15 min schedule


@dataclass(frozen=True)
class FlowHealth:
    source: str
    target: str
    heartbeat_ms: int | None  # timestamp of the pair's newest heartbeat on the target; None when there is none
    checkpoint_ms: int | None  # timestamp of the newest record of the checkpoints topic
    now_ms: int

    @property
    def heartbeat_age_s(self) -> float | None:
        return None if self.heartbeat_ms is None else max(0.0, (self.now_ms - self.heartbeat_ms) / 1000)

    @property
    def checkpoint_age_s(self) -> float | None:
        return None if self.checkpoint_ms is None else max(0.0, (self.now_ms - self.checkpoint_ms) / 1000)


def heartbeat_timestamp(flow: Flow, *, timeout_s: float, wait_s: float | None = None) -> int | None:
    """The newest heartbeat of `flow`'s pair in the target's heartbeats topic (other pairs' records skipped)."""
    topic = flow.policy().heartbeats_topic()
    newest: int | None = None
    conf = flow.target_consumer.librdkafka()
    for _p, _o, key, value, _ts in read_to_end(
        flow.target, conf, topic, read_committed=False, timeout_s=timeout_s, wait_s=wait_s or timeout_s
    ):
        try:
            beat = Heartbeat.from_record(key, value)
        except WireFormatError:
            continue  # a foreign writer's record: not a heartbeat of any pair
        if (beat.source_cluster_alias, beat.target_cluster_alias) == (flow.source, flow.target):
            newest = beat.timestamp if newest is None else max(newest, beat.timestamp)
    return newest


def checkpoint_timestamp(flow: Flow, *, timeout_s: float, wait_s: float | None = None) -> int | None:
    """The record timestamp of the newest checkpoint the flow wrote to the target."""
    topic = flow.policy().checkpoints_topic(flow.source)
    newest: int | None = None
    conf = flow.target_consumer.librdkafka()
    wait = wait_s or timeout_s
    for _p, _o, _key, value, ts in read_to_end(flow.target, conf, topic, timeout_s=timeout_s, wait_s=wait):
        if value is not None and ts > 0:
            newest = ts if newest is None else max(newest, ts)
    return newest


def flow_health(
    flow: Flow, *, now_ms: int | None = None, timeout_s: float | None = None, wait_s: float | None = None
) -> FlowHealth:
    """Read both ages from the target; raises the Kafka layer's error when the target cannot be read.
    `wait_s` (default `timeout_s`) bounds a read stalled by an open transaction: health is best effort."""
    timeout = flow.admin_timeout_ms / 1000 if timeout_s is None else timeout_s
    wait = timeout if wait_s is None else min(wait_s, timeout)
    beat = heartbeat_timestamp(flow, timeout_s=timeout, wait_s=wait) if flow.emit_heartbeats_enabled else None
    checkpoint = checkpoint_timestamp(flow, timeout_s=timeout, wait_s=wait) if flow.emit_checkpoints_enabled else None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return FlowHealth(flow.source, flow.target, beat, checkpoint, now)


def stale_after_s(flow: Flow, floor_s: float = STALE_FLOOR_S) -> float:
    """A heartbeat older than this says nothing is running the pair (three missed beats, at least `floor_s`)."""
    return max(floor_s, 3.0 * flow.emit_heartbeats_interval_seconds)


def flow_state(
    flow: Flow,
    views: Sequence[PartitionView],
    health: FlowHealth,
    *,
    lagging_after_s: float = LAGGING_AFTER_S,
    stale_floor_s: float = STALE_FLOOR_S,
) -> str:
    """The worst of: nothing runs the pair (stale or missing heartbeat), the copy is behind, or all is well."""
    if flow.emit_heartbeats_enabled:
        age = health.heartbeat_age_s
        if age is None or age > stale_after_s(flow, stale_floor_s):
            return STALE_HEARTBEAT
    if any(v.lag_records > 0 and v.lag_seconds > lagging_after_s for v in views):
        return LAGGING
    return OK

"""Replication SLOs: is a flow within its RPO and lag targets, and since when has it been outside them.

RPO ("how many seconds of data would we lose now") is the age of the oldest source record not yet copied, the
maximum over the flow's partitions: the `replication-lag-seconds` `flow_views` already computes. The lag is the
flow's total `replication-lag-records`. A flow with neither `mirrorflow.rpo.target.seconds` nor
`mirrorflow.lag.target.records` has no SLO and is never breached.

Since when: record timestamps prove part of it. The first uncopied record of a partition, written at T, has been
waiting ever since, so the RPO has exceeded the target continuously from T + target: that is the breach's start
as far as the data shows. An earlier start (the copy was further behind, then caught up to T while still out of
its target), and any breach of the records target, can only be known by watching: every reader that sees a
breach (`metrics serve`, `metrics show`, the dashboard) stores `{since, checked}` for the flow in the flow's
metrics topic (`mirrorflow-metrics.<source>.internal` on the target, compacted, one key per flow, so the state is
bounded), and one that sees the flow within its SLO removes it with a tombstone. A fresh process reads the stored
start. It trusts it only while the breach is continuous as far as it can tell: when the RPO alone is breached
and the data's start is later than the last check, the flow may have recovered in between unseen, so the data's
start wins. Storing is best-effort, like the metrics themselves: a failure is logged, never raised.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mirrorflow.kafka.metrics_store import MetricsPublisher, ensure_metrics_topic, read_snapshots
from mirrorflow.replication.metrics import PartitionView, flow_metrics_topic

if TYPE_CHECKING:
    from mirrorflow.config.model import Flow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredBreach:
    """What a reader last stored for a breached flow: when the breach started and when it was last seen."""

    since_ms: int
    checked_ms: int

    def encode(self, flow: str) -> bytes:
        return json.dumps({"flow": flow, "since_ms": self.since_ms, "checked_ms": self.checked_ms}).encode()

    @classmethod
    def decode(cls, data: bytes) -> StoredBreach:
        raw = json.loads(data)
        return cls(int(raw["since_ms"]), int(raw["checked_ms"]))


@dataclass(frozen=True)
class FlowSlo:
    """One flow's SLO now. `since_ms` is set only while breached."""

    flow: str
    source: str
    target: str
    rpo_target_s: float | None
    lag_target_records: int | None
    rpo_s: float
    lag_records: int
    rpo_breached: bool
    lag_breached: bool
    since_ms: int | None

    @property
    def has_slo(self) -> bool:
        return self.rpo_target_s is not None or self.lag_target_records is not None

    @property
    def breached(self) -> bool:
        return self.rpo_breached or self.lag_breached

    def describe(self) -> str:
        """`RPO 45.2 s > target 30 s; lag 1200 records > target 1000`: the objectives the flow misses (or meets)."""
        parts = []
        if self.rpo_target_s is not None:
            sign = ">" if self.rpo_breached else "<="
            parts.append(f"RPO {self.rpo_s:.1f} s {sign} target {self.rpo_target_s:g} s")
        if self.lag_target_records is not None:
            sign = ">" if self.lag_breached else "<="
            parts.append(f"lag {self.lag_records} records {sign} target {self.lag_target_records}")
        return "; ".join(parts) or "no SLO"


def slo_key(flow_name: str) -> bytes:
    """A JSON object, so it never collides with the partitions' snapshot keys (JSON lists)."""
    return json.dumps({"slo": flow_name}, separators=(",", ":")).encode()


def assess(flow: Flow, views: Sequence[PartitionView], stored: StoredBreach | None, now_ms: int) -> FlowSlo:
    """The flow's SLO from its partitions' live lag and the stored breach (pure: no I/O)."""
    rpo = max((v.lag_seconds for v in views), default=0.0)
    lag = sum(v.lag_records for v in views)
    rpo_target, lag_target = flow.rpo_target_seconds, flow.lag_target_records
    rpo_breached = rpo_target is not None and rpo > rpo_target
    lag_breached = lag_target is not None and lag > lag_target
    since: int | None = None
    if rpo_breached or lag_breached:
        proven = None
        if rpo_breached and rpo_target is not None:
            starts = [
                v.oldest_uncopied_ms + int(rpo_target * 1000)
                for v in views
                if v.oldest_uncopied_ms is not None and v.lag_seconds > rpo_target
            ]
            proven = min(starts, default=None)
        seen_throughout = stored is not None and (lag_breached or proven is None or proven <= stored.checked_ms)
        candidates = [proven] if proven is not None else []
        if stored is not None and seen_throughout:
            candidates.append(stored.since_ms)
        since = min(candidates, default=now_ms)
    return FlowSlo(
        flow.name, flow.source, flow.target, rpo_target, lag_target, rpo, lag, rpo_breached, lag_breached, since
    )


def _topic(flow: Flow) -> str:
    return flow_metrics_topic(flow)


def read_breach(flow: Flow, timeout_s: float) -> StoredBreach | None:
    """The stored breach of `flow`; None when there is none or it cannot be read (logged: best effort)."""
    try:
        raw = read_snapshots(flow.target, flow.target_consumer.librdkafka(), _topic(flow), timeout_s).get(
            slo_key(flow.name)
        )
        return StoredBreach.decode(raw) if raw is not None else None
    except Exception as err:  # the SLO is still assessed from the data alone
        log.warning("slo: cannot read the stored state of %s: %s", flow.name, err)
        return None


def store_breach(flow: Flow, slo: FlowSlo, stored: StoredBreach | None, now_ms: int, timeout_s: float) -> None:
    """Record the breach (with the time it was seen) or remove the stored one once the flow is within its SLO."""
    if not slo.breached and stored is None:
        return
    conf = flow.target_producer.librdkafka()
    topic = _topic(flow)
    if not ensure_metrics_topic(flow.target, conf, topic, flow.checkpoints_topic_replication_factor, timeout_s):
        return
    publisher = MetricsPublisher(flow.target, conf, topic)
    value = StoredBreach(slo.since_ms, now_ms).encode(flow.name) if slo.since_ms is not None else None
    publisher.publish(slo_key(flow.name), value)
    publisher.close(timeout_s)


def flow_slo(
    flow: Flow, views: Sequence[PartitionView], *, now_ms: int | None = None, timeout_s: float | None = None
) -> FlowSlo:
    """Assess the flow's SLO and keep its since-when on the target; no I/O for a flow without an SLO."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if flow.rpo_target_seconds is None and flow.lag_target_records is None:
        return assess(flow, views, None, now)
    timeout = flow.admin_timeout_ms / 1000 if timeout_s is None else timeout_s
    stored = read_breach(flow, timeout)
    slo = assess(flow, views, stored, now)
    store_breach(flow, slo, stored, now, timeout)
    return slo


def format_since(since_ms: int, now_ms: int) -> str:
    """`12:04:05 UTC (3 min ago)`, with the date when it is not today's."""
    at = time.gmtime(since_ms / 1000)
    today = time.gmtime(now_ms / 1000)[:3] == at[:3]
    shown = time.strftime("%H:%M:%S UTC" if today else "%Y-%m-%d %H:%M:%S UTC", at)
    return f"{shown} ({_duration(max(0.0, (now_ms - since_ms) / 1000))} ago)"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

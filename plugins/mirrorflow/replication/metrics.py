"""MM2's MirrorSourceConnector metrics per remote topic-partition, plus replication lag.

Storage: each copy task publishes a JSON snapshot of its partition's metrics (at its first commit, then at most
every `copy_loop.SNAPSHOT_INTERVAL_S`, and at its end) to the compacted topic `mirrorflow-metrics.<source>.internal`
on the target (key = remote topic and partition), outside the data transaction and best-effort. Any process that
can read the target (`mirrorflow metrics serve`, an Airflow page) sees the latest snapshot of every partition. Lag
is not stored: it is computed when read, from the committed progress records and the source's end offsets, so it
keeps growing while no copy runs.

Statistics follow MM2's (MirrorSourceMetrics): `-min`/`-max`/`-avg` over a sliding window (two 30 s samples), the
plain `record-age-ms`/`replication-latency-ms` the last value, rates over the window. Resolution is one batch: the
copy loop only keeps the batch's oldest/newest timestamp and their sum, so no per-record Python work is added.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

from mirrorflow.core.progress import progress_topic
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.metrics_store import read_snapshots, record_timestamps
from mirrorflow.kafka.offsets import list_offsets
from mirrorflow.kafka.topics import list_topic_partitions
from mirrorflow.replication.copy_task import flow_reads_committed
from mirrorflow.replication.flow_rules import internal_separator
from mirrorflow.replication.state_records import read_progress

if TYPE_CHECKING:  # copy tasks import this module on executors, which must not need pydantic
    from mirrorflow.config.model import Flow

log = logging.getLogger(__name__)

GROUP = "MirrorSourceConnector"
JMX_DOMAIN = "kafka.connect.mirror"
TAGS = ("source", "target", "topic", "partition")
WINDOW_S = 60.0  # MM2: samples=2 of metrics.sample.window.ms=30000
SOURCE_METRICS = (
    "record-count",
    "record-rate",
    "byte-count",
    "byte-rate",
    "record-age-ms",
    "record-age-ms-max",
    "record-age-ms-min",
    "record-age-ms-avg",
    "replication-latency-ms",
    "replication-latency-ms-max",
    "replication-latency-ms-min",
    "replication-latency-ms-avg",
)
LAG_METRICS = ("replication-lag-records", "replication-lag-seconds")


def flow_metrics_topic(flow: Flow) -> str:
    """The metrics topic of `flow` on its target, with the separator MM2 gives its internal topics."""
    return metrics_topic(flow.source, internal_separator(flow))


def metrics_topic(source_alias: str, separator: str = ".") -> str:
    """Target-side metrics topic of flow `source_alias`->target (named like the progress topic)."""
    return f"mirrorflow-metrics{separator}{source_alias}{separator}internal"


def prometheus_name(metric: str, group: str = GROUP) -> str:
    """JMX-exporter style: `kafka.connect.mirror` + group + attribute, lower case, non-alphanumerics to `_`."""
    raw = f"{JMX_DOMAIN}_{group}_{metric}".lower()
    return "".join(c if c.isalnum() else "_" for c in raw)


def mbean_name(source: str, target: str, topic: str, partition: int) -> str:
    return f"{JMX_DOMAIN}:type={GROUP},source={source},target={target},topic={topic},partition={partition}"


@dataclass
class Snapshot:
    """The stored state of one remote partition's metrics, as JSON on the metrics topic."""

    source: str
    target: str
    topic: str  # the remote topic, as MM2 tags it
    partition: int
    source_topic: str
    updated_ms: int
    next_upstream: int
    values: dict[str, float]

    def key(self) -> bytes:
        return snapshot_key(self.topic, self.partition)

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> Snapshot:
        raw = json.loads(data)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


def snapshot_key(remote_topic: str, partition: int) -> bytes:
    return json.dumps([remote_topic, partition], separators=(",", ":")).encode()


class _Window:
    """min/max/sum/count over per-batch samples younger than WINDOW_S."""

    __slots__ = ("samples",)

    def __init__(self) -> None:
        self.samples: deque[tuple[float, float, float, float, int]] = deque()

    def add(self, now: float, low: float, high: float, total: float, count: int) -> None:
        self.samples.append((now, low, high, total, count))
        while self.samples and self.samples[0][0] < now - WINDOW_S:
            self.samples.popleft()

    def stats(self) -> tuple[float, float, float]:
        n = sum(s[4] for s in self.samples)
        if not n:
            return 0.0, 0.0, 0.0
        return min(s[1] for s in self.samples), max(s[2] for s in self.samples), sum(s[3] for s in self.samples) / n


class PartitionMetrics:
    """The recorder one copy task keeps for its partition; `snapshot()` is what gets published."""

    def __init__(
        self,
        *,
        source: str,
        target: str,
        source_topic: str,
        remote_topic: str,
        partition: int,
        record_count: int = 0,
        byte_count: int = 0,
        clock: tuple[float, float] | None = None,
    ) -> None:
        self.source, self.target = source, target
        self.source_topic, self.remote_topic, self.partition = source_topic, remote_topic, partition
        self.record_count, self.byte_count = record_count, byte_count
        self.next_upstream = 0
        self.last_age = self.last_latency = 0.0
        self._age, self._latency = _Window(), _Window()
        start = clock[0] if clock else time.monotonic()
        self._counts: deque[tuple[float, int, int]] = deque([(start, record_count, byte_count)])

    def record_batch(
        self,
        *,
        records: int,
        nbytes: int,
        oldest_ts: int | None,
        newest_ts: int | None,
        ts_sum: int,
        polled_ms: int,
        acked_ms: int,
        next_upstream: int,
        now: float | None = None,
    ) -> None:
        """One committed batch: ages are measured at poll (`polled_ms`), latencies at acknowledgement."""
        now = time.monotonic() if now is None else now
        self.record_count += records
        self.byte_count += nbytes
        self.next_upstream = next_upstream
        self._counts.append((now, self.record_count, self.byte_count))
        while len(self._counts) > 2 and self._counts[1][0] < now - WINDOW_S:
            self._counts.popleft()
        if records and oldest_ts is not None and newest_ts is not None:
            self.last_age = float(polled_ms - newest_ts)
            self.last_latency = float(acked_ms - newest_ts)
            self._age.add(now, polled_ms - newest_ts, polled_ms - oldest_ts, polled_ms * records - ts_sum, records)
            self._latency.add(now, acked_ms - newest_ts, acked_ms - oldest_ts, acked_ms * records - ts_sum, records)

    def rates(self) -> tuple[float, float]:
        (t0, r0, b0), (t1, r1, b1) = self._counts[0], self._counts[-1]
        span = t1 - t0
        return ((r1 - r0) / span, (b1 - b0) / span) if span > 0 else (0.0, 0.0)

    def snapshot(self, now_ms: int | None = None) -> Snapshot:
        record_rate, byte_rate = self.rates()
        age_min, age_max, age_avg = self._age.stats()
        lat_min, lat_max, lat_avg = self._latency.stats()
        values = {
            "record-count": float(self.record_count),
            "record-rate": round(record_rate, 3),
            "byte-count": float(self.byte_count),
            "byte-rate": round(byte_rate, 3),
            "record-age-ms": self.last_age,
            "record-age-ms-max": age_max,
            "record-age-ms-min": age_min,
            "record-age-ms-avg": round(age_avg, 3),
            "replication-latency-ms": self.last_latency,
            "replication-latency-ms-max": lat_max,
            "replication-latency-ms-min": lat_min,
            "replication-latency-ms-avg": round(lat_avg, 3),
        }
        return Snapshot(
            self.source,
            self.target,
            self.remote_topic,
            self.partition,
            self.source_topic,
            int(time.time() * 1000) if now_ms is None else now_ms,
            self.next_upstream,
            values,
        )


@dataclass
class PartitionView:
    """One remote partition as `mirrorflow metrics` shows it: the stored metrics and the live lag."""

    source: str
    target: str
    topic: str
    partition: int
    source_topic: str
    next_upstream: int
    source_end: int
    lag_records: int
    lag_seconds: float
    updated_ms: int | None
    values: dict[str, float]
    oldest_uncopied_ms: int | None = None
    """Timestamp of the first record not yet copied; None when caught up (replication/slo.py dates breaches)."""

    def tags(self) -> dict[str, str]:
        return {"source": self.source, "target": self.target, "topic": self.topic, "partition": str(self.partition)}


def flow_views(
    flow: Flow, *, now_ms: int | None = None, timeout_s: float | None = None, wait_s: float | None = None
) -> list[PartitionView]:
    """Every partition the flow has copied: its latest snapshot (rates zeroed once stale) and its lag now.
    `wait_s` (default `timeout_s`) bounds a read of the progress stalled by an open transaction."""
    timeout = flow.admin_timeout_ms / 1000 if timeout_s is None else timeout_s
    wait = timeout if wait_s is None else min(wait_s, timeout)
    sep = internal_separator(flow)
    target_conf = flow.target_consumer.librdkafka()
    source_conf = flow.source_consumer.librdkafka()
    committed = flow_reads_committed(flow)  # the copy's isolation: the end it can reach
    # Best effort: an open transaction on the progress partition fails this within `wait` (a clear
    # StalledReadError) rather than the copy's 90 s wait; a scrape reports the flow down meanwhile.
    stored = read_progress(flow.target, target_conf, progress_topic(flow.source, sep), timeout_s=timeout, wait_s=wait)
    progress = {tp: p.next_upstream for tp, p in stored.items()}
    snapshots: dict[tuple[str, int], Snapshot] = {}
    for key, raw in read_snapshots(flow.target, target_conf, metrics_topic(flow.source, sep), timeout).items():
        if not key.startswith(b"["):
            continue  # not a partition's snapshot (a flow's SLO state, replication/slo.py)
        try:
            snap = Snapshot.decode(raw)
        except (ValueError, TypeError) as err:
            log.warning("metrics: skipping an unreadable snapshot: %s", err)
            continue
        if snap.source == flow.source and snap.target == flow.target:
            snapshots[(snap.source_topic, snap.partition)] = snap
    admin = admin_client(flow.source_admin.librdkafka())
    existing = list_topic_partitions(admin, flow.source, timeout)  # a deleted source topic has no lag to show
    known = set(progress) | set(snapshots)
    selected = _selected(flow, existing)  # a topic the flow no longer copies is not its lag (nor its SLO)
    copied = [tp for tp in known if tp[0] in selected and tp[1] < existing[tp[0]]]
    unstarted = _never_copied(flow, selected, known)
    starts = list_offsets(admin, flow.source, unstarted, latest=False, timeout_s=timeout)
    ends = list_offsets(
        admin,
        flow.source,
        copied + unstarted,
        latest=True,
        read_committed=committed,
        timeout_s=timeout,
    )
    positions = {tp: progress.get(tp, snapshots[tp].next_upstream if tp in snapshots else 0) for tp in copied}
    # A never-copied partition is shown once records wait in it: the copy will start at its log start.
    positions |= {tp: starts[tp] for tp in unstarted if ends.get(tp, 0) > starts.get(tp, 0)}
    wanted = sorted(positions)
    lagging = {tp: pos for tp, pos in positions.items() if ends.get(tp, 0) > pos}
    oldest = record_timestamps(flow.source, source_conf, lagging, read_committed=committed, timeout_s=timeout)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    policy = flow.policy()
    views = []
    for tp in wanted:
        found = snapshots.get(tp)
        values = dict.fromkeys(SOURCE_METRICS, 0.0)
        if found is not None:
            values.update(stale_rates_zeroed(found.values, now - found.updated_ms))
        end = ends.get(tp, positions[tp])
        lag_ts = oldest.get(tp)
        views.append(
            PartitionView(
                flow.source,
                flow.target,
                found.topic if found else policy.format_remote_topic(flow.source, tp[0]),
                tp[1],
                tp[0],
                positions[tp],
                end,
                max(0, end - positions[tp]),
                max(0.0, (now - lag_ts) / 1000) if lag_ts is not None and tp in lagging else 0.0,
                found.updated_ms if found else None,
                values,
                lag_ts if tp in lagging else None,
            )
        )
    return views


def _selected(flow: Flow, existing: Mapping[str, int]) -> dict[str, int]:
    """The source topics (with their partition counts) the flow replicates now."""
    from mirrorflow.replication.flow_rules import FlowRules  # pydantic-free import of this module on executors

    rules = FlowRules.of(flow)
    return {t: n for t, n in existing.items() if rules.should_replicate_topic(t)}


def _never_copied(flow: Flow, selected: Mapping[str, int], known: set[tuple[str, int]]) -> list[tuple[str, int]]:
    """The selected source partitions with neither progress nor a snapshot: a flow whose copy never ran (or
    fails from its first run) lags by all of their records, and must not look caught up. None with
    `auto.offset.reset = latest`: that copy starts at the end, so nothing written before it waits."""
    if flow.source_consumer.librdkafka().get("auto.offset.reset", "earliest") == "latest":
        return []
    return [(t, p) for t, count in sorted(selected.items()) for p in range(count) if (t, p) not in known]


def stale_rates_zeroed(values: Mapping[str, float], age_ms: int) -> dict[str, float]:
    """A snapshot older than the rate window describes an idle partition: its rates are 0 (MM2's meters decay)."""
    out = dict(values)
    if age_ms > WINDOW_S * 1000:
        out["record-rate"] = out["byte-rate"] = 0.0
    return out

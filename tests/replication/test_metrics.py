"""The metric arithmetic of one partition (MM2's names, windowed min/max/avg, rates) and the stored snapshot."""

from __future__ import annotations

from typing import NamedTuple

from mirrorflow.replication.metrics import (
    SOURCE_METRICS,
    PartitionMetrics,
    Snapshot,
    mbean_name,
    metrics_topic,
    prometheus_name,
    stale_rates_zeroed,
)


def recorder() -> PartitionMetrics:
    return PartitionMetrics(
        source="A",
        target="B",
        source_topic="t",
        remote_topic="A.t",
        partition=3,
        record_count=10,
        byte_count=100,
        clock=(0.0, 0.0),
    )


class Batch(NamedTuple):
    """The arguments of one `record_batch` call, so that a test lists its batches as rows of a table."""

    records: int
    nbytes: int
    oldest_ts: int | None
    newest_ts: int | None
    ts_sum: int
    polled_ms: int
    acked_ms: int
    next_upstream: int
    now: float


def feed(m: PartitionMetrics, *batches: Batch) -> None:
    for batch in batches:
        m.record_batch(**batch._asdict())


def test_names_follow_mm2_and_the_jmx_exporter() -> None:
    assert metrics_topic("A") == "mirrorflow-metrics.A.internal"
    assert metrics_topic("A", "_") == "mirrorflow-metrics_A_internal"
    assert prometheus_name("record-count") == "kafka_connect_mirror_mirrorsourceconnector_record_count"
    assert prometheus_name("replication-latency-ms-avg") == (
        "kafka_connect_mirror_mirrorsourceconnector_replication_latency_ms_avg"
    )
    assert mbean_name("A", "B", "A.t", 1) == (
        "kafka.connect.mirror:type=MirrorSourceConnector,source=A,target=B,topic=A.t,partition=1"
    )
    assert len(SOURCE_METRICS) == 12


def test_batches_give_counts_rates_ages_and_latencies() -> None:
    m = recorder()
    # 3 records with timestamps 1000, 1500, 2000, polled at 5000, acknowledged at 5100.
    feed(m, Batch(3, 30, 1000, 2000, 4500, polled_ms=5000, acked_ms=5100, next_upstream=13, now=2.0))
    v = m.snapshot(now_ms=9).values
    assert v["record-count"] == 13 and v["byte-count"] == 130
    assert v["record-rate"] == 1.5 and v["byte-rate"] == 15.0
    assert (v["record-age-ms-min"], v["record-age-ms-max"], v["record-age-ms-avg"]) == (3000, 4000, 3500)
    assert v["record-age-ms"] == 3000
    assert (v["replication-latency-ms-min"], v["replication-latency-ms-max"]) == (3100, 4100)
    assert v["replication-latency-ms-avg"] == 3600
    feed(m, Batch(1, 5, 6000, 6000, 6000, polled_ms=6010, acked_ms=6020, next_upstream=14, now=4.0))
    v = m.snapshot().values
    assert v["record-age-ms-min"] == 10 and v["record-age-ms-max"] == 4000
    assert v["replication-latency-ms"] == 20
    assert v["record-age-ms-avg"] == (3 * 3500 + 10) / 4


def test_window_forgets_old_batches_and_empty_batches_keep_stats() -> None:
    m = recorder()
    feed(
        m,
        # records, bytes, oldest and newest timestamp, their sum, polled, acked, next upstream, monotonic now
        Batch(1, 1, 0, 0, 0, 9000, 9000, 11, now=1.0),
        Batch(1, 1, 100, 100, 100, 200, 300, 12, now=100.0),
        Batch(0, 0, None, None, 0, 0, 0, 15, now=101.0),
    )
    v = m.snapshot().values
    assert v["record-age-ms-max"] == 100, "the batch from 99 s ago left the 60 s window"
    assert m.snapshot().next_upstream == 15


def test_snapshot_round_trips_and_stale_rates_read_as_zero() -> None:
    m = recorder()
    feed(m, Batch(2, 8, 1, 2, 3, polled_ms=10, acked_ms=20, next_upstream=12, now=1.0))
    snap = m.snapshot(now_ms=1234)
    assert Snapshot.decode(snap.encode()) == snap
    assert snap.key() == b'["A.t",3]'
    assert stale_rates_zeroed(snap.values, 1000)["record-rate"] == 2.0
    stale = stale_rates_zeroed(snap.values, 61_000)
    assert stale["record-rate"] == 0 and stale["byte-rate"] == 0 and stale["record-count"] == 12

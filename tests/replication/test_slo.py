"""The SLO assessment on its own (replication/slo.py `assess`): which target is missed, and since when, from the
partitions' lag and the stored breach. The real clusters' side is tests/cli/test_metrics_slo.py."""

from __future__ import annotations

from mirrorflow.config.model import Flow
from mirrorflow.replication.metrics import SOURCE_METRICS, PartitionView
from mirrorflow.replication.slo import StoredBreach, assess, format_since, slo_key

NOW = 1_800_000_000_000


def view(partition: int, lag_records: int, oldest_ms: int | None) -> PartitionView:
    lag_s = (NOW - oldest_ms) / 1000 if oldest_ms is not None else 0.0
    values = dict.fromkeys(SOURCE_METRICS, 0.0)
    return PartitionView("A", "B", "A.t", partition, "t", 0, lag_records, lag_records, lag_s, None, values, oldest_ms)


def flow(rpo: float | None = None, lag: int | None = None) -> Flow:
    return Flow(source="A", target="B", name="A->B", rpo_target_seconds=rpo, lag_target_records=lag)


def test_no_target_means_no_slo() -> None:
    slo = assess(flow(), [view(0, 50, NOW - 600_000)], None, NOW)
    assert not slo.has_slo and not slo.breached and slo.since_ms is None and slo.rpo_s == 600


def test_rpo_is_the_oldest_uncopied_record_over_partitions_and_dates_the_breach() -> None:
    views = [view(0, 3, NOW - 45_000), view(1, 9, NOW - 12_000), view(2, 0, None)]
    slo = assess(flow(rpo=10), views, None, NOW)
    assert (slo.rpo_s, slo.lag_records, slo.rpo_breached, slo.lag_breached) == (45.0, 12, True, False)
    # The oldest uncopied record turned 10 s old 35 s ago: outside the SLO since then, with no observer needed.
    assert slo.since_ms == NOW - 35_000
    assert slo.describe() == "RPO 45.0 s > target 10 s"


def test_within_targets() -> None:
    slo = assess(flow(rpo=60, lag=100), [view(0, 100, NOW - 59_000)], StoredBreach(NOW - 10, NOW - 5), NOW)
    assert slo.has_slo and not slo.breached and slo.since_ms is None
    assert slo.describe() == "RPO 59.0 s <= target 60 s; lag 100 records <= target 100"


def test_a_stored_start_seen_throughout_the_breach_is_kept() -> None:
    views = [view(0, 3, NOW - 45_000)]
    # The data proves the breach since 35 s ago; it was last seen breached 20 s ago, so it has lasted since
    # the stored start.
    seen = StoredBreach(since_ms=NOW - 600_000, checked_ms=NOW - 20_000)
    assert assess(flow(rpo=10), views, seen, NOW).since_ms == NOW - 600_000
    # Last check before the data's start: the flow may have recovered unseen in between, so the data's start wins.
    unseen_gap = StoredBreach(since_ms=NOW - 600_000, checked_ms=NOW - 40_000)
    assert assess(flow(rpo=10), views, unseen_gap, NOW).since_ms == NOW - 35_000


def test_a_lag_breach_starts_when_first_seen() -> None:
    slo = assess(flow(lag=5), [view(0, 6, NOW - 1_000)], None, NOW)
    assert slo.lag_breached and not slo.rpo_breached and slo.since_ms == NOW
    kept = assess(flow(lag=5), [view(0, 6, NOW - 1_000)], StoredBreach(NOW - 90_000, NOW - 30_000), NOW)
    assert kept.since_ms == NOW - 90_000


def test_stored_breach_round_trip_and_key_never_looks_like_a_snapshot_key() -> None:
    stored = StoredBreach(NOW - 5, NOW)
    assert StoredBreach.decode(stored.encode("A->B")) == stored
    assert slo_key("A->B").startswith(b"{") and slo_key("A->B") != slo_key("B->A")


def test_format_since() -> None:
    assert format_since(NOW - 180_000, NOW) == "07:57:00 UTC (3 min ago)"
    assert format_since(NOW - 86_400_000, NOW).startswith("2027-01-14 08:00:00 UTC")

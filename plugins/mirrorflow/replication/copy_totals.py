"""The totals of a leased copy application (`copy_app`), which forgets its finished Spark jobs as it goes: a
year of rounds must not keep every range's result, so they are added up into counts instead."""

from __future__ import annotations

from mirrorflow.replication.copy_task import CopyResult

FOLDED = ("records", "bytes", "dropped", "filtered", "dead_lettered", "schema_ids_not_ours", "transactions")
"""The counts of `copy_plan.summarise` that add up."""


def fold_results(totals: dict[str, float], results: list[CopyResult]) -> None:
    """Adds `results` to `totals` (the counts `copy_plan.summarise` gives, and `latency_sum_ms` for the mean)."""
    for key in (*FOLDED, "offset_syncs", "latency_sum_ms"):
        totals[key] = totals.get(key, 0) + sum(getattr(r, key) for r in results)
    totals["handed_over"] = totals.get("handed_over", 0) + sum(1 for r in results if r.handed_over)
    totals["max_latency_ms"] = max([totals.get("max_latency_ms", 0), *(r.max_latency_ms for r in results)])


def add_folded(summary: dict[str, object], folded: dict[str, float]) -> None:
    """Adds a leased application's folded totals to a `copy_plan.summarise` summary of the jobs it kept."""
    kept_sum = float(str(summary.get("avg_latency_ms", 0) or 0)) * float(str(summary.get("records", 0) or 0))
    for key, value in folded.items():
        before = summary.get(key, 0)
        known = float(before) if isinstance(before, int | float) else 0.0
        if key == "max_latency_ms":
            summary[key] = max(known, value)
        elif key != "latency_sum_ms":
            summary[key] = known + value
    records = float(str(summary.get("records", 0) or 0))
    if folded and records:
        summary["avg_latency_ms"] = round((kept_sum + folded.get("latency_sum_ms", 0)) / records, 1)

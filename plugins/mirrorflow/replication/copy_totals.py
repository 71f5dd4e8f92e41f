"""What copy rounds did (`RoundsOutcome`), and the totals of a leased copy application (`copy_app`), which
forgets its finished Spark jobs as it goes: a year of rounds must not keep every range's result, so they are
added up into counts instead."""

from __future__ import annotations

from dataclasses import dataclass, field

from mirrorflow.replication.copy_task import CopyResult, CopyTask

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


@dataclass
class RoundsOutcome:
    """What the rounds did: every finished range's result, every group started (for `idle_counts`), counts."""

    results: list[CopyResult]
    groups: list[list[CopyTask]]
    rounds: int = 0
    """Rounds due (planned, or skipped because the pause check could not be made)."""
    handovers: int = 0
    """Rounds after the first that started Spark tasks for changed groups."""
    restarts: int = 0
    """Groups started again a round after their task ended."""
    cancelled: int = 0
    """Superseded Spark tasks cancelled (their ranges' results are not in `results`)."""
    quiet: int = 0
    """Partitions found quiet by the last round planned."""
    paused: str | None = None
    renewals: int = 0
    """Groups a leased application started again because its lease ends later than their ranges do."""
    folded: dict[str, float] = field(default_factory=dict)
    """A leased application's totals of the jobs it forgot (`fold_results`), which `results` no longer holds."""
    live: int = 0
    """Spark jobs running after the last round."""

"""Step reports → small JSON for XCom.

XCom lives in Airflow's metadata database, so a task returns a summary, never a full plan of thousands of
topics: long lists are cut to their first items plus a count. Reports carry names, counts and offsets only;
client configs (the one place secrets live) are never part of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import Enum
from typing import Any

MAX_ITEMS = 20


def compact(value: Any, limit: int = MAX_ITEMS) -> Any:
    """A JSON-able copy of `value` with every list longer than `limit` cut to `limit` items and a note."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): compact(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else list(value)
        head = [compact(v, limit) for v in items[:limit]]
        if len(items) > limit:
            head.append(f"... {len(items) - limit} more")
        return head
    if isinstance(value, Enum):
        return compact(value.value, limit)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def control_plane_summary(report: Any) -> dict[str, Any]:
    """The parts of a `ControlPlaneReport` worth keeping: what each step that ran found and changed."""
    summary: dict[str, Any] = {
        "flow": report.flow,
        "steps": list(report.steps),
        "duration_ms": report.duration_ms,
        "dry_run": report.dry_run,
    }
    if report.plan is not None:
        summary["plan"] = plan_summary(report.plan)
    for part in ("topics", "internal_topics", "configs", "acls", "heartbeat"):
        value = getattr(report, part)
        if value is not None:
            summary[part] = compact(value)
    return summary


def plan_summary(plan: Any) -> dict[str, Any]:
    """Counts and the first names of a `FlowPlan` (the full plan can list thousands of topics)."""
    return {
        "flow": plan.flow,
        "source_topics": len(plan.topics),
        "replicated": len(plan.replicated()),
        "to_create": compact([t.remote_topic for t in plan.to_create()]),
        "to_grow": compact([t.remote_topic for t in plan.to_grow()]),
        "target_topics": len(plan.target_topics),
    }


def repeated_summary(reports: list[Any], seconds: float) -> dict[str, Any]:
    """One line for a step repeated at its cadence: how often it ran and its last report."""
    return {"runs": len(reports), "seconds": round(seconds, 1), "last": compact(reports[-1]) if reports else None}

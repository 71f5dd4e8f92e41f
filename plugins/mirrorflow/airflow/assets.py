"""Airflow assets Mirrorflow updates, so other DAGs can be scheduled on replication facts instead of files.

* `checkpoints_asset(flow)`: the flow's checkpoints (MM2's `<source>.checkpoints.internal` on the target) were
  emitted; the event's extra carries the round's counts and the flow's replication lag when the task ended.
* `runbook_asset(direction)`: a failover (or failback) runbook completed for real (a dry run emits nothing); the
  extra names the clusters and carries the report's summary.

A downstream DAG schedules on them with `DAG(schedule=[checkpoints_asset(...)])`; the names are stable, derived
from the aliases only (no addresses, no credentials: asset names and extras are visible to every UI user).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow.sdk import Asset

log = logging.getLogger(__name__)
GROUP = "mirrorflow"


def _slug(text: str) -> str:
    return text.replace("->", "-to-")


def checkpoints_asset(flow_name: str) -> Asset:
    """`mirrorflow://<A>-to-<B>/checkpoints` for flow `A->B`."""
    return Asset(
        name=f"mirrorflow.checkpoints.{_slug(flow_name)}",
        uri=f"mirrorflow://{_slug(flow_name)}/checkpoints",
        group=GROUP,
    )


def runbook_asset(direction: str) -> Asset:
    """`mirrorflow://runbook/failover` (or `/failback`): a runbook that moved clients completed (dry runs emit
    nothing); the extra names the clusters."""
    return Asset(name=f"mirrorflow.runbook.{direction}", uri=f"mirrorflow://runbook/{direction}", group=GROUP)


def annotate(asset: Asset, extra: Mapping[str, Any]) -> None:
    """Put `extra` on the event this running task emits for `asset` (nothing outside a task, e.g. in a test
    calling the task function directly)."""
    from airflow.sdk import get_current_context

    try:
        context = get_current_context()
    except RuntimeError:
        log.debug("no task context: asset %s not annotated", asset.name)
        return
    context["outlet_events"][asset].extra = dict(extra)

"""DAG ids, task ids and tags of the generated DAGs: stable names an operator can predict from the config.

MM2 cluster aliases may hold characters Airflow refuses in ids (Airflow takes letters, digits, `_`, `.` and
`-`), so each other character becomes `_`. Two aliases can collide after that (`eu west` and `eu_west`): the
factory reports the clash instead of letting one DAG replace the other.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mirrorflow.config.model import Flow

PREFIX = "mirrorflow"
SEPARATOR = "__"
MAX_ID_LENGTH = 250  # Airflow's limit for dag ids
MAX_TAG_LENGTH = 100  # Airflow's limit for tags

_INVALID = re.compile(r"[^A-Za-z0-9_.-]")


def sanitise(alias: str) -> str:
    """`alias` with every character Airflow refuses in an id replaced by `_` (never empty)."""
    return _INVALID.sub("_", alias) or "_"


def flow_dag_id(source: str, target: str) -> str:
    """`mirrorflow__<source>__<target>`, the DAG of the flow `source->target`."""
    return SEPARATOR.join((PREFIX, sanitise(source), sanitise(target)))


def heartbeat_dag_id(target: str) -> str:
    """`mirrorflow__heartbeats__<target>`: the DAG of every heartbeat-only pair writing into `target`.

    Grouped by the cluster the heartbeats are written to, so a file of N clusters has at most N such DAGs
    (not N x (N-1)); each pair stays a task of its own (`heartbeat_task_id`)."""
    return SEPARATOR.join((PREFIX, "heartbeats", sanitise(target)))


def heartbeat_task_id(source: str) -> str:
    """`from__<source>`: the task of a heartbeats DAG that beats for the pair `source-><target>`."""
    return SEPARATOR.join(("from", sanitise(source)))


def flow_tags(source: str, target: str, *extra: str) -> list[str]:
    tags = [PREFIX, f"source:{source}", f"target:{target}", *extra]
    return [tag[:MAX_TAG_LENGTH] for tag in tags]


def heartbeat_tags(target: str, pairs: Sequence[Flow]) -> list[str]:
    """Tags of a target's heartbeats DAG: the target, and every source it beats for (the UI filters on both)."""
    tags = [PREFIX, f"target:{target}", "mirrorflow:heartbeats", *(f"source:{pair.source}" for pair in pairs)]
    return [tag[:MAX_TAG_LENGTH] for tag in tags]

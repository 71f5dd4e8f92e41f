"""Who sees which flow on the Replication dashboard: a flow is shown only to a user who may read its flow DAG.

The Kafka reads behind the page are shared by every user (one read per flow per cache interval); what each
request returns is cut from that shared snapshot with the configured auth manager, per DAG id, the way Airflow's
own API filters its DAG lists (`filter_authorized_dag_ids`, which an auth manager may answer in one batch).
Everything shown about a flow (its card, heartbeat, checkpoint, drill, SLO, error text, and the page's count) is
inside that flow's row, so a flow the user may not read leaves no trace in the answer.

A user who may read no flow DAG and has no general DAG read access gets 403, as before per-DAG filtering; a user
with per-DAG access (FAB's `DAG:<id>` permissions, say) to some flows sees those flows and nothing else.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.configuration import conf
from fastapi import HTTPException, status

NO_ACCESS = "reading Mirrorflow flows needs read access to their DAGs"


def dag_teams(dag_ids: set[str]) -> dict[str | None, set[str]]:
    """The DAG ids grouped by the team owning their bundle (all under None unless `[core] multi_team` is on).

    Multi-team auth managers decide per team, as `get_authorized_dag_ids` asks them; the team comes from the
    metadata DB, so a flow DAG not yet parsed belongs to no team (and is decided as such)."""
    if not conf.getboolean("core", "multi_team", fallback=False):
        return {None: set(dag_ids)}
    from airflow.models.dag import DagModel

    teams = DagModel.get_dag_id_to_team_name_mapping(sorted(dag_ids))
    grouped: dict[str | None, set[str]] = defaultdict(set)
    for dag_id in dag_ids:
        grouped[teams.get(dag_id)].add(dag_id)
    return dict(grouped)


def readable_dag_ids(user: BaseUser, dag_ids: Iterable[str]) -> set[str]:
    """Those of `dag_ids` the user may read (`GET`), as the configured auth manager decides per DAG."""
    wanted = set(dag_ids)
    if not wanted:
        return set()
    manager = get_auth_manager()
    readable: set[str] = set()
    for team, ids in dag_teams(wanted).items():
        readable |= manager.filter_authorized_dag_ids(dag_ids=ids, user=user, method="GET", team_name=team)
    return readable


def visible_flows(
    snapshot: dict[str, Any], user: BaseUser, *, dag_id: str | None = None, flow: str | None = None
) -> dict[str, Any]:
    """The shared `snapshot` cut down to the rows of flows whose DAG `user` may read, optionally one DAG or flow.

    `dag_id`/`flow` only narrow what the user may read anyway (the DAG's Replication tab passes `dag_id`); an
    unknown or unreadable one gives no rows, with the same answer for both so a DAG's existence does not leak."""
    rows: list[dict[str, Any]] = snapshot["flows"]
    allowed = readable_dag_ids(user, (row["dag_id"] for row in rows))
    if not allowed and not get_auth_manager().is_authorized_dag(method="GET", user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, NO_ACCESS)
    shown = [
        row
        for row in rows
        if row["dag_id"] in allowed and dag_id in (None, row["dag_id"]) and flow in (None, row["flow"])
    ]
    return snapshot | {"flows": shown, "filter": {"dag_id": dag_id, "flow": flow}}

"""The dashboard's per-DAG filter under `[core] multi_team`: each flow DAG is decided with the team owning its
bundle in Airflow's metadata DB, as Airflow's own DAG lists do (SimpleAuthManager refuses another team's DAGs).

No Kafka here: the flows' data is covered by test_dashboard.py; this is the authorisation step alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import delete

pytestmark = pytest.mark.integration


@pytest.fixture
def red_dag(airflow_db: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str, str]]:
    """(a DAG of team red's bundle, a DAG in no DB row, the team); multi-team on, SimpleAuthManager in charge."""
    from airflow.api_fastapi import app as api_app
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.models.dag import DagModel, clear_team_name_cache
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team
    from airflow.utils.session import create_session

    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
    monkeypatch.setattr(api_app._AuthManagerState, "instance", SimpleAuthManager())
    tag = uuid.uuid4().hex[:8]
    red, loose, bundle, team = f"mirrorflow__R{tag}__B", f"mirrorflow__L{tag}__B", f"b-{tag}", f"red{tag}"
    with create_session() as session:
        row = DagBundleModel(name=bundle)
        row.teams = [Team(name=team)]
        session.add(row)
        session.flush()
        session.add(DagModel(dag_id=red, bundle_name=bundle, fileloc="/dev/null"))
    clear_team_name_cache()
    try:
        yield red, loose, team
    finally:
        with create_session() as session:
            session.execute(delete(DagModel).where(DagModel.dag_id == red))
            session.execute(delete(DagBundleModel).where(DagBundleModel.name == bundle))
            session.execute(delete(Team).where(Team.name == team))


def test_flow_dags_are_decided_with_their_bundles_team(red_dag: tuple[str, str, str]) -> None:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from mirrorflow.airflow.dashboard_auth import dag_teams, readable_dag_ids

    red, loose, team = red_dag
    assert dag_teams({red, loose}) == {team: {red}, None: {loose}}
    blue_viewer = SimpleAuthManagerUser(username="b", role="viewer", teams=["blue"])
    red_viewer = SimpleAuthManagerUser(username="r", role="viewer", teams=[team])
    assert readable_dag_ids(blue_viewer, [red, loose]) == {loose}
    assert readable_dag_ids(red_viewer, [red, loose]) == {red, loose}

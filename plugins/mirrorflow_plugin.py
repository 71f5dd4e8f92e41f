"""Mirrorflow's Airflow plugin: the Replication dashboard (a FastAPI app at `/mirrorflow`, linked in the nav and
as a Replication tab on each DAG, where it opens filtered to that DAG's flow).

The only plugin file: `.airflowignore` keeps Airflow's loader out of the `mirrorflow/` package beside it.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from mirrorflow.airflow.dashboard import URL_PREFIX, app

DASHBOARD_APP: dict[str, Any] = {"app": app, "url_prefix": URL_PREFIX, "name": "Mirrorflow replication"}
# `url_route` makes the UI show the page in an iframe inside its own frame, under the nav's Browse menu.
REPLICATION_VIEW: dict[str, str] = {
    "name": "Replication",
    "href": URL_PREFIX.lstrip("/") + "/",
    "destination": "nav",
    "category": "browse",
    "url_route": "mirrorflow_replication",
}

# A tab on every DAG's page (Airflow has no per-DAG plugin views): the UI puts the DAG's id, URL-encoded, in place
# of `{DAG_ID}`, and the page shows only the flow of that DAG (none, said so, on a DAG that is not a flow's).
FLOW_TAB: dict[str, str] = {
    "name": "Replication",
    "href": URL_PREFIX.lstrip("/") + "/?dag_id={DAG_ID}",
    "destination": "dag",
    "url_route": "mirrorflow_flow",
}


class MirrorflowPlugin(AirflowPlugin):
    name = "mirrorflow"
    # Airflow's plugin manager reads these class attributes; they are never mutated.
    fastapi_apps = [DASHBOARD_APP]  # noqa: RUF012
    external_views = [REPLICATION_VIEW, FLOW_TAB]  # noqa: RUF012

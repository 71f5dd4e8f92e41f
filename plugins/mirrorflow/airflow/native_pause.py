"""A failover pauses the flow's DAG in Airflow itself, and the end of a runbook unpauses the way back.

The fence that matters is in Kafka: the pause marker the runbook writes stops every task of the flow, on any
worker, and `mirrorflow run` too (replication/failover/kafka_state.py). But a DAG that Airflow still thinks is
running keeps being scheduled: under `@continuous` its runs start, skip and end green, the UI never shows it as
paused, and an operator has to know about markers to resume it. So the runbook also pauses the DAG the way an
operator would, through Airflow's REST API (`PATCH /api/v2/dags/{dag_id}`, `is_paused`), and a completed real
run unpauses the DAG of the reverse flow it armed (after a failback, that is the original flow).

Tasks have no database access in Airflow 3, so the API is reached through the Airflow connection
`mirrorflow_airflow_api` (conn_type http: host = the API server's base URL, login/password of a user allowed
to edit DAGs); a token comes from `POST /auth/token`, which both the simple and the FAB auth managers serve.
Without the connection nothing changes in Airflow and the task log says how to turn it on. A refusal or an
unreachable API server is reported in the task's result and log, and does not fail the runbook: the Kafka
fence already holds, and failing a runbook mid-incident over a UI flag would be the worse outcome.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

AIRFLOW_API_CONN_ID = "mirrorflow_airflow_api"
TIMEOUT_S = 30.0


class ApiError(Exception):
    """The API server refused or did not answer; the message names the URL and status, never a credential."""


@dataclass
class AirflowApi:
    """Airflow's REST API as one user (`base`: the API server's root URL)."""

    base: str
    username: str
    password: str = field(repr=False)
    _token: str | None = field(default=None, repr=False)

    def _call(self, method: str, path: str, body: dict[str, Any], token: str | None) -> dict[str, Any]:
        url = f"{self.base.rstrip('/')}{path}"
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(url, json.dumps(body).encode(), headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                answer: dict[str, Any] = json.load(response)
                return answer
        except urllib.error.HTTPError as err:
            detail = err.read(300).decode(errors="replace") if err.code != 401 else ""
            raise ApiError(f"{method} {url}: HTTP {err.code} {err.reason} {detail}".strip()) from None
        except (OSError, ValueError) as err:
            raise ApiError(f"{method} {url}: {err}") from None

    def token(self) -> str:
        if self._token is None:
            answer = self._call("POST", "/auth/token", {"username": self.username, "password": self.password}, None)
            self._token = str(answer["access_token"])
        return self._token

    def set_paused(self, dag_id: str, paused: bool) -> bool:
        """Pause or unpause `dag_id`; returns the paused state Airflow reports back."""
        path = f"/api/v2/dags/{urllib.parse.quote(dag_id, safe='')}?update_mask=is_paused"
        answer = self._call("PATCH", path, {"is_paused": paused}, self.token())
        return bool(answer.get("is_paused"))


def api_from_connection(conn_id: str = AIRFLOW_API_CONN_ID) -> AirflowApi | None:
    """The API the connection points at, or None when the connection is not defined."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    host = str(conn.host or "")
    base = host if "://" in host else f"{conn.schema or 'http'}://{host}"
    if conn.port:
        base = f"{base.rstrip('/')}:{conn.port}"
    return AirflowApi(base, str(conn.login or ""), str(conn.password or ""))


def set_dags_paused(dag_ids: list[str], paused: bool, why: str, api: AirflowApi | None = None) -> dict[str, str]:
    """Pause (or unpause) each DAG; {dag_id: what happened}, also logged. Never raises (module docstring)."""
    verb = "paused" if paused else "unpaused"
    api = api or api_from_connection()
    if api is None:
        log.warning(
            "%s: Airflow connection %s is not defined, so %s stay as they are in Airflow (the pause marker in "
            "Kafka still decides whether the flow copies); define it (conn_type http, host = the API server's "
            "URL, a user allowed to edit DAGs) to have the runbook %s them",
            why,
            AIRFLOW_API_CONN_ID,
            ", ".join(dag_ids),
            "pause" if paused else "unpause",
        )
        return dict.fromkeys(dag_ids, f"not {verb}: no connection {AIRFLOW_API_CONN_ID}")
    outcome: dict[str, str] = {}
    for dag_id in dag_ids:
        try:
            now = api.set_paused(dag_id, paused)
            outcome[dag_id] = verb if now == paused else f"Airflow reports is_paused={now}"
        except ApiError as err:
            outcome[dag_id] = f"not {verb}: {err}"
    for dag_id, what in outcome.items():
        (log.info if what == verb else log.error)("%s: DAG %s %s", why, dag_id, what)
    return outcome

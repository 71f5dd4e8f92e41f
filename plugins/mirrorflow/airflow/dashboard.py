"""The Replication dashboard: a FastAPI app the Airflow plugin mounts at `/mirrorflow`, shown in the UI's nav.

The page (`/mirrorflow/`) is a static shell; its data comes from `/mirrorflow/api/flows`, which answers only to
an Airflow identity: the JWT the UI keeps in its `_token` cookie (sent by the browser with the page's same-origin
fetch) or an `Authorization: Bearer` token from `POST /auth/token`. Airflow leaves plugin apps unauthenticated, so
the endpoint reuses the API server's own `get_user` to validate the token, then shows only the flows whose DAG the
user may read (`dashboard_auth`). `?dag_id=` (what each flow DAG's Replication tab passes) or `?flow=` narrows it.

The flows are those the DAG factory builds (`MIRRORFLOW_CONFIG`, `MIRRORFLOW_CLUSTERS`). Each is read from its
clusters on request (cached a few seconds, flows in parallel, short timeouts): nothing is stored in Airflow's
database. Only names and numbers leave the server; a config that does not load is reported without its text
(Airflow's import errors show the details to those allowed to see them).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse

from mirrorflow.airflow.connections import with_connections
from mirrorflow.airflow.dag_ids import flow_dag_id
from mirrorflow.airflow.dashboard_auth import visible_flows
from mirrorflow.airflow.dashboard_page import render_page
from mirrorflow.airflow.factory import config_file, env_clusters, repo_root
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.core.errors import UsageError
from mirrorflow.replication.failover.drill import last_drill
from mirrorflow.replication.flow_health import UNREACHABLE, flow_health, flow_state
from mirrorflow.replication.metrics import PartitionView, flow_views
from mirrorflow.replication.slo import FlowSlo, flow_slo

log = logging.getLogger(__name__)

URL_PREFIX = "/mirrorflow"
TIMEOUT_ENV = "MIRRORFLOW_DASHBOARD_TIMEOUT_S"
CACHE_S = 5.0
ERROR_CHARS = 300


def load_flows() -> tuple[list[Flow], str | None]:
    """The enabled flows the DAG factory would build, or no flows and a message without the config's text."""
    path = config_file(None, repo_root(None))
    try:
        return list(load_config(path, env_clusters() or None).flows), None
    except UsageError as err:
        log.warning("dashboard: cannot load %s: %s", path, err)
        return [], f"the Mirrorflow config {path.name} does not load; see the DAG import errors in Airflow"
    except OSError as err:
        return [], f"the Mirrorflow config {path.name} cannot be read ({err.strerror})"


def partition_row(v: PartitionView) -> dict[str, Any]:
    m = v.values
    return {
        "topic": v.topic,
        "partition": v.partition,
        "source_topic": v.source_topic,
        "lag_records": v.lag_records,
        "lag_seconds": round(v.lag_seconds, 3),
        "next_upstream": v.next_upstream,
        "source_end": v.source_end,
        "record_count": int(m["record-count"]),
        "record_rate": m["record-rate"],
        "byte_rate": m["byte-rate"],
        "latency_avg_ms": m["replication-latency-ms-avg"],
        "updated_ms": v.updated_ms,
    }


def slo_row(slo: FlowSlo) -> dict[str, Any] | None:
    """The flow's SLO for the page; None when the flow has no target (the page then shows nothing)."""
    if not slo.has_slo:
        return None
    return {
        "breached": slo.breached,
        "since_ms": slo.since_ms,
        "rpo_s": round(slo.rpo_s, 3),
        "rpo_target_s": slo.rpo_target_s,
        "rpo_breached": slo.rpo_breached,
        "lag_records": slo.lag_records,
        "lag_target_records": slo.lag_target_records,
        "lag_breached": slo.lag_breached,
    }


def flow_summary(flow: Flow, timeout_s: float) -> dict[str, Any]:
    """One flow's card: state, ages, throughput and partitions; an unreachable flow carries its error only."""
    row: dict[str, Any] = {
        "flow": flow.name,
        "dag_id": flow_dag_id(flow.source, flow.target),
        "source": flow.source,
        "target": flow.target,
    }
    try:
        live = with_connections(flow)
        views = flow_views(live, timeout_s=timeout_s)
        health = flow_health(live, timeout_s=timeout_s)
        slo = flow_slo(live, views, timeout_s=timeout_s)
        drill = last_drill(live, timeout_s) if live.drill_schedule else None
    except Exception as err:  # one flow's clusters being down must not blank the page
        log.warning("dashboard: flow %s: %s", flow.name, err)
        return row | {"state": UNREACHABLE, "error": str(err)[:ERROR_CHARS], "partitions": []}
    return row | {
        "state": flow_state(live, views, health),
        "error": None,
        "slo": slo_row(slo),
        "last_drill": drill,
        "heartbeat_age_s": health.heartbeat_age_s,
        "checkpoint_age_s": health.checkpoint_age_s,
        "lag_records": sum(v.lag_records for v in views),
        "lag_seconds": round(max((v.lag_seconds for v in views), default=0.0), 3),
        "record_rate": round(sum(v.values["record-rate"] for v in views), 3),
        "byte_rate": round(sum(v.values["byte-rate"] for v in views), 3),
        "partitions": [partition_row(v) for v in views],
    }


def gather(flows: Sequence[Flow], timeout_s: float) -> list[dict[str, Any]]:
    if not flows:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(flows)), thread_name_prefix="mirrorflow-dashboard") as pool:
        return list(pool.map(lambda f: flow_summary(f, timeout_s), flows))


class _Cache:
    """The last snapshot of every flow for `CACHE_S`: many open pages polling must not multiply the reads on the
    clusters. It is shared by all users; each request then keeps only the flows its user may read."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value: dict[str, Any] | None = None
        self.at = 0.0

    def get(self, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        with self.lock:
            if self.value is None or time.monotonic() - self.at > CACHE_S:
                self.value, self.at = compute(), time.monotonic()
            return self.value


def snapshot() -> dict[str, Any]:
    timeout = float(os.environ.get(TIMEOUT_ENV, "5"))
    flows, error = load_flows()
    return {"generated_ms": int(time.time() * 1000), "error": error, "flows": gather(flows, timeout)}


def create_app() -> FastAPI:
    app = FastAPI(title="Mirrorflow replication", docs_url=None, redoc_url=None, openapi_url=None)
    cache = _Cache()

    @app.get("/api/flows")
    def api_flows(
        user: Annotated[BaseUser, Depends(get_user)], dag_id: str | None = None, flow: str | None = None
    ) -> dict[str, Any]:
        return visible_flows(cache.get(snapshot), user, dag_id=dag_id, flow=flow)

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request) -> HTMLResponse:
        try:
            login = get_auth_manager().get_url_login(next_url=str(request.url))
        except Exception:  # no auth manager (a bare test app): the page still renders
            login = "/"
        return HTMLResponse(render_page(login_url=login))

    return app


app = create_app()

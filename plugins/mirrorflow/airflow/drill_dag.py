"""`mirrorflow_drill`: the DR drill on a schedule (`replication/failover/drill.py`), one task per flow that sets
`mirrorflow.drill.schedule`, so one failing pair fails only its task. A failed drill fails its task loudly, after
its report is kept; the report is also the task's XCom and log."""

from __future__ import annotations

import logging
from typing import Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from mirrorflow.airflow.factory import START_DATE
from mirrorflow.airflow.schedule import parse_schedule
from mirrorflow.config.model import MirrorConfig

log = logging.getLogger(__name__)
DRILL_DAG_ID = "mirrorflow_drill"


def drill_task_id(flow_name: str) -> str:
    return "drill__" + flow_name.replace("->", "__")


def build_drill_dag(config: MirrorConfig, config_path: str) -> DAG | None:
    """None when no flow asks for drills; the schedule is the first drilled flow's (set it at the top level)."""
    drilled = [f for f in config.flows if f.drill_schedule]
    if not drilled:
        return None
    with DAG(
        dag_id=DRILL_DAG_ID,
        schedule=parse_schedule(str(drilled[0].drill_schedule)),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        auto_register=False,
        tags=["mirrorflow", "mirrorflow:runbook"],
        description="Mirrorflow DR drill: the failover runbook rehearsed (dry run) with its evidence kept",
        dag_display_name="mirrorflow drill",
        doc_md=(
            "### Mirrorflow DR drill\n\nEach task dry-runs the failover of one flow and checks that every group "
            "would resume exactly, that the fence can be applied and that the reverse flow is armed. Reports are "
            f"kept in `mirrorflow-runbook.internal` on each DR cluster (`mirrorflow drill {config_path} --history`)."
        ),
        default_args={"owner": "mirrorflow", "retries": 0},
    ) as dag:
        for flow in drilled:
            PythonOperator(
                task_id=drill_task_id(flow.name),
                python_callable=drill_step,
                op_kwargs={"config_path": config_path, "flow_name": flow.name},
            )
    return dag


def drill_step(config_path: str, flow_name: str) -> dict[str, Any]:
    from airflow.sdk.exceptions import AirflowFailException

    from mirrorflow.airflow.connections import with_connections
    from mirrorflow.replication.failover.drill import render, run_drill

    report = run_drill(config_path, flow_name, prepare_flow=with_connections)
    log.info("%s", render(report))
    if not report["passed"]:
        failed = "; ".join(f"{c['name']}: {c['detail']}" for c in report["checks"] if not c["passed"])
        raise AirflowFailException(f"DR drill of {flow_name} FAILED (report kept, seq {report['seq']}): {failed}")
    return report

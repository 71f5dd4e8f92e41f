"""One flow's Airflow copy task in a process of its own, as a worker runs it: `python -m tests.spark.copy_probe
CONFIG FLOW MODE RUN_SECONDS TIMEOUT_SECONDS OUT`. The task's `execution_timeout` is applied by Airflow's own
timeout context (the one the task runner wraps `execute` in), so a copy that overruns ends as in production.
OUT receives {"result": ...} or {"error": "<class>: <message>"}. The master comes from the
`AIRFLOW_CONN_MIRRORFLOW_SPARK` connection in the environment."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def copy_operator(config: str | Path, flow: str, *, mode: str = "interval", **kwargs: Any) -> Any:
    """The flow's copy task as the DAG factory builds it (the real job, the master from the connection or
    `spark_master`); `kwargs` override any operator argument."""
    from mirrorflow.airflow.spark import MirrorflowCopyOperator

    arguments: dict[str, Any] = {
        "task_id": "copy",
        "application": str(REPO / "spark_jobs" / "mirrorflow_copy.py"),
        "config_path": str(config),
        "flow_name": flow,
        "clusters": None,
        "copy_mode": mode,
        "run_seconds": 60,
        "spark_master": "local[*]",
        "explicit_master": False,
    }
    return MirrorflowCopyOperator(**{**arguments, **kwargs})


def main(config: str, flow: str, mode: str, run_seconds: str, timeout_seconds: str, out: str) -> None:
    from airflow.sdk.execution_time.timeout import timeout

    limit = dt.timedelta(seconds=float(timeout_seconds))
    operator = copy_operator(config, flow, mode=mode, run_seconds=int(run_seconds), execution_timeout=limit)
    try:
        with timeout(float(timeout_seconds)):
            report: dict[str, object] = {"result": operator.execute({})}
    except BaseException as err:  # the report is the test's evidence, whatever ended the task
        report = {"error": f"{type(err).__name__}: {err}"}
    Path(out).write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:7])

"""A failure notifier for tests (`mirrorflow.airflow.failure.notifier = tests.airflow.notify_probe.record`):
appends one JSON line per call to the file named by MIRRORFLOW_TEST_NOTIFY_FILE."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

NOTIFY_FILE_ENV = "MIRRORFLOW_TEST_NOTIFY_FILE"
NOT_CALLABLE = 42


def record(context: Mapping[str, Any]) -> None:
    ti = context["ti"]
    line = {"task": ti.task_id, "try": ti.try_number, "error": str(context.get("exception"))}
    with open(os.environ[NOTIFY_FILE_ENV], "a") as out:
        out.write(json.dumps(line) + "\n")


def record_deadline(context: Mapping[str, Any] | None = None, flow: str = "?", **_: Any) -> None:
    """A deadline callback (`mirrorflow.airflow.deadline.notifier`): one JSON line with the flow and run."""
    run = (context or {}).get("dag_run")
    run_id = run.get("run_id") if isinstance(run, Mapping) else getattr(run, "run_id", None)
    with open(os.environ[NOTIFY_FILE_ENV], "a") as out:
        out.write(json.dumps({"deadline": True, "flow": flow, "run_id": run_id}) + "\n")

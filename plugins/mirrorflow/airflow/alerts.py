"""Alerts from Airflow itself: what runs when a flow task has failed for good (after its last retry), and when
a flow DAG run overruns its deadline.

An operator wires their paging into `mirrorflow.airflow.failure.notifier`: the dotted path of a callable that
takes Airflow's task context, for example a module-level instance of a provider's notifier
(`SlackNotifier(...)`, `SmtpNotifier(...)`) or a plain function. Without it, the failure is logged at ERROR
with the flow, task, run, try and reason, so a log-based alert still has one line to match. Airflow calls it on
the worker, after the task's final try; retries call nothing (`on_retry_callback` stays free for the operator).
"""

from __future__ import annotations

import datetime as dt
import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.core.errors import UsageError

log = logging.getLogger(__name__)

NOTIFIER_KEY = "mirrorflow.airflow.failure.notifier"
Notifier = Callable[[Mapping[str, Any]], None]


def failure_notifier(flow: Flow) -> Notifier:
    """The flow's failure callback: the configured notifier, or a log line; UsageError if it cannot be loaded."""
    path = flow.airflow_failure_notifier
    if not path:
        return log_failure
    module_name, _, attribute = path.strip().rpartition(".")
    try:
        target = getattr(importlib.import_module(module_name), attribute) if module_name else None
    except (ImportError, AttributeError) as err:
        raise UsageError(f"{path!r} cannot be loaded ({type(err).__name__}: {err})") from None
    if not callable(target):
        raise UsageError(f"{path!r} is not a callable")
    notifier: Notifier = target
    return notifier


def log_failure(context: Mapping[str, Any]) -> None:
    """The default alert: one ERROR line naming what failed and why (Mirrorflow errors never hold a secret)."""
    ti = context.get("ti") or context.get("task_instance")
    error = context.get("exception")
    reason = str(error).strip().splitlines()[0] if error is not None and str(error).strip() else "unknown reason"
    log.error(
        "Mirrorflow alert: DAG %s, task %s, run %s failed for good after try %s: %s",
        getattr(ti, "dag_id", "?"),
        getattr(ti, "task_id", "?"),
        getattr(ti, "run_id", "?"),
        getattr(ti, "try_number", "?"),
        reason,
    )


DEADLINE_NOTIFIER_KEY = "mirrorflow.airflow.deadline.notifier"


def deadline_alert(flow: Flow) -> Any:
    """Airflow's DeadlineAlert for the flow's DAG runs when `mirrorflow.airflow.deadline.seconds` is set (else
    None), measured from when a run was queued, so a run stuck waiting for a slot counts. The scheduler checks
    deadlines and the executor runs the callback, with `context` and the flow's name; a task timeout cannot see
    a run that never started.

    Opt-in because Airflow 3.3's `dag.test()` fails every run of a DAG that has one: at the run's end it looks
    the alert up by its serialized form instead of its stored id (`tests/airflow/test_deadline_canary.py`
    fails once that is fixed, and the default can become the copy's bound plus a margin)."""
    if not flow.airflow_deadline_seconds:
        return None
    path = flow.airflow_deadline_notifier or f"{__name__}.log_deadline_miss"
    return queued_deadline(flow.airflow_deadline_seconds, path, flow=flow.name)


def queued_deadline(seconds: int, path: str, **kwargs: str) -> Any:
    """A DeadlineAlert `seconds` after a run was queued, calling the callable at `path` with `kwargs`."""
    from airflow.sdk.definitions.callback import SyncCallback
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=dt.timedelta(seconds=seconds),
        callback=SyncCallback(path, kwargs=kwargs),
    )


def _run_id(context: Mapping[str, Any] | None) -> str:
    """The DAG run id of a deadline callback's context (a mapping or a run object), "?" when absent."""
    run = (context or {}).get("dag_run")
    return str(run.get("run_id", "?") if isinstance(run, Mapping) else getattr(run, "run_id", "?"))


def log_deadline_miss(context: Mapping[str, Any] | None = None, flow: str = "?", **_: Any) -> None:
    """The default deadline alert: one ERROR line to match in the logs."""
    log.error(
        "Mirrorflow alert: flow %s: DAG run %s is still running past its deadline (mirrorflow.airflow.deadline."
        "seconds); a copy starved of Spark cores or a run waiting for a worker slot are the usual causes",
        flow,
        _run_id(context),
    )


def log_rto_miss(context: Mapping[str, Any] | None = None, runbook: str = "?", **_: Any) -> None:
    """The default RTO alert of the runbook DAGs: one ERROR line to match in the logs."""
    log.error(
        "Mirrorflow alert: the %s runbook run %s is still going past the recovery time objective "
        "(mirrorflow.runbook.rto.target.seconds): look for its failed or waiting step",
        runbook,
        _run_id(context),
    )

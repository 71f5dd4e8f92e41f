"""Alerts from Airflow itself: what runs when a flow task has failed for good (after its last retry).

An operator wires their paging into `mirrorflow.airflow.failure.notifier`: the dotted path of a callable that
takes Airflow's task context, for example a module-level instance of a provider's notifier
(`SlackNotifier(...)`, `SmtpNotifier(...)`) or a plain function. Without it, the failure is logged at ERROR
with the flow, task, run, try and reason, so a log-based alert still has one line to match. Airflow calls it on
the worker, after the task's final try; retries call nothing (`on_retry_callback` stays free for the operator).
"""

from __future__ import annotations

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

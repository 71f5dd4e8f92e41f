"""The failover and failback runbooks (docs/design.md §4) as manual DAGs: `mirrorflow_failover`, `mirrorflow_failback`.

`dags/mirrorflow_failover.py` is one call: `register_failover_dags(globals())`, reading the same config as the
flow DAGs (`MIRRORFLOW_CONFIG`). The trigger form is the Params below; Airflow validates it on trigger.

One task per runbook step, in order, each calling `run_failover` for its step as the runbook of this DAG run (its
run id names it). The state is in Kafka (the runbook topic on the cluster the clients move to), so the tasks may
run on different workers with no shared disk; with the air-gapped override `$MIRRORFLOW_STATE_DIR` it is in
`<state root>/<direction>-<primary>-<dr>-<run id>` instead, which every worker must then share. A step that
fails or refuses fails its task with the reason; clearing that task resumes exactly there, from the persisted
state (a task re-runs an earlier step only when the runbook put it back to pending, as a fence rolled back). A
dry run records nothing anywhere: each task replays the earlier steps' dry runs (reads only) before its own.
A config that cannot be read builds no runbook DAG: `dags/mirrorflow_flows.py` already reports it as its import
error. The last task, `report`, pushes only the report's path and small counts to XCom: never offsets or secrets.
Credentials of `<alias>.mirrorflow.connection` Airflow connections are merged into the flow's clients at task run
time (`with_connections`), exactly as the flow DAGs do.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Param, get_parsing_context

from mirrorflow.airflow.alerts import queued_deadline
from mirrorflow.airflow.assets import runbook_asset
from mirrorflow.airflow.dag_ids import flow_dag_id
from mirrorflow.airflow.drill_dag import DRILL_DAG_ID, build_drill_dag
from mirrorflow.airflow.factory import CONFIG_ENV, START_DATE, config_file, repo_root
from mirrorflow.airflow.native_pause import set_dags_paused
from mirrorflow.config.loader import load_config
from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.replication.failover.options import FENCES, REDIRECTS, FailoverOptions, options_from_values
from mirrorflow.replication.failover.step import STEP_NAMES

log = logging.getLogger(__name__)

DIRECTIONS = ("failover", "failback")
REPORT_TASK = "report"
ANNOUNCE_TASK = "announce"
RTO_LOG = "mirrorflow.airflow.alerts.log_rto_miss"


def register_failover_dags(
    globals_dict: MutableMapping[str, Any], config_path: str | Path | None = None
) -> dict[str, DAG]:
    """Build `mirrorflow_failover` and `mirrorflow_failback` (and `mirrorflow_drill` when a flow sets
    `mirrorflow.drill.schedule`) into `globals_dict`; returns them by id."""
    only = get_parsing_context().dag_id
    wanted = [d for d in DIRECTIONS if only is None or only == f"mirrorflow_{d}"]
    drill = only is None or only == DRILL_DAG_ID
    if not wanted and not drill:  # a worker parsing for a flow DAG: nothing to build here
        return {}
    repo = repo_root(globals_dict.get("__file__"))
    path = config_file(config_path, repo)
    try:
        config = load_config(path, require_flows=False)
    except UsageError as err:
        # The flow DAG file shows the same error as its import error (file, line, key): not twice.
        log.warning("Mirrorflow builds no runbook DAG from %s (set by %s): %s", path, CONFIG_ENV, err)
        return {}
    aliases = sorted(config.clusters)
    step_timeout = dt.timedelta(seconds=max((f.runbook_step_timeout_seconds for f in config.flows), default=1800))
    # The strictest recovery time objective of the flows: a runbook run still going past it raises the alert.
    rto = min((f.runbook_rto_target_seconds for f in config.flows if f.runbook_rto_target_seconds), default=None)
    notifier = next((f.airflow_deadline_notifier for f in config.flows if f.airflow_deadline_notifier), None)
    dags = {
        f"mirrorflow_{d}": build_runbook_dag(
            d, str(path), aliases, repo, step_timeout, rto and queued_deadline(rto, notifier or RTO_LOG, runbook=d)
        )
        for d in wanted
    }
    drill_dag = build_drill_dag(config, str(path)) if drill else None
    if drill_dag is not None:
        dags[DRILL_DAG_ID] = drill_dag
    globals_dict.update(dags)
    return dags


def runbook_params(aliases: list[str]) -> dict[str, Param]:
    """The trigger form: JSON schema per field, enforced by Airflow before a run is created."""
    first = aliases[0] if aliases else ""
    second = aliases[1] if len(aliases) > 1 else first
    return {
        "primary": Param(first, type="string", enum=aliases, title="Primary cluster (clients leave it on failover)"),
        "dr": Param(second, type="string", enum=aliases, title="DR cluster (clients move there on failover)"),
        "groups": Param(
            None,
            type=["null", "string"],
            minLength=1,
            title="Consumer groups (full-match regex)",
            description="Empty: the flow's own `groups` filter.",
        ),
        "mode": Param("planned", type="string", enum=["planned", "unplanned"], title="Mode"),
        "dry_run": Param(True, type="boolean", title="Dry run (reads only; says what each step would do)"),
        "max_lag_records": Param(None, type=["null", "integer"], minimum=0, title="Lag gate: records (planned)"),
        "max_lag_seconds": Param(None, type=["null", "number"], minimum=0, title="Lag gate: seconds (planned)"),
        "fence": Param("none", type="string", enum=list(FENCES), title="Fence method (planned)"),
        "fence_principals": Param(
            [], type="array", items={"type": "string", "pattern": "^[^:]+:.+$"}, title="Fence principals (Type:name)"
        ),
        "fence_command": Param(None, type=["null", "string"], title="Fence command (fence = command)"),
        "unfence_command": Param(
            None, type=["null", "string"], title="Unfence command (fence = command: run if the fence is rolled back)"
        ),
        "fence_verify_seconds": Param(5.0, type="number", minimum=0, title="Seconds end offsets must stand still"),
        "redirect": Param("none", type="string", enum=list(REDIRECTS), title="Redirect method"),
        "redirect_target": Param(None, type=["null", "string"], title="Redirect target (file, command or URL)"),
        "open_transaction_wait_seconds": Param(
            60.0, type="number", minimum=0, title="Seconds to wait for transactions open at the fence (planned)"
        ),
        "strict_groups": Param(
            False,
            type="boolean",
            title="Strict groups",
            description="Refuse when a group has no exact translation; off: such groups are reported and skipped.",
        ),
    }


RUNBOOK_PRIORITY = 1000
"""Runbook tasks' absolute priority weight: started mid-incident, they take the next free worker slot before
any flow task (flow tasks keep Airflow's default weight of 1 per downstream task)."""


def build_runbook_dag(
    direction: str,
    config_path: str,
    aliases: list[str],
    repo: Path,
    step_timeout: dt.timedelta = dt.timedelta(seconds=1800),
    deadline: Any = None,
) -> DAG:
    with DAG(
        dag_id=f"mirrorflow_{direction}",
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        auto_register=False,
        params=runbook_params(aliases),
        tags=["mirrorflow", "mirrorflow:runbook"],
        description=f"Mirrorflow {direction} runbook (docs/design.md §4): trigger with the form; dry run by default",
        dag_display_name=f"mirrorflow {direction}",
        doc_md=_doc(direction, config_path),
        deadline=deadline,
        default_args={
            "owner": "mirrorflow",
            "retries": 0,
            "priority_weight": RUNBOOK_PRIORITY,
            "weight_rule": "absolute",
            "execution_timeout": step_timeout,
        },
    ) as dag:
        common = {"config_path": config_path, "direction": direction, "repo": str(repo)}
        previous: PythonOperator | None = None
        for index, name in enumerate(STEP_NAMES):
            task = PythonOperator(task_id=name, python_callable=run_step, op_kwargs={**common, "index": index})
            if previous is not None:
                previous >> task
            previous = task
        report = PythonOperator(task_id=REPORT_TASK, python_callable=report_step, op_kwargs=common)
        announce = PythonOperator(
            task_id=ANNOUNCE_TASK,
            python_callable=announce_step,
            op_kwargs={"direction": direction, "config_path": config_path, "repo": str(repo)},
            outlets=[runbook_asset(direction)],
        )
        if previous is not None:
            previous >> report
        report >> announce
    return dag


def announce_step(direction: str, config_path: str, repo: str, params: Mapping[str, Any], ti: Any) -> dict[str, Any]:
    """After a run that moved clients: the runbook asset's event, the DAG of the flow clients left paused (again),
    and the reverse flow resumed, its pause markers deleted and then its DAG unpaused in Airflow (the way back
    must run; after a failback it is the original flow, paused by the failover). A DAG unpaused over a marker
    would skip every run and end green. A dry run is skipped (no event: DAGs scheduled on the asset must not
    start because somebody rehearsed)."""
    from airflow.sdk.exceptions import AirflowSkipException

    from mirrorflow.airflow.assets import annotate

    summary = ti.xcom_pull(task_ids=REPORT_TASK) or {}
    if summary.get("dry_run", True) or not summary.get("completed"):
        raise AirflowSkipException("dry run or not completed: no asset event")
    extra = {
        "direction": direction,
        "primary": params.get("primary"),
        "dr": params.get("dr"),
        **{key: summary.get(key) for key in ("groups", "partitions", "data_loss_bound_records", "rto_seconds")},
    }
    annotate(runbook_asset(direction), extra)
    primary, dr = str(params.get("primary")), str(params.get("dr"))
    left, arrived = (primary, dr) if direction == "failover" else (dr, primary)
    # Paused again (idempotent): `pause_flow` reports an API it could not reach and goes on, as the Kafka fence
    # holds; the run's end is the next chance for the UI to show the flow paused.
    in_airflow = set_dags_paused([flow_dag_id(left, arrived)], True, f"{direction}: the flow clients left")
    reverse = f"{arrived}->{left}"
    if any(flow.name == reverse for flow in load_config(config_path).flows):
        resumed, extra["resumed"] = resume_reverse(config_path, reverse, Path(repo), direction)
        if resumed:  # else its DAG stays as it is: unpaused over a marker, it would skip every run and end green
            in_airflow |= set_dags_paused([flow_dag_id(arrived, left)], False, f"{direction}: the reverse flow")
    extra["airflow"] = in_airflow
    return extra


def resume_reverse(config_path: str, flow_name: str, repo: Path, direction: str) -> tuple[bool, str]:
    """Delete the pause markers of `flow_name` (`pause_markers.resume`): (done, what happened). A failure (its
    target down, as the old primary may be after an unplanned failover) is an ERROR line with the way to finish
    by hand, not a failed task: the runbook completed, and its asset event must still reach the DAGs that wait."""
    from confluent_kafka import KafkaException

    from mirrorflow.airflow.tasks import load_flow
    from mirrorflow.replication.flow_clients import FlowClients
    from mirrorflow.replication.flow_cycle import state_root_override
    from mirrorflow.replication.pause_markers import resume

    try:
        flow = load_flow(config_path, flow_name)
        with FlowClients(flow) as clients:
            gone = resume(flow, clients, state_root_override(repo))
    except (MirrorflowError, KafkaException) as err:
        why = (
            f"not resumed: {err}. Once its clusters answer, run `mirrorflow unpause {config_path} --flow "
            f"{flow_name}` and unpause its DAG"
        )
        log.error("%s completed, but the way back %s is %s", direction, flow_name, why)
        return False, why
    what = "; ".join(gone) or "it was not paused"
    log.info("%s: the way back %s resumed (%s)", direction, flow_name, what)
    return True, f"resumed ({what})"


def _doc(direction: str, config_path: str) -> str:
    return (
        f"### Mirrorflow {direction}\n\nThe runbook of `mirrorflow {direction}` on `{config_path}`, one task per "
        "step. Trigger with the form (a dry run by default). A failed task names the reason in its log; clear it "
        "to resume there. The `report` task's XCom points at `report.json` / `report.md`. See docs/failover.md."
    )


def options_from_params(
    params: Mapping[str, Any], *, config_path: str, direction: str, state_dir: Path | None
) -> FailoverOptions:
    """The runbook's options from the trigger form, validated (UsageError with the field to fix).

    A field left empty means the runbook's default, and the form's default is a dry run."""
    given = {key: value for key, value in params.items() if value not in ("", None)}
    return options_from_values(
        given, config=config_path, direction=direction, state_dir=state_dir, dry_run_default=True
    )


def run_state_dir(direction: str, params: Mapping[str, Any], run_id: str, repo: Path) -> Path | None:
    """With the override `$MIRRORFLOW_STATE_DIR`: one directory per DAG run, directly under the state root (where
    `paused_flows` looks for markers). None (the default): the state is in Kafka, keyed by the run id."""
    from mirrorflow.replication.flow_cycle import state_root_override

    root = state_root_override(repo)
    if root is None:
        return None
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("_")
    return root / f"{direction}-{params['primary']}-{params['dr']}-{safe}"


def _options(config_path: str, direction: str, repo: str, params: Mapping[str, Any], run_id: str) -> FailoverOptions:
    state_dir = run_state_dir(direction, params, run_id, Path(repo))
    options = options_from_params(params, config_path=config_path, direction=direction, state_dir=state_dir)
    return replace(options, run=run_id)


def run_step(
    config_path: str, direction: str, repo: str, index: int, params: Mapping[str, Any], run_id: str
) -> dict[str, Any]:
    """Task `STEP_NAMES[index]`: that step of the runbook (after any earlier one the runbook reset)."""
    from mirrorflow.airflow.connections import with_connections
    from mirrorflow.replication.failover.runbook import FailoverFailed, run_failover
    from mirrorflow.replication.failover.steps import STEPS

    name = STEP_NAMES[index]
    options = _options(config_path, direction, repo, params, run_id)
    # A real run resumes: done steps are skipped, a reset one (a rolled-back fence) runs again before this one.
    # A dry run keeps nothing: the earlier steps' dry runs are replayed (reads only) so this one can read them.
    chosen = list(STEPS[: index + 1])

    def progress(step: str, status: str, result: dict[str, Any]) -> None:
        why = result.get("reason") or result.get("error") or result.get("note") or ""
        log.info("%s %s: %s%s", direction, step, status, f" ({why})" if why else "")

    log.info("%s %s -> %s, runbook %s", direction, options.source, options.target, run_id)
    try:
        report = run_failover(options, steps=chosen, on_step=progress, prepare_flow=with_connections)
    except FailoverFailed as err:
        log.error("%s", err)
        raise
    status = next((s["status"] for s in report["steps"] if s["name"] == name), "unknown")
    result = {"step": name, "status": status, "dry_run": options.dry_run, "state": report["state_dir"]}
    if name == "pause_flow" and status == "done" and not options.dry_run:
        flow_dag = flow_dag_id(options.source, options.target)
        result["airflow"] = set_dags_paused([flow_dag], True, f"{direction} {options.source}->{options.target}")
    return result


def report_step(config_path: str, direction: str, repo: str, params: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    """The report of the whole run, kept beside the state (Kafka, or the override's directory); XCom gets where it
    is and counts only."""
    from mirrorflow.airflow.connections import with_connections
    from mirrorflow.replication.failover.report import REPORT_JSON, REPORT_MD, render_markdown
    from mirrorflow.replication.failover.runbook import run_failover
    from mirrorflow.replication.failover.steps import STEPS

    options = _options(config_path, direction, repo, params, run_id)
    # A dry run kept nothing: the whole dry run again (reads only) is its report.
    report = run_failover(options, steps=STEPS if options.dry_run else [], prepare_flow=with_connections)
    state_dir = options.state_path()
    if options.dry_run and state_dir is not None:  # the operator of the local override reads the files
        state_dir.mkdir(parents=True, exist_ok=True)
        (state_dir / REPORT_JSON).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        (state_dir / REPORT_MD).write_text(render_markdown(report))
    log.info("%s", render_markdown(report))
    bound = report["data_loss_bound_records"]
    where = report["state_dir"]
    return {
        "report": str(state_dir / REPORT_JSON) if state_dir is not None else where,
        "report_md": str(state_dir / REPORT_MD) if state_dir is not None else where,
        "dry_run": report["dry_run"],
        "completed": report["completed"],
        "fence": report["fence"]["status"],
        "steps": len(report["steps"]),
        "groups": len({g["group"] for g in report["groups"]}),
        "partitions": len(report["partitions"]),
        "data_loss_bound_records": bound if isinstance(bound, int) else str(bound)[:80],
        "rto_seconds": report["rto_seconds"],
    }

"""The DAG factory: one DAG per enabled flow of an mm2.properties, built at parse time without touching Kafka.

`dags/mirrorflow_flows.py` is one call: `register_flow_dags(globals())`. The file is read from
`MIRRORFLOW_CONFIG` (default `<repo>/config/mm2.properties`), restricted to `MIRRORFLOW_CLUSTERS` (MM2's
`--clusters`: space- or comma-separated target aliases).

Failures, the way Airflow 3.3 can show them:
* A config the loader rejects has no flows to build: the DAG file raises, and Airflow lists an import error
  naming file, line and key of every problem (MM2 would refuse to start on it too).
* A flow whose DAG cannot be built (its schedule, an id clash) becomes a placeholder DAG with that flow's id:
  paused by its `None` schedule, tagged `mirrorflow:broken`, its docs and its one task carrying the error.
  The other flows keep running. An import error cannot be used for this: Airflow marks every DAG of a file
  with an import error as stale, so one bad flow would stop all of them.
* `MIRRORFLOW_STRICT=1` turns broken flows into an import error of the whole file (meant for CI).
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import os
from collections.abc import Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, get_parsing_context

from mirrorflow.airflow import tasks
from mirrorflow.airflow.alerts import NOTIFIER_KEY, deadline_alert, failure_notifier
from mirrorflow.airflow.assets import checkpoints_asset
from mirrorflow.airflow.dag_docs import broken_doc, flow_doc, heartbeat_doc
from mirrorflow.airflow.dag_ids import flow_dag_id, flow_tags, heartbeat_dag_id, heartbeat_tags, heartbeat_task_id
from mirrorflow.airflow.embedded import REPO
from mirrorflow.airflow.schedule import Schedule, ScheduleError, overlapping_runs, parse_schedule
from mirrorflow.airflow.spark import MirrorflowCopyOperator
from mirrorflow.config.issues import Issue, IssueLog
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.config.precedence import connector_settings
from mirrorflow.config.properties_file import read_properties
from mirrorflow.core.errors import UsageError
from mirrorflow.replication.flow_steps import COPY, ORDER, flow_steps, step

log = logging.getLogger(__name__)

CONFIG_ENV = "MIRRORFLOW_CONFIG"
CLUSTERS_ENV = "MIRRORFLOW_CLUSTERS"
STRICT_ENV = "MIRRORFLOW_STRICT"
BROKEN_TAG = "mirrorflow:broken"
START_DATE = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
MAX_RETRY_DELAY = dt.timedelta(minutes=10)
LOOP_MARGIN = dt.timedelta(minutes=5)


_NOTIFIER_FIX = (
    "name a module-level function or notifier instance (package.module.attribute) importable by the DAG "
    "processor and the workers; Airflow calls it with the task context"
)


class FlowDagError(UsageError):
    """The DAG file cannot be built (a bad config, or broken flows in strict mode): Airflow's import error."""


class FlowBuildError(UsageError):
    """One flow's DAG cannot be built; the message names file, line and key where one is to blame."""


def register_flow_dags(
    globals_dict: MutableMapping[str, Any],
    config_path: str | Path | None = None,
    clusters: Sequence[str] | None = None,
) -> dict[str, DAG]:
    """Build the DAGs of every enabled flow (and heartbeat-only pair) into `globals_dict`; returns them by id."""
    repo = repo_root(globals_dict.get("__file__"))
    path = config_file(config_path, repo)
    subset = list(clusters) if clusters is not None else env_clusters()
    try:
        config = load_config(path, subset or None)
    except UsageError as err:
        raise FlowDagError(
            f"Mirrorflow builds no DAG from {path} (set by {CONFIG_ENV}) until it is fixed:\n{err}"
        ) from None
    factory = _Factory(config, str(path), subset or None, repo / "spark_jobs" / "mirrorflow_copy.py")
    dags, broken = factory.build(only=get_parsing_context().dag_id)
    if broken and os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes"):
        raise FlowDagError(f"{STRICT_ENV} is set and {len(broken)} flow(s) cannot be built:\n" + "\n".join(broken))
    for dag_id, dag in dags.items():
        globals_dict[dag_id] = dag
    return dags


def repo_root(dag_file: str | None) -> Path:
    """The checkout holding `dags/` (and `spark_jobs/`, `config/`): the DAG file's grandparent."""
    if dag_file:
        return Path(dag_file).resolve().parents[1]
    return REPO


def config_file(config_path: str | Path | None, repo: Path) -> Path:
    """The config to read; a relative path is taken from the checkout (the parser's cwd is anyone's guess)."""
    raw = config_path or os.environ.get(CONFIG_ENV) or repo / "config" / "mm2.properties"
    path = Path(raw).expanduser()
    return path if path.is_absolute() else (repo / path).resolve()


def env_clusters() -> list[str]:
    """`MIRRORFLOW_CLUSTERS="A B"` or `"A,B"` → ["A", "B"]."""
    return os.environ.get(CLUSTERS_ENV, "").replace(",", " ").split()


class _Factory:
    def __init__(self, config: MirrorConfig, path: str, clusters: list[str] | None, application: Path) -> None:
        self.config = config
        self.path = path
        self.clusters = clusters
        self.application = str(application)

    def build(self, only: str | None = None) -> tuple[dict[str, DAG], list[str]]:
        """(DAGs by id, error messages of broken flows); with `only`, just that DAG (a worker's parse)."""
        wanted: list[tuple[str, str, list[Flow], Callable[[str, list[Flow]], DAG]]] = [
            (flow_dag_id(f.source, f.target), f.name, [f], self._flow_dag) for f in self.config.flows
        ]
        wanted += [
            (heartbeat_dag_id(target), f"heartbeats into {target}", pairs, self._heartbeat_dag)
            for target, pairs in self.heartbeat_pairs().items()
        ]
        owners: dict[str, list[str]] = {}
        for dag_id, label, _, _ in wanted:
            owners.setdefault(dag_id, []).append(label)
        dags: dict[str, DAG] = {}
        broken: list[str] = []
        for dag_id, label, flows, build in wanted:
            if only is not None and dag_id != only:
                continue
            try:
                if len(owners[dag_id]) > 1:
                    raise FlowBuildError(
                        f"{self.path}: flows {' and '.join(owners[dag_id])} both map to DAG id {dag_id!r}; "
                        "rename one of the cluster aliases"
                    )
                dags[dag_id] = build(dag_id, flows)
            except Exception as err:  # one flow must not take the others down with it
                message = str(err)
                if not isinstance(err, FlowBuildError):
                    message = f"{self.path}: flow {label}: {type(err).__name__}: {err}"
                log.error("Mirrorflow flow %s is broken: %s", label, message)
                broken.append(message)
                dags[dag_id] = self._broken_dag(dag_id, label, flows, message, build == self._heartbeat_dag)
        return dags, broken

    def heartbeat_pairs(self) -> dict[str, list[Flow]]:
        """Heartbeat-only pairs (herder running, flow not enabled) by the target their heartbeats go to."""
        enabled = {f.name for f in self.config.flows}
        by_target: dict[str, list[Flow]] = {}
        for pair in sorted(self.config.heartbeat_flows, key=lambda f: (f.target, f.source)):
            if pair.name not in enabled and pair.emit_heartbeats_enabled:
                by_target.setdefault(pair.target, []).append(pair)
        return by_target

    def _op_kwargs(self, flow: Flow) -> dict[str, Any]:
        return {"config_path": self.path, "flow_name": flow.name, "clusters": self.clusters}

    def _python(self, task_id: str, flow: Flow, call: Callable[..., Any], **kwargs: Any) -> PythonOperator:
        return PythonOperator(
            task_id=task_id, python_callable=tasks.fail_fast(call), op_kwargs=self._op_kwargs(flow), **kwargs
        )

    def _dag(self, dag_id: str, flow: Flow, schedule: Schedule, active_runs: int = 1, **kwargs: Any) -> DAG:
        return DAG(
            dag_id=dag_id,
            schedule=schedule,
            start_date=START_DATE,
            catchup=False,
            max_active_runs=active_runs,
            auto_register=False,  # only what `register_flow_dags` returns: never a half-built DAG
            default_args={"owner": "mirrorflow", **self._retry_args(flow)},
            **kwargs,
        )

    def _retry_args(self, flow: Flow) -> dict[str, Any]:
        """The flow's retry policy and failure notifier, as task arguments (DAG defaults, or one pair's task)."""
        try:
            notifier = failure_notifier(flow)
        except UsageError as err:
            key, line = self._origin(flow, NOTIFIER_KEY)
            raise FlowBuildError(Issue(self.path, line, key, str(err), _NOTIFIER_FIX).render()) from None
        delay = dt.timedelta(seconds=flow.airflow_retry_delay_seconds)
        return {
            "retries": flow.airflow_retries,
            "retry_delay": delay,
            "retry_exponential_backoff": 2.0,
            "max_retry_delay": max(MAX_RETRY_DELAY, delay),
            "on_failure_callback": notifier,
        }

    def _flow_dag(self, dag_id: str, flows: list[Flow]) -> DAG:
        """The flow's steps (`replication/flow_steps.py`) as tasks wired by their dependencies; in continuous mode
        the steps that repeat beside the copy share one `loops` task."""
        (flow,) = flows
        continuous = flow.copy_mode == "continuous"
        steps = [s for s in flow_steps(flow) if not (continuous and s.beside_copy)]
        task_ids = [task_id for s in steps for task_id in s.tasks] + (["loops"] if continuous else [])
        schedule = self.schedule(flow)
        overlap = overlapping_runs(flow, schedule)  # continuous exactly-once: runs hand over without a stop
        with self._dag(
            dag_id,
            flow,
            schedule if overlap is None else overlap,
            1 if overlap is None else 2,
            tags=flow_tags(flow.source, flow.target),
            doc_md=flow_doc(flow, self.path, task_ids),
            description=f"Mirrorflow {flow.name}: MM2 replication from {flow.source} to {flow.target}",
            dag_display_name=f"mirrorflow {flow.name}",
            deadline=deadline_alert(flow),
        ) as dag:
            ends: dict[str, tuple[Any, Any]] = {}  # step -> (its first task, its last task)
            for each in steps:
                operators = [self._step_task(flow, task_id) for task_id in each.tasks]
                for before, after in itertools.pairwise(operators):
                    before >> after
                ends[each.name] = (operators[0], operators[-1])
                for upstream in each.after:
                    ends[upstream][1] >> operators[0]
            if continuous:
                loop = self._step_task(flow, "loops")
                beside = {up for s in flow_steps(flow) if s.beside_copy for up in s.after}
                for upstream in _nearest(flow, _copy_inputs(flow, beside)):
                    ends[upstream][1] >> loop
        return dag

    def _step_task(self, flow: Flow, task_id: str) -> Any:
        """The task that runs `task_id` of `flow`: the Spark copy, a control-plane step, or a loop step."""
        if task_id == "copy":
            return self._copy_task(flow)
        loop_timeout = dt.timedelta(seconds=flow.copy_run_seconds) + LOOP_MARGIN
        if task_id in LOOP_TASKS:
            kwargs: dict[str, Any] = {"execution_timeout": loop_timeout}
            if task_id in ("loops", "emit_checkpoints") and flow.emit_checkpoints_enabled:
                kwargs["outlets"] = [checkpoints_asset(flow.name)]
            if task_id == "loops" and flow.airflow_loop_pool:
                # The loop task holds a worker slot for the whole run, mostly asleep: a pool of its own keeps
                # such tasks from filling every slot, so a runbook started mid-incident still finds one.
                kwargs["pool"] = flow.airflow_loop_pool
        else:
            kwargs = {"execution_timeout": dt.timedelta(seconds=flow.airflow_execution_timeout_seconds)}
        return self._python(task_id, flow, getattr(tasks, task_id), **kwargs)

    def _copy_task(self, flow: Flow) -> MirrorflowCopyOperator:
        continuous = flow.copy_mode == "continuous"
        loop_timeout = dt.timedelta(seconds=flow.copy_run_seconds) + LOOP_MARGIN
        return MirrorflowCopyOperator(
            task_id="copy",
            application=self.application,
            config_path=self.path,
            flow_name=flow.name,
            clusters=self.clusters,
            copy_mode=flow.copy_mode,
            run_seconds=flow.copy_run_seconds,
            spark_master=flow.spark_master,
            explicit_master="mirrorflow.spark.master" in flow.settings,
            queue=flow.airflow_copy_queue,
            execution_timeout=(
                loop_timeout + dt.timedelta(minutes=10)
                if continuous
                else dt.timedelta(seconds=flow.copy_interval_timeout_seconds)
            ),
        )

    def _heartbeat_dag(self, dag_id: str, pairs: list[Flow]) -> DAG:
        """One DAG per target, one task per source with no dependencies and the pair's own retries and notifier:
        a pair that fails (its settings, its retries) fails only its own task."""
        target = pairs[0].target
        with self._dag(
            dag_id,
            pairs[0],
            self._shared_schedule(pairs),
            tags=heartbeat_tags(target, pairs),
            doc_md=heartbeat_doc(target, pairs, self.path),
            description=f"Mirrorflow heartbeats into {target} from {len(pairs)} cluster(s) whose flow is not enabled",
            dag_display_name=f"mirrorflow heartbeats into {target}",
        ) as dag:
            owners: dict[str, str] = {}
            for pair in pairs:
                task_id = heartbeat_task_id(pair.source)
                if task_id in owners:
                    raise FlowBuildError(
                        f"{self.path}: flows {owners[task_id]} and {pair.name} both map to task {task_id!r} of "
                        f"DAG {dag_id!r}; rename one of the cluster aliases"
                    )
                owners[task_id] = pair.name
                timeout = dt.timedelta(seconds=pair.copy_run_seconds) + LOOP_MARGIN
                self._python(task_id, pair, tasks.heartbeat_pair, execution_timeout=timeout, **self._retry_args(pair))
        return dag

    def _shared_schedule(self, pairs: list[Flow]) -> Schedule:
        """The schedule of the pairs sharing a DAG: they must agree, or the DAG names the pair that differs."""
        schedule = self.schedule(pairs[0])
        for pair in pairs[1:]:
            if pair.schedule != pairs[0].schedule:
                key, line = self._origin(pair, "mirrorflow.schedule")
                problem = (
                    f"the heartbeat-only pairs into {pair.target} share one DAG, but {pair.name} has schedule "
                    f"{pair.schedule!r} and {pairs[0].name} has {pairs[0].schedule!r}"
                )
                fix = f"give every <source>->{pair.target} pair that is not enabled the same mirrorflow.schedule"
                raise FlowBuildError(Issue(self.path, line, key, problem, fix).render())
        return schedule

    def _broken_dag(self, dag_id: str, label: str, flows: list[Flow], message: str, heartbeats: bool) -> DAG:
        if heartbeats:
            tags = [*heartbeat_tags(flows[0].target, flows), BROKEN_TAG]
        else:
            tags = flow_tags(flows[0].source, flows[0].target, BROKEN_TAG)
        with DAG(
            dag_id=dag_id,
            schedule=None,
            start_date=START_DATE,
            catchup=False,
            auto_register=False,
            tags=tags,
            doc_md=broken_doc(label, message),
            description=message.splitlines()[0][:200],
        ) as dag:
            PythonOperator(task_id="config_error", python_callable=tasks.broken_flow, op_kwargs={"message": message})
        return dag

    def schedule(self, flow: Flow) -> Schedule:
        """The flow's `mirrorflow.schedule` for `DAG(schedule=...)`, or a FlowBuildError at its key and line."""
        try:
            schedule = parse_schedule(flow.schedule)
            if isinstance(schedule, str) and not schedule.startswith("@"):
                _validate_cron(schedule)
        except ScheduleError as err:
            key, line = self._origin(flow, "mirrorflow.schedule")
            issue = Issue(self.path, line, key, err.problem, err.fix)
            raise FlowBuildError(issue.render()) from None
        return schedule

    def _origin(self, flow: Flow, key: str) -> tuple[str, int | None]:
        """The raw key (and its line) that set `key` for `flow`, found by MM2's precedence."""
        props = read_properties(self.path, IssueLog(self.path))
        if props is None:
            return key, None
        origin = connector_settings(props.values, flow.source, flow.target).get(key, (None, None))[1] or key
        return origin, props.lines.get(origin)


LOOP_TASKS = ("loops", "heartbeats", "emit_checkpoints", "sync_group_offsets")
"""Tasks that last as long as the copy's run (their timeout follows `mirrorflow.copy.run.seconds`)."""


def _copy_inputs(flow: Flow, upstreams: set[str]) -> set[str]:
    """`upstreams` with the steps that run inside `loops` or are the copy replaced by what the copy waits for:
    the loop runs beside the copy, not after it."""
    inside = {s.name for s in flow_steps(flow) if s.beside_copy} | {COPY}
    copy_after = set(step(flow, COPY).after)
    return {u for u in upstreams if u not in inside} | (copy_after if upstreams & inside else set())


def _nearest(flow: Flow, upstreams: set[str]) -> list[str]:
    """`upstreams` without those that are already ancestors of another (no redundant edges), in step order."""
    after = {s.name: set(s.after) for s in flow_steps(flow)}

    def ancestors(name: str) -> set[str]:
        found = set(after[name])
        for parent in after[name]:
            found |= ancestors(parent)
        return found

    covered = set().union(*(ancestors(u) for u in upstreams)) if upstreams else set()
    return [name for name in ORDER if name in upstreams and name not in covered]


def _validate_cron(expression: str) -> None:
    from airflow.sdk import CronTriggerTimetable
    from airflow.sdk.exceptions import AirflowTimetableInvalid

    try:
        CronTriggerTimetable(expression, timezone="UTC").validate()
    except AirflowTimetableInvalid as err:
        raise ScheduleError(f"{expression!r} is not a valid cron string ({err})") from None

"""The failover state machine (docs/design.md §4): the same steps for `mirrorflow failover|failback` and the Airflow
DAG.

Every step is idempotent and recorded in the runbook's state after it ends; a re-run (any process, any machine)
skips the steps already done and starts at the first one that is not (the failed one, or the one a killed run
was in). The state is in Kafka on the cluster the clients move to (`kafka_state`), or, with the air-gapped
override (`--state-dir` or `$MIRRORFLOW_STATE_DIR`), in a local directory (`state.StateStore`). A dry run
performs every read, records nothing, and says for each step what it would do.

Failover moves clients from `primary` to `dr` through the flow primary->dr. Failback is the same machine on the
reverse flow dr->primary (which must be enabled and must have copied the DR side's data back): clients move
from `dr` to `primary`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.core.patterns import PatternError, compile_patterns
from mirrorflow.core.runbook_record import RunbookId
from mirrorflow.replication.discovery import FlowPlan, discover
from mirrorflow.replication.failover.kafka_state import KafkaStateStore, flow_clusters
from mirrorflow.replication.failover.state import (
    DONE,
    FAILED,
    PENDING,
    PLANNED,
    SKIPPED,
    Clusters,
    RunbookStore,
    RunState,
    StateStore,
    StepState,
    default_state_dir,
)
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import state_root_override

Direction = Literal["failover", "failback"]
Mode = Literal["planned", "unplanned"]
FENCES = ("none", "acl", "command")
REDIRECTS = ("none", "topic", "file", "command", "webhook")
STEP_NAMES = (
    "preflight",
    "fence",
    "verify_fence",
    "drain",
    "pause_flow",
    "final_checkpoint",
    "commit_offsets",
    "redirect",
    "arm_reverse",
)
"""The steps in order (`steps.STEPS`, checked by a test): named here for the DAG and the report, which must not
import the steps and their Kafka calls."""


@dataclass(frozen=True)
class FailoverOptions:
    """What the operator asked for; `options_from_values` builds it from CLI options or DAG params."""

    config: str
    primary: str
    dr: str
    direction: Direction = "failover"
    groups: str | None = None
    mode: Mode = "planned"
    fence: str = "none"
    fence_principals: tuple[str, ...] = ()
    fence_command: str | None = None
    unfence_command: str | None = None
    fence_verify_seconds: float = 5.0
    redirect: str = "none"
    redirect_target: str | None = None
    dry_run: bool = False
    max_lag_records: int | None = None
    max_lag_seconds: float | None = None
    state_dir: str | None = None
    restart: bool = False
    clusters: tuple[str, ...] = ()
    strict_groups: bool = False  # a group with no exact translation refuses the run instead of being skipped
    open_transaction_wait_seconds: float = 60.0  # how long verify_fence waits for transactions open at the fence
    run: str = ""
    """The Airflow DAG run id: each DAG run is its own runbook ("" for the CLI: one per direction and pair)."""

    @property
    def source(self) -> str:
        """The cluster the clients leave."""
        return self.primary if self.direction == "failover" else self.dr

    @property
    def target(self) -> str:
        """The cluster the clients move to."""
        return self.dr if self.direction == "failover" else self.primary

    def state_path(self) -> Path | None:
        """The air-gapped override: `--state-dir`, else `<$MIRRORFLOW_STATE_DIR>/<direction>-<primary>-<dr>` when
        that variable is set (relative to the working directory), where `mirrorflow run` then also looks for
        pause markers. None (the default): the state is in Kafka."""
        if self.state_dir:
            return Path(self.state_dir)
        root = state_root_override(Path.cwd())
        return None if root is None else default_state_dir(self.direction, self.primary, self.dr, root)

    def key(self) -> dict[str, Any]:
        return {
            "direction": self.direction,
            "primary": self.primary,
            "dr": self.dr,
            "mode": self.mode,
            "groups": self.groups,
            "fence": self.fence,
            "redirect": self.redirect,
        }

    def validate(self) -> None:
        if self.primary == self.dr:
            raise UsageError(f"--primary and --dr are both '{self.primary}': name two different cluster aliases")
        if self.mode not in ("planned", "unplanned"):
            raise UsageError(f"--mode {self.mode}: use planned or unplanned")
        if self.fence not in FENCES:
            raise UsageError(f"--fence {self.fence}: use one of {', '.join(FENCES)}")
        if self.redirect not in REDIRECTS:
            raise UsageError(f"--redirect {self.redirect}: use one of {', '.join(REDIRECTS)}")
        if self.fence == "acl" and not self.fence_principals:
            raise UsageError("--fence acl needs --fence-principals User:name,... (the producers to deny WRITE)")
        if self.fence == "acl" and any(":" not in p for p in self.fence_principals):
            raise UsageError(f"--fence-principals {','.join(self.fence_principals)}: write each as Type:name")
        if self.fence == "command" and not self.fence_command:
            raise UsageError("--fence command needs --fence-command CMD")
        if self.unfence_command and self.fence != "command":
            raise UsageError("--unfence-command undoes --fence command: use it with --fence command only")
        if self.redirect in ("file", "command", "webhook") and not self.redirect_target:
            what = {"file": "a file path", "command": "a shell command", "webhook": "an http(s) URL"}[self.redirect]
            raise UsageError(f"--redirect {self.redirect} needs --redirect-target ({what})")
        if self.redirect == "webhook" and not str(self.redirect_target).startswith(("http://", "https://")):
            raise UsageError(f"--redirect-target {self.redirect_target}: a webhook needs an http(s) URL")
        if self.max_lag_records is not None and self.max_lag_records < 0:
            raise UsageError(f"--max-lag-records {self.max_lag_records}: give 0 or more")
        if self.max_lag_seconds is not None and self.max_lag_seconds < 0:
            raise UsageError(f"--max-lag-seconds {self.max_lag_seconds:g}: give 0 or more")
        if self.open_transaction_wait_seconds < 0:
            raise UsageError(f"--open-transaction-wait-seconds {self.open_transaction_wait_seconds:g}: give 0 or more")
        if self.fence_verify_seconds < 0:
            raise UsageError(f"--fence-verify-seconds {self.fence_verify_seconds:g}: give 0 or more")
        if self.groups is not None:
            try:
                compile_patterns([self.groups], key="--groups")
            except PatternError as err:
                raise UsageError(str(err)) from err


def options_from_values(
    values: Mapping[str, Any],
    *,
    config: str,
    direction: str,
    state_dir: str | Path | None,
    dry_run_default: bool = False,
) -> FailoverOptions:
    """Validated options from the operator's values, keyed by field name (absent: the field's default).

    The one reading of the CLI's flags and the DAG's trigger form, so both accept and refuse the same input with
    the same message (UsageError, exit code 2). `fence_principals` is a list or the CLI's comma-separated text."""
    mode = values.get("mode", "planned")
    if mode not in ("planned", "unplanned"):
        raise UsageError(f"--mode {mode}: use planned or unplanned")
    options = FailoverOptions(
        config=config,
        primary=str(values["primary"]),
        dr=str(values["dr"]),
        direction="failback" if direction == "failback" else "failover",
        groups=values.get("groups"),
        mode="unplanned" if mode == "unplanned" else "planned",
        fence=str(values.get("fence", "none")),
        fence_principals=_principals(values.get("fence_principals")),
        fence_command=values.get("fence_command"),
        unfence_command=values.get("unfence_command"),
        fence_verify_seconds=float(values.get("fence_verify_seconds", 5.0)),
        redirect=str(values.get("redirect", "none")),
        redirect_target=values.get("redirect_target"),
        dry_run=bool(values.get("dry_run", dry_run_default)),
        max_lag_records=values.get("max_lag_records"),
        max_lag_seconds=values.get("max_lag_seconds"),
        state_dir=None if state_dir is None else str(state_dir),
        restart=bool(values.get("restart", False)),
        strict_groups=bool(values.get("strict_groups", False)),
        open_transaction_wait_seconds=float(values.get("open_transaction_wait_seconds", 60.0)),
    )
    options.validate()
    return options


def _principals(raw: str | Iterable[str] | None) -> tuple[str, ...]:
    if isinstance(raw, str):  # "User:a, User:b" from the shell
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    return tuple(str(p) for p in raw or ())


@dataclass
class Outcome:
    status: str
    result: dict[str, Any] = field(default_factory=dict)


def done(**result: Any) -> Outcome:
    return Outcome(DONE, result)


def skipped(reason: str, **result: Any) -> Outcome:
    return Outcome(SKIPPED, {"reason": reason, **result})


class Refused(MirrorflowError):
    """A step that will not go on (preflight gate, active groups, fence not holding); exit code 1."""


@dataclass
class Context:
    """What every step gets: the options, the loaded config, the flow clients move along, and the state."""

    options: FailoverOptions
    config: MirrorConfig
    flow: Flow
    state: RunState
    clients: FlowClients
    store: RunbookStore

    @property
    def state_dir(self) -> Path | None:
        """Local directory for report files and snippets: only with the `--state-dir` override."""
        return self.store.artifacts

    @property
    def dry_run(self) -> bool:
        return self.options.dry_run

    @property
    def timeout_s(self) -> float:
        return self.flow.admin_timeout_ms / 1000

    @property
    def source_reachable(self) -> bool:
        """What preflight found (unplanned runs go on without the old primary)."""
        return bool(self.state.result("preflight").get("source_reachable", True))

    def plan(self) -> FlowPlan:
        return discover(self.flow, self.clients)


TP = tuple[str, int]


def tp_key(topic: str, partition: int) -> str:
    """Offsets are keyed "topic-partition" strings in results: the state and the report are JSON."""
    return f"{topic}-{partition}"


def plan_partitions(plan: FlowPlan) -> list[TP]:
    return [(t.topic, p) for t in plan.topics for p in range(t.partitions)]


Step = tuple[str, Callable[[Context], Outcome]]


class FailoverFailed(MirrorflowError):
    """A step failed or refused; `report` is the report as far as the run got (also saved beside the state)."""

    def __init__(self, message: str, report: dict[str, Any], exit_code: int = 1) -> None:
        super().__init__(message, exit_code=exit_code)
        self.report = report


def resolve_flow(config: MirrorConfig, options: FailoverOptions) -> Flow:
    for alias in (options.primary, options.dr):
        if alias not in config.clusters:
            known = ", ".join(sorted(config.clusters))
            raise UsageError(f"{config.path}: unknown cluster alias '{alias}' (clusters: {known})")
    name = f"{options.source}->{options.target}"
    for flow in config.flows:
        if flow.name == name:
            return flow
    if options.direction == "failback":
        raise UsageError(
            f"{config.path}: failback needs the reverse flow {name} enabled (`{name}.enabled = true`) and run until "
            f"it has copied {options.dr}'s data back to {options.primary}; see docs/failover.md"
        )
    raise UsageError(
        f"{config.path}: failover needs the flow {name} (`{name}.enabled = true`): nothing replicates there"
    )


def run_failover(
    options: FailoverOptions,
    *,
    steps: Sequence[Step] | None = None,
    on_step: Callable[[str, str, dict[str, Any]], None] | None = None,
    prepare_flow: Callable[[Flow], Flow] | None = None,
) -> dict[str, Any]:
    """Run (or resume, or dry-run) the runbook; returns the report. Raises `FailoverFailed` on a failed step,
    `UsageError` for bad input (nothing done). `prepare_flow` lays settings over the flow before any client is
    made (the Airflow DAG merges its connections' credentials with it, as the flow DAGs do)."""
    from mirrorflow.replication.failover.report import build_report, write_report
    from mirrorflow.replication.failover.steps import STEPS

    options.validate()
    config = load_config(options.config, clusters=list(options.clusters) or None, require_flows=False)
    flow = resolve_flow(config, options)
    if prepare_flow is not None:
        flow = prepare_flow(flow)
    chosen = list(steps if steps is not None else STEPS)
    names = [name for name, _ in chosen]
    with FlowClients(flow) as clients:
        store = open_store(options, flow, clients)
        if options.dry_run:
            stored = None if options.restart else store.load()
            state = stored if stored is not None and stored.key == options.key() else None
            state = state or RunState(key=options.key(), steps={})
            for name in names:
                state.steps.setdefault(name, StepState(name))
            return _drive(
                Context(options, config, flow, state, clients, store), chosen, on_step, build_report, write_report
            )
        with store.locked():
            state = store.open(options.key(), names, restart=options.restart)
            return _drive(
                Context(options, config, flow, state, clients, store), chosen, on_step, build_report, write_report
            )


def open_store(options: FailoverOptions, flow: Flow, clients: FlowClients) -> RunbookStore:
    """The runbook's store: Kafka on the flow's target (the default), or the local directory override. Both key
    what they keep by the clusters' `cluster.id`s, so other clusters that reuse the aliases never see it."""
    path = options.state_path()
    clusters: Clusters = flow_clusters(flow, clients, target_required=path is None)
    if path is not None:
        return StateStore(path, clusters)
    holder, source = str(clusters[flow.target]), clusters[flow.source] or ""
    return KafkaStateStore(
        flow, clients, RunbookId(options.direction, options.primary, options.dr, holder, source, options.run), clusters
    )


def _drive(
    ctx: Context,
    steps: list[Step],
    on_step: Callable[[str, str, dict[str, Any]], None] | None,
    build_report: Callable[[Context], dict[str, Any]],
    write_report: Callable[[Context, dict[str, Any]], None],
) -> dict[str, Any]:
    options, state, store = ctx.options, ctx.state, ctx.store
    for name, run in steps:
        step = state.step(name)
        if step.status in (DONE, SKIPPED):
            continue
        step.status = PENDING
        step.started_ms = time.time_ns() // 1_000_000
        step.attempts += 0 if options.dry_run else 1
        if not options.dry_run:  # a run killed inside the step leaves the attempt on record
            store.save(state)
        started = time.monotonic()
        try:
            outcome = run(ctx)
        except MirrorflowError as err:
            step.duration_ms = int((time.monotonic() - started) * 1000)
            step.status, step.error = FAILED, str(err)
            if not options.dry_run:
                store.save(state)
            report = build_report(ctx)
            if not options.dry_run:
                _keep_report(ctx, report, write_report)
            if on_step is not None:
                on_step(name, FAILED, {"error": str(err)})
            what = "refused" if isinstance(err, Refused) else "failed"
            raise FailoverFailed(f"{options.direction} step '{name}' {what}: {err}", report, err.exit_code) from err
        step.duration_ms = int((time.monotonic() - started) * 1000)
        step.status = PLANNED if options.dry_run and outcome.status == DONE else outcome.status
        step.result, step.error = outcome.result, None
        if not options.dry_run:
            store.save(state)
        if on_step is not None:
            on_step(name, step.status, outcome.result)
    report = build_report(ctx)
    if not options.dry_run:
        _keep_report(ctx, report, write_report)
    return report


def _keep_report(ctx: Context, report: dict[str, Any], write_report: Callable[[Context, dict[str, Any]], None]) -> None:
    """Beside the state: one record in Kafka, or the report files in the override's directory."""
    ctx.store.save_report(report)
    if ctx.state_dir is not None:
        write_report(ctx, report)

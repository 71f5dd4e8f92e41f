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
from collections.abc import Callable, Sequence
from typing import Any

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.core.runbook_record import RunbookId
from mirrorflow.replication.failover.kafka_state import KafkaStateStore
from mirrorflow.replication.failover.options import FailoverOptions
from mirrorflow.replication.failover.report import build_report, write_report
from mirrorflow.replication.failover.state import (
    DONE,
    FAILED,
    PENDING,
    PLANNED,
    SKIPPED,
    RunbookStore,
    RunState,
    StateStore,
    StepState,
)
from mirrorflow.replication.failover.step import Context, Refused, Step
from mirrorflow.replication.failover.steps import STEPS
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.pause_markers import Clusters, flow_clusters


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
            return _drive(Context(options, config, flow, state, clients, store), chosen, on_step)
        with store.locked():
            state = store.open(options.key(), names, restart=options.restart)
            return _drive(Context(options, config, flow, state, clients, store), chosen, on_step)


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
                _keep_report(ctx, report)
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
        _keep_report(ctx, report)
    return report


def _keep_report(ctx: Context, report: dict[str, Any]) -> None:
    """Beside the state: one record in Kafka, or the report files in the override's directory."""
    ctx.store.save_report(report)
    if ctx.state_dir is not None:
        write_report(ctx, report)

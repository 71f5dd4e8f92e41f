"""`mirrorflow run CONFIG [--flow A->B] [--clusters A B ...] [--once | --for SECONDS] [--json]`: run flows
without an Airflow scheduler, through the same `run_control_plane` the DAG tasks call.

`--once`: one full cycle of every selected flow (and of every heartbeat-only pair MM2 would run): discover, sync
topics, configs and ACLs, heartbeat, then the copy to the source ends seen at its start (on Spark, master
`mirrorflow.spark.master`), checkpoints, and group sync when enabled; exit 0.
`--for SECONDS`: repeat each step at its MM2 interval for that long, copying whenever new records are there.
Neither: until interrupted (Ctrl-C). `--no-copy` runs the control plane only.
A flow a failover paused (its marker in the runbook topic on the flow's target; with the air-gapped override
`$MIRRORFLOW_STATE_DIR`, also a `paused-flow.json` marker under it) is skipped with one line on stderr (and
stopped, when the marker appears while it runs).
Any failure stops the run with exit code 1 and one message; nothing half-done is reported as done.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from mirrorflow.cli.plan_cmd import (
    ClustersOption,
    ConfigArgument,
    FlowOption,
    VerboseOption,
    change_lines,
    config_command,
    render_report,
    select_flows,
    setup_logging,
    to_json,
)
from mirrorflow.config.model import Flow
from mirrorflow.core.errors import UsageError
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import (
    ControlPlaneReport,
    flow_paused,
    run_loop,
    state_root_override,
)
from mirrorflow.replication.pause_markers import PAUSE_CACHE_S, PauseUnknown


def register(app: typer.Typer) -> None:
    config_command(
        app, "run", "Run the flows without Airflow: topics, configs, ACLs and heartbeats at MM2's intervals."
    )(run)


def run(
    ctx: typer.Context,
    config: ConfigArgument,
    flow: FlowOption = None,
    clusters: ClustersOption = None,
    once: Annotated[bool, typer.Option("--once", help="One full cycle, then exit.")] = False,
    for_seconds: Annotated[
        float | None,
        typer.Option("--for", help="Keep running for this many seconds, then exit.", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print every cycle's report as JSON at the end.")] = False,
    no_copy: Annotated[bool, typer.Option("--no-copy", help="Control plane only: no record copy.")] = False,
    verbose: VerboseOption = False,
) -> None:
    if once and for_seconds is not None:
        raise UsageError("--once and --for exclude each other: give one of them (or neither to run until Ctrl-C)")
    if for_seconds is not None and for_seconds <= 0:
        raise UsageError(f"--for {for_seconds:g}: give a positive number of seconds")
    setup_logging(verbose)
    _, flows, pairs = select_flows(ctx, config, clusters, flow)
    root = state_root_override(Path.cwd())
    flows = _unpaused(flows, root)
    reports: list[ControlPlaneReport] = []
    heartbeats = 0

    def record(report: ControlPlaneReport) -> None:
        nonlocal heartbeats
        if as_json:
            reports.append(report)
        if report.heartbeat is not None and report.heartbeat.emitted:
            heartbeats += 1
        if not as_json:
            for line in change_lines(report):
                typer.echo(f"{report.flow}{line}")

    # Spark is imported only when a copy runs: `run --no-copy` stays light.
    copy = None
    bar = CopyProgressBar() if not as_json and sys.stdout.isatty() else None
    if not no_copy:
        from mirrorflow.spark.copy_job import CopyStep

        copy = CopyStep(on_progress=bar.update if bar is not None else None)
    try:
        if once:  # every step is due at the start of a loop: a loop of no time runs each once, in order

            def once_report(report: ControlPlaneReport) -> None:
                reports.append(report)
                if not as_json:
                    _print_once(report)

            run_loop(flows, pairs, seconds=0.0, on_report=once_report, copy=copy)
        else:
            try:
                run_loop(
                    flows,
                    pairs,
                    seconds=for_seconds,
                    on_report=record,
                    copy=copy,
                    paused=lambda f, c: flow_paused(f, c, root, PAUSE_CACHE_S),
                    on_paused=lambda reason: typer.echo(f"stopped: {reason}", err=True),
                    on_skipped=lambda line: typer.echo(line, err=True),
                )
            except KeyboardInterrupt:
                typer.echo("interrupted", err=True)
            if not as_json:
                typer.echo(f"done: {len(flows)} flows, {len(pairs)} heartbeat-only pairs, {heartbeats} heartbeats sent")
    finally:
        if bar is not None:
            bar.close()
        if copy is not None:
            copy.close()
    if as_json:
        typer.echo(json.dumps(to_json(reports), indent=2))


def _unpaused(flows: list[Flow], root: Path | None) -> list[Flow]:
    """The flows no failover has paused (markers in Kafka; with the override, also under `root`)."""
    kept = []
    for f in flows:
        try:
            with FlowClients(f) as clients:
                reason = flow_paused(f, clients, root)
        except PauseUnknown as err:
            typer.echo(f"skipped: {err}", err=True)
            continue
        if reason is None:
            kept.append(f)
        else:
            typer.echo(f"skipped: {reason}", err=True)
    return kept


def _print_once(report: ControlPlaneReport) -> None:
    for line in render_report(report):
        typer.echo(line)
    if isinstance(report.copy, dict):
        copied = report.copy
        typer.echo(
            f"  copied {copied['records']} records ({copied['bytes']} bytes) in {copied['transactions']} transactions"
        )
    if report.checkpoints is not None:
        typer.echo(f"  {len(report.checkpoints.emitted)} checkpoints emitted")
    if report.groups is not None:
        typer.echo(f"  groups synced: {', '.join(g.group for g in report.groups.written) or 'none'}")
        for skipped in report.groups.skipped_active:
            typer.echo(f"  group '{skipped.group}' not synced: it is active on {report.target}")
    if report.heartbeat is not None and report.heartbeat.emitted:
        typer.echo(
            f"  sent heartbeat {report.source}->{report.target} to {report.target}:{report.heartbeat.topic} "
            f"(offset {report.heartbeat.offset})"
        )


class CopyProgressBar:
    """A rich progress bar per flow, advanced as the Spark copy finishes partition ranges (terminals only)."""

    def __init__(self) -> None:
        self._progress = Progress(
            TextColumn("copy {task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("ranges")
        )
        self._tasks: dict[str, TaskID] = {}
        self._progress.start()

    def update(self, flow: str, done: int, total: int) -> None:
        if flow not in self._tasks:
            self._tasks[flow] = self._progress.add_task(flow, total=total)
        self._progress.update(self._tasks[flow], completed=done, total=total)

    def close(self) -> None:
        self._progress.stop()

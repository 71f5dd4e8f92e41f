"""`mirrorflow plan CONFIG [--flow A->B] [--clusters A B ...] [--json]`: what `run` would change, read-only.

Runs every control-plane step in dry-run against the live clusters (discover, topics, internal topics, config
drift, ACLs) and prints the changes. Exit 2 for a bad config or an unknown `--flow`, 1 (one message, no
traceback) when a cluster cannot be reached.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from mirrorflow.cli.console_logs import SPARK_LEVEL_ENV, filter_library_deprecations, is_verbose
from mirrorflow.config.loader import load_config, split_cluster_args
from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.errors import UsageError
from mirrorflow.replication.flow_clients import LIBRDKAFKA_LOG
from mirrorflow.replication.flow_cycle import ControlPlaneReport, run_control_plane, run_heartbeat_pair

CommandFunction = TypeVar("CommandFunction", bound=Callable[..., Any])
FlowOption = Annotated[
    list[str] | None,
    typer.Option(
        "--flow",
        help="Only this flow, e.g. --flow 'A->B' (quote it: > is a shell redirection). Repeatable.",
        show_default=False,
    ),
]
ClustersOption = Annotated[
    list[str] | None,
    typer.Option(
        "--clusters",
        help="Only flows whose target is one of these aliases (MM2's --clusters): A B or A,B.",
        show_default=False,
    ),
]
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="Also show librdkafka's own log.")]
ConfigArgument = Annotated[Path, typer.Argument(help="The mm2.properties file.", show_default=False)]


def config_command(app: typer.Typer, name: str, help: str) -> Callable[[CommandFunction], CommandFunction]:
    """Register a command that reads mm2.properties: it takes MM2's `--clusters.X.key=value` overrides too, as
    extra arguments (`split_cluster_args` reads them)."""
    return app.command(name, context_settings={"allow_extra_args": True}, help=help)


def register(app: typer.Typer) -> None:
    config_command(
        app,
        "plan",
        "Show what `run` would change on the live clusters (topics, partitions, configs, ACLs); changes nothing.",
    )(plan)


def plan(
    ctx: typer.Context,
    config: ConfigArgument,
    flow: FlowOption = None,
    clusters: ClustersOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the reports as JSON.")] = False,
    verbose: VerboseOption = False,
) -> None:
    setup_logging(verbose)
    _, flows, pairs = select_flows(ctx, config, clusters, flow)
    reports = [run_control_plane(f, dry_run=True) for f in flows]
    reports += [run_heartbeat_pair(f, dry_run=True) for f in pairs]
    if as_json:
        typer.echo(json.dumps(to_json(reports), indent=2))
        return
    for report in reports:
        for line in render_report(report):
            typer.echo(line)


def setup_logging(verbose: bool) -> None:
    """The console of the CLI commands (docs/console.md): librdkafka's lines and Spark's
    INFO lines only with `--verbose`."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    filter_library_deprecations()
    verbose = is_verbose(verbose)
    LIBRDKAFKA_LOG.setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    if verbose:
        os.environ.setdefault(SPARK_LEVEL_ENV, "INFO")


def select_flows(
    ctx: typer.Context, config: Path, clusters: Sequence[str] | None, names: Sequence[str] | None
) -> tuple[MirrorConfig, list[Flow], list[Flow]]:
    """The loaded config, the enabled flows to run and the heartbeat-only pairs (none when `--flow` is given)."""
    extra = list(ctx.args)
    if extra and not clusters:
        raise UsageError(f"unexpected arguments: {' '.join(extra)}")
    subset = split_cluster_args([*(clusters or []), *extra])
    loaded = load_config(config, clusters=subset or None)
    if not names:
        enabled = {f.name for f in loaded.flows}
        pairs = [f for f in loaded.heartbeat_flows if f.name not in enabled]
        return loaded, connected(loaded.flows), connected(pairs)
    flows: list[Flow] = []
    for name in dict.fromkeys(n.strip().replace(" ", "") for n in names):
        try:
            flows.append(loaded.flow(name))
        except KeyError:
            known = ", ".join(f.name for f in loaded.flows) or "none"
            raise UsageError(
                f"--flow {name}: {config} does not enable this flow"
                f"{' for the selected --clusters' if subset else ''} (enabled flows: {known}); "
                f"write it as SOURCE->TARGET, or enable it with `{name}.enabled = true`"
            ) from None
    return loaded, connected(flows), []


def connected(flows: Sequence[Flow]) -> list[Flow]:
    """The flows with the credentials of the Airflow connections they name merged in, as their DAG tasks see
    them (`<alias>.mirrorflow.connection`): `run`, `plan`, `metrics show|serve`, `failover` on any machine
    where those connections resolve (AIRFLOW_CONN_* variables, a secrets backend). Airflow is imported only
    for a file that names a connection."""
    if not any(f.source_connection or f.target_connection for f in flows):
        return list(flows)
    from mirrorflow.airflow.connections import with_connections

    return [with_connections(f) for f in flows]


def connected_flow(flow: Flow) -> Flow:
    """One flow through `connected` (the runbook's and the drill's `prepare_flow`)."""
    return connected([flow])[0]


def render_report(report: ControlPlaneReport) -> list[str]:
    """Human-readable lines: what a dry run would change, or what a run changed."""
    return [_headline(report), *(change_lines(report) or ["  no changes"])]


def _headline(report: ControlPlaneReport) -> str:
    plan = report.plan
    if plan is None:
        return f"Heartbeats {report.flow}"
    up_to_date = sum(1 for t in plan.topics if t.action == "none")
    return f"Flow {report.flow}: {len(plan.topics)} source topics selected, {up_to_date} up to date on the target"


def change_lines(report: ControlPlaneReport) -> list[str]:
    """One line per change (configs and ACLs indented below their topic); empty when nothing changes."""
    target = report.target

    def verb(present: str, past: str) -> str:
        return f"would {present}" if report.dry_run else past

    lines: list[str] = []
    if report.topics is not None:
        for c in report.topics.created:
            if c.outcome == "exists":
                continue
            lines.append(
                f"  {verb('create', 'created')} topic {target}:{c.name} from {c.source_topic} "
                f"({_count(c.partitions, 'partition')}, replication factor {_rf(c.replication_factor)})"
            )
            if c.configs:
                lines.append(f"      configs: {', '.join(f'{k}={v}' for k, v in c.configs.items())}")
        for g in report.topics.grown:
            lines.append(
                f"  {verb('add', 'added')} partitions to {target}:{g.name}: "
                f"{g.partitions_before} -> {g.partitions_after}"
            )
    if report.internal_topics is not None:
        for t in report.internal_topics.created:
            lines.append(
                f"  {verb('create', 'created')} internal topic {t.cluster}:{t.name} "
                f"({t.purpose}; compacted, {t.partitions} partition{'s' if t.partitions != 1 else ''}, "
                f"replication factor {_rf(t.replication_factor)})"
            )
        for name, before, after in report.internal_topics.grown:
            lines.append(f"  {verb('add', 'added')} partitions to internal topic {target}:{name}: {before} -> {after}")
        for name, key, value in report.internal_topics.configured:
            lines.append(f"  {verb('set', 'set')} {key}={value} on internal topic {target}:{name}")
    if report.configs is not None:
        for drift in report.configs.topics:
            lines.append(f"  {verb('change', 'changed')} configs of {target}:{drift.remote_topic} (from {drift.topic})")
            for d in drift.changes:
                new = "(target default)" if d.new is None else d.new
                old = "(unset)" if d.old is None else d.old
                lines.append(f"      {d.key}: {old} -> {new}")
    if report.acls is not None:
        if report.acls.security_disabled:
            lines.append(f"  ACL sync skipped: cluster '{report.acls.security_disabled_cluster}' has no authorizer")
        for b in report.acls.added:
            lines.append(
                f"  {verb('add', 'added')} ACL on {target}: {b.permission_type} {b.operation} on {b.resource_type} "
                f"{b.resource_name} ({b.pattern_type}) for {b.principal} from host {b.host}"
            )
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _rf(value: int) -> str:
    return "broker default" if value == -1 else str(value)


def to_json(reports: Sequence[ControlPlaneReport]) -> dict[str, Any]:
    return {"flows": [r.to_dict() for r in reports]}

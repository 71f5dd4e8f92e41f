"""`mirrorflow failover|failback CONFIG --primary A --dr B [options]`: the runbook of docs/design.md §4 from the shell.

Exit codes: 0 done (or dry run planned), 1 a step refused or failed (the reason is printed; a re-run resumes at
that step), 2 bad input (nothing done). `--json` prints the report on stdout in every case where one exists.

The state is in Kafka (the runbook topic on the cluster the clients move to), so a re-run resumes from any
machine; `--state-dir` (or `$MIRRORFLOW_STATE_DIR`) keeps it in a local directory instead, for air-gapped runs.
`mirrorflow unpause CONFIG --flow A->B` deletes the pause marker the runbook left for a flow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from mirrorflow.cli.plan_cmd import (
    ClustersOption,
    FlowOption,
    VerboseOption,
    config_command,
    connected_flow,
    select_flows,
    setup_logging,
)
from mirrorflow.core.errors import UsageError
from mirrorflow.replication.failover.options import options_from_values
from mirrorflow.replication.failover.report import render_markdown
from mirrorflow.replication.failover.runbook import FailoverFailed, run_failover


def register(app: typer.Typer) -> None:
    app.command("failover", help="Move consumer groups and clients from --primary to --dr (resumable).")(runbook)


def register_failback(app: typer.Typer) -> None:
    app.command("failback", help="Bring them home: the same runbook on the reverse flow DR->primary.")(runbook)


def register_unpause(app: typer.Typer) -> None:
    config_command(
        app, "unpause", "Delete the pause marker a failover left for a flow (in Kafka), so the flow runs again."
    )(unpause)


Primary = Annotated[str, typer.Option("--primary", help="Alias of the primary cluster.")]
Dr = Annotated[str, typer.Option("--dr", help="Alias of the DR cluster.")]
Groups = Annotated[
    str | None, typer.Option("--groups", help="Groups to move (full-match regex; default: the flow's groups).")
]
ModeOpt = Annotated[str, typer.Option("--mode", help="planned (fence, drain to zero) or unplanned (RPO ledger).")]
Fence = Annotated[str, typer.Option("--fence", help="none, acl (deny WRITE to --fence-principals) or command.")]
Principals = Annotated[
    str | None, typer.Option("--fence-principals", help="Comma-separated principals, e.g. User:app1,User:app2.")
]
FenceCommand = Annotated[str | None, typer.Option("--fence-command", help="Shell command that stops the producers.")]
UnfenceCommand = Annotated[
    str | None,
    typer.Option("--unfence-command", help="With --fence command: shell command run when the fence is rolled back."),
]
FenceSeconds = Annotated[
    float, typer.Option("--fence-verify-seconds", help="How long end offsets must stand still to prove the fence.")
]
Redirect = Annotated[str, typer.Option("--redirect", help="none, topic, file, command or webhook.")]
RedirectTarget = Annotated[
    str | None, typer.Option("--redirect-target", help="The file, command or URL of the redirect method.")
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print every action and the data-loss bound; change nothing.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the report as JSON.")]
MaxLagRecords = Annotated[
    int | None, typer.Option("--max-lag-records", help="Planned: refuse above this replication lag (records).")
]
MaxLagSeconds = Annotated[
    float | None, typer.Option("--max-lag-seconds", help="Planned: refuse above this replication lag (seconds).")
]
StateDir = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help=(
            "Air-gapped override: keep state and reports in this local directory instead of Kafka "
            "(also: $MIRRORFLOW_STATE_DIR/<kind>-<primary>-<dr> when that is set)."
        ),
    ),
]
StrictGroups = Annotated[
    bool,
    typer.Option(
        "--strict-groups",
        help="Refuse when a selected group has no exact translation (default: report it and move the others).",
    ),
]
OpenTxnWait = Annotated[
    float,
    typer.Option(
        "--open-transaction-wait-seconds",
        help="Planned: how long to wait for transactions open at the fence; still open: reported at risk.",
    ),
]
Restart = Annotated[bool, typer.Option("--restart", help="Discard a previous run's state and start over.")]
Config = Annotated[Path, typer.Argument(help="The mm2.properties file.", show_default=False)]


def runbook(
    ctx: typer.Context,
    config: Config,
    primary: Primary,
    dr: Dr,
    groups: Groups = None,
    mode: ModeOpt = "planned",
    fence: Fence = "none",
    fence_principals: Principals = None,
    fence_command: FenceCommand = None,
    unfence_command: UnfenceCommand = None,
    fence_verify_seconds: FenceSeconds = 5.0,
    redirect: Redirect = "none",
    redirect_target: RedirectTarget = None,
    dry_run: DryRun = False,
    as_json: AsJson = False,
    max_lag_records: MaxLagRecords = None,
    max_lag_seconds: MaxLagSeconds = None,
    state_dir: StateDir = None,
    restart: Restart = False,
    strict_groups: StrictGroups = False,
    open_transaction_wait_seconds: OpenTxnWait = 60.0,
    verbose: VerboseOption = False,
) -> None:
    """Both commands: failover and failback take the same options; the command's name is the direction."""
    setup_logging(verbose)
    options = options_from_values(locals(), config=str(config), direction=ctx.info_name or "", state_dir=state_dir)

    def progress(name: str, status: str, result: dict[str, Any]) -> None:
        if not as_json:
            typer.echo(f"{name}: {status}" + (f" — {result['reason']}" if "reason" in result else ""), err=True)
            for stale in result.get("skipped_groups", []) if name == "preflight" else []:
                where = f"{stale['topic']}-{stale['partition']} at {stale['upstream_offset']}"
                typer.echo(f"  skipped group {stale['group']}: no exact translation for {where}", err=True)

    try:
        report = run_failover(options, on_step=progress, prepare_flow=connected_flow)
    except FailoverFailed as err:
        if as_json:
            typer.echo(json.dumps(err.report, indent=2, sort_keys=True))
        raise
    if as_json:
        typer.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        typer.echo(render_markdown(report))


def unpause(
    ctx: typer.Context,
    config: Config,
    flow: FlowOption = None,
    clusters: ClustersOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Resume the flows named by `--flow`: their markers in the runbook topic on their targets are deleted."""
    from mirrorflow.replication.flow_clients import FlowClients
    from mirrorflow.replication.pause_markers import unpause as delete_marker

    setup_logging(verbose)
    if not flow:
        raise UsageError("unpause needs --flow SOURCE->TARGET (the flow a failover paused)")
    _, flows, _ = select_flows(ctx, config, clusters, flow)
    for f in flows:
        with FlowClients(f) as clients:
            deleted = delete_marker(f, clients)
        typer.echo(f"{f.name}: {'pause marker deleted' if deleted else 'not paused'}")

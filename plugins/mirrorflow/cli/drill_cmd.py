"""`mirrorflow drill CONFIG [--flow A->B] [--history] [--json]`: rehearse the failover of each enabled flow (a dry
run plus the drill's checks, its report kept on the DR cluster), or show the kept reports. Exit 1 when a drill
fails (docs/failover.md "DR drills")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from mirrorflow.cli.plan_cmd import connected_flow
from mirrorflow.config.loader import load_config


def register(app: typer.Typer) -> None:
    app.command("drill", help="Rehearse the failover runbook (dry run + checks) and keep the evidence.")(drill)


def drill(
    config: Annotated[Path, typer.Argument(help="The mm2.properties file.", metavar="CONFIG")],
    flow: Annotated[str | None, typer.Option("--flow", help="Only this flow (A->B: clients move A to B).")] = None,
    show_history: Annotated[bool, typer.Option("--history", help="Show the kept drills; run none.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    from mirrorflow.replication.failover.drill import history, render, run_drill

    names = [flow] if flow else [f.name for f in load_config(config).flows]
    reports = []
    for name in names:
        if show_history:
            reports += history(str(config), name)
        else:
            reports.append(run_drill(str(config), name, prepare_flow=connected_flow))
    if as_json:
        typer.echo(json.dumps(reports, indent=2))
    else:
        for report in reports:
            typer.echo(render(report))
    if not show_history and not all(r["passed"] for r in reports):
        raise typer.Exit(code=1)

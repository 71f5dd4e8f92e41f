"""`mirrorflow validate CONFIG [--clusters A B ...] [--json]`: what this mm2.properties makes Mirrorflow run.

Like MM2's own command line, the file comes first and `--clusters` takes one or more aliases
(`--clusters west-1 west-2`, or `--clusters west-1,west-2`). Errors are printed one per line as
`FILE:LINE: KEY: problem. fix` on stderr, with exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from mirrorflow.cli.plan_cmd import config_command
from mirrorflow.config.issues import ConfigError
from mirrorflow.config.keys import is_secret_key
from mirrorflow.config.loader import load_config, split_cluster_args
from mirrorflow.config.model import MirrorConfig


def register(app: typer.Typer) -> None:
    config_command(
        app, "validate", "Check an mm2.properties file and show the flows it enables, as MM2 would read it."
    )(validate)


def validate(
    ctx: typer.Context,
    config: Annotated[Path, typer.Argument(help="The mm2.properties file.", metavar="CONFIG", show_default=False)],
    clusters: Annotated[
        list[str] | None,
        typer.Option(
            "--clusters",
            metavar="ALIAS...",
            help="Only flows whose target is one of these aliases (MM2's --clusters): A B or A,B.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    extra = list(ctx.args)
    if extra and not clusters:
        raise typer.BadParameter(f"unexpected arguments: {' '.join(extra)}", ctx=ctx)
    subset = split_cluster_args([*(clusters or []), *extra])
    try:
        loaded = load_config(config, clusters=subset or None)
    except ConfigError as err:
        for issue in err.issues:
            typer.echo(issue.render(), err=True)
        raise typer.Exit(code=2) from None
    if as_json:
        typer.echo(json.dumps(as_document(loaded), indent=2))
    else:
        _print_human(loaded, subset)


def as_document(loaded: MirrorConfig) -> dict[str, Any]:
    """The stable `validate --json` document (docs/design.md §6); secrets appear as `***`."""
    flows: list[dict[str, Any]] = []
    for f in loaded.flows:
        flows.append({"source": f.source, "target": f.target, "settings": f.effective_settings()})
        if not f.transforms.empty:
            flows[-1]["transforms"] = f.transforms.describe(is_secret_key)
    return {
        "flows": flows,
        "ignored_keys": list(loaded.ignored_keys),
        "heartbeat_pairs": [list(pair) for pair in loaded.heartbeat_pairs],
        "warnings": [issue.render() for issue in loaded.warnings],
    }


def _print_human(loaded: MirrorConfig, subset: list[str]) -> None:
    console = Console(highlight=False, markup=False)
    scope = f" (targets: {', '.join(subset)})" if subset else ""
    summary = Table(title=f"Flows in {loaded.path}{scope}", title_justify="left")
    for column in (
        "flow",
        "delivery",
        "copy",
        "schedule",
        "topics",
        "topics.exclude",
        "groups",
        "sync offsets",
    ):
        summary.add_column(column)
    for flow in loaded.flows:
        summary.add_row(
            flow.name,
            flow.delivery,
            flow.copy_mode,
            flow.schedule,
            ", ".join(flow.topics),
            ", ".join(flow.topics_exclude),
            ", ".join(flow.groups),
            "yes" if flow.sync_group_offsets_enabled else "no",
        )
    console.print(summary)
    for flow in loaded.flows:
        table = Table(title=f"{flow.name}: effective settings", title_justify="left")
        table.add_column("key")
        table.add_column("value", overflow="fold")
        for key, value in flow.effective_settings().items():
            table.add_row(key, value)
        console.print(table)
        if not flow.transforms.empty:
            console.print(f"{flow.name}: transforms, in order:")
            for number, line in enumerate(flow.transforms.describe(is_secret_key), start=1):
                console.print(f"  {number}. {line}", soft_wrap=True)
    pairs = ", ".join(f"{s}->{t}" for s, t in loaded.heartbeat_pairs) or "none"
    console.print(f"Heartbeat pairs: {pairs}", soft_wrap=True)
    if loaded.ignored_keys:
        console.print("Ignored keys (MM2 settings Mirrorflow accepts but does not use):")
        for key in loaded.ignored_keys:
            console.print(f"  {key}", soft_wrap=True)
    if loaded.warnings:
        console.print(f"Warnings ({len(loaded.warnings)}):")
        for issue in loaded.warnings:
            console.print(f"  {issue.render()}", soft_wrap=True)

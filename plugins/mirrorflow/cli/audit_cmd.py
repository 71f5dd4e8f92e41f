"""`mirrorflow audit CONFIG --flow A->B [--topics REGEX] [--json]`: compare a flow's source and remote topics
record by record (docs/design.md §6). Exit 0 when clean, 1 when records are lost, duplicated, misplaced, out of order
or unexpected, 2 for a bad config or option. Reads only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from mirrorflow.cli.plan_cmd import VerboseOption, setup_logging
from mirrorflow.config.loader import load_config
from mirrorflow.core.errors import UsageError
from mirrorflow.replication.audit import audit_flow

_FLOW = re.compile(r"([^\s>-][^\s>]*?)->([^\s>-][^\s>]*)")


def register(app: typer.Typer) -> None:
    app.command("audit", help="Check that a flow lost, duplicated, moved and reordered no record; reads only.")(audit)


def parse_flow_name(value: str) -> str:
    """`A->B` as written; a UsageError for anything else (`A-B`, `A->`, `->B`)."""
    match = _FLOW.fullmatch(value.strip())
    if match is None:
        raise UsageError(f"--flow {value!r} is not a flow name: write SOURCE->TARGET, e.g. --flow 'A->B'")
    return f"{match.group(1)}->{match.group(2)}"


def audit(
    config: Annotated[Path, typer.Argument(help="The mm2.properties file.", metavar="CONFIG", show_default=False)],
    flow: Annotated[str, typer.Option("--flow", help="The flow to audit, e.g. --flow 'A->B'.", show_default=False)],
    topics: Annotated[
        str | None, typer.Option("--topics", help="Only source topics matching this regex.", show_default=False)
    ] = None,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Seconds to wait for each read.", show_default=False)
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    verbose: VerboseOption = False,
) -> None:
    name = parse_flow_name(flow)
    if timeout is not None and timeout <= 0:
        raise UsageError(f"--timeout {timeout:g}: give a positive number of seconds")
    if topics is not None:
        try:
            re.compile(topics)
        except re.error as err:
            raise UsageError(f"--topics {topics!r} is not a valid regex ({err})") from None
    setup_logging(verbose)
    selected = load_config(config).flow(name)
    report = audit_flow(selected, topics=topics, timeout_s=timeout)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        _print_human(report)
    if not report["clean"]:
        raise typer.Exit(code=1)


def _print_human(report: dict[str, Any]) -> None:
    console = Console(highlight=False, markup=False)
    table = Table(title=f"Audit of {report['flow']}", title_justify="left")
    columns = ("checked", "lost", "duplicated", "out_of_order", "misplaced", "unexpected", "not_yet_copied")
    table.add_column("topic")
    for column in columns:
        table.add_column(column.replace("_", " "), justify="right")
    for t in report["topics"]:
        table.add_row(f"{t['topic']} -> {t['remote_topic']}", *(str(t[c]) for c in columns))
    table.add_row("total", *(str(report[c]) for c in columns))
    console.print(table)
    latency = report["latency"]
    if latency["measurable"]:
        parts = [f"{k[:-3]} {latency[k]} ms" for k in ("p50_ms", "p99_ms", "max_ms") if latency.get(k) is not None]
        console.print(f"Replication latency ({latency['source']}): {', '.join(parts)}", soft_wrap=True)
    else:
        console.print(f"Replication latency: {latency['note']}", soft_wrap=True)
    console.print("clean" if report["clean"] else "FAULTS FOUND", soft_wrap=True)

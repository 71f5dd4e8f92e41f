"""`mirrorflow translate CONFIG (--group G | --groups REGEX) --source A --target B [--live] [--json]`: where a
source consumer group resumes on the target cluster (the RemoteClusterUtils role, docs/design.md §6).

Without `--live` the target's checkpoints are read (as Java's `RemoteClusterUtils.translateOffsets` does);
with `--live` the flow's offset maps are applied to the group's current offsets on the source. `--json` prints
`[{"topic": ..., "partition": ..., "offset": ...}]` sorted by topic and partition (target-side names), or with
`--groups` an object keyed by group. Exit 2 for a bad config, alias or option; 1 when a cluster cannot be read.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from mirrorflow.cli.plan_cmd import ClustersOption, ConfigArgument, VerboseOption, config_command, setup_logging
from mirrorflow.config.loader import load_config, split_cluster_args
from mirrorflow.core.errors import UsageError
from mirrorflow.replication.offset_translation import TranslatedOffset
from mirrorflow.replication.remote_cluster_utils import bulk_to_json, to_json, translate_group, translate_groups


def register(app: typer.Typer) -> None:
    config_command(
        app, "translate", "Show where a consumer group of SOURCE resumes on TARGET: exact translated offsets."
    )(translate)


def translate(
    ctx: typer.Context,
    config: ConfigArgument,
    source: Annotated[str, typer.Option("--source", help="Alias of the cluster the group consumed from.")],
    target: Annotated[str, typer.Option("--target", help="Alias of the cluster the group moves to.")],
    group: Annotated[str | None, typer.Option("--group", help="The consumer group.", show_default=False)] = None,
    groups: Annotated[
        str | None,
        typer.Option("--groups", help="Every group whose name fully matches this regex.", show_default=False),
    ] = None,
    live: Annotated[
        bool, typer.Option("--live", help="Translate the group's current source offsets instead of checkpoints.")
    ] = False,
    clusters: ClustersOption = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            help="Seconds to wait for a cluster (default: admin.timeout.ms).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    verbose: VerboseOption = False,
) -> None:
    extra = list(ctx.args)
    if extra and not clusters:
        raise UsageError(f"unexpected arguments: {' '.join(extra)}")
    if (group is None) == (groups is None):
        raise UsageError("give exactly one of --group GROUP or --groups REGEX")
    if timeout is not None and timeout <= 0:
        raise UsageError(f"--timeout {timeout:g}: give a positive number of seconds")
    setup_logging(verbose)
    subset = split_cluster_args([*(clusters or []), *extra])
    loaded = load_config(config, clusters=subset or None, require_flows=False)
    if group is not None:
        offsets = translate_group(loaded, group, source, target, live=live, timeout_s=timeout)
        if as_json:
            typer.echo(json.dumps(to_json(offsets), indent=2))
        else:
            _print_table({group: offsets}, source, target, live)
        return
    assert groups is not None
    found = translate_groups(loaded, groups, source, target, live=live, timeout_s=timeout)
    if as_json:
        typer.echo(json.dumps(bulk_to_json(found), indent=2))
    else:
        _print_table(found, source, target, live)


def _print_table(found: dict[str, list[TranslatedOffset]], source: str, target: str, live: bool) -> None:
    how = "live, from the offset maps" if live else "from checkpoints"
    header = ("group", "topic", "partition", "offset", f"offset on {source}")
    rows = [
        (name, o.topic, str(o.partition), str(o.offset), str(o.upstream_offset))
        for name, offsets in sorted(found.items())
        for o in offsets
    ]
    # Never wrap names: piped output would otherwise be folded at 80 columns, breaking grep and copy-paste.
    needed = sum(max(len(r[i]) for r in [header, *rows]) + 3 for i in range(len(header))) + 1
    console = Console(highlight=False, markup=False)
    console = Console(highlight=False, markup=False, width=max(console.width, needed))
    if not rows:
        console.print(f"No translated offsets {how} for the selected groups of {source} on {target}.")
        return
    table = Table(title=f"Consumer groups of {source} on {target} ({how})", title_justify="left")
    for column in header:
        table.add_column(column, justify="left" if column in ("group", "topic") else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    console.print(table)

"""`mirrorflow reset CONFIG --flow A->B --topic T [--dry-run] [--delete-remote-topic] [--force]`: start the copy
of one source topic afresh, the recovery when the source (or remote) topic was deleted and re-created. The logic
is `mirrorflow.replication.topic_reset`; this module parses and prints. It never prompts (it runs in scripts and
under Airflow): the checks that protect data refuse instead, and --force overrides them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mirrorflow.cli.audit_cmd import parse_flow_name
from mirrorflow.cli.plan_cmd import VerboseOption, setup_logging
from mirrorflow.config.loader import load_config
from mirrorflow.core.errors import UsageError
from mirrorflow.replication.topic_reset import ResetReport, reset_topic

HELP = "\n\n".join(
    [
        "Start the copy of one source topic afresh: the recovery after the source (or remote) topic was deleted "
        "and re-created, which the copy reports with both topic IDs.",
        "Removes the topic's progress records, ALL of its offset-map segments and its metrics snapshots from the "
        "target (tombstones), so the next copy starts at the new source topic's beginning.",
        "The remote topic's records are kept: the new copy writes after the remote topic's current end, so the old "
        "records stay below it and offset translation stays exact. --delete-remote-topic deletes the remote topic "
        "instead (irreversible; the next run re-creates it empty).",
        "Pause the flow first. The reset fences a running exactly-once copy of the topic, and fails if a copy "
        "restarts meanwhile (run it again then: partitions already reset are kept). An at-least-once copy cannot be "
        "fenced: the reset refuses unless a pause marker stops the flow, or --force is given.",
        "Partitions whose progress records the topic IDs the clusters report now were not re-created: the reset "
        "keeps them and says so. --force resets them too, which copies the whole topic again after the remote "
        "topic's end (every record then exists twice on the target), or into an empty remote topic with "
        "--delete-remote-topic.",
        "--delete-remote-topic is refused when the remote topic's name does not mark it as a copy of the source "
        "(IdentityReplicationPolicy: it may be the target's own topic) and while a consumer group that has a "
        "checkpoint on it is active on the target; the checkpoints of its partitions are restarted at the new copy's "
        "start. --dry-run shows what would be removed and changes nothing.",
    ]
)


def register(app: typer.Typer) -> None:
    app.command("reset", help=HELP)(reset)


def reset(
    config: Annotated[Path, typer.Argument(help="The mm2.properties file.", metavar="CONFIG", show_default=False)],
    flow: Annotated[str, typer.Option("--flow", help="The flow, e.g. --flow 'A->B'.", show_default=False)],
    topic: Annotated[str, typer.Option("--topic", help="The source topic to copy afresh.", show_default=False)],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be removed; change nothing.")] = False,
    delete_remote_topic: Annotated[
        bool,
        typer.Option("--delete-remote-topic", help="Also delete the remote topic and its records (irreversible)."),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also reset partitions that were not re-created (copies them again), and an at-least-once flow "
            "that is not paused.",
        ),
    ] = False,
    verbose: VerboseOption = False,
) -> None:
    name = parse_flow_name(flow)
    if not topic.strip():
        raise UsageError("--topic must name a source topic")
    setup_logging(verbose)
    selected = load_config(config).flow(name)
    report = reset_topic(selected, topic, dry_run=dry_run, delete_remote_topic=delete_remote_topic, force=force)
    _print(report, force=force)


def _print(report: ResetReport, *, force: bool) -> None:
    verb = "would remove" if report.dry_run else "removed"
    typer.echo(
        f"{'[dry run] ' if report.dry_run else ''}reset of {report.topic} in flow {report.flow}: {verb} "
        f"{report.progress_records} progress record(s), {report.segments} offset-map segment(s), "
        f"{report.metrics_snapshots} metrics snapshot(s)"
    )
    if report.unchanged:
        kept = "reset anyway (--force)" if force else "kept: nothing to reset (--force resets them)"
        typer.echo(
            f"  partitions {report.unchanged} were not re-created (their progress has the current topic IDs): {kept}"
        )
    elif not (report.progress_records or report.segments or report.metrics_snapshots):
        typer.echo(f"  nothing is stored for {report.topic} in flow {report.flow}: check the topic name")
    typer.echo(
        f"  source topic ID now: {report.source_topic_id or 'unknown'}; remote topic ID now: "
        f"{report.remote_topic_id or 'unknown'}"
    )
    for p, (source_id, remote_id) in report.recorded_ids.items():
        typer.echo(f"  partition {p} was recorded for source {source_id or 'unknown'}, remote {remote_id or 'unknown'}")
    if report.delete_remote_topic:
        action = "deleted" if report.remote_topic_deleted else ("would be deleted" if report.dry_run else "absent")
        typer.echo(f"  remote topic {report.remote_topic}: {action}; the next run re-creates it")
    if report.checkpoints_restarted:
        typer.echo(f"  {report.checkpoints_restarted} checkpoint(s) of {report.remote_topic} restarted at the new copy")
    for p, (upstream, downstream) in sorted(report.fresh_starts.items()):
        typer.echo(
            f"  {report.topic}-{p}: the next copy {'would start' if report.dry_run else 'starts'} at upstream offset "
            f"{upstream}, writing {report.remote_topic}-{p} from offset {downstream} on"
        )

"""`make demo`: Mirrorflow end to end on the embedded default, in one process, exiting 0 only if all went well.

Two real Kafka clusters start on loopback; an active/active pair of flows is configured from the file
`mirrorflow local up` writes; records (keys, headers, tombstones, timestamps) and a consumer group's position are
created on `primary`; then the same functions the DAGs run do the work: the control plane, the exactly-once copy
on Spark `local[*]`, checkpoints and exact translation. The demo checks what it prints and stops the clusters.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.sample_data import consume_group, produce_orders, read_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.flow_cycle import run_control_plane
from mirrorflow.replication.remote_cluster_utils import translate_group

DEMO_DIR = Path("var/demo")
TOPIC = "orders"
GROUP = "billing"
console = Console(highlight=False)


def _demo_config(clusters: LocalClusters) -> Path:
    """The generated file plus two flows: active/active, which must never loop."""
    base = clusters.mm2_properties_file.read_text()
    path = clusters.directory / "demo-mm2.properties"
    path.write_text(
        base + "\n# The demo's flows: active/active between the two clusters.\n"
        "primary->backup.enabled = true\n"
        "backup->primary.enabled = true\n"
        "topics = orders.*\n"
        "mirrorflow.copy.mode = interval\n"
        "sync.group.offsets.enabled = true\n"
        "emit.checkpoints.interval.seconds = 5\n"
    )
    return path


def _show_flows(config: MirrorConfig) -> None:
    table = Table(title=f"flows in {config.path}")
    for column in ("flow", "topics", "delivery", "copy mode", "policy"):
        table.add_column(column)
    for flow in config.flows:
        table.add_row(flow.name, ", ".join(flow.topics), flow.delivery, flow.copy_mode, flow.replication_policy_class)
    console.print(table)


def _show_translation(config: MirrorConfig) -> None:
    """Where group `billing` resumes on backup: from the checkpoints, exactly (0 re-reads, 0 skips)."""
    translated = translate_group(config, GROUP, "primary", "backup")
    if not translated:
        raise MirrorflowError(f"demo check failed: no checkpoint for group '{GROUP}' on backup")
    table = Table(title=f"group '{GROUP}' of primary, translated for backup (mirrorflow translate)")
    for column in ("remote topic", "partition", "primary offset", "backup offset"):
        table.add_column(column)
    for t in translated:
        table.add_row(t.topic, str(t.partition), str(t.upstream_offset), str(t.offset))
    console.print(table)
    if sum(t.upstream_offset for t in translated) != 400:
        raise MirrorflowError("demo check failed: the translated positions do not cover the 400 consumed records")


def run_demo(directory: Path = DEMO_DIR) -> None:
    started = time.monotonic()
    console.rule("Mirrorflow demo")
    console.print("starting two local Kafka clusters (KRaft, from Maven Central jars)...")
    clusters = LocalClusters.up(["primary", "backup"], directory)
    try:
        for alias in clusters.aliases:
            console.print(f"  {alias}: {clusters.bootstrap(alias)}")
        config = load_config(_demo_config(clusters))
        _show_flows(config)
        written = produce_orders(clusters.bootstrap("primary"), TOPIC, count=1000, partitions=3)
        consume_group(clusters.bootstrap("primary"), TOPIC, GROUP, count=400)
        console.print(f"produced {written} records to '{TOPIC}' on primary; group '{GROUP}' consumed 400 of them")

        from mirrorflow.spark.copy_job import CopyStep

        step = CopyStep("local[*]")
        try:
            for round_ in (1, 2):
                for flow in config.flows:
                    report = run_control_plane(flow, copy=step)
                    created = [t.name for t in report.topics.created] if report.topics else []
                    copied = report.copy or {}
                    console.print(
                        f"round {round_} {flow.name}: created {created or 'nothing'}, copied {copied.get('records')} "
                        f"records in {copied.get('transactions')} transactions, "
                        f"{copied.get('checkpoints_emitted')} checkpoints, groups synced: "
                        f"{', '.join(copied.get('groups_synced') or []) or 'none'}"
                    )
        finally:
            step.close()
        _show_translation(config)
        source = read_topic(clusters.bootstrap("primary"), TOPIC)
        remote = read_topic(clusters.bootstrap("backup"), f"primary.{TOPIC}")
        if source != remote:
            raise MirrorflowError("demo check failed: backup's primary.orders differs from primary's orders")
        echoes = read_topic(clusters.bootstrap("primary"), f"backup.primary.{TOPIC}")
        if echoes:
            raise MirrorflowError("demo check failed: active/active looped (backup.primary.orders exists)")
        console.print(
            f"[green]ok[/green]: primary.orders on backup equals orders on primary record for record "
            f"({sum(len(v) for v in source.values())} records, partitions, keys, headers, timestamps); no loop"
        )
        console.print(f"[green]demo finished in {time.monotonic() - started:.0f} s[/green]")
    finally:
        clusters.down(purge=True)
        console.print("clusters stopped")


def main() -> None:
    try:
        run_demo()
    except MirrorflowError as err:
        console.print(f"[red]error:[/red] {err}")
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()

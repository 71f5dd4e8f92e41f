"""`make demo`: Mirrorflow end to end on the embedded default, in one process, exiting 0 only if all went well.

Two real Kafka clusters start on loopback; an active/active pair of flows is configured from the file
`mirrorflow local up` writes; records (keys, headers, tombstones, timestamps) and a consumer group's position are
created on `primary`; then Airflow runs each flow's DAG with `dag.test()` (SQLite, no scheduler): the control
plane, the exactly-once copy submitted to Spark `local[*]`, checkpoints and group sync. The demo prints a summary,
checks the copy record for record and the exact translation of the group, and stops the clusters.

The demo also checks its own console: `main` runs it in a child process, passes every line through to the
terminal and fails when one is noise (`mirrorflow.core.console_noise`: a raw librdkafka line, a deprecation
warning, Spark's log4j banner). librdkafka's own lines go to var/demo/librdkafka.log; `--verbose` (or
MIRRORFLOW_VERBOSE=1) shows them and Spark's INFO lines, and then the noise check is off.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mirrorflow.airflow.embedded import DagRunResult
from mirrorflow.cli.console_logs import ConsoleLogs, filter_library_deprecations, is_verbose, quiet_console
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.console_noise import noise_lines
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.sample_data import consume_group, produce_orders, read_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.remote_cluster_utils import translate_group

DEMO_DIR = Path("var/demo")
TOPIC = "orders"
GROUP = "billing"
CHILD_ENV = "MIRRORFLOW_DEMO_CHILD"
console = Console(highlight=False, width=120)


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
        "mirrorflow.schedule = 10m\n"
        "sync.group.offsets.enabled = true\n"
        "emit.checkpoints.interval.seconds = 5\n"
        "# The DR drill (mirrorflow_drill): rehearses each flow's failover; `true` stands in for a fence script.\n"
        "mirrorflow.drill.schedule = @daily\n"
        "mirrorflow.drill.fence = command\n"
        "mirrorflow.drill.fence.command = true\n"
    )
    return path


def _show_flows(config: MirrorConfig) -> None:
    table = Table(title=f"flows in {config.path}")
    for column in ("flow", "topics", "delivery", "copy mode", "policy"):
        table.add_column(column)
    for flow in config.flows:
        table.add_row(flow.name, ", ".join(flow.topics), flow.delivery, flow.copy_mode, flow.replication_policy_class)
    console.print(table)


def _show_runs(round_: int, runs: list[DagRunResult]) -> None:
    table = Table(title=f"round {round_}: one dag.test() run of each flow DAG")
    for column in ("flow DAG", "state", "tasks", "records copied", "checkpoints", "groups synced"):
        table.add_column(column)
    for run in runs:
        copied = run.results.get("copy") or {}
        checkpoints = (run.results.get("emit_checkpoints") or {}).get("last") or {}
        groups = (run.results.get("sync_group_offsets") or {}).get("last") or {}
        table.add_row(
            run.dag_id.removeprefix("mirrorflow__").replace("__", "->"),
            run.state,
            f"{sum(s == 'success' for s in run.task_states.values())}/{len(run.task_states)} ok",
            str(copied.get("records", "-")),
            str(len(checkpoints.get("emitted") or [])),
            ", ".join(g["group"] for g in groups.get("written") or [] if isinstance(g, dict)) or "-",
        )
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


def _dry_run_failover(config_path: Path, directory: Path) -> None:
    """The runbook of docs/design.md §4 in dry-run mode: every action and the data-loss bound, nothing changed."""
    from mirrorflow.replication.failover.options import FailoverOptions
    from mirrorflow.replication.failover.runbook import run_failover

    options = FailoverOptions(
        config=str(config_path),
        primary="primary",
        dr="backup",
        groups=GROUP,
        dry_run=True,
        state_dir=str(directory / "failover"),
    )
    report = run_failover(options)
    table = Table(title="dry-run failover primary -> backup (mirrorflow failover --dry-run)")
    for column in ("step", "status"):
        table.add_column(column)
    for step in report.get("steps", []):
        table.add_row(str(step.get("name")), str(step.get("status")))
    console.print(table)
    console.print(f"data-loss bound if failing over now: {report.get('data_loss_bound_records')}")


def _show_drills(config_path: Path) -> None:
    """The reports the drill DAG kept on each DR cluster in the rounds above (`mirrorflow drill --history`)."""
    from mirrorflow.replication.failover.drill import history, render

    for flow in ("primary->backup", "backup->primary"):
        kept = history(str(config_path), flow)
        if not kept:
            raise MirrorflowError(f"demo check failed: no drill report kept for {flow}")
        console.print(render(kept[-1]))


def run_demo(directory: Path = DEMO_DIR, logs: ConsoleLogs | None = None) -> None:
    started = time.monotonic()
    console.rule("Mirrorflow demo")
    console.print("starting two local Kafka clusters (KRaft, from Maven Central jars)...")
    clusters = LocalClusters.up(["primary", "backup"], directory)
    try:
        for alias in clusters.aliases:
            console.print(f"  {alias}: {clusters.bootstrap(alias)}")
        config_path = _demo_config(clusters)
        config = load_config(config_path)
        _show_flows(config)
        written = produce_orders(clusters.bootstrap("primary"), TOPIC, count=1000, partitions=3)
        consume_group(clusters.bootstrap("primary"), TOPIC, GROUP, count=400)
        console.print(f"produced {written} records to '{TOPIC}' on primary; group '{GROUP}' consumed 400 of them")

        # Airflow reads its settings at import: its home is prepared before anything imports it.
        from mirrorflow.airflow.embedded import prepare_home, run_flow_dags

        prepare_home(directory / "airflow", config_path)
        filter_library_deprecations()  # again: importing Airflow put its own warning filters first
        console.print("running the flow DAGs with Airflow's dag.test() (copy on spark-submit local[*])...")
        for round_ in (1, 2):
            runs = run_flow_dags()
            _show_runs(round_, runs)
            failed = [r.dag_id for r in runs if r.state != "success"]
            if failed:
                raise MirrorflowError(f"demo check failed: DAG run(s) {', '.join(failed)} did not succeed")
        _show_translation(config)
        _dry_run_failover(config_path, directory)
        _show_drills(config_path)
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
        summary = logs.summary() if logs is not None else None
        if summary:
            console.print(summary)


def _run_here(verbose: bool) -> None:
    try:
        run_demo(logs=quiet_console(DEMO_DIR, verbose=verbose))
    except MirrorflowError as err:
        console.print(f"[red]error:[/red] {err}")
        sys.exit(err.exit_code)


def run_checked(argv: list[str]) -> int:
    """Run the demo in a child process with its stdout and stderr on one pipe (so librdkafka's or the JVM's
    writes to the file descriptors are caught too), echo every line, and fail if any of them was noise."""
    env = {**os.environ, CHILD_ENV: "1", "PYTHONUNBUFFERED": "1"}
    if sys.stdout.isatty():
        env.setdefault("FORCE_COLOR", "1")  # the child's rich console writes to a pipe
    child = subprocess.Popen(
        [sys.executable, "-m", "mirrorflow.cli.demo", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
        errors="replace",
    )
    assert child.stdout is not None
    lines = []
    for line in child.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    code = child.wait()
    noisy = noise_lines(lines)
    if noisy:
        console.print(f"[red]error:[/red] the demo's console held {len(noisy)} noisy line(s); the first ones:")
        for kind, line in noisy[:5]:
            console.print(f"  {kind}: {line[:200]}", markup=False)
        console.print("Find where the line comes from (docs/console.md) and quiet it there.")
        return code or 1
    return code


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    verbose = is_verbose("--verbose" in args or "-v" in args)
    if os.environ.get(CHILD_ENV) or verbose:  # a verbose console is noisy on purpose: nothing to check
        _run_here(verbose)
        return
    sys.exit(run_checked(args))


if __name__ == "__main__":
    main()

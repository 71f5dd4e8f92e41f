"""The copy on Spark: the driver plans one copy range per source partition, executors run `copy_range`; when
partitions outnumber Spark's slots, one Spark task copies several ranges in threads (`copy_ranges`). The Spark
jobs themselves are `copy_tasks`'; a continuous exactly-once run with `mirrorflow.copy.round.seconds` plans again
in rounds (`copy_rounds_job`).

Spark supplies what a replicator should not build for itself: scheduling across a cluster, task retries
(a retried attempt fences the failed one through its transactional id), and placement. confluent-kafka moves
the bytes because Spark's own Kafka sink can neither keep record timestamps nor report the offsets it wrote.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from mirrorflow.config.loader import load_config, split_cluster_args
from mirrorflow.config.model import Flow
from mirrorflow.config.overrides import cluster_settings_from_env, with_cluster_settings
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.replication.copy_plan import (
    copyable,
    idle_counts,
    plan_copy,
    summarise,
    totals_line,
)
from mirrorflow.replication.discovery import FlowPlan, discover
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.job_summary import publish_summary
from mirrorflow.replication.round_claims import rounds_apply
from mirrorflow.spark.copy_rounds_job import copy_in_rounds, round_master
from mirrorflow.spark.copy_tasks import OnProgress, Runtime, run_copy_groups, spread_over_cores
from mirrorflow.spark.quiet import quiet_driver_conf, spark_log_level

log = logging.getLogger(__name__)

# Retries per task when the master is local (local[N] alone never retries; see docs/copy.md).
LOCAL_TASK_ATTEMPTS = 3


def effective_master(master: str) -> str:
    """`local[N]` / `local[*]` gain a retry count (`local[N,F]`); other masters are used as given."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)\])?", master.strip())
    if m is None:
        return master
    return f"local[{m.group(1) or 1},{LOCAL_TASK_ATTEMPTS}]"


def in_process_conf(master: str, conf: Mapping[str, str]) -> dict[str, str]:
    """The flow's Spark settings (`mirrorflow.spark.conf.*`) for a session this process starts itself.

    Under spark-submit (its JVM is already running: `PYSPARK_GATEWAY_PORT`) they arrived as `--conf`, and a
    builder option would override them, so nothing is set. A local run's UI serves nobody and takes a port
    per concurrent copy: it is off unless the flow turns it on (`airflow/spark_sizing.py` does the same for
    spark-submit); on a cluster it stays Spark's default, on."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return {}
    settings = dict(conf)
    if effective_master(master).startswith("local"):
        settings.setdefault("spark.ui.enabled", "false")
    return settings


def spark_session(master: str, app_name: str, conf: Mapping[str, str] | None = None) -> SparkSession:
    # py4j logs every connection it closes at INFO, even from finalizers at interpreter exit.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(effective_master(master))
    if effective_master(master).startswith("local"):
        # Local executors must run this interpreter (where mirrorflow and confluent-kafka are installed), not
        # whatever `python3` is first on PATH; an in-process SparkContext reads only the environment for it.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in quiet_driver_conf().items():  # read when pyspark launches the driver JVM, before its banner
        builder = builder.config(key, value)
    for key, value in in_process_conf(master, conf or {}).items():
        builder = builder.config(key, value)
    spark = (
        builder.config("spark.ui.showConsoleProgress", "false")
        .config("spark.task.maxFailures", str(LOCAL_TASK_ATTEMPTS))
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(spark_log_level())  # a session whose JVM was already running (spark-submit)
    return spark


def copy_flow(
    flow: Flow,
    spark: SparkSession,
    *,
    interval: bool,
    run_seconds: float | None = None,
    plan: FlowPlan | None = None,
    on_progress: OnProgress | None = None,
    run_started_ms: int | None = None,
    try_number: int = 0,
    app: tuple[str, str] | None = None,
) -> dict[str, object]:
    """One copy run of a flow: discover (unless given the plan), copy every partition on Spark, summarise.
    `run_started_ms` orders overlapping continuous runs (`copy_claims`): the DAG run's start when Airflow runs the
    copy, so a retry of an older run's task never counts as the newest run; now if None. `try_number`: the Airflow
    try (rounds order the claims of a retry after the try it replaces, `copy_rounds`). `app`: the id and
    configuration of a leased application (`replication/copy_app.py`), with rounds only."""
    if not interval and run_seconds and rounds_apply(flow.delivery, flow.copy_round_seconds, run_seconds):
        started = run_started_ms
        return copy_in_rounds(
            flow, spark, run_seconds=run_seconds, run_started_ms=started, try_number=try_number, app=app
        )
    if plan is None:
        with FlowClients(flow) as clients:
            plan = discover(flow, clients)
    tasks = plan_copy(flow, copyable(plan), interval=interval, run_seconds=run_seconds, run_started_ms=run_started_ms)
    runtimes: list[Runtime] = []
    groups, quiet = spread_over_cores(flow, tasks, spark, interval=interval)
    results = run_copy_groups(spark, groups, on_progress=on_progress, runtimes=runtimes)
    summary = summarise(results)
    summary["spark_tasks"] = len(groups)
    summary["quiet_partitions"] = quiet
    summary.update(idle_counts([[(t.topic, t.partition) for t in group] for group in groups], results))
    summary["executors"] = runtimes
    summary["flow"] = flow.name
    summary["mode"] = "interval" if interval else "continuous"
    return summary


class CopyStep:
    """The copy step of a cycle run outside Airflow (`mirrorflow run`): an interval copy to the ends seen now on a
    Spark session started on first use. It only copies: checkpoints and group sync are the cycle's next steps
    (`flow_cycle.CHECKPOINTS`, `GROUPS`), as in the interval-mode DAG."""

    def __init__(self, master: str | None = None, on_progress: Callable[[str, int, int], None] | None = None) -> None:
        self._master = master
        self._on_progress = on_progress
        self._spark: SparkSession | None = None

    def __call__(self, flow: Flow, plan: FlowPlan, clients: FlowClients) -> dict[str, object]:
        if self._spark is None:
            self._spark = spark_session(self._master or flow.spark_master, "mirrorflow-run")
        # The cycle planned before topic sync ran: re-discover if it created or grew remote topics since.
        fresh = plan if not (plan.to_create() or plan.to_grow()) else None
        progress = None
        if self._on_progress is not None:
            report = self._on_progress

            def progress(done: int, total: int) -> None:
                report(flow.name, done, total)

        return copy_flow(flow, self._spark, interval=True, plan=fresh, on_progress=progress)

    def close(self) -> None:
        if self._spark is not None:
            self._spark.stop()
            self._spark = None


def main(argv: list[str] | None = None) -> int:
    """`spark-submit spark_jobs/mirrorflow_copy.py CONFIG --flow A->B [--mode ...]`; prints the totals line."""
    parser = argparse.ArgumentParser(prog="mirrorflow_copy", description="Copy one Mirrorflow flow on Spark.")
    parser.add_argument("config", help="the mm2.properties file")
    parser.add_argument("--flow", required=True, help="the flow to copy, e.g. A->B")
    parser.add_argument("--clusters", nargs="*", default=None, help="MM2's --clusters subset")
    parser.add_argument("--mode", choices=["interval", "continuous"], default=None, help="default: the flow's")
    parser.add_argument("--run-seconds", type=float, default=None, help="continuous mode: how long to run")
    parser.add_argument("--try-number", type=int, default=0, help="the Airflow task's try (orders rounds' claims)")
    parser.add_argument("--app-id", default=None, help="a leased application's id (replication/copy_app.py)")
    parser.add_argument("--config-id", default="", help="with --app-id: the configuration it was submitted for")
    parser.add_argument("--summary-file", default=None, help="also write the JSON summary here")
    parser.add_argument("--summary-key", default=None, help="also write the totals to the metrics topic, this key")
    parser.add_argument("--master", default=None, help="Spark master (default: the flow's mirrorflow.spark.master)")
    parser.add_argument(
        "--run-started-ms", type=int, default=None, help="when the run started (the DAG run's start; default: now)"
    )
    args = parser.parse_args(argv)
    try:
        flow = load_config(args.config, split_cluster_args(args.clusters) or None).flow(args.flow)
        # Credentials from Airflow connections arrive in the environment, never on the command line.
        flow = with_cluster_settings(flow, cluster_settings_from_env(os.environ))
        mode = args.mode or flow.copy_mode
        run_seconds = args.run_seconds if args.run_seconds is not None else float(flow.copy_run_seconds)
        master = args.master or flow.spark_master
        if mode == "continuous" and rounds_apply(flow.delivery, flow.copy_round_seconds, run_seconds):
            master = round_master(master)
        spark = spark_session(master, f"mirrorflow-copy {flow.name}", flow.spark_submit_conf())
        try:
            summary = copy_flow(
                flow,
                spark,
                interval=mode == "interval",
                run_seconds=run_seconds,
                run_started_ms=args.run_started_ms,
                try_number=args.try_number,
                app=(args.app_id, args.config_id) if args.app_id else None,
            )
        finally:
            spark.stop()
    except MirrorflowError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    if args.summary_file:
        Path(args.summary_file).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    if args.summary_key:  # a driver the Airflow task cannot reach by file (cluster deploy mode)
        try:
            publish_summary(flow, args.summary_key, summary)
        except MirrorflowError as err:
            print(f"warning: the totals did not reach the Airflow task: {err}", file=sys.stderr)
    print(totals_line(summary))
    return 0

"""The copy on Spark: the driver plans one copy range per source partition, executors run `copy_range`; when
partitions outnumber Spark's slots, one Spark task copies several ranges in threads (`copy_ranges`).

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
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from pyspark import TaskContext
from pyspark.sql import SparkSession

from mirrorflow.config.loader import load_config, split_cluster_args
from mirrorflow.config.model import Flow
from mirrorflow.config.overrides import cluster_settings_from_env, with_cluster_settings
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.replication.copy_group import copy_ranges
from mirrorflow.replication.copy_plan import (
    copyable,
    idle_counts,
    plan_copy,
    refresh_identities,
    spread,
    spread_quiet,
    summarise,
    totals_line,
)
from mirrorflow.replication.copy_quiet import quiet_partitions
from mirrorflow.replication.copy_rounds import CopyRounds, rounds_apply
from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.discovery import FlowPlan, discover
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import flow_paused, state_root_override
from mirrorflow.replication.job_summary import publish_summary
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


Runtime = dict[str, str]
"""Where an executor's code came from: its `python` and the file of each package in RUNTIME_PACKAGES."""
RUNTIME_PACKAGES = ("mirrorflow", "confluent_kafka", "pydantic")


def executor_runtime() -> Runtime:
    """This Python worker's interpreter and package files: shows a cluster ran the shipped zip and env."""
    files = {name: str(getattr(sys.modules.get(name), "__file__", "") or "") for name in RUNTIME_PACKAGES}
    return {"python": sys.executable, **files}


def _copy_partition(groups: Iterable[list[CopyTask]]) -> Iterator[tuple[CopyResult, Runtime]]:
    context = TaskContext.get()
    retried = context is not None and context.attemptNumber() > 0
    for group in groups:
        if retried:  # a topic may have been re-created since planning (see `refresh_identities`)
            group = refresh_identities(group)
        runtime = executor_runtime()
        for result in copy_ranges(group):
            yield result, runtime


OnProgress = Callable[[int, int], None]
"""Called with (ranges done, ranges in all) while a copy job runs (ranges of a Spark task count when it ends)."""


def run_copy_groups(
    spark: SparkSession,
    groups: list[list[CopyTask]],
    *,
    on_progress: OnProgress | None = None,
    runtimes: list[Runtime] | None = None,
) -> list[CopyResult]:
    """Run each group of ranges (see `spread`) as one Spark task; a range that fails for good fails the job with
    its reason.

    `runtimes`, when given, receives each distinct executor runtime seen (see `executor_runtime`)."""
    tasks = [task for group in groups for task in group]
    if not tasks:
        return []
    sc = spark.sparkContext
    group = f"mirrorflow-copy-{uuid.uuid4().hex[:12]}"
    sc.setJobGroup(group, f"copy {tasks[0].flow}: {len(tasks)} partition ranges in {len(groups)} Spark tasks")
    stop = threading.Event()
    watcher = None
    if on_progress is not None:
        sizes = [len(g) for g in groups]
        watcher = threading.Thread(target=_watch, args=(spark, group, sizes, on_progress, stop), daemon=True)
        watcher.start()
    rdd = sc.parallelize(groups, len(groups))
    try:
        pairs: list[tuple[CopyResult, Runtime]] = rdd.mapPartitions(_copy_partition).collect()
    except Exception as err:  # py4j wraps the executor's Python exception in a Java one
        raise MirrorflowError(f"the Spark copy job failed: {python_error_line(str(err))}") from None
    finally:
        stop.set()
        if watcher is not None:
            watcher.join(timeout=5)
    if on_progress is not None:
        on_progress(len(tasks), len(tasks))
    if runtimes is not None:
        runtimes.extend(dict(seen) for seen in sorted({tuple(sorted(r.items())) for _, r in pairs}))
    return [result for result, _ in pairs]


def _watch(spark: SparkSession, group: str, sizes: list[int], on_progress: OnProgress, stop: threading.Event) -> None:
    """Report finished ranges from Spark's status tracker until the job ends. The tracker counts finished
    Spark tasks, not which ones: groups differ by one range at most, so the smallest count first is exact
    or one short."""
    tracker = spark.sparkContext.statusTracker()
    total = sum(sizes)
    smallest_first = sorted(sizes)
    while not stop.wait(0.25):
        done = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = tracker.getStageInfo(stage_id)
                done += stage.numCompletedTasks if stage is not None else 0
        on_progress(min(sum(smallest_first[:done]), total), total)


def python_error_line(java_message: str) -> str:
    """The executor's own exception line out of a Py4J/Spark error text (which carries the Python traceback)."""
    lines = [line.strip() for line in java_message.splitlines()]
    for marker in ("MirrorflowError:", "KafkaOperationError:", "Error:", "Exception:"):
        for line in reversed(lines):
            if marker in line and not line.startswith(("at ", "py4j", "org.apache")):
                return line.split("mirrorflow.core.errors.", 1)[-1]
    return lines[0] if lines else java_message


def copy_flow(
    flow: Flow,
    spark: SparkSession,
    *,
    interval: bool,
    run_seconds: float | None = None,
    plan: FlowPlan | None = None,
    on_progress: OnProgress | None = None,
    run_started_ms: int | None = None,
) -> dict[str, object]:
    """One copy run of a flow: discover (unless given the plan), copy every partition on Spark, summarise.
    `run_started_ms` orders overlapping continuous runs (`copy_claims`): the DAG run's start when Airflow runs the
    copy, so a retry of an older run's task never counts as the newest run; now if None."""
    if not interval and run_seconds and rounds_apply(flow.delivery, flow.copy_round_seconds, run_seconds):
        return copy_in_rounds(flow, spark, run_seconds=run_seconds, run_started_ms=run_started_ms)
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


def copy_in_rounds(
    flow: Flow, spark: SparkSession, *, run_seconds: float, run_started_ms: int | None
) -> dict[str, object]:
    """A continuous exactly-once run that plans again every `mirrorflow.copy.round.seconds` inside this Spark
    application and hands over only the Spark tasks whose ranges changed (`copy_rounds`)."""
    runtimes: list[Runtime] = []

    def plan_round(left_s: float, started_ms: int) -> tuple[list[list[CopyTask]], int]:
        with FlowClients(flow) as clients:
            found = discover(flow, clients)
        tasks = plan_copy(flow, copyable(found), interval=False, run_seconds=left_s, run_started_ms=started_ms)
        quiet_after = float(flow.copy_round_seconds)
        return spread_over_cores(flow, tasks, spark, interval=False, share=2, quiet_after_s=quiet_after)

    def paused() -> str | None:
        with FlowClients(flow) as clients:
            return flow_paused(flow, clients, state_root_override())

    rounds = CopyRounds(
        run_seconds=run_seconds,
        round_seconds=float(flow.copy_round_seconds),
        handover_seconds=float(flow.copy_handover_seconds),
        run_started_ms=run_started_ms or int(time.time() * 1000),
        plan=plan_round,
        run=lambda groups: run_copy_groups(spark, groups, runtimes=runtimes),
        cancel=spark.sparkContext.cancelAllJobs,
        paused=paused,
    )
    out = rounds.copy()
    summary = summarise(out.results)
    summary.update(spark_tasks=len(out.groups), quiet_partitions=out.quiet, rounds=out.rounds)
    summary.update(round_handovers=out.handovers, flow=flow.name, mode="continuous")
    summary.update(idle_counts([[(t.topic, t.partition) for t in g] for g in out.groups], out.results))
    summary["executors"] = [dict(seen) for seen in sorted({tuple(sorted(r.items())) for r in runtimes})]
    if out.paused:
        summary["paused"] = out.paused
    return summary


def round_master(master: str) -> str:
    """A local master with twice the task threads: two rounds' Spark tasks run at once while they hand over
    (`copy_rounds`); each round plans for half of them (`spread_over_cores(share=2)`). Others as given."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master.strip())
    if m is None:
        return master
    threads = (os.cpu_count() or 1) if m.group(1) in (None, "*") else int(m.group(1))
    return f"local[{2 * threads}]"


def spread_over_cores(
    flow: Flow,
    tasks: list[CopyTask],
    spark: SparkSession,
    *,
    interval: bool,
    share: int = 1,
    quiet_after_s: float | None = None,
) -> tuple[list[list[CopyTask]], int]:
    """The Spark tasks of the copy (`spread`), within the application's `spark.cores.max` when it has one, and
    how many partitions were found quiet (`copy_quiet`: a continuous copy groups them into one task).

    Spark's default parallelism is at least 2 on a cluster whatever cores the application may hold, so the cap
    the Airflow task sets (one core per `mirrorflow.copy.partitions.per.task` partitions) bounds the slots too.
    A continuous copy never runs more tasks than cores: a task waiting for a core would copy nothing until
    another's run ends, so its partitions would lag by a whole run; each task then copies more partitions.

    `share`: how many copies of the flow the application runs at once (2 with rounds: the next round's tasks
    start before the current ones hand over, `copy_rounds`), so one copy takes 1/share of the slots.
    `quiet_after_s`: how long without traffic makes a partition quiet; default the run's length."""
    slots = spark.sparkContext.defaultParallelism
    raw = spark.sparkContext.getConf().get("spark.cores.max")
    cores = int(raw) if raw and raw.strip().isdigit() and int(raw) > 0 else None
    if cores is not None:
        slots = min(slots, cores)
    slots = max(1, slots // max(share, 1))
    cores = None if cores is None else max(1, cores // max(share, 1))
    quiet: set[tuple[str, int]] = set()
    if interval:
        groups = spread(tasks, slots, flow.copy_partitions_per_task)
    else:
        run_s = max((t.run_seconds or 0.0 for t in tasks), default=0.0) or float(flow.copy_run_seconds)
        quiet = quiet_partitions(flow, tasks, quiet_after_s or run_s)
        groups = spread_quiet(tasks, quiet, slots, flow.copy_partitions_per_task, cores)
    needed = -(-len(tasks) // max(flow.copy_partitions_per_task, 1))
    if cores is not None and not interval and needed > cores:
        log.warning(
            "flow %s: %d partitions at %d per Spark task need %d tasks, but spark.cores.max is %d: each of the %d "
            "tasks copies up to %d partitions (a task waiting for a core would copy nothing for a whole run)",
            flow.name,
            len(tasks),
            flow.copy_partitions_per_task,
            needed,
            cores,
            len(groups),
            max((len(g) for g in groups), default=0),
        )
    return groups, len(quiet)


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
                flow, spark, interval=mode == "interval", run_seconds=run_seconds, run_started_ms=args.run_started_ms
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

"""The copy's Spark jobs: each group of copy ranges (`copy_plan.spread`) runs as one Spark task, and a job of
such tasks runs until their ranges end (`run_copy_groups`). Shared by one plan per run (`copy_job.copy_flow`) and
by rounds (`copy_rounds_job`), which run each group as a job of its own so that single tasks can be cancelled.
"""

from __future__ import annotations

import logging
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator

from pyspark import TaskContext
from pyspark.sql import SparkSession

from mirrorflow.config.model import Flow
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.replication.copy_group import copy_ranges
from mirrorflow.replication.copy_plan import refresh_identities, spread, spread_quiet
from mirrorflow.replication.copy_quiet import quiet_partitions
from mirrorflow.replication.copy_task import CopyResult, CopyTask

log = logging.getLogger(__name__)


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
    job_group: str | None = None,
) -> list[CopyResult]:
    """Run each group of ranges (see `spread`) as one Spark task; a range that fails for good fails the job with
    its reason.

    `runtimes`, when given, receives each distinct executor runtime seen (see `executor_runtime`). `job_group`:
    the Spark job group to run in (what `cancelJobGroup` names), a new one if None."""
    tasks = [task for group in groups for task in group]
    if not tasks:
        return []
    sc = spark.sparkContext
    group = job_group or f"mirrorflow-copy-{uuid.uuid4().hex[:12]}"
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

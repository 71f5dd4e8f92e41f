"""Mirrorflow's copy: interval mode in its own process (one `copy_range` thread per partition), interval mode
through Spark local (`copy_flow`, one Spark task per partition), and continuous mode (`copy_range` with
`run_seconds`, one thread per partition, stopped once caught up); exactly-once and at-least-once.

Every variant is a flow from its own alias pointing at the source cluster, so each starts from offset 0 into its
own remote topic and its own progress/offset-map topics.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from confluent_kafka.admin import NewTopic

from harness import COMPACT, KEEP, ArrivalWatch, Case, RssSampler, Watching, create_topics, delete_topics
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.replication.copy_group import copy_ranges
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_task import CopyTask
from report import MIRRORFLOW, Overhead, Run

ROOT = Path(__file__).resolve().parents[1]
SPARK_JOB = ROOT / "spark_jobs" / "mirrorflow_copy.py"


def write_config(
    path: Path, source: str, target: str, flows: dict[str, tuple[str, str]], extra: tuple[str, ...] = ()
) -> None:
    """`flows`: alias -> (topic, delivery); `extra`: more lines. Heartbeats off: only the case's topic is copied."""
    lines = [f"clusters = B, {', '.join(flows)}", f"B.bootstrap.servers = {target}"]
    for alias, (topic, delivery) in flows.items():
        lines += [
            f"{alias}.bootstrap.servers = {source}",
            f"{alias}->B.enabled = true",
            f"{alias}->B.topics = {topic}",
            f"{alias}->B.mirrorflow.delivery = {delivery}",
            f"{alias}->B.heartbeats.replication.enabled = false",
        ]
    lines += [
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "admin.timeout.ms = 30000",
        *extra,
    ]
    path.write_text("\n".join(lines) + "\n")


def flow_settings(aliases: Iterable[str], items: Iterable[str]) -> tuple[str, ...]:
    """`--set KEY=VALUE` items as config lines `<alias>->B.KEY = VALUE` for every alias."""
    pairs = [item.split("=", 1) for item in items]
    return tuple(f"{alias}->B.{key} = {value}" for alias in aliases for key, value in pairs)


def prepare_flow_topics(source: str, target: str, alias: str, case: Case, remote_config: dict[str, str]) -> None:
    """The remote topic and Mirrorflow's internal topics of one variant (the control plane would create them)."""
    names = [NewTopic(f"{alias}.{case.topic}", case.partitions, 1, config=remote_config)]
    names += [
        NewTopic(f"mirrorflow-{kind}.{alias}.internal", 1, 1, config=COMPACT)
        for kind in ("progress", "offset-map", "metrics")
    ]
    create_topics(target, names)
    create_topics(source, [NewTopic("mm2-offset-syncs.B.internal", 1, 1, config=COMPACT)])


def flow_of(config: Path, alias: str) -> Flow:
    return load_config(config).flow(f"{alias}->B")


def tasks_of(flow: Flow, case: Case, *, interval: bool, run_seconds: float | None = None) -> list[CopyTask]:
    topics = [SourcePartitions(case.topic, f"{flow.source}.{case.topic}", case.partitions)]
    return plan_copy(flow, topics, interval=interval, run_seconds=run_seconds)


def _copy_child(tasks: list[CopyTask], conn: Connection) -> None:
    """In the child: copy every task in its own thread (as one Spark task does); send (start, records) when done."""
    started = time.perf_counter()
    conn.send(("started", started))
    records = sum(r.records for r in copy_ranges(tasks))
    conn.send(("done", records))


def _in_child(tasks: list[CopyTask], watch: ArrivalWatch, *, until_caught_up: bool, timeout_s: float) -> Any:
    """Runs `_copy_child` in a spawned process sampled for RSS. Interval: until it returns; continuous: until
    the watch sees the whole case on the target, then the process is terminated (its open transaction aborts).
    Returns (started, done, peak RSS MiB)."""
    parent, child = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(target=_copy_child, args=(tasks, child), daemon=True)
    process.start()
    try:
        with RssSampler(process.pid or 0) as rss:
            deadline = time.monotonic() + timeout_s
            if not parent.poll(120):
                raise RuntimeError("the copy process did not start")
            _, started = parent.recv()
            done: float | None = None
            while done is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"copy incomplete after {timeout_s:.0f}s")
                complete = watch.complete()
                if until_caught_up and complete:
                    done = time.perf_counter()
                elif parent.poll(0.1):
                    message = parent.recv()
                    done = time.perf_counter()
                    if not until_caught_up and message[1] != watch.case.records:
                        raise RuntimeError(f"copied {message[1]} records, expected {watch.case.records}")
                elif not process.is_alive():
                    raise RuntimeError(f"the copy process exited with {process.exitcode}")
    finally:
        if process.is_alive():
            process.terminate()
        process.join(30)
        watch.close()
    return started, done, rss.peak_mib


def copy_in_process(
    config: Path,
    source: str,
    target: str,
    case: Case,
    alias: str,
    *,
    eos: bool,
    continuous: bool,
    timeout_s: float,
    record_overhead_bytes: int | None = None,
) -> Run:
    """`record_overhead_bytes` (when given) replaces the copy's per-record buffer cost (0: byte budgets only)."""
    prepare_flow_topics(source, target, alias, case, KEEP)
    flow = flow_of(config, alias)
    tasks = tasks_of(flow, case, interval=not continuous, run_seconds=timeout_s if continuous else None)
    if record_overhead_bytes is not None:
        tasks = [replace(task, record_overhead_bytes=record_overhead_bytes) for task in tasks]
    watch = ArrivalWatch(target, f"{alias}.{case.topic}", case)
    started, done, peak = _in_child(tasks, watch, until_caught_up=continuous, timeout_s=timeout_s)
    first = watch.first_arrival or done
    delete_topics(target, [f"{alias}.{case.topic}"])
    mode = "continuous" if continuous else "interval"
    return Run(
        case.name,
        f"Mirrorflow {mode} in-process, {'exactly-once' if eos else 'at-least-once'}",
        MIRRORFLOW,
        case.records,
        case.value_bytes,
        done - started,
        eos=eos,
        startup_s=max(0.0, first - started),
        peak_rss_mib=peak,
        task_rss_mib=peak,  # one process holds every partition's task
    )


class SparkBench:
    """One Spark local session for all Spark variants (its JVM and first Python worker started up front)."""

    def __init__(self, master: str) -> None:
        from mirrorflow.spark.copy_job import spark_session

        self.master = master
        self.spark = spark_session(master, "mirrorflow-bench")
        self.spark.sparkContext.parallelize([0], 1).count()
        gateway: Any = self.spark.sparkContext._gateway
        self.jvm_pid = int(gateway.proc.pid)

    def copy(
        self, config: Path, source: str, target: str, case: Case, alias: str, *, eos: bool, keep: bool = False
    ) -> Run:
        """`keep`: leave the remote topic for the fixed-cost runs that follow (spark-submit, `dag.test()`): deleted,
        the flow's next `sync_topics` would create it anew and the copy would stop, rightly, at a remote topic
        re-created under its progress (a different topic ID)."""
        from mirrorflow.spark.copy_job import copy_flow

        prepare_flow_topics(source, target, alias, case, KEEP)
        flow = flow_of(config, alias)
        watch = ArrivalWatch(target, f"{alias}.{case.topic}", case)
        with RssSampler(self.jvm_pid) as rss, Watching(watch):
            started = time.perf_counter()
            summary = copy_flow(flow, self.spark, interval=True)
            done = time.perf_counter()
        first = watch.first_arrival or done
        if summary["records"] != case.records:
            raise RuntimeError(f"Spark copied {summary['records']} records, expected {case.records}")
        if not keep:
            delete_topics(target, [f"{alias}.{case.topic}"])
        return Run(
            case.name,
            f"Mirrorflow interval Spark {self.master}, {'exactly-once' if eos else 'at-least-once'}",
            MIRRORFLOW,
            case.records,
            case.value_bytes,
            done - started,
            eos=eos,
            startup_s=max(0.0, first - started),
            peak_rss_mib=rss.peak_mib,
            task_rss_mib=rss.largest_mib(frozenset({self.jvm_pid})),
        )

    def stop(self) -> None:
        self.spark.stop()


def spark_submit_overhead(config: Path, alias: str, copy_seconds: float | None, master: str = "local[2]") -> Overhead:
    """`spark-submit` of the copy job (as the Airflow copy task runs it) for a flow with nothing left to copy:
    the fixed cost every interval run pays on top of its copy."""
    spark_submit = Path(sys.executable).with_name("spark-submit")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PATH": f"{spark_submit.parent}:{os.environ['PATH']}"}
    command = [str(spark_submit), "--master", master, str(SPARK_JOB), str(config), "--flow", f"{alias}->B"]
    command += ["--mode", "interval"]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"spark-submit failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return Overhead(
        f"spark-submit {master} of an empty range (JVM, session, discovery, fencing)", seconds, copy_seconds
    )

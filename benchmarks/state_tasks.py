"""What a Spark task of several copy ranges fetches of its state at its start, two ways in the same run
(`bench_state_startup.py` prints both):

- today: the ranges grouped round-robin (`tasks[i::groups]`, `copy_plan.spread` before slot grouping), each range
  reading its own state through its own reader, as `copy_range` did;
- grouped and shared: the groups of `copy_plan.spread` (ranges of one state slot together, `slot_groups`), the
  ranges reading through one `LogCache` (`copy_group.copy_ranges`), so a slot is fetched once per task.

Each task's ranges run their start-up reads at once in threads, as `copy_ranges` does: `state_reader` (the
reader, connected to both state topics), `load_state` (progress then map) and `load_snapshot` (metrics). Counted:
the state bytes fetched from the brokers (keys and values of the records `compacted_log.consume_to` delivers), the
partitions whose progress records were fetched, and the wall seconds of the task's reads.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import mirrorflow.kafka.compacted_log as compacted_log
from mirrorflow.kafka.log_cache import LogCache
from mirrorflow.replication.copy_plan import spread
from mirrorflow.replication.copy_slots import load_snapshot, load_state, state_reader
from mirrorflow.replication.copy_task import CopyTask
from mirrorflow.replication.metrics import snapshot_key

PER_TASK = 8
"""Ranges per Spark task: `mirrorflow.copy.partitions.per.task`'s default."""


class TaskFigures(NamedTuple):
    """Medians over the sampled tasks: state bytes fetched, partitions' progress fetched, wall seconds."""

    fetched: float
    partitions: float
    seconds: float


class _Counter:
    """Bytes and progress keys fetched, per thread's task (`consume_to` wrapped for the whole measurement)."""

    def __init__(self, progress_topic: str) -> None:
        self.progress_topic = progress_topic
        self.lock = threading.Lock()
        self.bytes = 0
        self.keys: set[bytes] = set()

    def add(self, topic: str, record: tuple[Any, ...]) -> None:
        with self.lock:
            self.bytes += len(record[2] or b"") + len(record[3] or b"")
            if topic == self.progress_topic and record[2] is not None:
                self.keys.add(record[2])


def _start_reads(task: CopyTask, shared: LogCache | None) -> None:
    """The state reads of one range's start, as `copy_range` makes them (interval mode: no read ahead)."""
    ahead = state_reader(task, shared)
    state = load_state(task, ahead.reader)
    snapshot, _ = load_snapshot(task, str(task.metrics_topic), snapshot_key(task.remote_topic, task.partition), shared)
    assert state.progress is not None and state.segments.runs and snapshot, f"{task.partition}: state missing"


def _run_group(group: list[CopyTask], shared: bool, counter: _Counter) -> tuple[int, int, float]:
    cache = LogCache() if shared else None
    with counter.lock:
        counter.bytes, counter.keys = 0, set()
    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(max_workers=len(group)) as pool:
            for done in [pool.submit(_start_reads, task, cache) for task in group]:
                done.result()
    finally:
        if cache is not None:
            cache.close()
    seconds = time.perf_counter() - started
    return counter.bytes, len(counter.keys), seconds


def measure_tasks(tasks: list[CopyTask], sample: int) -> dict[str, TaskFigures]:
    """{"today": ..., "grouped, shared": ...} over `sample` tasks of each way, spread over the flow."""
    groups = spread(tasks, 1, PER_TASK)
    ways = {"today": ([tasks[i :: len(groups)] for i in range(len(groups))], False), "grouped, shared": (groups, True)}
    counter = _Counter(tasks[0].progress_topic)
    real = compacted_log.consume_to

    def counted(reader: Any, cluster: str, topic: str, *args: Any) -> Iterator[Any]:
        for record in real(reader, cluster, topic, *args):
            counter.add(topic, record)
            yield record

    compacted_log.consume_to = counted  # type: ignore[assignment]
    figures = {}
    try:
        for way, (grouping, shared) in ways.items():
            step = max(len(grouping) // sample, 1)
            runs = [_run_group(group, shared, counter) for group in grouping[::step][:sample]]
            figures[way] = TaskFigures(*(statistics.median(column) for column in zip(*runs, strict=True)))
    finally:
        compacted_log.consume_to = real  # type: ignore[assignment]
    return figures

"""Several copy ranges in one process, one thread each: how one Spark task copies more partitions than Spark has
slots, and how the benchmarks copy in-process.

Threads suit the copy: nearly all of its time is librdkafka I/O and waits that release the GIL. A continuous
range runs for minutes, so ranges queued behind a busy slot would start late; grouping them into the running
tasks starts every partition at once. When one range fails, its siblings stop at their next transaction
boundary (their committed work stands) and the first error fails the group, so Spark retries the whole task;
the retry's fencing and stored progress resume each range where it stopped.

The ranges read their state through one cache (`kafka.log_cache`): ranges whose state shares a slot (the copy
plan groups them so, `copy_plan.spread`) fetch it once between them, and each later read of it is a tail from
where the last one stopped, to that read's own end. A range that fails leaves the cache as a prefix of the log
that the others continue from.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from mirrorflow.kafka.log_cache import LogCache
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.internal_topics import STATE_TAIL_MAX_GAP_S

TASK_MEMORY_BYTES = 256 * 1024 * 1024
"""The buffers of one Spark task, shared by its ranges: with Python and the records in flight a task stays within
the 512 MB a copy task may use however many partitions it copies (docs/benchmarks.md measures it)."""
MIN_RANGE_MEMORY_BYTES = 16 * 1024 * 1024


def copy_ranges(tasks: Sequence[CopyTask], shared: LogCache | None = None) -> list[CopyResult]:
    """Copy every range concurrently; the results in the order of `tasks`, or the first failure raised. `shared`:
    the cache of the ranges' state reads (a new one if None, closed here; given by a caller that counts its
    fetches, which closes it)."""
    if shared is not None:
        return _copy_ranges(tasks, shared)
    # A range that takes its partition back late in a run (`copy_claims`) reads through the cache again: after a
    # gap longer than the state topics keep tombstones (half of it), it reads from the start.
    owned = LogCache(max_gap_s=STATE_TAIL_MAX_GAP_S)
    try:
        return _copy_ranges(tasks, owned)
    finally:
        owned.close()


def _copy_ranges(tasks: Sequence[CopyTask], shared: LogCache) -> list[CopyResult]:
    share = max(TASK_MEMORY_BYTES // max(len(tasks), 1), MIN_RANGE_MEMORY_BYTES)
    tasks = [replace(task, memory_bytes=min(task.memory_bytes, share)) for task in tasks]
    if len(tasks) == 1:
        return [copy_range(tasks[0], shared=shared)]
    failed = threading.Event()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(task: CopyTask) -> CopyResult | None:
        try:
            return copy_range(task, stop=failed.is_set, shared=shared)
        except BaseException as err:
            with lock:
                errors.append(err)  # in the order they happened: the first is the cause
            failed.set()
            return None

    with ThreadPoolExecutor(max_workers=len(tasks), thread_name_prefix="copy") as pool:
        results = list(pool.map(run, tasks))
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]

"""Wall-clock marks of a copy's phases, for profiling a run boundary of continuous exactly-once mode (issue 19,
`profile_handover.py`). Nothing here changes what the copy does: `install` wraps the collaborators `copy_range`
and `CopyLoop` call (the writer, the reader, the set-up reads, the commit, the fence check, the claim wait) and
writes one line per phase to a file, so that the old run's last commit, the fence and the new run's first
commit can be put on one time line without touching the product's code.

A line: `<epoch ms> run=<n> p=<partition> <event> <details>`. Run as a script, it is one run's copy process:
`handover_probe.py RUN TASKS_PICKLE EVENTS` copies every task in a thread (as one Spark task does), marked; which
`mirrorflow` it imports is the caller's PYTHONPATH (the profile compares two versions in one run that way).
"""

from __future__ import annotations

import functools
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

import mirrorflow.replication.copy_loop as copy_loop_mod
import mirrorflow.replication.copy_range as copy_range_mod
from mirrorflow.kafka.partition_reader import PartitionReader
from mirrorflow.kafka.transfer import Batch, TargetWriter
from mirrorflow.replication.copy_loop import CopyLoop
from mirrorflow.replication.offset_sync_writer import OffsetSyncWriter

_out: TextIO | None = None
_run = -1
_lock = threading.Lock()


def mark(partition: int | str, event: str, detail: str = "") -> None:
    """One line: now, this run, the partition, the event."""
    line = f"{time.time() * 1000:.1f} run={_run} p={partition} {event} {detail}".rstrip() + "\n"
    with _lock:
        if _out is not None:
            _out.write(line)
            _out.flush()


def _timed(partition_of: Callable[..., int | str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        partition = partition_of(*args, **kwargs)
        mark(partition, f"{name}.start")
        try:
            result = fn(*args, **kwargs)
        except BaseException as err:
            mark(partition, f"{name}.error", repr(err)[:200])
            raise
        mark(partition, f"{name}.end")
        return result

    return wrapper


def _task_partition(task: Any, *_a: Any, **_k: Any) -> int:
    return int(task.partition)


class ProbeWriter(TargetWriter):
    """The target writer with init_transactions, the fence check and the first produce marked."""

    def __init__(self, cluster: str, conf: Any, **kwargs: Any) -> None:
        tid = kwargs.get("transactional_id") or ""
        self.probe_partition = tid.rsplit("|", 1)[-1] if tid else "?"
        self.probe_forwarded = False
        mark(self.probe_partition, "writer.start")
        super().__init__(cluster, conf, **kwargs)
        mark(self.probe_partition, "writer.ready")

    def _call(self, what: str, fn: Callable[[], object]) -> None:
        loud = what.startswith("initialising")
        if loud and os.environ.get("PROBE_CONNECT_FIRST"):
            mark(self.probe_partition, "connect.start")
            self._producer.list_topics(timeout=self.timeout_s)
            mark(self.probe_partition, "connect.end")
        if loud:
            mark(self.probe_partition, "init_transactions.start")
        try:
            super()._call(what, fn)
        except BaseException as err:
            mark(self.probe_partition, f"{what}.error", repr(err)[:200])
            raise
        if loud:
            mark(self.probe_partition, "init_transactions.end")

    def flush(self) -> None:
        began = time.monotonic()
        super().flush()
        self._slow("flush", began)

    def commit(self) -> None:
        began = time.monotonic()
        super().commit()
        self._slow("commit_transaction", began)

    def _slow(self, what: str, began: float) -> None:
        """Marks a flush or commit of the writer's first three transactions, or one that took over 200 ms."""
        self.probe_commits = getattr(self, "probe_commits", 0) + (what == "commit_transaction")
        took = (time.monotonic() - began) * 1000
        if self.probe_commits <= 3 or took > 200:
            mark(self.probe_partition, f"{what}.took", f"ms={took:.0f} n={self.probe_commits}")

    def fenced(self, err: BaseException) -> bool:
        mark(self.probe_partition, "fenced_check.start", repr(err)[:160])
        found = super().fenced(err)
        mark(self.probe_partition, "fenced_check.end", f"fenced={found}")
        return found

    def forward(self, messages: Any, topic: str, partition: int, batch: Batch, **kwargs: Any) -> bool:
        if not self.probe_forwarded:
            self.probe_forwarded = True
            mark(self.probe_partition, "first_produce", f"messages={len(messages)} from={messages[0].offset()}")
        return super().forward(messages, topic, partition, batch, **kwargs)


class ProbeReader(PartitionReader):
    """The source reader with its opening and first non-empty read marked."""

    def __init__(self, cluster: str, conf: Any, topic: str, partition: int, start: int, **kwargs: Any) -> None:
        self.probe_partition, self.probe_read = partition, False
        mark(partition, "reader.start", f"from={start}")
        super().__init__(cluster, conf, topic, partition, start, **kwargs)
        mark(partition, "reader.ready")

    def read(self, wanted: int, timeout_s: float) -> Any:
        messages = super().read(wanted, timeout_s)
        if messages and not self.probe_read:
            self.probe_read = True
            mark(self.probe_partition, "first_read", f"messages={len(messages)}")
        return messages


class ProbeSyncs(OffsetSyncWriter):
    """The offset-sync writer with its heal marked."""

    def heal(self, *args: Any, **kwargs: Any) -> int:
        mark(self._task.partition, "heal.start")
        healed = super().heal(*args, **kwargs)
        mark(self._task.partition, "heal.end", f"healed={healed}")
        return healed


def _probe_loop() -> None:
    """Marks on `CopyLoop`: each commit (records, duration), the loop's error, the claim wait, the run's end."""
    commit, run, inner = CopyLoop._commit, CopyLoop.run, CopyLoop._run
    # The claim wait's name in this version (`--before` profiles an older one): `_claimant` since session 15.
    claimed_name = "_claimant" if hasattr(CopyLoop, "_claimant") else "_successor_claimed"
    claimed = getattr(CopyLoop, claimed_name)

    def probe_commit(self: CopyLoop, batch: Batch, began: bool) -> tuple[int, int]:
        p, n = self.task.partition, len(batch.upstreams)
        mark(p, "commit.start", f"records={n} n={self.commits}")
        try:
            found = commit(self, batch, began)
        except BaseException as err:
            mark(p, "commit.error", repr(err)[:200])
            raise
        mark(p, "commit.end", f"records={n} n={self.commits} to={self.committed_to}")
        return found

    def probe_inner(self: CopyLoop, on_batch: Any) -> Any:
        try:
            return inner(self, on_batch)
        except BaseException as err:
            mark(self.task.partition, "loop.error", repr(err)[:200])
            raise

    def probe_claimed(self: CopyLoop, *args: Any, **kwargs: Any) -> Any:
        mark(self.task.partition, "claim_wait.start")
        found = claimed(self, *args, **kwargs)
        mark(self.task.partition, "claim_wait.end", f"claimed={found}")
        return found

    def probe_run(self: CopyLoop, on_batch: Any) -> Any:
        mark(self.task.partition, "loop.start", f"epoch={self.epoch} from={self.consumed_to}")
        result = run(self, on_batch)
        mark(self.task.partition, "loop.end", f"handed_over={result.handed_over} records={result.records}")
        return result

    CopyLoop._commit = probe_commit  # type: ignore[method-assign]
    CopyLoop.run = probe_run  # type: ignore[method-assign]
    CopyLoop._run = probe_inner  # type: ignore[method-assign]
    setattr(CopyLoop, claimed_name, probe_claimed)
    copy_loop_mod.load_progress = _timed(_task_partition, "claim_poll", copy_loop_mod.load_progress)


def _probe_log_reader() -> None:
    """Marks each state read's metadata, true ends and consumption (records, ms) under the reading partition."""
    import mirrorflow.kafka.compacted_log as log_mod

    ends, consume = log_mod.true_ends, log_mod.consume_to
    where = threading.local()

    def probe_ends(asker: Any, topic: str, partitions: Any, timeout_s: float) -> Any:
        """`log_fetch.true_ends` answers in spans (a generator): the time asking each one."""
        began = time.monotonic()
        for found in ends(asker, topic, partitions, timeout_s):
            where.ends_ms = (time.monotonic() - began) * 1000
            yield found
            began = time.monotonic()

    def probe_consume(reader: Any, cluster: str, topic: str, found: dict[int, int], *args: Any) -> Any:
        began, n = time.monotonic(), 0
        for record in consume(reader, cluster, topic, found, *args):
            n += 1
            yield record
        took = (time.monotonic() - began) * 1000
        asked_ms = getattr(where, "ends_ms", 0.0)
        detail = f"topic={topic.split('.')[0]} records={n} ends={sum(found.values())} ends_ms={asked_ms:.0f}"
        mark(threading.current_thread().name, "state_read", f"{detail} consume_ms={took:.0f}")

    log_mod.true_ends = probe_ends  # type: ignore[assignment]
    log_mod.consume_to = probe_consume


def install(run: int, out: TextIO) -> None:
    """Wrap the copy's collaborators for run `run`, writing marks to `out`."""
    global _out, _run
    _out, _run = out, run
    copy_range_mod.TargetWriter = ProbeWriter  # type: ignore[misc]
    copy_range_mod.PartitionReader = ProbeReader  # type: ignore[misc]
    copy_range_mod.OffsetSyncWriter = ProbeSyncs  # type: ignore[misc]
    import mirrorflow.replication.copy_slots as slots_mod

    for name in ("load_progress", "load_segments"):
        setattr(slots_mod, name, _timed(_task_partition, name, getattr(slots_mod, name)))
    for name in ("load_state", "load_metric_bytes", "newest_offset_sync", "start_metrics"):
        setattr(copy_range_mod, name, _timed(_task_partition, name, getattr(copy_range_mod, name)))
    bounds = copy_range_mod.partition_bounds
    copy_range_mod.partition_bounds = _timed(  # type: ignore[assignment]
        lambda _c, _conf, _t, partition, **_k: partition, "partition_bounds", bounds
    )
    _probe_loop()
    _probe_log_reader()


def main(argv: list[str]) -> int:
    """One run's copy process: every task of the pickle copied in its own thread, with its phases marked."""
    run, tasks_path, events = int(argv[0]), argv[1], argv[2]
    with open(tasks_path, "rb") as f:
        tasks = pickle.load(f)
    with open(events, "a") as out:
        install(run, out)
        mark("-", "process.start", str(copy_range_mod.__file__))
        results: dict[int, Any] = {}

        def copy(task: Any) -> None:
            try:
                results[task.partition] = copy_range_mod.copy_range(task)
            except BaseException as err:
                mark(task.partition, "copy.failed", repr(err)[:300])
                raise

        threads = [threading.Thread(target=copy, args=(t,)) for t in tasks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        mark("-", "process.end", f"handed_over={ {p: r.handed_over for p, r in results.items()} }")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

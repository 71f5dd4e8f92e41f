"""`make bench-map-growth`: the offset map of a real exactly-once copy on real brokers after 1k to 200k
transactions, thinned and not, side by side: the broker counterpart of `make bench-offset-map` (which models the
same copy without a broker). docs/offsets.md has the figures.

Model: two flows on two local clusters, one per variant, each copying its own one-partition source topic (offset
syncs are keyed by source partition in a topic both flows would share, so they do not share a source). The source
is filled first with enough records; the copy is the product's own `copy_range` in continuous mode (`end=None`,
exactly-once: transactional producer, `commit_batch`, state topics created by `create_internal_topics` with their
slots), in a process of its own per variant. Accelerated: each transaction is capped at `--txn-records` records
through `CopyTask.batch_records` (the record cap `buffer_settings` applies), so a copy behind a filled source
commits one small transaction after another, as a caught-up copy does per poll, only as fast as the brokers
allow. Each transaction's commit marker takes a downstream offset, so every transaction opens a new exact run.
Variants: `unthinned` (`offset_runs.DEFAULT_EXACT_RUNS` as shipped: `NO_THINNING`) and `thinned` (set to
`THINNING_WINDOW` in its process before any `OffsetMap` is built: `OffsetMap` reads the module attribute at
construction, so the copy's restored map and the start-up measurement below both use it).

At each checkpoint (`--checkpoints`, counted in committed transactions with records) the copy stops between
transactions (its `stop` callback), both variants wait, and each one in turn, alone, measures on the target:
* map records/bytes read: the partition's offset-map records in its slots of the compacted topic as a reader
  gets them today, tombstones included (key + value bytes). The product creates its state topics with the
  broker's default segment size (1 GiB) and the log cleaner never cleans an active segment, so nothing written in
  a run this short is compacted: this is what a start-up reads now;
* live keys/bytes: the same records folded as compaction would leave them (latest per key, tombstones removed):
  what the map costs once the cleaner has run, i.e. the map's own size;
* start-up: the copy's own start-up reads, `copy_slots.load_progress` + `load_segments`, then `restore_map`
  (wall ms, median of `--repeat`); the progress topic is read whole too, and holds one record per transaction
  until the cleaner runs, so its record count is printed beside.
Then the copies resume from their committed progress (a new `copy_range`, as the next run of a flow would).
Transactions per second are those of the stretch since the previous checkpoint, start-up of the run included.
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from confluent_kafka.admin import NewTopic

from bench_mirrorflow import flow_of, write_config
from harness import KEEP, Case, bench_clusters, create_topics, produce_source, run_id, wait_for_leaders
from mirrorflow.core import offset_runs
from mirrorflow.core.offset_map import NO_THINNING, decode_segment_key
from mirrorflow.core.offset_runs import THINNING_WINDOW
from mirrorflow.core.progress import decode_progress_key
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_setup import restore_map
from mirrorflow.replication.copy_slots import load_progress, load_segments
from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.internal_topics import create_internal_topics
from report import text_table

CHECKPOINTS = (1_000, 10_000, 100_000, 200_000)
VARIANTS = {"unthinned": NO_THINNING, "thinned": THINNING_WINDOW}
KeyDecoder = Callable[[bytes], tuple[Any, ...]]
"""A state record key's decoder: its source topic and partition come first."""


@dataclass
class Stretch:
    """One copy run, from the previous checkpoint to the next."""

    transactions: int
    records: int
    seconds: float


@dataclass
class Measured:
    """What one variant's state holds at a checkpoint, and what its start-up costs."""

    read_records: int
    read_bytes: int
    live_keys: int
    live_bytes: int
    progress_records: int
    reads_ms: float
    restore_ms: float
    runs_restored: int
    window: int


def copy_until(task: CopyTask, done: int, checkpoint: int) -> Stretch:
    """One continuous copy run from the committed progress until `checkpoint` transactions with records have
    committed in all (`done` before this run): `stop` is asked between transactions."""
    latest = [0]

    def on_batch(result: CopyResult) -> None:
        latest[0] = result.transactions

    began = time.perf_counter()
    result = copy_range(task, on_batch=on_batch, stop=lambda: done + latest[0] >= checkpoint)
    if done + result.transactions != checkpoint:
        raise RuntimeError(f"{task.flow}: {done + result.transactions} transactions, expected {checkpoint}")
    return Stretch(result.transactions, result.records, time.perf_counter() - began)


def partition_records(task: CopyTask, topic: str, decode_key: KeyDecoder) -> tuple[int, int, dict[bytes, bytes]]:
    """(records, key + value bytes, live key -> value) of the task's partition in state topic `topic`, read whole
    with the project's reader (read_committed, to the true end)."""
    count = size = 0
    live: dict[bytes, bytes] = {}
    for _p, _o, key, value, _ts in read_to_end(task.target, task.target_consumer, topic, timeout_s=task.timeout_s):
        if key is None or tuple(decode_key(key)[:2]) != (task.topic, task.partition):
            continue
        count += 1
        size += len(key) + len(value or b"")
        if value is None:
            live.pop(key, None)
        else:
            live[key] = value
    return count, size, live


def measure(task: CopyTask, repeat: int) -> Measured:
    """The map on the real topic and the copy's start-up reads (see the module docstring)."""
    read_records, read_bytes, live = partition_records(task, task.offset_map_topic, decode_segment_key)
    progress_records = partition_records(task, task.progress_topic, decode_progress_key)[0]
    reads, restores = [], []
    for _ in range(repeat):
        began = time.perf_counter()
        progress, _ = load_progress(task)
        stored, _ = load_segments(task)
        loaded = time.perf_counter()
        assert progress is not None, f"{task.flow}: no progress stored"
        restored = restore_map(stored, progress, progress.next_upstream)
        reads.append(loaded - began)
        restores.append(time.perf_counter() - loaded)
    if len(stored.runs) != len(live):
        raise AssertionError(f"{task.flow}: the copy restores {len(stored.runs)} runs, the topic holds {len(live)}")
    return Measured(
        read_records,
        read_bytes,
        len(live),
        sum(len(k) + len(v) for k, v in live.items()),
        progress_records,
        statistics.median(reads) * 1000,
        statistics.median(restores) * 1000,
        len(restored.segments()),
        restored._store.window,  # proves the variant's window reached the copy's maps
    )


def variant_child(conn: Connection, window: int, task: CopyTask, repeat: int) -> None:
    """In the variant's own process: set its window before any map is built, then copy and measure on request."""
    offset_runs.DEFAULT_EXACT_RUNS = window
    done = 0
    while (message := conn.recv()) is not None:
        kind, checkpoint = message
        if kind == "copy":
            conn.send(copy_until(task, done, checkpoint))
            done = checkpoint
        else:
            conn.send(measure(task, repeat))


def prepare(source: str, target: str, alias: str, topic: str, records: int, txn_records: int, config: Path) -> CopyTask:
    """The variant's filled source topic, its remote topic, its state topics (the product's own creation, with
    slots) and its continuous copy task, transactions capped at `txn_records`."""
    create_topics(source, [NewTopic(topic, 1, 1, config=KEEP)])
    produce_source(source, Case(records, 100, 1, topic))
    create_topics(target, [NewTopic(f"{alias}.{topic}", 1, 1, config=KEEP)])
    flow = flow_of(config, alias)
    with FlowClients(flow) as clients:
        create_internal_topics(flow, clients, source_partitions=1)
    task = plan_copy(flow, [SourcePartitions(topic, f"{alias}.{topic}", 1)], interval=False)[0]
    state = [(t, p) for t in (task.progress_topic, task.offset_map_topic) for p in range(task.state_partitions)]
    wait_for_leaders(target, state)
    return replace(task, batch_records=txn_records)


class Variant:
    """The parent's handle on one variant's process."""

    def __init__(self, name: str, window: int, task: CopyTask, repeat: int) -> None:
        self.name = name
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=variant_child, args=(child, window, task, repeat), daemon=True)
        self.process.start()

    def ask(self, kind: str, checkpoint: int) -> None:
        self.conn.send((kind, checkpoint))

    def answer(self) -> object:
        while not self.conn.poll(5):
            if not self.process.is_alive():
                raise RuntimeError(f"{self.name}: the copy process exited with {self.process.exitcode}")
        return self.conn.recv()

    def close(self) -> None:
        """Ends the process: at once if it is still copying (the run was cut short; its transaction aborts)."""
        if self.process.is_alive():
            self.conn.send(None)
            self.process.join(5)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(30)


def run(variants: list[Variant], checkpoints: list[int], together: bool) -> list[tuple[str, ...]]:
    """Copy every variant to each checkpoint (at once when `together`), then measure them one at a time."""
    rows = []
    for checkpoint in checkpoints:
        stretches: dict[str, Stretch] = {}
        for v in variants:
            v.ask("copy", checkpoint)
            if not together:
                stretches[v.name] = v.answer()  # type: ignore[assignment]
        for v in variants:
            if together:
                stretches[v.name] = v.answer()  # type: ignore[assignment]
        for v in variants:
            v.ask("measure", checkpoint)
            m: Measured = v.answer()  # type: ignore[assignment]
            s = stretches[v.name]
            rows.append(row(v.name, checkpoint, s, m))
            print(
                f"{v.name} at {checkpoint:,}: {s.transactions / s.seconds:,.0f} txn/s, "
                + ", ".join(f"{k} {val:,.0f}" for k, val in vars(m).items()),
                flush=True,
            )
    return rows


def row(name: str, checkpoint: int, s: Stretch, m: Measured) -> tuple[str, ...]:
    return (
        name,
        f"{checkpoint:,}",
        f"{s.transactions / s.seconds:,.0f}",
        f"{m.read_records:,}",
        f"{m.read_bytes:,}",
        f"{m.live_keys:,}",
        f"{m.live_bytes:,}",
        f"{m.progress_records:,}",
        f"{m.reads_ms:,.0f}",
        f"{m.restore_ms:,.1f}",
    )


HEADER = (
    "variant",
    "transactions",
    "txn/s",
    "map records read",
    "map bytes read",
    "live keys",
    "live bytes",
    "progress records",
    "start-up reads ms",
    "restore ms",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_map_growth", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--checkpoints", default=",".join(map(str, CHECKPOINTS)), help="transactions, comma-separated")
    parser.add_argument("--txn-records", type=int, default=1, help="records per transaction (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="start-ups timed per checkpoint (median)")
    parser.add_argument("--one-at-a-time", action="store_true", help="copy the variants in turn, not at once")
    args = parser.parse_args(argv)
    # A run stopped by `kill` still stops its copies and brokers (`finally` below, `bench_clusters`).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    checkpoints = sorted(int(c) for c in args.checkpoints.split(","))
    rid = run_id()
    with bench_clusters("mirrorflow-bench-map-") as (directory, source, target):
        config = directory / "growth.properties"
        topics = {name: f"growth-{i}-{rid}" for i, name in enumerate(VARIANTS)}  # keys of one size
        write_config(config, source, target, {name: (topic, "exactly-once") for name, topic in topics.items()})
        records = checkpoints[-1] * args.txn_records
        variants: list[Variant] = []
        try:
            for name, window in VARIANTS.items():
                task = prepare(source, target, name, topics[name], records, args.txn_records, config)
                variants.append(Variant(name, window, task, args.repeat))
            began = time.perf_counter()
            rows = run(variants, checkpoints, together=not args.one_at_a_time)
            elapsed = time.perf_counter() - began
        finally:
            for v in variants:
                v.close()
    print(
        f"\noffset map of one partition after N exactly-once transactions of {args.txn_records} record(s), real "
        f"brokers; thinned: W = {THINNING_WINDOW} exact runs; {elapsed:,.0f} s in all"
    )
    print(text_table(HEADER, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`make bench-map-growth`: what a real exactly-once copy on real brokers reads of its state at start-up after 1k
to 20k transactions, with the state topics' segment settings (`STATE_TOPIC_CONFIGS`) and, measured in the same run
as a baseline, with the broker's defaults they replaced; thinned and not. The broker counterpart of `make
bench-offset-map` (which models the same map without a broker). docs/offsets.md has the figures.

Model: one flow per variant between two local clusters, each copying its own one-partition source topic (offset
syncs are keyed by source partition in a shared topic) into state topics of its own. The source is filled first;
the copy is the product's `copy_range` in continuous mode (`end=None`, exactly-once: transactional producer,
`commit_batch`, state topics by `create_internal_topics` with their slots), in a process per variant.
Accelerated: each transaction is capped at `--txn-records` records through `CopyTask.batch_records`, so a copy
behind a filled source commits one small transaction after another, as a caught-up copy does per poll, as fast as
the brokers allow. Each transaction's commit marker takes a downstream offset: every transaction opens an exact run.

Variants (`--variants`, any subset):
* `baseline` ("unthinned, 1 GiB segments"): the behaviour before the segment settings. After
  `create_internal_topics`, its state topics get the broker's defaults at topic level (`BROKER_DEFAULTS`), a
  value the product keeps as an operator's choice; map unthinned (`NO_THINNING`, as shipped before session 16).
* `unthinned`: the product's settings, map unthinned (`offset_runs.DEFAULT_EXACT_RUNS` set to `NO_THINNING` in
  its process before any `OffsetMap` is built: read at construction).
* `thinned`: the product's settings, map thinned (`THINNING_WINDOW`, the default since session 16; set the same
  way; the measurement reports the restored map's window).
Accelerated time: the product's segment.ms is 2 minutes (10 until session 15), so a run of minutes would roll few
segments (the cleaner never cleans a partition's active segment), and its min.compaction.lag.ms (5 min; 15 until
session 15) keeps any record younger than that from cleaning. `--segment-ms` (default the product's / 40: 3,000;
15,000 of 600,000 until session 15) sets the factor (1/40): segment.ms,
min.compaction.lag.ms and delete.retention.ms are all scaled by it (`map_growth_state.accelerated`; printed) at
topic level on the state topics of the two variants with the product's settings; segment.bytes (16 MiB) and
min.cleanable.dirty.ratio (0.1) stay the product's. A segment rolls only when a record is appended after
segment.ms, so a copy's active segment holds up to its last segment.ms of writes. The brokers keep their
defaults (`harness.bench_clusters` only cuts the cleaner's dedupe buffer to 16 MiB, some 600,000 keys per pass):
after a roll the cleaner starts within `log.cleaner.backoff.ms` (15 s); the bounded wait below covers that.

At each checkpoint (`--checkpoints`, counted in committed transactions with records) the copies stop between
transactions (their `stop` callback); each variant measures once at once ("read at stop": what a start meets in
continuous operation, the uncleaned tail included), then the bench waits, up to 2 x (segment.ms +
min.compaction.lag.ms + 15 s), until no head slot of any variant holds anything the cleaner would clean (read
from the target broker's log directory: its cleaner checkpoint and segment files; `min.cleanable.dirty.ratio`
counted); the wait is printed. What is left is what a start after a pause would find. Then each variant in turn,
alone, measures on the target:
* progress / map records read: the records the copy's own start-up read, `copy_slots.load_state(task)` (what
  `copy_range` calls), counted as they come (a wrapper around `copy_slots.read_to_end` in the copy's process),
  tombstones included: a thinned map keeps one tombstone per merge for `delete.retention.ms` (scaled) after
  the cleaning that meets it. Map bytes are key + value;
* live keys/bytes: the map records read folded as compaction leaves them (latest per key, no tombstones): the
  map's own size, what a start reads at best;
* segments, active offsets, bytes on disk (progress / map): the head slots' segment files on the broker, the
  offsets of their active segment (records and commit markers: the part no cleaning can shrink yet) and the
  bytes of all their segments. A reader fetches those bytes; it is handed records, not commit markers, and the
  cleaner keeps a transaction's marker for `delete.retention.ms` after it has removed the transaction's records;
* start-up ms: `load_state` (wall, median of `--repeat`), then `restore_map`.
Then the copies resume from their committed progress (a new `copy_range`, as the next run of a flow would).
Transactions per second: the stretch since the previous checkpoint, start-up included.
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import statistics
import sys
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path

from confluent_kafka.admin import NewTopic

from bench_mirrorflow import flow_of, write_config
from harness import KEEP, Case, bench_clusters, create_topics, produce_source, run_id, wait_for_leaders
from map_growth_state import (
    BROKER_DEFAULTS,
    CLEANER_BACKOFF_S,
    Broker,
    ReadCounter,
    accelerated,
    await_cleaner,
    head_partitions,
    on_disk,
    set_state_configs,
)
from mirrorflow.core import offset_runs
from mirrorflow.core.offset_map import NO_THINNING
from mirrorflow.core.offset_runs import THINNING_WINDOW
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_setup import restore_map
from mirrorflow.replication.copy_slots import load_state
from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.internal_topics import STATE_TOPIC_CONFIGS, create_internal_topics
from report import text_table

CHECKPOINTS = (1_000, 5_000, 10_000, 20_000)
Disk = tuple[int, int, int]


@dataclass(frozen=True)
class Kind:
    """A variant: its label, its map's window, and whether its state topics get the broker's defaults."""

    label: str
    window: int
    baseline: bool


VARIANTS = {
    "baseline": Kind("unthinned, 1 GiB segments", NO_THINNING, True),
    "unthinned": Kind("unthinned", NO_THINNING, False),
    "thinned": Kind("thinned", THINNING_WINDOW, False),
}


@dataclass
class Stretch:
    """One copy run, from the previous checkpoint to the next."""

    transactions: int
    records: int
    seconds: float


@dataclass
class Measured:
    """What one variant's start-up reads of its state at a checkpoint, and what that costs."""

    progress_read: int
    map_read: int
    map_tombstones: int
    map_bytes: int
    live_keys: int
    live_bytes: int
    startup_ms: float
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


def measure(task: CopyTask, repeat: int, counter: ReadCounter) -> Measured:
    """The copy's start-up reads, counted and timed (see the module docstring)."""
    reads, restores = [], []
    for _ in range(repeat):
        counter.reset()
        began = time.perf_counter()
        state = load_state(task)
        loaded = time.perf_counter()
        assert state.progress is not None, f"{task.flow}: no progress stored"
        restored = restore_map(state.segments, state.progress, state.progress.next_upstream)
        reads.append(loaded - began)
        restores.append(time.perf_counter() - loaded)
    progress, stored = counter.of(task.progress_topic), counter.of(task.offset_map_topic)
    if len(state.segments.runs) != len(stored.live):
        raise AssertionError(f"{task.flow}: the copy restores {len(state.segments.runs)} runs, read {len(stored.live)}")
    return Measured(
        progress.records,
        stored.records,
        stored.tombstones,
        stored.size,
        len(stored.live),
        sum(stored.live.values()),
        statistics.median(reads) * 1000,
        statistics.median(restores) * 1000,
        len(restored.segments()),
        restored._store.window,  # proves the variant's window reached the copy's maps
    )


def variant_child(conn: Connection, window: int, task: CopyTask, repeat: int) -> None:
    """In the variant's own process: set its window before any map is built, count what the state reads read,
    then copy and measure on request."""
    offset_runs.DEFAULT_EXACT_RUNS = window
    counter = ReadCounter(task)
    counter.install()
    done = 0
    while (message := conn.recv()) is not None:
        kind, checkpoint = message
        if kind == "copy":
            conn.send(copy_until(task, done, checkpoint))
            done = checkpoint
        else:
            conn.send(measure(task, repeat, counter))


@dataclass(frozen=True)
class Setup:
    """Where a variant's source and target are, and how its state topics are set."""

    source: str
    target: str
    config: Path
    records: int
    txn_records: int
    configs: dict[str, str]


def prepare(name: str, topic: str, setup: Setup) -> tuple[CopyTask, dict[str, str]]:
    """The variant's filled source topic, its remote topic, its state topics (the product's own creation, with
    slots, then `setup.configs` at topic level) and its continuous copy task, transactions capped at
    `setup.txn_records`; with the state topics' effective segment settings."""
    create_topics(setup.source, [NewTopic(topic, 1, 1, config=KEEP)])
    produce_source(setup.source, Case(setup.records, 100, 1, topic))
    create_topics(setup.target, [NewTopic(f"{name}.{topic}", 1, 1, config=KEEP)])
    flow = flow_of(setup.config, name)
    with FlowClients(flow) as clients:
        create_internal_topics(flow, clients, source_partitions=1)
        effective = set_state_configs(flow, clients, setup.configs)
    task = plan_copy(flow, [SourcePartitions(topic, f"{name}.{topic}", 1)], interval=False)[0]
    state = [(t, p) for t in (task.progress_topic, task.offset_map_topic) for p in range(task.state_partitions)]
    wait_for_leaders(setup.target, state)
    return replace(task, batch_records=setup.txn_records), effective


class Variant:
    """The parent's handle on one variant's process."""

    def __init__(self, name: str, task: CopyTask, effective: dict[str, str], repeat: int) -> None:
        self.name, self.kind, self.task, self.effective = name, VARIANTS[name], task, effective
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        args = (child, self.kind.window, task, repeat)
        self.process = context.Process(target=variant_child, args=args, daemon=True)
        self.process.start()

    def ask(self, kind: str, checkpoint: int) -> None:
        self.conn.send((kind, checkpoint))

    def answer(self) -> object:
        while not self.conn.poll(5):
            if not self.process.is_alive():
                raise RuntimeError(f"{self.name}: the copy process exited with {self.process.exitcode}")
        return self.conn.recv()

    def measured(self, checkpoint: int) -> Measured:
        self.ask("measure", checkpoint)
        return self.answer()  # type: ignore[return-value]

    def watched(self) -> list[tuple[str, int, float]]:
        """Its head slots with their `min.cleanable.dirty.ratio`."""
        ratio = float(self.effective["min.cleanable.dirty.ratio"])
        return [(t, p, ratio) for t, p in head_partitions(self.task)]

    def close(self) -> None:
        """Ends the process: at once if it is still copying (the run was cut short; its transaction aborts)."""
        if self.process.is_alive():
            self.conn.send(None)
            self.process.join(5)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(30)


def copy_all(variants: list[Variant], checkpoint: int, together: bool) -> dict[str, Stretch]:
    """Copies every variant to `checkpoint` (at once when `together`)."""
    stretches: dict[str, Stretch] = {}
    for v in variants:
        v.ask("copy", checkpoint)
        if not together:
            stretches[v.name] = v.answer()  # type: ignore[assignment]
    for v in variants:
        if together:
            stretches[v.name] = v.answer()  # type: ignore[assignment]
    return stretches


def run(variants: list[Variant], checkpoints: list[int], together: bool, broker: Broker) -> list[tuple[str, ...]]:
    """Copy every variant to each checkpoint, wait for the cleaner, then measure them one at a time."""
    rows = []
    watched = [w for v in variants for w in v.watched()]
    for checkpoint in checkpoints:
        stretches = copy_all(variants, checkpoint, together)
        at_stop = {v.name: v.measured(checkpoint) for v in variants}
        waited = await_cleaner(broker.data_dir, watched, broker.wait_bound_s)
        print(f"at {checkpoint:,}: waited {waited:,.0f} s for the cleaner", flush=True)
        for v in variants:
            disk = on_disk(broker.bootstrap, broker.data_dir, head_partitions(v.task))
            m, s = v.measured(checkpoint), stretches[v.name]
            rows.append(row(v.kind.label, checkpoint, s, m, at_stop[v.name], waited, disk))
            print(
                f"{v.name} at {checkpoint:,}: {s.transactions / s.seconds:,.0f} txn/s, (segments, active offsets, "
                f"bytes) {disk}, " + ", ".join(f"{k} {val:,.0f}" for k, val in vars(m).items()),
                flush=True,
            )
    return rows


def row(
    label: str, checkpoint: int, s: Stretch, m: Measured, stop: Measured, waited: float, disk: list[Disk]
) -> tuple[str, ...]:
    (p_segments, p_active, p_size), (m_segments, m_active, m_size) = disk
    return (
        label,
        f"{checkpoint:,}",
        f"{s.transactions / s.seconds:,.0f}",
        f"{stop.progress_read:,} / {stop.map_read:,}",
        f"{m.progress_read:,}",
        f"{m.map_read:,} ({m.map_tombstones:,})",
        f"{m.map_bytes:,}",
        f"{m.live_keys:,}",
        f"{m.live_bytes:,}",
        f"{p_segments} / {m_segments}",
        f"{p_active:,} / {m_active:,}",
        f"{p_size:,} / {m_size:,}",
        f"{waited:,.0f}",
        f"{m.startup_ms:,.0f}",
        f"{m.restore_ms:,.1f}",
    )


HEADER = (
    "variant",
    "transactions",
    "txn/s",
    "read at stop p / m",
    "progress records read",
    "map records read (tombstones)",
    "map bytes read",
    "live keys",
    "live bytes",
    "segments p / m",
    "active offsets p / m",
    "bytes on disk p / m",
    "wait s",
    "start-up ms",
    "restore ms",
)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_map_growth", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--checkpoints", default=",".join(map(str, CHECKPOINTS)), help="transactions, comma-separated")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: %(default)s")
    parser.add_argument(
        "--segment-ms",
        type=int,
        default=int(STATE_TOPIC_CONFIGS["segment.ms"]) // 40,
        help="segment.ms of the product variants; the factor of all its times (default %(default)s: 1/40)",
    )
    parser.add_argument("--txn-records", type=int, default=1, help="records per transaction (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="start-ups timed per checkpoint (median)")
    parser.add_argument("--one-at-a-time", action="store_true", help="copy the variants in turn, not at once")
    args = parser.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown or not args.variants:
        parser.error(f"--variants: {unknown or 'none'}; known: {', '.join(VARIANTS)}")
    args.checkpoints = sorted(int(c) for c in args.checkpoints.split(","))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # A run stopped by `kill` still stops its copies and brokers (`finally` below, `bench_clusters`).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    checkpoints: list[int] = args.checkpoints
    rid = run_id()
    times, factor = accelerated(args.segment_ms)
    lag_s = int(times["min.compaction.lag.ms"]) / 1000
    wait_bound_s = 2 * (args.segment_ms / 1000 + lag_s + CLEANER_BACKOFF_S)
    print(f"accelerated x{1 / factor:g} (factor {factor:g}): {times} on the product variants", flush=True)
    with bench_clusters("mirrorflow-bench-map-") as (directory, source, target):
        config = directory / "growth.properties"
        topics = {name: f"growth-{i}-{rid}" for i, name in enumerate(args.variants)}  # keys of one size
        write_config(config, source, target, {name: (topic, "exactly-once") for name, topic in topics.items()})
        records = checkpoints[-1] * args.txn_records
        variants: list[Variant] = []
        try:
            for name in args.variants:
                configs = BROKER_DEFAULTS if VARIANTS[name].baseline else times
                setup = Setup(source, target, config, records, args.txn_records, configs)
                task, effective = prepare(name, topics[name], setup)
                print(f"{name}: state topics {effective}", flush=True)
                variants.append(Variant(name, task, effective, args.repeat))
            broker = Broker(target, directory / "clusters" / "B" / "data", wait_bound_s)
            began = time.perf_counter()
            rows = run(variants, checkpoints, not args.one_at_a_time, broker)
            elapsed = time.perf_counter() - began
        finally:
            for v in variants:
                v.close()
    print(
        f"\nstart-up reads of one partition's state after N exactly-once transactions of {args.txn_records} "
        f"record(s), real brokers; thinned: W = {THINNING_WINDOW} exact runs; product settings with their times "
        f"scaled by {factor:g} at topic level ({times}); baseline: the broker's "
        f"defaults at topic level; waited up to {wait_bound_s:,.0f} s for the cleaner per checkpoint; "
        f"{elapsed:,.0f} s in all"
    )
    print(text_table(HEADER, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

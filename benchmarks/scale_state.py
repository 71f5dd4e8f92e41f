"""The copy start-up reads of `make scale-sim` (`scale_sim.py`): what one copy range reads of its state at its
start, fed synthetic state topics instead of a broker (the real `copy_slots` reads, with `read_to_end` replaced).

Two models, each with its baseline measured in the same run:
* `startup_scan`: the one-partition state topics of older versions (every range reads all of them) beside
  today's slots (a range reads its own head slot, settled; and the chain of slots below it, not settled), each
  progress key written `--dirty` times;
* `tail_scan`: today's settled head-slot read in steady state. The log cleaner cannot compact a record younger
  than `min.compaction.lag.ms` (5 min), nor anything in the active segment (rolled after `segment.ms`, 2 min),
  so a start reads every record written to its slot in the last ~7 minutes: at c exactly-once commits a second
  per partition, c x 420 progress records and as many map runs for each partition sharing the slot, each its
  own record batch with a commit marker, and a metrics snapshot every 10 s at most (`SNAPSHOT_INTERVAL_S`;
  written outside transactions). Until session 15: 25 minutes (c x 1,500) and a snapshot a second; both are
  options (`--tail-seconds`, `--snapshot-seconds`), so that both can be measured by the same code. Behind that
  tail the cleaner keeps every commit marker for `delete.retention.ms` (1 h): bytes a reader fetches and is
  handed no record for. Rate 0 (the live state only,
  what the `startup_scan` slots figure reads) is the baseline.
Bytes count the wire: key, value, `RECORD_OVERHEAD` per record, `BATCH_OVERHEAD` per batch, `MARKER_BYTES` per
commit marker. Not modelled: the unthinned map's live runs older than the tail (one per transaction within the
source's retention; docs/state-plan.md), and the cleaner's own delay (its 15 s backoff, the dirty ratio).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from mirrorflow.core.offset_map import Segment, encode_segment
from mirrorflow.core.progress import Progress, encode_progress
from mirrorflow.core.state_slots import MAX_STATE_PARTITIONS, head_slot, sized_state_partitions
from mirrorflow.replication import copy_setup, copy_slots
from mirrorflow.replication.copy_loop import SNAPSHOT_INTERVAL_S
from mirrorflow.replication.copy_plan import spread
from mirrorflow.replication.copy_task import CopyTask
from mirrorflow.replication.internal_topics import STATE_TOPIC_CONFIGS
from mirrorflow.replication.metrics import PartitionMetrics, snapshot_key
from mirrorflow.replication.slot_groups import slot_key

STATE_CAP = MAX_STATE_PARTITIONS
"""`mirrorflow.state.partitions.max` of the simulated flow (`scale_sim.py --state-partitions-max`)."""

Record = tuple[int, int, bytes | None, bytes | None, int]

# The module attributes the scans replace with their synthetic topics: where the functions they time
# (`copy_slots.load_progress`/`load_segments`/`load_snapshot`) look up `read_to_end`. Checked by
# tests/benchmarks/test_scale_sim.py, so a move of those reads breaks a test, not `make scale-sim`.
PATCHED: tuple[tuple[Any, str], ...] = ((copy_slots, "read_to_end"),)

RECORD_OVERHEAD = 20
"""Bytes a record costs on the wire beyond its key and value (record header fields, varints)."""
BATCH_OVERHEAD = 61
"""A record batch header: at least one per partition a read fetches, and one per commit in an uncleaned tail (an
exactly-once commit writes its own batch to each partition it touches)."""
MARKER_BYTES = BATCH_OVERHEAD + 18
"""A commit marker: a control batch of one record (about 80 bytes on disk, as measured by bench-map-growth)."""
TAIL_S = (int(STATE_TOPIC_CONFIGS["min.compaction.lag.ms"]) + int(STATE_TOPIC_CONFIGS["segment.ms"])) / 1000
"""The longest a record stays uncleaned: the active segment's age plus the compaction lag (before the cleaner's
own delay: its 15 s backoff, and the dirty ratio's wait)."""
MARKERS_KEPT_S = int(STATE_TOPIC_CONFIGS["delete.retention.ms"]) / 1000
"""How long the cleaner keeps a cleaned transaction's commit marker."""
METADATA_ANSWERS = {"a read per range (session 18)": 169, "shared (session 19)": 52}
"""Metadata answers listing a state topic at the start of a Spark task of 8 continuous exactly-once ranges, as
the broker counted them (`make bench-state-metadata`, 2026-12-02): each lists every slot of its topic."""
METADATA_PARTITION_BYTES = 42
"""One partition in a metadata answer at replication factor 3 (`broker_metadata.partition_bytes(3)`)."""


def timed(fn: Callable[[], Any], repeat: int = 5) -> tuple[float, Any]:
    """Median CPU seconds of this process over `repeat` calls, and the last result. CPU, not wall time: on a
    shared machine the wall time mostly measures the neighbours (everything measured here is single-threaded)."""
    times, result = [], None
    for _ in range(repeat):
        started = time.process_time()
        result = fn()
        times.append(time.process_time() - started)
    return statistics.median(times), result


class Topics:
    """Synthetic state topics: records by topic and partition, and bytes a read fetches beyond them (markers)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.records: dict[str, dict[int, list[Record]]] = {}
        self.unseen: dict[tuple[str, int], int] = {}
        self.own_batches: set[str] = set()
        """Topics whose every record is its own batch (the tail model: one batch per commit)."""
        self.fetched = 0

    def put(self, topic: str, slot: int, key: bytes, value: bytes, markers: int = 0) -> None:
        partition = self.records.setdefault(topic, {}).setdefault(slot, [])
        partition.append((slot, len(partition), key, value, 0))
        self.unseen[(topic, slot)] = self.unseen.get((topic, slot), 0) + markers * MARKER_BYTES

    def read_to_end(self, cluster: str, conf: Any, topic: str, **kwargs: Any) -> Iterator[Record]:
        """`read_to_end` on these topics, counting the bytes of the partitions asked for."""
        if kwargs.get("on_count") is not None:
            kwargs["on_count"](self.slots)
        chosen = kwargs.get("partitions")
        wanted = list(chosen(self.slots) if callable(chosen) else (chosen if chosen is not None else range(self.slots)))
        records = [r for p in wanted for r in self.records.get(topic, {}).get(p, [])]
        per_record = RECORD_OVERHEAD + (BATCH_OVERHEAD if topic in self.own_batches else 0)
        self.fetched += sum(len(k or b"") + len(v or b"") + per_record for _, _, k, v, _ in records)
        self.fetched += BATCH_OVERHEAD * len(wanted) + sum(self.unseen.get((topic, p), 0) for p in wanted)
        return iter(records)


def _start_reads(task: CopyTask, key: bytes) -> tuple[Any, Any, Any]:
    """The copy start's reads, in copy_range's order: the progress, then the map (spared the slots below the head
    when the progress says settled), and the metrics snapshot."""
    progress = copy_setup.load_progress(task)[0]
    stored = copy_setup.load_segments(task, copy_setup.settled_slots(progress))[0]
    return progress, stored, copy_slots.load_snapshot(task, str(task.metrics_topic), key)[0]


def _measure(topics: Topics, task: CopyTask, repeat: int) -> dict[str, float]:
    """CPU (median of `repeat`) and bytes fetched of one range's start-up reads of `topics`."""
    originals = [getattr(module, name) for module, name in PATCHED]
    for module, name in PATCHED:
        setattr(module, name, topics.read_to_end)
    try:
        key = snapshot_key(task.remote_topic, task.partition)
        per_task, (found, stored, snapshot) = timed(lambda: _start_reads(task, key), repeat)
        topics.fetched = 0
        _start_reads(task, key)
    finally:
        for (module, name), original in zip(PATCHED, originals, strict=True):
            setattr(module, name, original)
    assert found is not None and stored.runs and snapshot, "the synthetic records must hold the task's own state"
    return {"cpu_ms": round(per_task * 1000, 1), "mb": round(topics.fetched / 1e6, 4), "bytes": topics.fetched}


def _seed(
    topics: Topics, t: CopyTask, commits: int, runs: int, markers: int, snapshots: int = 1, settled: bool = True
) -> None:
    """One partition's state at its head slot, settled (or not: a start then reads the chain of slots below the
    head too, as the first start after an upgrade or a growth does): `commits` progress records (the last one
    live) and the map's first run plus `runs` one-record runs (each commit's marker takes a downstream offset, so
    each is a new run), `markers` commit markers beyond the records, and `snapshots` metrics snapshots (the last
    one live)."""
    slot, ids = head_slot(t.topic, t.partition, topics.slots), (t.source_topic_id, t.remote_topic_id)
    topics.put(t.offset_map_topic, slot, *encode_segment(t.topic, t.partition, Segment(0, 0, 1000)))
    for v in range(runs):
        topics.put(t.offset_map_topic, slot, *encode_segment(t.topic, t.partition, Segment(1000 + v, 1000 + 2 * v, 1)))
    for v in range(commits):
        at = 1000 + v
        progress = Progress(
            t.topic,
            t.partition,
            at + 1,
            at + v + 1,
            at + 1,
            1,
            1_700_000,
            *ids,
            settled_slots=topics.slots if settled else 0,
        )
        topics.put(t.progress_topic, slot, *encode_progress(progress))
    for topic in (t.progress_topic, t.offset_map_topic):
        topics.unseen[(topic, slot)] = topics.unseen.get((topic, slot), 0) + markers * MARKER_BYTES
    pm = PartitionMetrics(
        source=t.source, target=t.target, source_topic=t.topic, remote_topic=t.remote_topic, partition=t.partition
    )
    for v in range(snapshots):
        snap = pm.snapshot(now_ms=1 + v)
        topics.put(str(t.metrics_topic), slot, snap.key(), snap.encode())


def startup_scan(tasks: list[CopyTask], dirty_versions: int) -> dict[str, Any]:
    """Per-range cost of reading a range's state at its start, at this many partitions: the one-partition state
    topics of older versions (every range reads all of them) beside today's slots (a range reads its own head
    slot of each topic, `core.state_slots`), in the same run on the same synthetic records."""
    slots = sized_state_partitions(len(tasks), STATE_CAP)  # as they would be with slots on (`SLOTS_ON`)
    before, after = _scan(tasks, dirty_versions, 1), _scan(tasks, dirty_versions, slots)
    chain = _scan(tasks, dirty_versions, slots, settled=False)
    found: dict[str, Any] = {
        f"progress records per task scan (uncompacted x{dirty_versions})": len(tasks) * dirty_versions,
        "state topic partitions (slots): one-partition topics -> slots": f"1 -> {slots}",
    }
    for label, key in (
        ("per task: decode progress + map + metrics, CPU ms", "cpu_ms"),
        ("per task: bytes fetched from the target, MB", "mb"),
        ("per copy run (all tasks): CPU s", "run_cpu_s"),
        ("per copy run (all tasks): GB fetched from the target", "run_gb"),
    ):
        found[f"{label} (one partition -> slots)"] = f"{before[key]} -> {after[key]}"
        found[f"{label} (slots, not settled: the chain)"] = chain[key]
    found["per task: bytes fetched from the target, MB (slots)"] = after["mb"]
    return found


def _scan(tasks: list[CopyTask], dirty_versions: int, slots: int, settled: bool = True) -> dict[str, float]:
    """One range's state reads on synthetic state topics of `slots` partitions, every partition's state at its
    head slot (settled there, as copies leave it), each progress key written `dirty_versions` times."""
    topics = Topics(slots)
    for t in tasks:
        _seed(topics, t, dirty_versions, 0, 0, settled=settled)
    found = _measure(topics, tasks[len(tasks) // 2], 3)
    found["run_cpu_s"] = round(found["cpu_ms"] / 1000 * len(tasks), 1)
    found["run_gb"] = round(found["bytes"] * len(tasks) / 1e9, 3)
    return found


def tail_scan(
    tasks: list[CopyTask],
    rates: list[float],
    tail_s: float = TAIL_S,
    snapshot_s: float = SNAPSHOT_INTERVAL_S,
    markers_s: float = MARKERS_KEPT_S,
) -> dict[str, Any]:
    """One range's settled start in steady state, at each commit rate (commits a second per partition, every
    partition of the flow alike) beside rate 0 (the live state only), measured on a range whose head slot holds
    the median number of the flow's partitions; only that slot is built. A busy partition writes a metrics snapshot
    every `snapshot_s`; the cleaner keeps commit markers `markers_s` (`delete.retention.ms`)."""
    slots = sized_state_partitions(len(tasks), STATE_CAP)
    heads = [head_slot(t.topic, t.partition, slots) for t in tasks]
    sizes = Counter(heads)
    median = sorted(sizes.values())[len(sizes) // 2]
    slot = next(h for h in heads if sizes[h] == median)
    mates = [t for t, h in zip(tasks, heads, strict=True) if h == slot]
    found: dict[str, Any] = {
        "state topic partitions (slots)": slots,
        "flow partitions per slot: mean / median (measured) / max": (
            f"{len(tasks) / slots:.1f} / {median} / {max(sizes.values())}"
        ),
        "uncleaned tail s (min.compaction.lag.ms + segment.ms)": tail_s,
        "commit markers kept after cleaning, s (delete.retention.ms)": markers_s,
        "metrics snapshot interval s (a busy partition)": snapshot_s,
    }
    for rate in [0.0, *rates]:
        commits = max(1, round(rate * tail_s))
        topics = Topics(slots)
        topics.own_batches.update({mates[0].progress_topic, mates[0].offset_map_topic, str(mates[0].metrics_topic)})
        snapshots = max(1, round(min(rate, 1 / snapshot_s) * tail_s))
        for t in mates:
            _seed(topics, t, commits, commits if rate else 0, round(rate * (tail_s + markers_s)), snapshots)
        m = _measure(topics, mates[0], 1 if rate >= 10 else 3)
        label = f"c = {rate:g}/s" if rate else "c = 0 (live state only, baseline)"
        found[f"{label}: progress / map / metrics records read"] = " / ".join(
            f"{len(topics.records[name][slot]):,}"
            for name in (mates[0].progress_topic, mates[0].offset_map_topic, str(mates[0].metrics_topic))
        )
        found[f"{label}: MB fetched per range (x8 per Spark task)"] = m["mb"]
        found[f"{label}: CPU ms per range"] = m["cpu_ms"]
    return found


def task_scan(tasks: list[CopyTask], tail: dict[str, Any], rates: list[float], per_task: int = 8) -> dict[str, Any]:
    """Per Spark task of `per_task` ranges: the partitions whose state its start fetches, today (round-robin
    groups, a read per range: each range's whole head slot) beside the groups of `copy_plan.spread` with reads
    shared by the task's ranges (each slot the task touches, once), and the MB that makes at each commit rate,
    scaled from `tail_scan`'s per-range figure (MB per partition sharing the slot x partitions fetched); and the
    metadata answers the start asks (`METADATA_ANSWERS`, measured), which list every slot of a state topic."""
    slots = sized_state_partitions(len(tasks), STATE_CAP)
    sized = [replace(t, state_partitions=slots) for t in tasks]
    sizes = Counter(slot_key(t) for t in sized)
    median_slot = sorted(sizes.values())[len(sizes) // 2]
    grouped = spread(sized, 1, per_task)
    ways = {
        "today (round-robin, a read per range)": ([sized[i :: len(grouped)] for i in range(len(grouped))], False),
        "grouped by slot, shared reads": (grouped, True),
    }
    found: dict[str, Any] = {"Spark tasks": len(grouped)}
    for way, (groups, shared) in ways.items():
        fetched = [
            sum(sizes[k] for k in {slot_key(t) for t in g}) if shared else sum(sizes[slot_key(t)] for t in g)
            for g in groups
        ]
        middle = statistics.median(fetched)
        found[f"{way}: partitions' state fetched per task (median / max)"] = f"{middle:.0f} / {max(fetched)}"
        for rate in [0.0, *rates]:
            label = f"c = {rate:g}/s" if rate else "c = 0 (live state only, baseline)"
            per_partition = float(tail[f"{label}: MB fetched per range (x8 per Spark task)"]) / median_slot
            found[f"{way}: {label}: MB fetched per task"] = round(per_partition * middle, 3)
    for way, answers in METADATA_ANSWERS.items():
        megabytes = answers * slots * METADATA_PARTITION_BYTES / 1e6
        found[f"metadata, {way}: {answers} answers of {slots:,} slots, MB per task (RF 3)"] = round(megabytes, 2)
    return found

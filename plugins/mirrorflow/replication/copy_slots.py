"""What one copy range reads of its state, and where it writes it: its slots (`core.state_slots`).

A range reads its partition's chain of each state topic: its head slot and the few below it where a smaller
topic put the state (the one-partition topics of older versions are slot 0 of every chain). That is O(the
partitions sharing those slots), not O(the flow). What it finds below its head it moves up in two steps, so
that no reader ever sees a run missing (`state_records.SlottedState` has the reading rules):
1. the first commit writes, at the head, every map run live only below it, and the progress;
2. the keys below whose copy at the head is durable are tombstoned: at the next commit in exactly-once mode (a
   later transaction than the copies), once the head's records are confirmed in at-least-once mode. Keys found
   at the head already (a move a crash cut short) are tombstoned below at the first commit.
A start reads the whole chain until a commit records the partition as settled (`Progress.settled_slots`: with
that commit durable, nothing of its progress or map is live below its head at that slot count); from then on a
start that finds the topics at that count reads the head slot alone, so its cost stays O(the partitions sharing
one slot) however many slots the flow has. What a crash leaves below is found by the next start, which reads the
chain because no settled progress covers it, and a copy that moved its state commits a second time at once
(`CopyLoop`), so the move ends within the run. Deletes (pruned runs, rewound runs, stale keys) go to every slot
the key is live in: at the head at once, below with the tombstones of step 2 (a delete below seen without the
head's record that replaces it would be a hole). The partition count after the fence comes from metadata asked
after it (`after_fence`), never below the count planned on the driver (a broker still answering with the count
before a growth would hide the head).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import Segment, encode_segment_key
from mirrorflow.core.progress import Progress, encode_progress_key
from mirrorflow.core.state_slots import check_count, head_slot, newest, slot_chain
from mirrorflow.kafka.compacted_log import OPEN_TRANSACTION_WAIT_S, LogReader, read_to_end
from mirrorflow.kafka.log_cache import LogCache
from mirrorflow.replication.copy_task import CopyTask
from mirrorflow.replication.state_records import SlotRecord, SlottedState, StoredSegments

log = logging.getLogger(__name__)

PRE_READ_WAIT_S = 2.0
"""How long a copy's reads of its state ahead of the fence wait on an open transaction (`state_reader`): one that a
killed predecessor left open ends only with the fence, or 60 s later, and the progress is read ahead BEFORE the
fence, so this is added to a boundary after a killed run."""

RECENT_COUNT_S = 5.0
"""How old a state topic's partition count may be where it decides no record (`LogReader.counts_after`): the read
of the progress ahead of the fence (a newer run's claim) and a fenced run's polls for its successor's claim. The
ranges of a task starting together share one answer; one starting again late in its run (`RetakeClaim`) asks
again, so it sees a newer run's claim at a head a growth added meanwhile."""

COUNT_WAIT_S = 10.0
"""How long a copy waits for a broker's metadata to show the state topic's planned partition count."""

ALWAYS: Callable[[int], bool] = lambda _count: True  # noqa: E731  (`_read_chain`'s `head_only` for every count)

Tombstones = dict[int, list[bytes]]
"""{slot: keys} to tombstone there."""


@dataclass
class Placement:
    """Where a range writes its state in one state topic, and what of the move (see the module) is left."""

    count: int
    """The topic's partitions (1 when it did not exist: a producer then creates it with one)."""
    head: int
    """The slot the range writes to."""
    copy_up: list[Segment] = field(default_factory=list)
    """Step 1: map runs live only below the head, written to the head at the next commit."""
    ready: Tombstones = field(default_factory=dict)
    """Step 2: keys below whose copy at the head is durable: tombstoned at the next commit."""
    after: Tombstones = field(default_factory=dict)
    """Keys below that the next commit copies up: tombstoned once that commit is durable."""
    key_slots: dict[int, list[int]] = field(default_factory=dict)
    """Map keys live below the head: {key: slots}; a delete of the key goes there too."""
    unsure: bool = False
    """A tombstone below was refused (at-least-once): this run never records the partition as settled, so the
    next start reads the chain again and tombstones it then."""

    @property
    def moving(self) -> bool:
        return bool(self.copy_up or self.ready or self.after)

    def committed(self) -> None:
        """The next commit is durable: its copies are at the head, and what waited on them is ready. Once nothing
        is left below, no key lives there any more: later deletes go to the head alone."""
        self.copy_up, self.ready, self.after = [], self.after, {}
        if not self.moving and not self.unsure:
            self.key_slots = {}


def load_progress(task: CopyTask, via: LogReader | None = None) -> tuple[Progress | None, Placement]:
    """The committed progress of the task's partition (the highest slot's), read after fencing so it is final,
    and its placement. The head slot is read first: a progress there settled at the topic's current count (see
    the module) is the answer. Otherwise the whole chain is read. `read_to_end` reads to the true end, waiting
    for other tasks' open transactions on the shared slots: a progress record of ours committed after one of
    them is never missed (that would copy again what was committed). After fencing, no writer can change this
    partition's progress or segments, so `load_segments`, given the settled count found here, reads the same
    cut. A tombstone (`mirrorflow reset`) means no progress."""
    tp = (task.topic, task.partition)
    head = SlottedState()
    placement = _read_chain(task, task.progress_topic, _progress_of(head, tp), head_only=ALWAYS, via=via)
    found = head.progress().get(tp)
    if found is not None and found.settled_slots == placement.count:
        return found, placement
    state = SlottedState()
    placement = _read_chain(task, task.progress_topic, _progress_of(state, tp), via=via)
    slots = state.progress_slots(tp)
    below = {slot: [encode_progress_key(*tp)] for slot in slots if slot != placement.head}
    if placement.head in slots:
        placement.ready = below
    else:
        placement.after = below
    return state.progress().get(tp), placement


class LoadedState(NamedTuple):
    """What a copy start reads of its progress and map (`load_state`)."""

    progress: Progress | None
    progress_placement: Placement
    segments: StoredSegments
    map_placement: Placement


@dataclass
class MapFold:
    """The map as the read ahead of the fence folded it (`read_map_ahead`), and how far into each slot: the read
    after the fence, the one the run boundary waits for, applies only the records committed since instead of
    folding every remembered run again (5,300 runs took 0.9 s on the deployed path's 2-core host)."""

    settled: int = -1
    """The settled count the fold was read with (`load_segments`); -1: nothing reusable."""
    count: int = 0
    """The slot count of that read (`Placement.count`): another count reads other slots."""
    state: SlottedState = field(default_factory=SlottedState)
    seen: dict[int, int] = field(default_factory=dict)
    """{slot: the offset after the last record applied}."""
    forgets: int = 0
    """The reader's `LogReader.forgets` of the map topic before that read: once it changes, a slot was read again
    from its start (a re-created topic), and its records below `seen` are not the ones applied."""


class ReadAhead(NamedTuple):
    """The state reader of a copy start and the progress it read before the fence (`state_reader`)."""

    reader: LogReader
    progress: Progress | None
    """The progress read ahead; None when there is none or it was not read to the end (`read`)."""
    read: bool
    fold: MapFold
    """What `read_map_ahead` folded of the map, for `load_state` after the fence."""


def state_reader(task: CopyTask, shared: LogCache | None = None) -> ReadAhead:
    """The reader `load_state` reads through, connected to both state topics. A continuous exactly-once copy
    reads its progress through it before it fences: a newer run's claim there means the partition is not this
    run's (`copy_claims`); `read_map_ahead` then reads the map while the writer connects, and the fence waits for
    it (`copy_range`). The reader remembers both, so the read after the fence, the one a run boundary waits for,
    is only what was committed since (`LogReader`, `remember`). A head start, not the answer: these reads wait
    `PRE_READ_WAIT_S` at most on an open transaction, and a failure is left to the read after the fence. `shared`:
    the Spark task's cache (`copy_group`): ranges whose state shares a slot fetch it once between them."""
    reader = LogReader(task.target, task.target_consumer, timeout_s=task.timeout_s, remember=True, shared=shared)
    reader.counts_after = time.monotonic() - RECENT_COUNT_S  # `after_fence` asks for a later one
    try:
        reader.connect(task.progress_topic, task.offset_map_topic)
    except BaseException:
        reader.close()
        raise
    if not (task.exactly_once and task.end is None):
        return ReadAhead(reader, None, False, MapFold())
    reader.wait_s = PRE_READ_WAIT_S
    try:
        progress, _ = load_progress(task, reader)
        return ReadAhead(reader, progress, True, MapFold())
    except MirrorflowError as err:
        log.debug("flow %s: reading %s-%s's progress before the fence: %s", task.flow, task.topic, task.partition, err)
        return ReadAhead(reader, None, False, MapFold())
    finally:
        reader.wait_s = OPEN_TRANSACTION_WAIT_S


def after_fence(reader: LogReader, fenced_at: float) -> LogReader:
    """`reader`, taking the state topics' partition counts from metadata asked at or after `fenced_at` only
    (`time.monotonic`, once the fence has ended): the run fenced here may have grown the topics and moved this
    partition's state up just before; a count asked earlier would read a chain without that head."""
    reader.counts_after = fenced_at
    return reader


def read_map_ahead(task: CopyTask, ahead: ReadAhead) -> LogReader:
    """The map's read ahead (see `state_reader`), which the fence waits for; the reader for `load_state`."""
    if ahead.read:
        ahead.reader.wait_s = PRE_READ_WAIT_S
        try:
            load_segments(task, settled_slots(ahead.progress), ahead.reader, ahead.fold)
        except MirrorflowError as err:
            log.debug("flow %s: reading %s-%s's map before the fence: %s", task.flow, task.topic, task.partition, err)
        finally:
            ahead.reader.wait_s = OPEN_TRANSACTION_WAIT_S
    return ahead.reader


def load_state(task: CopyTask, via: LogReader | None = None, fold: MapFold | None = None) -> LoadedState:
    """`load_progress`, then `load_segments` with the settled count it found, through one reader (a start pays
    one reader's connections, not one per read): `via` (`state_reader`, closed here) or a new one; `fold`: what
    the read ahead folded through `via` (`read_map_ahead`)."""
    with via or LogReader(task.target, task.target_consumer, timeout_s=task.timeout_s) as reader:
        progress, progress_placement = load_progress(task, reader)
        segments, map_placement = load_segments(task, settled_slots(progress), reader, fold)
    return LoadedState(progress, progress_placement, segments, map_placement)


def settled_slots(progress: Progress | None) -> int:
    """The slot count at which `progress` (as `load_progress` returned it) says the partition's map lies wholly
    at its head; 0: read the whole chain."""
    return 0 if progress is None else progress.settled_slots


def load_segments(
    task: CopyTask, settled: int = 0, via: LogReader | None = None, fold: MapFold | None = None
) -> tuple[StoredSegments, Placement]:
    """This partition's stored offset-map runs, the union over its slots applied as every reader applies them
    (`state_records`), and their placement; the head slot alone when the topic has `settled` slots (the
    progress' `settled_slots`, see the module). A segment cuts the older ones it overlaps: keeping the latest record
    per key instead would, after an at-least-once crash that delivered only part of one commit's map records,
    keep an older segment that overlaps a newer one, and `OffsetMap.restore` would refuse the pair at every
    restart. Keys live somewhere that the union does not hold are stale: tombstoned wherever they live. `fold`
    (with `via`, which remembers what it read): continued when it was read at the same settled count and slot
    count and `via` has not read a slot from its start again since, and left holding this read's fold; a failed
    read leaves nothing reusable."""
    tp = (task.topic, task.partition)
    if fold is None or fold.settled != settled:
        fold = MapFold(settled) if fold is None else _restart(fold, settled)
    continuing, forgets = fold.count != 0, _forgets(via, task)
    try:
        placement = _fold_chain(task, settled, via, fold)
        if continuing and (fold.count != placement.count or _forgets(via, task) != fold.forgets):
            # another slot count (other slots), or the reader read a slot from its start again: fold afresh
            forgets = _forgets(via, task)
            placement = _fold_chain(task, settled, via, _restart(fold, settled))
    except BaseException:
        _restart(fold, -1)
        raise
    fold.count, fold.forgets = placement.count, forgets
    state = fold.state
    union = state.runs(tp)
    runs = [] if union is None else union.runs()
    live = {run.upstream_start for run in runs}
    slots_of_key: dict[int, list[int]] = {}
    for slot, keys in state.key_slots(tp).items():
        for key in keys:
            slots_of_key.setdefault(key, []).append(slot)
    at_head = {key for key, slots in slots_of_key.items() if placement.head in slots}
    placement.copy_up = [run for run in runs if run.upstream_start not in at_head]
    for key, slots in slots_of_key.items():
        # A stale key below goes to `after` now, not only as the map's delete: a run the copy writes again under
        # the same key (a rewound range) cancels that delete, and the key would stay live below a progress
        # recorded as settled, for good (found by review; test_state_settled.py).
        for slot in slots:
            if slot != placement.head:
                target = placement.ready if key in live and key in at_head else placement.after
                target.setdefault(slot, []).append(encode_segment_key(tp[0], tp[1], key))
    placement.key_slots = {key: [s for s in slots if s != placement.head] for key, slots in slots_of_key.items()}
    stale = sorted(key for key in slots_of_key if key not in live)
    return StoredSegments(runs, stale), placement


def _forgets(via: LogReader | None, task: CopyTask) -> int:
    return 0 if via is None else via.forgets(task.offset_map_topic)


def _restart(fold: MapFold, settled: int) -> MapFold:
    fold.settled, fold.count, fold.state, fold.seen = settled, 0, SlottedState(), {}
    return fold


def _fold_chain(task: CopyTask, settled: int, via: LogReader | None, fold: MapFold) -> Placement:
    """Apply to `fold` the map records of the partition's chain that it has not applied yet."""
    return _read_chain(
        task,
        task.offset_map_topic,
        lambda records: fold.state.apply_segments(records, topics=[task.topic]),
        head_only=lambda count: count == settled,
        via=via,
        seen=fold.seen,
    )


def load_snapshot(
    task: CopyTask, topic: str, key: bytes, shared: LogCache | None = None, counts_after: float | None = None
) -> tuple[bytes | None, Placement]:
    """The partition's latest metrics snapshot (`key`) in metrics topic `topic`, from the highest slot of its
    chain that holds one, and its placement (the publisher tombstones those below the head). One at the head
    outranks any below, so the chain is read only when the head has none (one left below by a publisher that died
    before retiring it stays, outranked). `shared`: the Spark task's cache, with counts asked at or after
    `counts_after` (`after_fence`; None: asked for this read)."""
    found: dict[int, bytes | None] = {}

    def apply(records: Iterator[SlotRecord]) -> None:
        for slot, k, value in records:
            if k == key:
                found[slot] = value

    # Snapshots are written outside transactions: a stalled read waits the timeout, not for a transaction's end.
    timeout, conf = task.timeout_s, task.target_consumer
    with LogReader(task.target, conf, read_committed=False, timeout_s=timeout, wait_s=timeout, shared=shared) as via:
        via.counts_after = counts_after
        placement = _read_chain(task, topic, apply, head_only=ALWAYS, via=via)
        if found.get(placement.head) is not None:
            return found[placement.head], placement
        found.clear()
        placement = _read_chain(task, topic, apply, via=via)
    live = {slot: value for slot, value in found.items() if value is not None}
    placement.after = {slot: [key] for slot in live if slot != placement.head}
    return newest(live), placement


def _progress_of(state: SlottedState, tp: tuple[str, int]) -> Callable[[Iterator[SlotRecord]], object]:
    return lambda records: state.apply_progress(records, topics=[tp[0]])


def _read_chain(
    task: CopyTask,
    topic: str,
    apply: Callable[[Iterator[SlotRecord]], object],
    *,
    head_only: Callable[[int], bool] = lambda _count: False,
    via: LogReader | None = None,
    seen: dict[int, int] | None = None,
) -> Placement:
    """Read the partition's chain of slots of `topic` (ascending, as every reader does), or only its head slot
    when `head_only(count)` holds for the count the metadata gives; its placement. `seen` ({slot: offset}):
    records below are skipped (applied before), and it is moved past each record applied."""
    counts: list[int] = []

    def counted(count: int) -> None:  # told before `chain`; a topic missing now but there when planned too
        counts.append(count)
        if count < task.state_partitions:
            raise _BehindPlan(count)

    def chain(count: int) -> list[int]:
        count = check_count(count, topic)
        if head_only(count):
            return [head_slot(task.topic, task.partition, count)]
        return sorted(slot_chain(task.topic, task.partition, count))

    deadline = time.monotonic() + COUNT_WAIT_S
    while True:
        try:
            apply(_slot_records(task, topic, chain, counted, via, seen))
            break
        except _BehindPlan as err:
            if time.monotonic() >= deadline:
                raise MirrorflowError(
                    f"flow {task.flow}: the state topic '{topic}' on '{task.target}' has {err.count} partitions by "
                    f"the metadata this copy of {task.topic}-{task.partition} got, but {task.state_partitions} when "
                    f"the run was planned (topics never shrink): a broker is behind. Nothing was copied; the task "
                    "fails to be retried."
                ) from err
            counts.clear()
            if via is not None and via.counts_after is not None:
                via.counts_after = time.monotonic()  # a count kept from before is behind too: ask again
            time.sleep(0.5)
    count = max(counts[-1] if counts else 0, 1)
    return Placement(count, head_slot(task.topic, task.partition, count))


class _BehindPlan(Exception):
    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


def _slot_records(
    task: CopyTask,
    topic: str,
    slots: Callable[[int], list[int]],
    on_count: Callable[[int], None] | None,
    via: LogReader | None,
    seen: dict[int, int] | None = None,
) -> Iterator[SlotRecord]:
    for p, offset, key, value, _ts in read_to_end(
        task.target,
        task.target_consumer,
        topic,
        partitions=slots,
        timeout_s=task.timeout_s,
        on_count=on_count,
        wait_s=OPEN_TRANSACTION_WAIT_S,
        via=via,
    ):
        if seen is not None:
            if offset < seen.get(p, 0):
                continue
            seen[p] = offset + 1
        yield p, key, value

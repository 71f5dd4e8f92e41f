"""How every reader applies the stored state records (progress and offset map), in log order.

One set of rules for the copy's own set-up (`copy_setup`), the one-off readers (`read_offset_maps`) and the
tailing ones (`OffsetMapTail`), so that they can never disagree on what the stored history says:

- progress: the last record per source partition wins; a tombstone means "no progress" (what `mirrorflow
  reset` writes), at once, not only after compaction has removed the older records.
- offset map: folded by `core.offset_store.StoredRuns`: the last record per key wins, a tombstone deletes its
  run, and a run stored at upstream start S cuts the one before it at S (conservatively when that one is
  thinned) and drops the later runs it makes stale: those inside its upstream span, and those lying below it
  downstream (an at-least-once copy that resumed from an older progress record and copied the tail again: the
  later copy is the one a consumer reads). Runs after it on both sides stay: thinning re-writes a merged run
  under an old key while the newer, exact runs follow it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from itertools import groupby
from typing import Any, NamedTuple

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import Segment, StoredRuns, decode_segment, decode_segment_key
from mirrorflow.core.progress import Progress, decode_progress, decode_progress_key
from mirrorflow.kafka.compacted_log import OPEN_TRANSACTION_WAIT_S, read_to_end

TopicPartition = tuple[str, int]
RawRecord = tuple[bytes | None, bytes | None]
"""(key, value) of a stored record, in log order."""
SlotRecord = tuple[int, bytes | None, bytes | None]
"""(slot, key, value) of a stored record: the state topic's partition it was read from (`core.state_slots`)."""


SegmentStore = dict[TopicPartition, StoredRuns]
"""The live segments per source partition."""


class StoredSegments(NamedTuple):
    """One partition's fold of the offset-map topic: its live runs, and the keys still live in the topic that
    the fold dropped as stale (`StoredRuns.stale_keys`: the copy tombstones them)."""

    runs: list[Segment]
    stale_keys: list[int]


def stored_segments(store: SegmentStore, tp: TopicPartition) -> StoredSegments:
    """The live runs of `tp` in upstream order (none if it has no record), and the stale keys."""
    found = store.get(tp)
    return StoredSegments([], []) if found is None else StoredSegments(found.runs(), found.stale_keys())


def apply_segment_records(
    segments: SegmentStore, records: Iterable[RawRecord], *, topics: Collection[str] | None = None
) -> set[TopicPartition]:
    """Apply offset-map records (log order) to `segments`; the partitions they touched."""
    wanted = None if topics is None else set(topics)
    touched: set[TopicPartition] = set()
    for key, value in records:
        if key is None:
            continue
        if value is None:
            topic, partition, start = decode_segment_key(key)
            if wanted is None or topic in wanted:
                if (topic, partition) in segments:
                    segments[(topic, partition)].delete(start)
                touched.add((topic, partition))
            continue
        topic, partition, segment = decode_segment(key, value)
        if wanted is not None and topic not in wanted:
            continue
        segments.setdefault((topic, partition), StoredRuns()).put(segment)
        touched.add((topic, partition))
    return touched


def apply_progress_records(
    progress: dict[TopicPartition, Progress],
    records: Iterable[RawRecord],
    *,
    topics: Collection[str] | None = None,
) -> set[TopicPartition]:
    """Apply progress records (log order) to `progress`, a tombstone removing its partition; the partitions
    they touched. A tombstone whose key is not a progress key (no copy writes one) is skipped."""
    wanted = None if topics is None else set(topics)
    touched: set[TopicPartition] = set()
    for key, value in records:
        if key is None:
            continue
        if value is None:
            try:
                tp = decode_progress_key(key)
            except MirrorflowError:
                continue
            if wanted is None or tp[0] in wanted:
                progress.pop(tp, None)
                touched.add(tp)
            continue
        record = decode_progress(key, value)
        if wanted is None or record.topic in wanted:
            progress[(record.topic, record.partition)] = record
            touched.add((record.topic, record.partition))
    return touched


def latest_progress(
    progress_records: Iterable[RawRecord], *, topics: Collection[str] | None = None
) -> dict[TopicPartition, Progress]:
    """The live progress per source partition (only for `topics` if given)."""
    progress: dict[TopicPartition, Progress] = {}
    apply_progress_records(progress, progress_records, topics=topics)
    return progress


def read_progress(
    cluster: str,
    conf: Mapping[str, str],
    topic: str,
    *,
    timeout_s: float,
    wait_s: float = OPEN_TRANSACTION_WAIT_S,
    topics: Collection[str] | None = None,
) -> dict[TopicPartition, Progress]:
    """The live progress in progress topic `topic` (every slot) on `cluster`, read to its true end.
    Best-effort readers (metrics, health) pass a short `wait_s`: an open transaction then fails them quickly
    with `StalledReadError` instead of holding them for `OPEN_TRANSACTION_WAIT_S`."""
    state = SlottedState()
    state.apply_progress(slot_records(cluster, conf, topic, timeout_s=timeout_s, wait_s=wait_s), topics=topics)
    return state.progress()


def slot_records(
    cluster: str,
    conf: Mapping[str, str],
    topic: str,
    *,
    timeout_s: float,
    wait_s: float = OPEN_TRANSACTION_WAIT_S,
    require: bool = False,
) -> Iterator[SlotRecord]:
    """Every record of every slot of state topic `topic`, to its true end (`read_to_end`)."""
    for p, _o, key, value, _ts in read_to_end(
        cluster, conf, topic, timeout_s=timeout_s, wait_s=wait_s, require=require
    ):
        yield p, key, value


class SlottedState:
    """The progress and offset-map records of a flow folded per slot, and merged by the slot rules
    (`core.state_slots`).

    Progress: a partition's is the one in the highest slot holding one (a writer only writes its head; a record
    left below is older). Map: the union of every slot's live runs, each slot folded on its own and the slots
    applied in ascending order, as if the lower slots' records came first in one log: a key live in several
    slots takes the highest one's value, and a run in a higher slot cuts or drops the runs below that it makes
    stale, as a later record would. A copy moving its runs up writes them to its head first and tombstones them
    below only once those copies are durable; every reader takes the ends of the slots in ascending order, so
    whoever sees a tombstone below also sees the copy above, and the union never loses a run mid-move."""

    def __init__(self) -> None:
        self._progress: dict[int, dict[TopicPartition, Progress]] = {}
        self._segments: dict[int, SegmentStore] = {}
        self._unions: SegmentStore = {}

    def clear(self) -> None:
        self._progress.clear()
        self._segments.clear()
        self._unions.clear()

    def apply_progress(
        self, records: Iterable[SlotRecord], *, topics: Collection[str] | None = None
    ) -> set[TopicPartition]:
        """Apply progress records (each slot in log order); the partitions they touched."""
        return _by_slot(records, self._progress, apply_progress_records, topics)

    def apply_segments(
        self, records: Iterable[SlotRecord], *, topics: Collection[str] | None = None
    ) -> set[TopicPartition]:
        """Apply offset-map records (each slot in log order); the partitions they touched."""
        touched = _by_slot(records, self._segments, apply_segment_records, topics)
        for tp in touched:
            self._unions.pop(tp, None)
        return touched

    def progress(self) -> dict[TopicPartition, Progress]:
        """The live progress per source partition, from the highest slot holding one."""
        merged: dict[TopicPartition, Progress] = {}
        for slot in sorted(self._progress):
            merged.update(self._progress[slot])
        return merged

    def runs(self, tp: TopicPartition) -> StoredRuns | None:
        """The union of `tp`'s map over the slots (see the class); None if no slot has a record of it."""
        if tp in self._unions:
            return self._unions[tp]
        found = [self._segments[slot][tp] for slot in sorted(self._segments) if tp in self._segments[slot]]
        if len(found) <= 1:
            union = found[0] if found else None
        else:
            union = StoredRuns()
            for stored in found:
                for run in stored.runs():
                    union.put(run)
        if union is not None:
            self._unions[tp] = union
        return union

    def progress_slots(self, tp: TopicPartition) -> list[int]:
        """The slots holding a live progress of `tp`, ascending."""
        return sorted(slot for slot, found in self._progress.items() if tp in found)

    def key_slots(self, tp: TopicPartition) -> dict[int, list[int]]:
        """{slot: the map keys of `tp` live there (its runs and the keys its fold dropped as stale)}."""
        return {slot: live for slot, store in self._segments.items() if tp in store and (live := store[tp].live_keys())}


def _by_slot(
    records: Iterable[SlotRecord],
    folds: dict[int, Any],
    apply: Callable[..., set[TopicPartition]],
    topics: Collection[str] | None,
) -> set[TopicPartition]:
    """Apply each slot's run of `records` to that slot's fold with `apply`; the partitions touched."""
    touched: set[TopicPartition] = set()
    for slot, run in groupby(records, key=lambda r: r[0]):
        touched |= apply(folds.setdefault(slot, {}), ((k, v) for _s, k, v in run), topics=topics)
    return touched

"""How readers apply stored state records (no broker): the segment store against the rule it replaced, progress
tombstones, a map missing under its progress, the leading-gap rule, the copy's own set-up after a partial
at-least-once commit, and the stall errors of `compacted_log`."""

from __future__ import annotations

import random
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mirrorflow.replication.copy_setup as copy_setup
import mirrorflow.replication.copy_slots as copy_slots
import mirrorflow.replication.state_records as state_records
from mirrorflow.core import offset_runs
from mirrorflow.core.offset_map import OffsetMap, Segment, StoredRuns, encode_segment, encode_segment_key
from mirrorflow.core.progress import Progress, encode_progress, encode_progress_key
from mirrorflow.kafka import compacted_log
from mirrorflow.kafka.read_stall import blocked
from mirrorflow.replication.copy_task import CopyTask
from mirrorflow.replication.offset_translation import FlowOffsetMaps, RawRecord, Translation, assemble_offset_maps


def reference_put(stored: dict[int, Segment], segment: Segment) -> None:
    """The rule readers applied before the segment store (quadratic: every put scanned every segment). Kept
    here as the reference the store must agree with."""
    start = segment.upstream_start
    for other_start, other in list(stored.items()):
        if other_start == start or other.upstream_end <= start:
            continue
        if other_start > start:
            del stored[other_start]
        else:
            stored[other_start] = Segment(other_start, other.downstream_start, start - other_start)
    stored[start] = segment


def random_history(rng: random.Random, steps: int) -> list[tuple[int, Segment | None]]:
    """(upstream start, segment or None for a tombstone) as a copy writes them: runs that grow, gaps, resumes
    from an older offset (at-least-once re-copies) and prunes of the oldest segments."""
    history: list[tuple[int, Segment | None]] = []
    u = d = 0
    live: list[int] = []
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.1 and live:
            start = live.pop(0)
            history.append((start, None))
            continue
        if roll < 0.25 and u > 0:
            u = rng.randrange(0, u)  # resume from an older progress record
        u += rng.randrange(0, 3)
        d += rng.randrange(0, 3)
        length = rng.randrange(1, 8)
        history.append((u, Segment(u, d, length)))
        live = sorted({*(s for s in live if s < u), u})
        u, d = u + length, d + length
    return history


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 80))
def test_the_segment_store_applies_records_as_the_reference_rule_does(seed: int, steps: int) -> None:
    """On the histories an unthinned copy writes, readers fold as they did before thinning existed."""
    store, reference = StoredRuns(), {}
    for start, segment in random_history(random.Random(seed), steps):
        if segment is None:
            store.delete(start)
            reference.pop(start, None)
        else:
            store.put(segment)
            reference_put(reference, segment)
        assert store.runs() == sorted(reference.values(), key=lambda s: s.upstream_start)


def progress(topic: str, next_upstream: int, downstream_end: int, copied: int) -> Progress:
    return Progress(topic, 0, next_upstream, downstream_end, copied, 0, 0)


def segment(u: int, d: int, n: int) -> RawRecord:
    return encode_segment("t", 0, Segment(u, d, n))


def test_a_progress_tombstone_means_no_progress_for_readers() -> None:
    """`mirrorflow reset` tombstones progress; readers used to skip tombstones and keep the old record until
    compaction removed it."""
    records = [encode_progress(progress("t", 10, 10, 10)), (encode_progress_key("t", 0), None)]
    maps = assemble_offset_maps([segment(0, 0, 10)], records)
    assert ("t", 0) not in maps
    assert FlowOffsetMaps(maps).translate("t", 0, 5).status == "not-copied"


def test_progress_with_copied_records_but_no_map_translates_nothing() -> None:
    """The map's records were deleted: every offset used to translate to the replicated end, labelled exact."""
    stored = progress("t", 20, 20, 20)
    maps = FlowOffsetMaps(assemble_offset_maps([], [encode_progress(stored)]), progress={("t", 0): stored})
    maps.learn_log_starts({("t", 0): 0})  # what `learn_leading_gaps` supplies: the copy read from log start 0
    assert maps.translate("t", 0, 5) == Translation(None, "map-missing")
    nothing_copied = progress("t", 20, 0, 0)  # every record read was filtered out: the replicated end is right
    maps = FlowOffsetMaps(assemble_offset_maps([], [encode_progress(nothing_copied)]))
    assert maps.translate("t", 0, 20).offset == 0


def test_the_leading_gap_rule_needs_the_copys_whole_history() -> None:
    """0..9 -> 0..9 then 10..19 -> 10..19 were copied (progress: 20 records); the first segment's record was
    deleted. Offset 3 used to translate to the first surviving segment (10), past seven unread records."""
    stored = progress("t", 20, 20, 20)
    maps = FlowOffsetMaps(
        assemble_offset_maps([segment(10, 10, 10)], [encode_progress(stored)]), progress={("t", 0): stored}
    )
    maps.learn_log_starts({("t", 0): 0})
    assert maps.translate("t", 0, 3).status == "before-history"
    assert maps.translate("t", 0, 12).offset == 12
    whole = FlowOffsetMaps(
        assemble_offset_maps([segment(5, 0, 15)], [encode_progress(progress("t", 20, 15, 15))]),
        progress={("t", 0): progress("t", 20, 15, 15)},
    )
    whole.learn_log_starts({("t", 0): 0})  # 0..4 were read and not copied: a real leading gap
    assert whole.translate("t", 0, 3).offset == 0


def fake_task() -> CopyTask:
    fields = {
        "target": "B",
        "target_consumer": {},
        "offset_map_topic": "map",
        "progress_topic": "progress",
        "timeout_s": 1.0,
        "topic": "t",
        "partition": 0,
    }
    return cast(CopyTask, SimpleNamespace(**fields))


def test_a_partial_at_least_once_commit_does_not_make_the_copy_refuse_its_own_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At-least-once: run 1 committed 0..9 (progress 10). Run 2 grew the tail to 0..19 and crashed before its
    progress. Run 3 resumed at 10, copied 10..19 again to 20..29, and its commit delivered the new segment at 10
    but not the rewrite of the one at 0 before it crashed. The stored records, as the broker holds them:"""
    stored: list[RawRecord] = [segment(0, 0, 10), segment(0, 0, 20), segment(10, 20, 10)]

    def read_to_end(*_args: Any, **_kwargs: Any) -> Iterator[tuple[int, int, bytes | None, bytes | None, int]]:
        for offset, (key, value) in enumerate(stored):
            yield 0, offset, key, value, 0

    monkeypatch.setattr(copy_slots, "read_to_end", read_to_end)
    segments, _placement = copy_slots.load_segments(fake_task())
    restored = copy_setup.restore_map(segments, progress("t", 10, 10, 10), 10)  # used to raise at every restart
    assert restored.upstream_end == 10
    assert segments.runs == [Segment(0, 0, 10), Segment(10, 20, 10)]


def test_a_stall_blames_a_transaction_only_where_one_was_seen() -> None:
    seen = blocked("B", "s", {0: 5}, {0: 3}, 2.0, {0})
    assert isinstance(seen, compacted_log.OpenTransactionError)
    assert "--start-offset 3" in str(seen) and "unless" not in str(seen)
    unseen = blocked("B", "s", {0: 5}, {0: 3}, 2.0, set())
    assert not isinstance(unseen, compacted_log.OpenTransactionError)
    assert "kafka-transactions" not in str(unseen) and "still open" not in str(unseen)
    assert "leader" in str(unseen) and "s-0 at offset 3" in str(unseen)


def test_key_of_an_unknown_tombstone_is_skipped() -> None:
    """A tombstone no copy writes (a stray key) does not break readers; progress and the map stay."""
    records = [encode_progress(progress("t", 10, 10, 10)), (b"not a progress key", None)]
    maps = assemble_offset_maps([segment(0, 0, 10), (encode_segment_key("u", 0, 0), None)], records)
    assert FlowOffsetMaps(maps).translate("t", 0, 5).offset == 5


def test_readers_keep_the_exact_window_of_a_thinned_map() -> None:
    """A thinned map re-writes a merged run under an old key while the newer runs follow it. The readers' fold used
    to drop every key after a re-written one: the exact window vanished, and offsets in it translated to the
    replicated end, past records the group had not read (a skip). Readers fold as `StoredRuns` does."""
    copy = OffsetMap(start=0, exact_runs=4)
    log: list[RawRecord] = []
    for t in range(40):  # one run per exactly-once transaction, with a one-offset gap on each side
        copy.record_run(t * 3, t * 4, 2)
        changes = copy.unflushed()
        log += [encode_segment("t", 0, s) for s in changes.upserts]
        log += [(encode_segment_key("t", 0, key), None) for key in changes.deletes]
        copy.mark_flushed(changes)
    stored = Progress("t", 0, 40 * 3 - 1, 40 * 4 - 2, 80, 0, 0)
    maps = FlowOffsetMaps(assemble_offset_maps(log, [encode_progress(stored)]), progress={("t", 0): stored})
    for upstream in range(36 * 3, 40 * 3 - 1):  # the window: the newest runs, exact
        assert maps.translate("t", 0, upstream) == Translation(copy.translate(upstream), "exact"), upstream
    labels = set()
    for upstream in range(0, 36 * 3):  # thinned: never past what the live map says, and labelled with the bound
        found = maps.translate("t", 0, upstream)
        offset, bound = cast(tuple[int, int], copy.translate_bounded(upstream))
        assert (found.offset, found.rereads) == (offset, bound), upstream
        t, into = divmod(upstream, 3)  # the exact answer: the copy of the first copied record at or after it
        exact = 4 * t + into if into < 2 else 4 * (t + 1)
        reread = sum(1 for d in range(offset, exact) if d % 4 < 2)  # copies sit at 4t and 4t + 1
        assert found.status == ("conservative" if bound else "exact") and offset <= exact and reread <= bound
        labels.add(found.label)
    assert "exact" in labels and any(label.startswith("conservative (<= ") for label in labels), labels
    back = maps.untranslate("t", 0, 10)  # inside a thinned run downstream: the way home is bounded too
    assert back.status == "conservative" and back.rereads > 0 and back.offset is not None and back.offset <= 8


class EagerRuns:
    """StoredRuns' rule with every deletion done at once (how it was first written): the reference for the lazy
    key list, over thinned runs and tombstones anywhere."""

    def __init__(self) -> None:
        self.runs: dict[int, Segment] = {}
        self.dropped: set[int] = set()  # live in the topic, dropped by the fold

    def put(self, s: Segment) -> None:
        before = [k for k in self.runs if k < s.upstream_start]
        if before and self.runs[max(before)].upstream_end > s.upstream_start:
            self.runs[max(before)] = self.runs[max(before)].head(s.upstream_start)
        for k in sorted(k for k in self.runs if k > s.upstream_start):
            if k >= s.upstream_end and self.runs[k].downstream_start >= s.downstream_end:
                break
            del self.runs[k]
            self.dropped.add(k)
        self.runs[s.upstream_start] = s
        self.dropped.discard(s.upstream_start)

    def delete(self, key: int) -> None:
        self.runs.pop(key, None)
        self.dropped.discard(key)


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(0, 60), st.integers(0, 90), st.integers(1, 6), st.integers(0, 2)),
        max_size=120,
    )
)
def test_stored_runs_with_a_lazy_key_list_fold_as_the_eager_rule(ops: list[tuple[bool, int, int, int, int]]) -> None:
    lazy, eager = StoredRuns(), EagerRuns()
    for is_delete, u, d, n, gaps in ops:
        if is_delete:
            lazy.delete(u)
            eager.delete(u)
        else:
            run = Segment(u, d, n + gaps, upstream_gaps=gaps, downstream_extra=gaps, weight=1 + gaps)
            lazy.put(run)
            eager.put(run)
        assert lazy.runs() == [eager.runs[k] for k in sorted(eager.runs)]
        assert lazy.stale_keys() == sorted(eager.dropped)


def test_stored_runs_rebuild_their_key_list_after_many_tombstones() -> None:
    """Retention prunes the oldest runs while new ones arrive, then an at-least-once copy resumes: the rebuilt key
    list folds as the eager rule does."""
    rng = random.Random(7)
    lazy, eager = StoredRuns(), EagerRuns()
    for i in range(600):
        run = Segment(3 * i, 4 * i, 2)
        lazy.put(run)
        eager.put(run)
        if i >= 100 and rng.random() < 0.9:
            victim = rng.choice(sorted(eager.runs)[:50])
            lazy.delete(victim)
            eager.delete(victim)
    assert len(lazy._keys) <= 2 * len(eager.runs) + 64  # the list was rebuilt along the way
    for run in (Segment(1500, 5000, 4), Segment(1490, 5100, 3)):  # resumed copies cut the stale tails
        lazy.put(run)
        eager.put(run)
    assert lazy.runs() == [eager.runs[k] for k in sorted(eager.runs)]


def commit_records(copy: OffsetMap) -> list[RawRecord]:
    """The offset-map records of the copy's next commit, in the order the copy sends them."""
    changes = copy.unflushed()
    return [encode_segment("t", 0, s) for s in changes.upserts] + [
        (encode_segment_key("t", 0, key), None) for key in changes.deletes
    ]


def fold(log: list[RawRecord]) -> state_records.StoredSegments:
    store: dict[tuple[str, int], StoredRuns] = {}
    state_records.apply_segment_records(store, log)
    return state_records.stored_segments(store, ("t", 0))


def test_a_tombstone_lost_in_a_crash_is_written_again_so_compaction_changes_no_answer() -> None:
    """At-least-once, no thinning. Attempt 1 committed u0-2 -> d0-2 (progress 4), then copied u4,5 -> d3,4 and
    u7,8 -> d5,6 (a run at key 7) and died before its progress. Attempt 2 resumed at 4 (u4 compacted away at the
    source), copied u5 -> d7 and died before its tombstones (keys 7 and 4): the fold drops key 7 anyway, since the
    run at 5 lies below it downstream. Attempt 3 resumed at 4 again and tombstoned key 5. Once the log cleaner
    removed the key-5 record, key 7 came back in every reader of the compacted topic: a group at upstream 6 was
    sent to d5 ("exact") and read u7, u8, u5 again. The copy now tombstones the keys its fold dropped."""
    log: list[RawRecord] = []
    copy = OffsetMap(start=0)
    for u in range(3):
        copy.record(u, u)
    copy.mark_consumed(4)
    log += commit_records(copy)
    copy.mark_flushed(copy.unflushed())
    first = Progress("t", 0, 4, 3, 3, 0, 0)
    for u, d in ((4, 3), (5, 4), (7, 5), (8, 6)):
        copy.record(u, d)
    copy.mark_consumed(9)
    log += commit_records(copy)  # attempt 1 dies here
    copy = copy_setup.restore_map(fold(log), first, 4)
    copy.record(5, 7)
    copy.mark_consumed(7)
    records = commit_records(copy)
    tombstones = [(encode_segment_key("t", 0, key), None) for key in (7, 4)]
    assert records[-2:] == tombstones  # highest key first
    log += records[:-2]  # attempt 2 dies before its tombstones
    assert fold(log).stale_keys == [7]
    copy = copy_setup.restore_map(fold(log), first, 4)
    copy.record(8, 8)
    copy.mark_consumed(9)
    records = commit_records(copy)
    assert (encode_segment_key("t", 0, 7), None) in records  # the lost tombstone, written again
    log += records
    last = Progress("t", 0, 9, 9, 5, 0, 0)
    latest = {key: i for i, (key, _value) in enumerate(log)}
    cleaned = [record for i, record in enumerate(log) if latest[record[0]] == i]
    answers = [
        FlowOffsetMaps(assemble_offset_maps(records, [encode_progress(last)]), progress={("t", 0): last}).translate(
            "t", 0, 6
        )
        for records in (log, cleaned)
    ]
    assert answers == [Translation(8, "exact")] * 2


def test_a_reader_cut_inside_a_merged_run_stays_below_its_progress_downstream() -> None:
    """Exactly-once with thinning (window 4). A reader read the progress of transaction 1 (u0,u1 -> d0,d1, its
    marker at d2), then the map, which already held transaction 2 (u3,5,7,9,11 -> d3..d7): thinning had merged
    T1's run with T2's first under T1's key. The cut kept that merged run's whole downstream span, so the map's
    replicated end lay past T2's first copy and a group caught up at upstream 2 skipped u3."""
    copy = OffsetMap(start=0, exact_runs=4)
    log: list[RawRecord] = []
    for runs in ([(0, 0, 2)], [(3 + 2 * i, 3 + i, 1) for i in range(5)]):
        for u, d, n in runs:
            copy.record_run(u, d, n)
        copy.mark_consumed(copy.upstream_end, downstream_end=cast(int, copy.downstream_end) + 1)
        log += commit_records(copy)
        copy.mark_flushed(copy.unflushed())
    first = Progress("t", 0, 2, 3, 2, 0, 0)
    maps = FlowOffsetMaps(assemble_offset_maps(log, [encode_progress(first)]), progress={("t", 0): first})
    assert maps.translate("t", 0, 2).offset == 3  # d3 holds u3, which the group has not read


def test_a_partial_commit_of_a_thinned_head_does_not_refuse_every_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    """At-least-once with thinning (window 1), killed twice mid-commit (found by a random copy history). The last
    partial commit delivered the rewound thinned head [26,35) -> [16,22) but not the tombstones of runs 36 and 38,
    whose copies lie inside the head's downstream span. The fold kept them (it compared with the head's downstream
    start, not its end), and every restart refused the map: the partition could never be copied again."""
    monkeypatch.setattr(offset_runs, "DEFAULT_EXACT_RUNS", 1)
    S = Segment
    history: list[Segment | int] = [  # a run is a record, an int a tombstone
        S(1, 0, 1), S(3, 1, 1), S(5, 2, 2), S(5, 2, 6), S(1, 0, 2, 1, 0, 2), S(12, 8, 3), S(18, 11, 1), 3,
        S(1, 0, 8, 2, 0, 3), S(18, 11, 2), S(21, 13, 3), 5, S(12, 8, 5, 3, 0, 2), S(26, 16, 1), 18, S(32, 17, 1),
        S(12, 8, 8, 4, 0, 3), S(26, 16, 2, 5, 0, 2), S(34, 18, 1), S(36, 19, 1), S(38, 20, 1),
        S(1, 0, 16, 7, 0, 6), S(26, 16, 3, 6, 3, 3),
    ]  # fmt: skip
    log = [(encode_segment_key("t", 0, r), None) if isinstance(r, int) else encode_segment("t", 0, r) for r in history]
    stored = fold(log)
    assert {36, 38} <= set(stored.stale_keys)
    restored = copy_setup.restore_map(stored, Progress("t", 0, 34, 18, 18, 0, 0), 34)
    assert restored.upstream_end == 34 and {36, 38} <= set(restored.unflushed().deletes)

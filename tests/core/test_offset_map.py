"""The offset map against a brute-force model of the copied pairs, plus readable examples.

Histories run with every run exact (`NO_THINNING`: the map must equal the model's maximal runs) and with a tiny
window of exact runs (thinning: never a skip, re-reads within the reported bound, the run count within T1's bound,
the stored records restoring the live map).
"""

from __future__ import annotations

import itertools
import math
import time
from bisect import bisect_left
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import (
    NO_THINNING,
    OffsetMap,
    Segment,
    SegmentChanges,
    StoredRuns,
    decode_segment,
    decode_segment_key,
    encode_segment,
    encode_segment_key,
    offset_map_topic,
)

# ---- brute-force model ------------------------------------------------------------------------------------


class Model:
    """Every copied (upstream, downstream) pair, the consumed range and the downstream floor, naively."""

    def __init__(self) -> None:
        self.pairs: list[tuple[int, int]] = []
        self.ever: set[tuple[int, int]] = set()  # survives rewinds
        self.start: int | None = None
        self.up_end: int | None = None
        self.floor: int | None = None
        self.cuts: set[int] = set()  # a run cannot continue here: its beginning was pruned away whole

    def replicated_end(self) -> int | None:
        ends = [self.pairs[-1][1] + 1] if self.pairs else []
        if self.floor is not None:
            ends.append(self.floor)
        return max(ends) if ends else None

    def record(self, u: int, d: int) -> None:
        if self.start is None:
            self.start = u
        self.pairs.append((u, d))
        self.ever.add((u, d))
        self.up_end = u + 1

    def consume(self, upstream_end: int, downstream_end: int | None) -> None:
        if self.start is None:
            self.start = upstream_end
        self.up_end = upstream_end
        if downstream_end is not None:
            self.floor = downstream_end if self.floor is None else max(self.floor, downstream_end)

    def prune(self, x: int) -> None:
        if self.start is not None and self.up_end is not None:
            self.start = max(self.start, min(x, self.up_end))
            if self.pairs and self.pairs[-1][0] < self.start:
                self.cuts.add(self.pairs[-1][0] + 1)

    def rewind(self, x: int) -> None:
        if self.start is None:
            self.start = self.up_end = x
            return
        self.floor = self.replicated_end()
        self.pairs = [p for p in self.pairs if p[0] < x]
        self.cuts = {c for c in self.cuts if c <= x}
        self.start = min(self.start, x)
        self.up_end = x

    def translate(self, offset: int) -> int | None:
        if self.start is None or self.up_end is None or not self.start <= offset <= self.up_end:
            return None
        return next((d for u, d in self.pairs if u >= offset), self.replicated_end())

    def untranslate(self, down: int) -> int | None:
        """The first copy at or after downstream `down` that the source still holds, else the consumed end."""
        if self.start is None or self.up_end is None:
            return None
        start = self.start
        return max(start, next((u for u, d in self.pairs if d >= down and u >= start), self.up_end))

    def runs(self) -> list[Segment]:
        """Maximal runs of the pairs, without those wholly below start (what the map must hold)."""
        runs: list[list[int]] = []
        for u, d in self.pairs:
            if runs and u == runs[-1][0] + runs[-1][2] and d == runs[-1][1] + runs[-1][2] and u not in self.cuts:
                runs[-1][2] += 1
            else:
                runs.append([u, d, 1])
        assert self.start is not None or not runs
        return [Segment(u, d, n) for u, d, n in runs if self.start is not None and u + n > self.start]


def check_invariants(m: OffsetMap) -> None:
    """I1-I6 and T1 of offset_map's docstring, through the public API only."""
    segs = m.segments()
    if m.start is None:
        assert m.upstream_end is None and not segs and m.downstream_end is None
        return
    assert m.upstream_end is not None and m.start <= m.upstream_end
    for a, b in itertools.pairwise(segs):
        assert b.upstream_start >= a.upstream_end and b.downstream_start >= a.downstream_end  # I1
        if a.exact and b.exact:  # I3
            assert not (b.upstream_start == a.upstream_end and b.downstream_start == a.downstream_end)
    for s in segs:
        assert s.upstream_length >= 1 and s.downstream_length >= 1 and m.start < s.upstream_end <= m.upstream_end
        assert not s.exact or (s.length >= 1 and s.weight == 1)  # I2, I5
    if segs:
        end = m.downstream_end
        assert end is not None and end >= segs[-1].downstream_end  # I6
    old = segs[: max(len(segs) - m.exact_runs, 0)]
    total = sum(s.weight for s in segs)
    age = total - sum(s.weight for s in old)
    for a, b in reversed(list(itertools.pairwise(old))):  # T1
        assert a.weight + b.weight > age, (a, b, age)
        age += b.weight
    assert len(segs) <= m.exact_runs + 2 * math.log2(max(total / m.exact_runs, 1)) + 2


# ---- random copy histories ---------------------------------------------------------------------------------

copy_op = st.tuples(
    st.just("copy"),
    st.lists(st.tuples(st.sampled_from([0, 0, 0, 1, 3]), st.sampled_from([0, 0, 0, 1, 2])), min_size=1, max_size=6),
)
forward_ops = st.one_of(
    copy_op,
    copy_op,
    st.tuples(st.just("drop"), st.integers(1, 3)),
    st.tuples(st.just("consume"), st.integers(0, 2), st.sampled_from([None, -1, 0, 1, 2])),
    st.tuples(st.just("prune"), st.integers(0, 12)),
    st.tuples(st.just("flush"), st.booleans()),
    st.tuples(st.just("stage")),
    st.tuples(st.just("syncs"), st.booleans()),
)
ops = st.one_of(forward_ops, st.tuples(st.just("rewind"), st.integers(0, 8)))


class Harness:
    """One history on three maps (per record, batched, as runs), the model, a simulated offset-map topic."""

    def __init__(self, begin: int | None, lag: int, window: int = NO_THINNING) -> None:
        self.window = window
        self.maps = {kind: OffsetMap(begin, exact_runs=window) for kind in ("record", "batch", "run")}
        self.model = Model()
        if begin is not None:
            self.model.start = self.model.up_end = begin
        self.lag = lag
        self.syncs: list[tuple[int, int]] = []
        self.stored: dict[int, Segment] = {}
        self.folded = StoredRuns()  # the same records as a translation reader folds them
        self.staged: SegmentChanges | None = None
        self.resumed: OffsetMap | None = None  # restored from the topic at the last commit, then copying on

    def apply(self, op: tuple[Any, ...]) -> None:
        kind, model, ref = op[0], self.model, self.maps["record"]
        if kind == "copy":
            pairs = []
            u = model.up_end if model.up_end is not None else 5
            d = model.replicated_end() if model.replicated_end() is not None else 7
            assert d is not None
            for du, dd in op[1]:
                u, d = u + du, d + dd
                pairs.append((u, d))
                u, d = u + 1, d + 1
            for u, d in pairs:
                ref.record(u, d)
                model.record(u, d)
                if self.resumed is not None:
                    self.resumed.record(u, d)
            self.maps["batch"].record_batch([p[0] for p in pairs], [p[1] for p in pairs])
            run_start = 0
            for i in range(1, len(pairs) + 1):
                if i == len(pairs) or pairs[i] != (pairs[i - 1][0] + 1, pairs[i - 1][1] + 1):
                    u, d = pairs[run_start]
                    self.maps["run"].record_run(u, d, i - run_start)
                    run_start = i
        elif kind == "drop":
            base = model.up_end if model.up_end is not None else 5
            self._all(lambda m: m.mark_consumed(base + op[1]))
            model.consume(base + op[1], None)
        elif kind == "consume":
            base = model.up_end if model.up_end is not None else 5
            end = model.replicated_end()
            floor = None if op[2] is None or end is None else max(end + op[2], 0)
            self._all(lambda m: m.mark_consumed(base + op[1], downstream_end=floor))
            model.consume(base + op[1], floor)
        elif kind == "prune":  # the copy emits the syncs of a batch before it prunes
            self.syncs += ref.offset_syncs(self.lag)
            x = (model.start or 0) + op[1]
            self._all(lambda m: m.prune_below(x))
            model.prune(x)
        elif kind == "rewind" and model.up_end is not None:
            x = max(model.up_end - op[1], 0)
            self._all(lambda m: m.rewind(x))
            model.rewind(x)
        elif kind == "stage":  # changes taken for a transaction that commits only after later changes
            self.staged = ref.unflushed()
        elif kind == "flush":
            self.flush(commit=op[1])
        elif kind == "syncs":
            self.syncs += ref.offset_syncs(self.lag, flush_latest=op[1])

    def _all(self, action: Any) -> None:
        for m in [*self.maps.values(), *([self.resumed] if self.resumed is not None else [])]:
            action(m)

    def flush(self, *, commit: bool) -> None:
        ref = self.maps["record"]
        if not commit:  # the transaction aborted: nothing reached the topic
            self.staged = None
            return
        if self.staged is not None:
            self.write(self.staged)
            self.staged = None
        self.write(ref.unflushed())
        assert {s.upstream_start: s for s in ref.segments()} == self.stored
        assert self.folded.runs() == sorted(self.stored.values(), key=lambda s: s.upstream_start)
        assert ref.unflushed().upserts == () and ref.unflushed().deletes == ()
        restored = OffsetMap.restore(
            self.stored.values(),
            next_upstream=ref.upstream_end,
            downstream_end=ref.downstream_end,
            exact_runs=self.window,
        )
        if ref.start is not None:  # the stored map does not hold the log start: a resumed copy prunes to it first
            restored.prune_below(ref.start)
        check_invariants(restored)
        assert restored.segments() == ref.segments()
        assert (restored.upstream_end, restored.downstream_end) == (ref.upstream_end, ref.downstream_end)
        assert restored.unflushed().upserts == ()
        if ref.start is None:
            assert restored.start is None
            return
        assert restored.start is not None
        for offset in range(max(restored.start, ref.start), (ref.upstream_end or 0) + 2):
            assert restored.translate(offset) == ref.translate(offset), offset
        restored.merge(ref.segments())  # re-applying stored segments changes nothing
        assert restored.segments() == ref.segments()
        self.resumed = restored

    def write(self, changes: SegmentChanges) -> None:
        for s in changes.upserts:
            key, value = encode_segment("orders", 3, s)
            assert decode_segment(key, value) == ("orders", 3, s)
            self.stored[s.upstream_start] = s
            self.folded.put(s)
        for key_start in changes.deletes:
            self.folded.delete(key_start)
            assert decode_segment_key(encode_segment_key("orders", 3, key_start)) == ("orders", 3, key_start)
            self.stored.pop(key_start, None)
        self.maps["record"].mark_flushed(changes)

    def check(self) -> None:
        model, ref = self.model, self.maps["record"]
        for m in self.maps.values():
            check_invariants(m)
            assert m.segments() == ref.segments()
            assert (m.start, m.upstream_end, m.downstream_end) == (
                model.start,
                model.up_end,
                model.replicated_end(),
            )
        if self.window == NO_THINNING:
            self.check_exact()
        else:
            self.check_thinned()
        if self.resumed is not None:  # a crash and resume loses at most the history below its first segment
            m = self.resumed
            check_invariants(m)
            assert (m.segments(), m.upstream_end, m.downstream_end) == (
                ref.segments(),
                ref.upstream_end,
                ref.downstream_end,
            )
            for offset in range(max(m.start or 0, ref.start or 0), (model.up_end or 0) + 3):
                assert m.translate(offset) == ref.translate(offset), offset

    def check_exact(self) -> None:
        """Every run exact: the map is the model's maximal runs and answers exactly both ways."""
        model, ref = self.model, self.maps["record"]
        assert ref.segments() == tuple(model.runs())
        for offset in range((model.up_end or 0) + 3):
            assert ref.translate(offset) == model.translate(offset), offset
            bounded = ref.translate_bounded(offset)
            assert bounded is None or bounded[1] == 0
        kept_u, kept_d = self._kept()
        for down in range((model.replicated_end() or 0) + 3):
            back = ref.untranslate(down)
            assert back == model.untranslate(down), down
            if back is not None:  # 0 re-reads, 0 skips: the copies read below `down` are those of u < back
                assert bisect_left(kept_d, down) == bisect_left(kept_u, back), down

    def check_thinned(self) -> None:
        """Thinned: each run holds what it says (T2, T3), and both translations never skip, re-read within the
        reported bound (at most the run's gaps), and are exact where they say so."""
        model, ref = self.model, self.maps["record"]
        kept_u, kept_d = self._kept()
        pairs = set(model.pairs)
        for s in ref.segments():
            if s.exact:
                assert all((s.upstream_start + i, s.downstream_start + i) in pairs for i in range(s.length)), s
                continue
            inside = [(u, d) for u, d in model.pairs if s.upstream_start <= u < s.upstream_end]
            assert len(inside) >= s.length, s
            assert all(s.downstream_start <= d < s.downstream_end for _, d in inside), s
        for offset in range((model.up_end or 0) + 3):
            true, got = model.translate(offset), ref.translate_bounded(offset)
            assert (got is None) == (true is None), offset
            if got is None or true is None:
                continue
            down, bound = got
            assert down <= true, f"translate({offset}) skips: {down} > {true}"
            rereads = bisect_left(kept_d, true) - bisect_left(kept_d, down)
            assert rereads <= bound, (offset, rereads, bound)
            assert bound == 0 or bound <= self._run_gaps_up(offset)
            assert bound > 0 or down == true
        for down_offset in range((model.replicated_end() or 0) + 3):
            true_up, back = model.untranslate(down_offset), ref.untranslate_bounded(down_offset)
            assert (back is None) == (true_up is None)
            if back is None or true_up is None:
                continue
            up, bound = back
            assert up <= true_up, f"untranslate({down_offset}) skips: {up} > {true_up}"
            rereads = bisect_left(kept_u, true_up) - bisect_left(kept_u, up)
            assert rereads <= bound and (bound > 0 or up == true_up), (down_offset, rereads, bound)

    def _kept(self) -> tuple[list[int], list[int]]:
        """Copies the source still holds, in copy order: both offsets increase along them (I1)."""
        model = self.model
        kept = [(u, d) for u, d in model.pairs if model.start is not None and u >= model.start]
        return [u for u, _ in kept], [d for _, d in kept]

    def _run_gaps_up(self, offset: int) -> int:
        run = next(s for s in self.maps["record"].segments() if s.upstream_start <= offset < s.upstream_end)
        return run.max_rereads

    def check_syncs(self) -> None:
        """Every sync is a copied pair, every segment starts with one, and they obey the lag rule."""
        syncs, lag = self.syncs, self.lag
        assert set(syncs) <= self.model.ever
        synced = set(syncs)
        for run in _unpruned(self.model).runs():
            positions = [i for i in range(run.length) if (run.upstream_start + i, run.downstream_start + i) in synced]
            assert positions and positions[0] == 0, f"segment start of {run} not synced"
            # consecutive syncs at most lag + 1 apart, at most `lag` records after the last one
            gaps = [b - a for a, b in zip(positions, [*positions[1:], run.length], strict=True)]
            assert max(gaps) <= lag + 1, (run, positions)

    def check_mm2_translation(self) -> None:
        """MM2's `sync.down + 1` translation from our syncs never skips and re-reads <= offset.lag.max."""
        syncs, pairs, lag = self.syncs, self.model.pairs, self.lag
        assert syncs == sorted(syncs) and len({d for _, d in syncs}) == len(syncs)
        start, up_end = self.model.start, self.model.up_end
        assert start is not None and up_end is not None
        for offset in range(start, up_end + 1):
            exact = self.model.translate(offset)
            sync = max((s for s in syncs if s[0] <= offset), default=None)
            if sync is None or exact is None:
                continue
            mm2 = sync[1] + (0 if offset == sync[0] else 1)
            assert mm2 <= exact, f"MM2 translation of {offset} skips: {mm2} > {exact}"
            rereads = sum(1 for _, d in pairs if mm2 <= d < exact)
            assert rereads <= lag, f"MM2 re-reads {rereads} > offset.lag.max {lag} at {offset}"


def _unpruned(model: Model) -> Model:
    whole = Model()
    whole.pairs, whole.start, whole.cuts = model.pairs, 0, model.cuts
    return whole


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    begin=st.sampled_from([None, 0, 40]),
    lag=st.sampled_from([0, 1, 2, 5, 100]),
    window=st.sampled_from([NO_THINNING, 1, 2, 3]),
    history=st.lists(forward_ops, max_size=8) | st.lists(forward_ops, min_size=15, max_size=50),
)
def test_translation_and_mm2_syncs_match_the_model(
    begin: int | None, lag: int, window: int, history: list[tuple[Any, ...]]
) -> None:
    h = Harness(begin, lag, window)
    h.check()
    for op in history:
        h.apply(op)
        h.check()
    thinned = sum(not s.exact for s in h.maps["record"].segments())
    event(f"{len(history) // 10 * 10}+ steps, {len(h.model.pairs) // 20 * 20}+ records, {thinned} thinned runs")
    h.syncs += h.maps["record"].offset_syncs(lag)
    if h.model.pairs:
        h.check_syncs()
        h.check_mm2_translation()
    h.flush(commit=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    begin=st.sampled_from([None, 0, 40]),
    window=st.sampled_from([NO_THINNING, 1, 2, 3]),
    history=st.lists(ops, max_size=8) | st.lists(ops, min_size=15, max_size=50),
)
# Found by Hypothesis: a resumed map must prune to the log start before a rewind reaches it.
@example(
    begin=0,
    history=[("copy", [(0, 0)])] * 3
    + [("copy", [(0, 0), (0, 0)]), ("prune", 0)]
    + [("copy", [(0, 0)])] * 3
    + [("copy", [(0, 0), (0, 0)]), ("copy", [(0, 0)]), ("prune", 4), ("flush", True), ("syncs", False)]
    + [("copy", [(0, 0)]), ("rewind", 8)],
    window=NO_THINNING,
)
def test_rewinds_stay_exact_or_conservative(begin: int | None, window: int, history: list[tuple[Any, ...]]) -> None:
    h = Harness(begin, lag=3, window=window)
    for op in history:
        h.apply(op)
        h.check()
    h.syncs += h.maps["record"].offset_syncs(h.lag)
    h.check_syncs()
    h.flush(commit=True)


# ---- examples ----------------------------------------------------------------------------------------------


def test_contiguous_copy_is_one_segment() -> None:
    m = OffsetMap()
    for i in range(10):
        m.record(100 + i, 500 + i)
    assert m.segments() == (Segment(100, 500, 10),)
    assert m.translate(100) == 500 and m.translate(109) == 509
    assert m.translate(110) == 510  # caught up: the replicated end
    assert m.translate(99) is None  # before the copy began
    assert m.translate(111) is None  # the copy has not read that far
    assert m.translate(111, clamp_ahead=True) == 510


def test_transaction_markers_split_segments_without_losing_exactness() -> None:
    m = OffsetMap(start=0)
    m.record_run(0, 0, 5)  # transaction 1 ...
    m.record_run(5, 6, 5)  # ... its commit marker took downstream offset 5
    m.mark_consumed(12, downstream_end=12)  # upstream marker at 10, aborted record at 11; our marker at 11
    assert m.segments() == (Segment(0, 0, 5), Segment(5, 6, 5))
    assert [m.translate(u) for u in (4, 5, 9, 10, 11, 12)] == [4, 6, 10, 12, 12, 12]


def test_compaction_and_dropped_records_translate_to_the_next_copy() -> None:
    m = OffsetMap(start=0)
    m.record(0, 0)
    m.record(3, 1)  # 1-2 compacted away upstream
    m.mark_consumed(7)  # 4-6 dropped by a filter
    m.record(7, 2)
    assert m.segments() == (Segment(0, 0, 1), Segment(3, 1, 1), Segment(7, 2, 1))
    assert [m.translate(u) for u in range(9)] == [0, 1, 1, 1, 2, 2, 2, 2, 3]
    m.mark_consumed(20)  # a dropped tail translates to the replicated end
    assert m.translate(15) == 3 and m.translate(20) == 3 and m.translate(21) is None


def test_untranslate_inverts_across_transaction_markers_and_dropped_records() -> None:
    """Failback of a group that read the copy: downstream -> upstream, gaps on either side skipped."""
    m = OffsetMap(start=0)
    m.record_run(0, 0, 5)  # upstream 0-4 -> 0-4
    m.record_run(6, 6, 3)  # upstream marker at 5; our commit marker took downstream 5; 6-8 -> 6-8
    m.record(12, 9)  # 9-11 dropped by a filter (or aborted)
    m.mark_consumed(15, downstream_end=11)  # 13-14 markers upstream; our marker at 10
    assert [m.untranslate(d) for d in range(13)] == [0, 1, 2, 3, 4, 6, 6, 7, 8, 12, 15, 15, 15]
    for d in range(13):  # never a skip of a copied record, never a re-read
        u = m.untranslate(d)
        assert u is not None and m.translate(u) is not None and m.translate(u) >= min(d, 10)
    assert OffsetMap().untranslate(0) is None
    with pytest.raises(ValueError):
        m.untranslate(-1)


def test_untranslate_after_pruning_never_goes_below_the_log_start() -> None:
    m = OffsetMap(start=0)
    m.record_run(0, 0, 10)
    m.record_run(20, 10, 10)
    m.prune_below(25)  # the first run is gone, the second straddles the new start
    assert [m.untranslate(d) for d in (0, 9, 10, 14, 15, 19, 20)] == [25, 25, 25, 25, 25, 29, 30]
    empty = OffsetMap(start=7)
    assert empty.untranslate(0) == 7  # consumed, nothing copied: the group resumes at the consumed end


def test_nothing_copied_yet() -> None:
    m = OffsetMap()
    assert m.translate(0) is None and m.segments() == ()
    m.mark_consumed(10)  # everything filtered so far; where copies will land is unknown
    assert m.translate(10) is None
    m.mark_consumed(10, downstream_end=42)
    assert m.translate(10) == 42 and m.translate(9) is None


def test_going_backwards_is_an_error() -> None:
    m = OffsetMap()
    m.record(10, 10)
    with pytest.raises(ValueError, match="rewind"):
        m.record(10, 11)
    with pytest.raises(ValueError, match="reset"):
        m.record(11, 9)
    with pytest.raises(ValueError, match="rewind"):
        m.mark_consumed(5)
    with pytest.raises(ValueError):
        m.record_batch([11, 12], [11])


def test_prune_keeps_translation_exact_above_the_log_start() -> None:
    m = OffsetMap(start=0)
    m.record_run(0, 0, 5)
    m.record_run(10, 5, 5)
    m.prune_below(12)
    assert m.start == 12 and m.segments() == (Segment(10, 5, 5),)  # straddling segment kept whole
    assert m.translate(11) is None and m.translate(12) == 7
    m.prune_below(1_000)  # never beyond what was consumed
    assert m.start == 15 and m.segments() == () and m.translate(15) == 10
    assert m.unflushed().deletes == (10, 0)


def test_merge_is_idempotent_and_rejects_conflicts() -> None:
    m = OffsetMap.restore([Segment(0, 0, 10), Segment(0, 0, 5), Segment(20, 12, 3)])  # an older tail too
    assert m.segments() == (Segment(0, 0, 10), Segment(20, 12, 3))
    m.merge([Segment(20, 12, 3), Segment(2, 2, 4)])
    assert m.segments() == (Segment(0, 0, 10), Segment(20, 12, 3))
    assert m.unflushed().upserts == ()
    with pytest.raises(ValueError, match="disagrees"):
        m.merge([Segment(5, 6, 1)])
    with pytest.raises(ValueError, match="disagrees"):
        m.merge([Segment(12, 10, 1)])  # the map says 12 was a gap


def test_restore_rewinds_segments_written_after_the_progress() -> None:
    # at-least-once: segments of 0-9 reached the topic, the progress (next upstream 6) is older
    m = OffsetMap.restore([Segment(0, 0, 10)], next_upstream=6, downstream_end=10)
    assert m.segments() == (Segment(0, 0, 6),) and m.upstream_end == 6 and m.downstream_end == 10
    changes = m.unflushed()
    assert changes.upserts == (Segment(0, 0, 6),)
    m.record(6, 10)  # re-copied after the old copies
    assert m.translate(6) == 10 and m.translate(5) == 5


def test_restore_joins_stored_segments_that_form_one_run() -> None:
    m = OffsetMap.restore([Segment(0, 0, 5), Segment(5, 5, 5)])
    assert m.segments() == (Segment(0, 0, 10),)
    changes = m.unflushed()
    assert changes.upserts == (Segment(0, 0, 10),) and changes.deletes == (5,)


def test_merge_after_unflushed_records_keeps_them_unflushed() -> None:
    m = OffsetMap()
    m.record_run(0, 0, 3)
    m.merge([Segment(10, 10, 2)])
    assert m.unflushed().upserts[0] == Segment(0, 0, 3)  # the merged one may be re-written: harmless


def test_reset_tombstones_everything() -> None:
    m = OffsetMap()
    m.record_run(0, 0, 3)
    m.mark_flushed(m.unflushed())
    m.reset(start=3)
    m.record(3, 0)
    changes = m.unflushed()
    assert changes.upserts == (Segment(3, 0, 1),) and changes.deletes == (0,)


def test_only_changed_segments_are_flushed() -> None:
    m = OffsetMap()
    m.record_run(0, 0, 3)
    first = m.unflushed()
    assert first.upserts == (Segment(0, 0, 3),)
    m.record(3, 3)  # the tail grows before the commit is acknowledged
    m.mark_flushed(first)
    assert m.unflushed().upserts == (Segment(0, 0, 4),)
    m.mark_flushed(m.unflushed())
    m.record(5, 5)
    assert m.unflushed().upserts == (Segment(5, 5, 1),)


def test_offset_syncs_follow_the_lag_rule() -> None:
    m = OffsetMap()
    m.record_run(0, 0, 250)
    assert m.offset_syncs(100) == [(0, 0), (101, 101), (202, 202)]
    m.record_run(250, 250, 60)
    assert m.offset_syncs(100) == [(303, 303)]  # drift continues across calls
    m.record(311, 312)  # upstream and downstream gap: a new segment starts with a sync
    assert m.offset_syncs(100, flush_latest=True) == [(311, 312)]
    m.record(312, 313)
    assert m.offset_syncs(100) == [] and m.offset_syncs(100, flush_latest=True) == [(312, 313)]
    assert m.offset_syncs(0) == []


def test_offset_syncs_after_restore_start_with_the_first_new_record() -> None:
    m = OffsetMap.restore([Segment(0, 0, 10)], next_upstream=10)
    m.record_run(10, 10, 3)
    assert m.offset_syncs(100) == [(10, 10)]


def test_resync_after_recomputes_the_syncs_that_followed_a_lost_one() -> None:
    """What an outage lost after the sync (99, 99): a restored map recomputes exactly the syncs the
    uninterrupted map emitted after it, and its newest copied record."""
    live = OffsetMap()
    live.record_run(0, 0, 100)
    assert live.offset_syncs(40, flush_latest=True) == [(0, 0), (41, 41), (82, 82), (99, 99)]
    live.record_run(100, 101, 150)  # a new segment (a commit marker at 100)
    lost = live.offset_syncs(40, flush_latest=True)
    restored = OffsetMap.restore(live.segments(), next_upstream=250, downstream_end=251)
    assert restored.last_copied() == (249, 250) and restored.offset_syncs(40) == []
    restored.resync_after(99, 99)
    assert (
        restored.offset_syncs(40, flush_latest=True)
        == lost
        == [(100, 101), (141, 142), (182, 183), (223, 224), (249, 250)]
    )
    assert OffsetMap().last_copied() is None


def test_segment_wire_format() -> None:
    key, value = encode_segment("orders", 3, Segment(1234, 1199, 7))
    assert key.hex() == "00066f726465727300000003" + "00000000000004d2"
    assert value.hex() == "0000" + "00000000000004af" + "0000000000000007"
    assert decode_segment(key, value + b"\x00") == ("orders", 3, Segment(1234, 1199, 7))
    assert offset_map_topic("primary") == "mirrorflow-offset-map.primary.internal"
    assert offset_map_topic("primary", "_") == "mirrorflow-offset-map_primary_internal"
    with pytest.raises(MirrorflowError, match="upgrade"):
        decode_segment(key, b"\x00\x02" + value[2:] + bytes(24))
    with pytest.raises(MirrorflowError, match="truncated"):
        decode_segment(key, value[:10])
    with pytest.raises(MirrorflowError, match="truncated"):
        decode_segment_key(key[:-1])
    with pytest.raises(MirrorflowError, match="length"):
        decode_segment(key, value[:10] + bytes(8))


def test_one_million_contiguous_records_is_fast() -> None:
    m = OffsetMap()
    record = m.record
    began = time.perf_counter()
    for i in range(1_000_000):
        record(i, i + 7)
    took = time.perf_counter() - began
    print(f"\nOffsetMap.record: 1,000,000 contiguous records in {took:.3f} s")
    assert m.segments() == (Segment(0, 7, 1_000_000),)


def test_version_0_records_decode_as_exact_runs() -> None:
    """Records written before thinning (value version 0) read as exact runs; exact runs are still written so."""
    key = bytes.fromhex("00066f726465727300000003" + "00000000000004d2")
    old = bytes.fromhex("0000" + "00000000000004af" + "0000000000000007")
    assert decode_segment(key, old) == ("orders", 3, Segment(1234, 1199, 7, 0, 0, 1))
    assert encode_segment("orders", 3, Segment(1234, 1199, 7)) == (key, old)


def test_thinned_run_wire_format() -> None:
    run = Segment(1234, 1199, 7, upstream_gaps=3, downstream_extra=5, weight=4)
    key, value = encode_segment("orders", 3, run)
    assert value.hex() == "0001" + "00000000000004af" + f"{7:016x}{3:016x}{5:016x}{4:016x}"
    assert decode_segment(key, value) == ("orders", 3, run)
    with pytest.raises(MirrorflowError, match="truncated"):
        decode_segment(key, value[:-1])
    with pytest.raises(MirrorflowError, match="weight"):
        decode_segment(key, value[:-8] + bytes(8))


def eos_copy(m: OffsetMap, first: int, end: int, lag: int = 100) -> None:
    """Exactly-once shaped history, transactions `first` to `end` - 1: transaction t copies 1 + t % 3 records,
    then a commit marker on both sides; offset syncs are taken after each commit, as the copy does."""
    u, d = m.upstream_end or 0, m.downstream_end or 0
    for t in range(first, end):
        n = 1 + t % 3
        m.record_run(u, d, n)
        u, d = u + n + 1, d + n + 1
        m.mark_consumed(u, downstream_end=d)
        m.offset_syncs(lag)


def test_an_exactly_once_copy_keeps_the_map_bounded_and_never_skips() -> None:
    window = 8
    m = OffsetMap(start=0, exact_runs=window)
    stored: dict[int, Segment] = {}
    done = 0
    for total in (10, 100, 1_000, 10_000):
        eos_copy(m, done, total)
        done = total
        changes = m.unflushed()
        for s in changes.upserts:
            stored[s.upstream_start] = s
        for key in changes.deletes:
            stored.pop(key, None)
        m.mark_flushed(changes)
        segs = m.segments()
        assert len(segs) <= window + 2 * math.log2(total / window) + 2, (total, len(segs))
        age = 0
        for s in reversed(segs):  # a group N transactions behind lands in a run of at most N transactions
            assert s.weight <= age + 1, (s, age)
            age += s.weight
        assert len(stored) == len(segs) and all(s.exact for s in segs[-window:])
        restored = OffsetMap.restore(
            stored.values(), next_upstream=m.upstream_end, downstream_end=m.downstream_end, exact_runs=window
        )
        assert restored.segments() == segs
    # every upstream offset: never a skip, re-reads within the bound; the newest transactions exact
    copies: list[int] = []  # both sides carry the same markers, so a copy has u == d
    up = 0
    for t in range(done):
        copies += range(up, up + 1 + t % 3)
        up += 2 + t % 3
    exact_from = copies[-sum(1 + t % 3 for t in range(done - window, done))]
    for u in range(up + 1):
        true = copies[bisect_left(copies, u)] if u <= copies[-1] else up
        down, bound = m.translate_bounded(u) or (-1, -1)
        assert down <= true and bisect_left(copies, true) - bisect_left(copies, down) <= bound, (u, down, bound)
        assert bound <= u - (m.start or 0) and (u < exact_from or (bound, down) == (0, true)), (u, down, bound)


def test_thinning_merges_old_runs_and_tombstones_their_keys() -> None:
    m = OffsetMap(start=0, exact_runs=2)
    m.record_run(0, 0, 2)  # markers at upstream 2 and downstream 2
    m.record_run(3, 3, 2)
    m.mark_flushed(m.unflushed())
    m.record_run(6, 6, 2)
    m.offset_syncs(100)
    m.record_run(9, 9, 2)  # runs 0 and 3 leave the window: equal weights, merged
    assert m.segments()[0] == Segment(0, 0, 4, upstream_gaps=1, downstream_extra=1, weight=2)
    changes = m.unflushed()
    assert changes.deletes == (3,) and changes.upserts[0] == m.segments()[0]
    assert [m.translate_bounded(u) for u in (0, 1, 2, 3, 4, 5)] == [(0, 0), (0, 1), (1, 2), (2, 2), (3, 2), (6, 0)]
    assert m.untranslate_bounded(4) == (3, 2) and m.untranslate_bounded(5) == (6, 0)


def test_syncs_are_kept_for_runs_thinned_before_the_copy_synced_them() -> None:
    m = OffsetMap(start=0, exact_runs=1)
    for t in range(6):
        m.record_run(t * 3, t * 4, 2)
    assert len(m.segments()) < 6
    assert m.offset_syncs(100) == [(t * 3, t * 4) for t in range(6)]


def test_a_rewind_into_a_thinned_run_keeps_it_conservative() -> None:
    m = OffsetMap(start=0, exact_runs=1)
    for t in range(4):
        m.record_run(t * 3, t * 3, 2)  # 0-1, 3-4, 6-7, 9-10: the first two thinned into [0, 5)
    head = m.segments()[0]
    assert not head.exact and head.upstream_end == 5
    m.rewind(4)  # copies at 4 and above are forgotten; which of [0, 4) were copied is not known exactly
    cut = m.segments()
    assert cut == (head.head(4),) and cut[0].upstream_end == 4 and cut[0].downstream_end == head.downstream_end
    assert [m.translate(u) for u in range(5)] == [0, 0, 1, 2, 11]  # exact: 0, 1, 3, 3, 11 (never above)
    m.record(4, 11)
    assert m.translate(4) == 11 and m.segments()[-1] == Segment(4, 11, 1)


def test_restore_accepts_exact_runs_left_inside_a_thinned_one() -> None:
    """An at-least-once write where the merged run landed and a tombstone did not."""
    merged = Segment(0, 0, 4, upstream_gaps=1, downstream_extra=1, weight=2)
    m = OffsetMap.restore([merged, Segment(3, 3, 2), Segment(6, 6, 2)], exact_runs=4)
    assert m.segments() == (merged, Segment(6, 6, 2))
    with pytest.raises(ValueError, match="disagrees"):
        m.merge([Segment(1, 4, 1)])  # copy 1 cannot lie 3 offsets later downstream: 1 marker in between at most


def test_stored_runs_fold_the_topic_as_readers_must() -> None:
    """Readers fold the offset-map topic in log order. A thinned run re-written under an old key keeps the newer
    runs after it (dropping every later key there would lose the exact window: a skip); a resumed at-least-once
    copy's run still cuts the stale tail of the earlier attempt."""
    copy = OffsetMap(start=0, exact_runs=2)
    log: list[tuple[int, Segment | None]] = []
    for t in range(12):
        copy.record_run(t * 3, t * 4, 2)
        changes = copy.unflushed()
        log += [(s.upstream_start, s) for s in changes.upserts] + [(key, None) for key in changes.deletes]
        copy.mark_flushed(changes)
        copy.offset_syncs(100)
    folded = StoredRuns()
    for key, run in log:
        folded.put(run) if run is not None else folded.delete(key)
    assert tuple(folded.runs()) == copy.segments()

    stale = StoredRuns()  # at-least-once: 0-9 and 12-19 stored, then the copy resumed at 5 and copied again
    for run in (Segment(0, 0, 10), Segment(12, 11, 8), Segment(5, 30, 4)):
        stale.put(run)
    assert stale.runs() == [Segment(0, 0, 5), Segment(5, 30, 4)]
    thinned = StoredRuns()  # a cut inside a thinned run stays conservative
    thinned.put(Segment(0, 0, 4, upstream_gaps=1, downstream_extra=1, weight=2))
    thinned.put(Segment(3, 9, 1))
    assert thinned.runs() == [Segment(0, 0, 2, upstream_gaps=1, downstream_extra=3, weight=2), Segment(3, 9, 1)]
    thinned.delete(3)
    assert thinned.runs() == [Segment(0, 0, 2, upstream_gaps=1, downstream_extra=3, weight=2)]


def test_folding_and_restoring_200k_stored_runs_is_not_quadratic() -> None:
    """A reader folding the topic record by record (the replaced fold rescanned every earlier run: 47 s for 20k
    records on this machine) and the restore that follows, at the issue's 200,000 transactions."""
    records = [Segment(3 * i, 4 * i, 2) for i in range(200_000)]
    began = time.process_time()
    folded = StoredRuns()
    for run in records:
        folded.put(run)
    restored = OffsetMap.restore(folded.runs(), next_upstream=600_000, downstream_end=800_000, exact_runs=NO_THINNING)
    took = time.process_time() - began
    print(f"\nStoredRuns + OffsetMap.restore: 200,000 runs in {took:.2f} s")
    assert restored.segments() == tuple(records)
    assert took < 30, "quadratic: 200,000 runs would take hours"

"""The upstream→downstream offset map of one copied partition (docs/design.md §1.5, docs/offsets.md).

MM2 remembers a sparse history of offset syncs and answers `sync.down + 1`, so a consumer that fails over
re-reads up to `offset.lag.max` records (docs/mm2-reference.md §5.3). We keep the newest runs of the copy exact
(0 re-reads, 0 skips) and thin older ones into runs that translate conservatively (never a skip, a bounded
number of re-reads), so that a map stays small however many transactions commit. One `OffsetMap` per source
topic-partition.

Terms:
- copied pair (u, d): the upstream record at offset u was written downstream at offset d.
- consumed range [start, upstream_end): the upstream offsets the copy has read past. Each was either copied
  (it lies in a run) or is a gap: never delivered (compaction, transaction markers, aborted records under
  read_committed) or dropped on purpose (a filter, a provenance loop cut).
- replicated end (`downstream_end`): the lowest downstream offset the next copied record can land at, i.e.
  max(last copied d + 1, any floor the copy reported, e.g. the target end offset after our commit marker).
- run (`Segment`): c copied pairs, in order on both sides, within upstream span [u, u+N) and downstream span
  [d, d+M); g = N - c upstream offsets of the span are gaps, k = M - c downstream offsets are not copies.
  Exact when g = k = 0: then u+i was copied to d+i. Copying makes exact runs (a new one wherever either side
  skips an offset: in exactly-once mode at every commit marker); thinning merges old neighbours (T1-T3).

Translation of a committed upstream offset U (the next offset the group will read), `translate(U)`:
- None when the map is empty or U < start (below the retained history: pruned, or before the copy began);
- None when U > upstream_end: the copy has not read that far, so the answer is not known yet
  (`clamp_ahead=True` answers the replicated end instead: never a skip, but the records in
  [upstream_end, U) are re-read once copied);
- inside a run (u <= U < u+N): d + max(0, U - u - g), exact when the run is exact;
- else the start d of the next run, or the replicated end if there is none (U lies past every copy, e.g. in a
  dropped or compacted tail); None if nothing was ever copied and no floor is known.
Why never a skip: the true answer is the downstream offset of the first copy of an upstream record >= U. In a
run, of the U - u upstream offsets in [u, U) at most g are gaps, so at least x >= U - u - g copies precede
that first copy in the run; downstream offsets strictly increase along the copies from d, so it lies at
>= d + x. Every copy of a record >= U is at or above the answer. Re-reads: below the true answer lie x <= U - u
copies; below the answer d + x', x' = max(0, U - u - g), lie at least x' - k of them (at most k offsets of the
span are not copies), so at most min(g + k, U - u) copies are read again (`translate_bounded`). Exact runs and
the gaps between runs answer exactly: below the answer lie exactly the copies of upstream records < U, at or
above it the copies of every record >= U; between the last copy and the replicated end lie only our commit
marker and other writers' records, so a consumer positioned there misses nothing and reads the next copy once.
`untranslate(D)` is the mirror image (downstream span, k for g): u + max(0, D - d - k) inside a run, the next
run's u or the consumed end otherwise, never below `start`; never above the true answer, at most
min(g + k, D - d) re-reads.

Invariants (tests/core/test_offset_map.py checks them after every step of random copy histories):
  I1 runs are sorted and disjoint on both sides: for consecutive a, b: b.u >= a.u + a.N and b.d >= a.d + a.M,
     so upstream and downstream offsets both strictly increase along the map.
  I2 every run has N >= 1 and M >= 1; an exact one has c = N = M >= 1.
  I3 exact runs are maximal: no consecutive exact a, b with b.u == a.u + a.N and b.d == a.d + a.M.
  I4 empty map <=> start is None <=> upstream_end is None; an empty map has no runs.
  I5 start <= upstream_end; every run ends at or below upstream_end and above start (pruning drops
     whole runs only, so the first one may begin below start).
  I6 the replicated end, when runs exist, is >= the downstream end of the last one.
  I7 the copy never goes backwards: record() only accepts u >= upstream_end and d >= replicated end;
     going back is explicit (rewind() for an at-least-once re-copy, reset() for a truncated target).
Thinning (core/offset_runs.py has the schedule):
  T1 below the newest `exact_runs` runs (the window, W), with age(r) = the total weight of the runs newer than r
     (weight: the number of exact runs merged into a run, one per transaction in exactly-once mode): for
     neighbours a, b there, w(a) + w(b) > age(b) (thinning merged every pair that could be merged without
     weighing more than its age). So ages at least double every two runs going back, and a map holds at most
     W + 2 log2(total weight / W) + 2 runs; the total weight is at most the number of exact runs ever opened.
     Without rewinds also w(r) <= age(r) + 1: a group N transactions behind lands in a run of weight <= N.
  T2 a merged run holds every copy of both parts and nothing else: its spans run from the first part's start
     to the second's end, so offsets between the parts (gaps, our markers) become g and k. Translation through
     it is the conservative answer above; the runs around it do not change.
  T3 a rewind into a thinned run keeps its head conservatively (`Segment.head`): it may hold fewer copies
     than it says spans (c is then a lower bound, still keeping both answers conservative), never more.
Why only old runs: a checkpointed group, failover and failback read near the end of the copy, which stays exact;
a group N transactions behind re-reads at most the gaps of one merged run of at most N transactions.

Durable storage: one record per run in a compacted topic on the target (`offset_map_topic`; record format in
core/record_codec.py); a merge is written as the merged run under its first key plus tombstones for the keys it
absorbed, in the same `SegmentChanges`. Translation and the bounds are `OffsetLookup`'s (core/offset_lookup.py).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

from mirrorflow.core import offset_runs
from mirrorflow.core.offset_lookup import OffsetLookup
from mirrorflow.core.offset_runs import NO_THINNING
from mirrorflow.core.offset_store import RunStore, SegmentChanges, StoredRuns
from mirrorflow.core.record_codec import (
    Segment,
    decode_segment,
    decode_segment_key,
    encode_segment,
    encode_segment_key,
)

__all__ = [
    "NO_THINNING",
    "OffsetMap",
    "Segment",
    "SegmentChanges",
    "StoredRuns",
    "decode_segment",
    "decode_segment_key",
    "encode_segment",
    "encode_segment_key",
    "offset_map_topic",
]


def offset_map_topic(source_alias: str, separator: str = ".") -> str:
    """Target-side topic of the offset maps of flow `source_alias`->target, named like MM2's internals."""
    if not source_alias:
        raise ValueError("source cluster alias must not be empty")
    return f"mirrorflow-offset-map{separator}{source_alias}{separator}internal"


class OffsetMap(OffsetLookup):
    """The copy history of one source partition as runs (module docstring: terms, rules, invariants): what the
    copy records, forgets and stores; the questions asked of it are `OffsetLookup`'s (core/offset_lookup.py).

    Runs and their storage bookkeeping live in a `RunStore` (core/offset_store.py). A copied record that
    continues the tail run costs three attribute writes and no allocation.
    """

    __slots__ = ()

    def __init__(self, start: int | None = None, *, exact_runs: int | None = None) -> None:
        """`start`: the upstream offset the copy begins consuming at; None = at the first recorded offset.
        `exact_runs`: how many of the newest runs stay exact (W, T1); default `offset_runs.DEFAULT_EXACT_RUNS`,
        `NO_THINNING` keeps them all."""
        if start is not None and start < 0:
            raise ValueError(f"start offset must be >= 0, got {start}")
        self._store = RunStore(offset_runs.DEFAULT_EXACT_RUNS if exact_runs is None else exact_runs)
        self._runs = self._store.runs
        self._start = start
        self._up_end = start
        # The downstream offset that continues the (exact) tail run, or None when the next record cannot extend
        # it (None never equals an int, so the fast path of record() needs no extra test). While the tail is
        # open it is also the replicated end; otherwise `_down_end` is.
        self._ext_d: int | None = None
        self._down_end: int | None = None

    def __repr__(self) -> str:
        return (
            f"OffsetMap(start={self._start}, upstream_end={self._up_end}, "
            f"downstream_end={self.downstream_end}, segments={len(self._runs)})"
        )

    # ---- the copy appends -----------------------------------------------------------------------------
    def record(self, upstream: int, downstream: int) -> None:
        """One record was copied: upstream offset -> downstream offset."""
        if upstream == self._up_end and downstream == self._ext_d:
            self._up_end = upstream + 1
            self._ext_d = downstream + 1
            self._runs.ns[-1] += 1
            return
        self._open_run(upstream, downstream)

    def record_run(self, upstream: int, downstream: int, count: int) -> None:
        """`count` records copied contiguously on both sides, starting at (upstream, downstream): O(1)."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        if count == 0:
            return
        self.record(upstream, downstream)
        self._runs.ns[-1] += count - 1
        self._up_end = upstream + count
        self._ext_d = downstream + count

    def record_batch(self, upstreams: Sequence[int], downstreams: Sequence[int]) -> None:
        """Copied pairs in copy order; contiguous stretches are found locally and added in one step."""
        total = len(upstreams)
        if total != len(downstreams):
            raise ValueError(f"{total} upstream offsets but {len(downstreams)} downstream offsets")
        i = 0
        while i < total:
            u, d = upstreams[i], downstreams[i]
            self.record(u, d)
            j = i + 1
            u += 1
            d += 1
            while j < total and upstreams[j] == u and downstreams[j] == d:
                j += 1
                u += 1
                d += 1
            if j > i + 1:
                self._runs.ns[-1] += j - i - 1
                self._up_end = u
                self._ext_d = d
            i = j

    def _open_run(self, u: int, d: int) -> None:
        if u < 0 or d < 0:
            raise ValueError(f"offsets must be >= 0, got upstream {u} -> downstream {d}")
        if self._up_end is None:
            self._start = u
        elif u < self._up_end:
            raise ValueError(
                f"upstream offset {u} is below the consumed end {self._up_end}: the copy never goes "
                "backwards within an offset map (use rewind() to re-copy from an older position)"
            )
        end = self.downstream_end
        if end is not None and d < end:
            raise ValueError(
                f"downstream offset {d} is below the replicated end {end}: the target went backwards "
                "(use reset() after a truncated or re-created target topic)"
            )
        self._up_end = u + 1
        self._ext_d = d + 1
        self._store.add(Segment(u, d, 1))

    def mark_consumed(self, upstream_end: int, *, downstream_end: int | None = None) -> None:
        """Every upstream offset below `upstream_end` was consumed; those not recorded were not copied.

        Call it with the source consumer's position after dropping records or reading past gaps, so that
        offsets in a dropped or compacted tail translate to the replicated end. `downstream_end` raises the
        floor of the replicated end (e.g. the target end offset after our commit marker); lower values are
        ignored."""
        if upstream_end < 0:
            raise ValueError(f"upstream end must be >= 0, got {upstream_end}")
        down = self.downstream_end
        if self._up_end is None:
            self._start = upstream_end
        elif upstream_end < self._up_end:
            raise ValueError(
                f"upstream end {upstream_end} is below the consumed end {self._up_end}: the copy never goes "
                "backwards within an offset map (use rewind())"
            )
        self._up_end = upstream_end
        if downstream_end is not None:
            if downstream_end < 0:
                raise ValueError(f"downstream end must be >= 0, got {downstream_end}")
            down = downstream_end if down is None else max(down, downstream_end)
        self._settle(down)

    def _settle(self, down_end: int | None) -> None:
        """Set the replicated end; the tail stays extendable only if it is exact and ends at both ends."""
        runs = self._runs
        n = len(runs)
        open_tail = n > 0 and runs.exact(n - 1) and runs.up_end(n - 1) == self._up_end
        self._ext_d = down_end if open_tail and runs.down_end(n - 1) == down_end else None
        self._down_end = down_end

    # ---- going back, forgetting -------------------------------------------------------------------------
    def prune_below(self, upstream_log_start: int) -> None:
        """Forget history below the source log start; translation stays as exact as it was for U >= it.

        Whole runs only (a straddling one is kept, so keys never change); never beyond upstream_end.
        """
        if self._start is None or self._up_end is None:
            return
        x = min(upstream_log_start, self._up_end)
        if x <= self._start:
            return
        self._start = x
        runs = self._runs
        j = bisect_right(runs.us, x) - 1
        k = j if j >= 0 and runs.up_end(j) > x else j + 1
        down = self.downstream_end
        self._store.drop_front(k, x)
        self._settle(down)

    def rewind(self, upstream: int) -> None:
        """Forget copies at upstream offsets >= `upstream`: an at-least-once copy restarts there.

        The old copies stay in the target log, so the replicated end does not move back; the re-copied
        records land after them. Consumers that crossed the duplicates re-read them (at-least-once). A thinned
        run cut by the rewind keeps a conservative head (T3)."""
        if upstream < 0:
            raise ValueError(f"upstream offset must be >= 0, got {upstream}")
        if self._up_end is None or self._start is None:
            self._start = self._up_end = upstream
            return
        if upstream > self._up_end:
            raise ValueError(f"cannot rewind forward to {upstream}: consumed end is {self._up_end}")
        down = self.downstream_end
        if upstream <= self._start:
            self._start = upstream
            first = 0
        else:
            first = bisect_left(self._runs.us, upstream)
        self._store.cut(upstream, first)
        self._up_end = upstream
        self._settle(down)

    def reset(self, start: int | None = None) -> None:
        """Forget everything (target topic truncated or re-created): stored runs become tombstones."""
        self._store.clear()
        self._start = self._up_end = start
        self._ext_d, self._down_end = None, None

    # ---- durable storage --------------------------------------------------------------------------------
    def unflushed(self) -> SegmentChanges:
        """Runs changed since the last `mark_flushed` and keys to tombstone; does not change the map."""
        return self._store.unflushed()

    def forget_stored(self, keys: Iterable[int]) -> None:
        """Tombstone stored keys this map does not hold (`StoredRuns.stale_keys`) at the next flush; keys it
        holds are left alone."""
        self._store.deletes.update(keys)

    def mark_flushed(self, changes: SegmentChanges) -> None:
        """`changes` (from `unflushed`) is durable. Ignored if runs were removed or rewritten since, other than
        by thinning (a thinned run that thinning rewrote again since stays unflushed)."""
        self._store.mark_flushed(changes)

    def merge(self, segments: Iterable[Segment]) -> None:
        """Add stored runs (already durable, already synced); re-applying known ones changes nothing.

        The runs must come from this partition's copy history: gaps between them are taken as gaps of that
        history. Runs wholly below `start` are ignored; a run that disagrees with a recorded copy or gap raises
        ValueError. A stored exact run inside a thinned one (a merge whose tombstones did not all land) is
        taken as known."""
        for s in sorted(segments, key=lambda s: (s.upstream_start, s.upstream_length)):
            self._merge_one(s)
        self._store.epoch += 1

    def _merge_one(self, s: Segment) -> None:
        if self._start is None or self._up_end is None:
            self._start = self._up_end = s.upstream_start
        if s.upstream_end <= self._start:
            return
        store, runs, up_end = self._store, self._runs, self._up_end
        a, b = max(s.upstream_start, self._start), min(s.upstream_end, up_end)
        if a < b and not runs.agrees(s, a, b):
            raise ValueError(f"stored {s} disagrees with the copy history in {self!r}")
        if s.upstream_end <= up_end:
            return
        n = len(runs)
        clean_before = n == 0 or (store.scan_from == n - 1 and runs.signature(n - 1) == store.scan_sig)
        self._up_end = s.upstream_end
        store.sync_next = s.upstream_end if store.sync_next is None else max(store.sync_next, s.upstream_end)
        if s.upstream_start < up_end or (s.upstream_start == up_end and self._ext_d == s.downstream_start):
            # continues the exact tail run (I3): the tail must end exactly where `s` goes on
            if not s.exact or self._ext_d != s.downstream_start + (up_end - s.upstream_start):
                self._up_end = up_end
                raise ValueError(f"stored {s} does not continue the tail run of {self!r}")
            runs.ns[-1] += s.upstream_end - up_end
            if runs.us[-1] != s.upstream_start:
                store.deletes.add(s.upstream_start)
                clean_before = False
            if store.scan_from == n - 1:
                stored = clean_before or runs.us[-1] == s.upstream_start
                store.scan_sig = runs.signature(n - 1) if stored else None
            self._ext_d = self._down_end = s.downstream_end
            return
        end = self.downstream_end
        if end is not None and s.downstream_start < end:
            self._up_end = up_end
            raise ValueError(f"stored {s} goes below the replicated end {end} of {self!r}")
        self._ext_d = s.downstream_end if s.exact else None
        self._down_end = s.downstream_end
        if clean_before:
            store.scan_from, store.scan_sig = n, runs_signature(s)
        store.add(s)

    @classmethod
    def restore(
        cls,
        segments: Iterable[Segment],
        *,
        next_upstream: int | None = None,
        downstream_end: int | None = None,
        exact_runs: int | None = None,
    ) -> OffsetMap:
        """Rebuild from the offset-map topic and the committed progress record of the partition.

        Runs beyond `next_upstream` (an at-least-once crash between writing runs and progress) are rewound
        away; the gap up to `next_upstream` counts as consumed. Runs stored by a live map with the same
        `exact_runs` come back as they were (T1 already holds, so nothing is merged); runs stored without
        thinning (an older Mirrorflow) are thinned here, and the copy's next commit writes that back.
        """
        m = cls(exact_runs=exact_runs)
        m.merge(segments)
        if next_upstream is not None:
            if m._up_end is not None and next_upstream < m._up_end:
                m.rewind(next_upstream)
            m.mark_consumed(next_upstream, downstream_end=downstream_end)
        elif downstream_end is not None and m._up_end is not None:
            m.mark_consumed(m._up_end, downstream_end=downstream_end)
        return m

    # ---- MM2 offset syncs -------------------------------------------------------------------------------
    def resync_after(self, upstream: int, downstream: int) -> None:
        """Consider the records after the sync (upstream, downstream) not synced yet, as if that sync were the
        last one written: the next `offset_syncs` call recomputes the syncs that followed it (to rewrite syncs
        an outage lost) from the exact runs. A restored map otherwise counts its whole history as synced."""
        self._store.sync_next = upstream + 1
        self._store.sync_last_down = downstream

    def offset_syncs(self, offset_lag_max: int, *, flush_latest: bool = False) -> list[tuple[int, int]]:
        """MM2 offset syncs (upstream, downstream) for records recorded since the previous call.

        The rule is in core/offset_sync_rule.py. `flush_latest=True` also syncs the newest record, as MM2 does with
        its delayed syncs every offset.flush.interval.ms. Exact runs that thinning merged before this call saw
        them were set aside and are synced now, so thinning neither costs a sync nor invents one. Call it before
        `prune_below`: records pruned before they were considered get no sync."""
        if offset_lag_max < 0:
            raise ValueError(f"offset.lag.max must be >= 0, got {offset_lag_max}")
        return self._store.offset_syncs(offset_lag_max, flush_latest)


def runs_signature(s: Segment) -> tuple[int, int, int]:
    return s.length, s.upstream_gaps, s.downstream_extra

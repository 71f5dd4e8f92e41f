"""The exact upstream→downstream offset map of one copied partition (DESIGN §1.5).

MM2 remembers a sparse history of offset syncs and answers `sync.down + 1`, so a consumer that fails over
re-reads up to `offset.lag.max` records (MM2-FACTS §5.3). We keep every contiguous run that was copied and
answer exactly: 0 re-reads, 0 skips. One `OffsetMap` per source topic-partition.

Terms:
- copied pair (u, d): the upstream record at offset u was written downstream at offset d.
- consumed range [start, upstream_end): the upstream offsets the copy has read past. Each was either copied
  (it lies in a segment) or is a gap: never delivered (compaction, transaction markers, aborted records under
  read_committed) or dropped on purpose (a filter, a provenance loop cut).
- replicated end (`downstream_end`): the lowest downstream offset the next copied record can land at, i.e.
  max(last copied d + 1, any floor the copy reported, e.g. the target end offset after our commit marker).

Translation of a committed upstream offset U (the next offset the group will read), `translate(U)`:
- None when the map is empty or U < start (below the retained history: pruned, or before the copy began);
- None when U > upstream_end: the copy has not read that far, so the answer is not known yet
  (`clamp_ahead=True` answers the replicated end instead: never a skip, but the records in
  [upstream_end, U) are re-read once copied);
- else the downstream offset of the first copied record with upstream offset >= U, or the replicated end if
  there is none (U lies past every copied record, e.g. inside a dropped or compacted tail); None if nothing
  was ever copied and no floor is known.
Why 0 re-reads, 0 skips: below the answer lie exactly the copies of upstream records < U; at or above it lie
the copies of every record >= U. Between the last copy and the replicated end lie only our commit marker and
other writers' records, never a copy, so a consumer positioned at the replicated end misses nothing and reads
the next copy exactly once, in exactly-once and at-least-once mode alike.

Invariants (tests/core/test_offset_map.py checks them after every step of random copy histories):
  I1 segments are sorted and disjoint on both sides: for consecutive a, b: b.u >= a.u + a.n and
     b.d >= a.d + a.n, so upstream and downstream offsets both strictly increase along the map.
  I2 every segment has length >= 1.
  I3 segments are maximal runs: no consecutive a, b with b.u == a.u + a.n and b.d == a.d + a.n.
  I4 empty map <=> start is None <=> upstream_end is None; an empty map has no segments.
  I5 start <= upstream_end; every segment ends at or below upstream_end and above start (pruning drops
     whole segments only, so the first one may begin below start).
  I6 the replicated end, when segments exist, is >= the downstream end of the last one.
  I7 the copy never goes backwards: record() only accepts u >= upstream_end and d >= replicated end;
     going back is explicit (rewind() for an at-least-once re-copy, reset() for a truncated target).

Durable storage: one record per segment in a compacted topic on the target (`offset_map_topic`); `Segment`
and its record format live in core/record_codec.py and are re-exported here.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mirrorflow.core.record_codec import (
    Segment,
    decode_segment,
    decode_segment_key,
    encode_segment,
    encode_segment_key,
)

__all__ = [
    "OffsetMap",
    "Segment",
    "SegmentChanges",
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


@dataclass(frozen=True, slots=True)
class SegmentChanges:
    """What to write to the offset-map topic: `upserts` as records, `deletes` (upstream starts) as tombstones.

    The two key sets are disjoint, so the write order does not matter. Pass the object back to
    `OffsetMap.mark_flushed` once the write is durable (after the transaction commits).
    """

    upserts: tuple[Segment, ...]
    deletes: tuple[int, ...]
    _epoch: int = field(repr=False, default=0)
    _count: int = field(repr=False, default=0)
    _tail_length: int = field(repr=False, default=0)


class OffsetMap:
    """The complete copy history of one source partition as maximal runs (module docstring: terms, rules).

    Segments live in three parallel `array('q')` (24 bytes a segment); a copied record that continues the
    tail run costs three attribute writes and no allocation.
    """

    __slots__ = (
        "_deletes",
        "_down_end",
        "_ds",
        "_epoch",
        "_ext_d",
        "_ns",
        "_scan_from",
        "_scan_len",
        "_start",
        "_sync_last_down",
        "_sync_next",
        "_up_end",
        "_us",
    )

    def __init__(self, start: int | None = None) -> None:
        """`start`: the upstream offset the copy begins consuming at; None = at the first recorded offset."""
        if start is not None and start < 0:
            raise ValueError(f"start offset must be >= 0, got {start}")
        self._us: array[int] = array("q")
        self._ds: array[int] = array("q")
        self._ns: array[int] = array("q")
        self._start = start
        self._up_end = start
        # The downstream offset that continues the tail run, or None when the next record cannot extend it
        # (None never equals an int, so the fast path of record() needs no extra test). While the tail is
        # open it is also the replicated end; otherwise `_down_end` is.
        self._ext_d: int | None = None
        self._down_end: int | None = None
        self._deletes: set[int] = set()
        # Flush bookkeeping: segments before `_scan_from` are stored as they are; segment `_scan_from` is
        # stored with length `_scan_len` (-1: unknown). `_epoch` changes whenever indices shift.
        self._scan_from = 0
        self._scan_len = -1
        self._epoch = 0
        # Offset-sync bookkeeping: records at upstream >= `_sync_next` are not yet considered (None: all).
        self._sync_next: int | None = None
        self._sync_last_down = -1

    # ---- state -------------------------------------------------------------------------------------------
    @property
    def start(self) -> int | None:
        return self._start

    @property
    def upstream_end(self) -> int | None:
        return self._up_end

    @property
    def downstream_end(self) -> int | None:
        """The replicated end (module docstring); None if nothing was copied and no floor is known."""
        return self._ext_d if self._ext_d is not None else self._down_end

    def segments(self) -> tuple[Segment, ...]:
        return tuple(Segment(u, d, n) for u, d, n in zip(self._us, self._ds, self._ns, strict=True))

    def __repr__(self) -> str:
        return (
            f"OffsetMap(start={self._start}, upstream_end={self._up_end}, "
            f"downstream_end={self.downstream_end}, segments={len(self._us)})"
        )

    # ---- the copy appends -----------------------------------------------------------------------------
    def record(self, upstream: int, downstream: int) -> None:
        """One record was copied: upstream offset -> downstream offset."""
        if upstream == self._up_end and downstream == self._ext_d:
            self._up_end = upstream + 1
            self._ext_d = downstream + 1
            self._ns[-1] += 1
            return
        self._open_segment(upstream, downstream)

    def record_run(self, upstream: int, downstream: int, count: int) -> None:
        """`count` records copied contiguously on both sides, starting at (upstream, downstream): O(1)."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        if count == 0:
            return
        self.record(upstream, downstream)
        self._ns[-1] += count - 1
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
                self._ns[-1] += j - i - 1
                self._up_end = u
                self._ext_d = d
            i = j

    def _open_segment(self, u: int, d: int) -> None:
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
        self._us.append(u)
        self._ds.append(d)
        self._ns.append(1)
        self._deletes.discard(u)
        self._up_end = u + 1
        self._ext_d = d + 1

    def mark_consumed(self, upstream_end: int, *, downstream_end: int | None = None) -> None:
        """Every upstream offset below `upstream_end` was consumed; those not recorded were not copied.

        Call it with the source consumer's position after dropping records or reading past gaps, so that
        offsets in a dropped or compacted tail translate to the replicated end. `downstream_end` raises the
        floor of the replicated end (e.g. the target end offset after our commit marker); lower values are
        ignored.
        """
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
        """Set the replicated end; the tail stays extendable only if it ends exactly at both ends."""
        us, ns = self._us, self._ns
        ends_here = bool(us) and us[-1] + ns[-1] == self._up_end
        self._ext_d = down_end if ends_here and self._ds[-1] + ns[-1] == down_end else None
        self._down_end = down_end

    # ---- translation ----------------------------------------------------------------------------------
    def translate(self, upstream_offset: int, *, clamp_ahead: bool = False) -> int | None:
        """Downstream offset for committed upstream offset U (module docstring: exact rules, None cases)."""
        if self._start is None or upstream_offset < self._start:
            return None
        assert self._up_end is not None  # I4
        if upstream_offset > self._up_end:
            return self.downstream_end if clamp_ahead else None
        us = self._us
        i = bisect_right(us, upstream_offset) - 1
        if i >= 0 and upstream_offset - us[i] < self._ns[i]:
            return self._ds[i] + (upstream_offset - us[i])
        if i + 1 < len(us):
            return self._ds[i + 1]
        return self.downstream_end

    def untranslate(self, downstream_offset: int) -> int | None:
        """The inverse: the upstream offset a group resumes at on the source after reading the remote partition
        up to (not including) downstream offset D (a failback of a group that read the copy).

        The upstream offset of the first copied record at or after D; past every copy, the consumed end (all
        the copy read beyond its last copy were gaps, which no consumer of the copy saw); never below `start`
        (older upstream records were deleted at the source). The copies below D are then exactly the copies of
        the upstream records below the answer: 0 re-reads, 0 skips. None when nothing was ever consumed.
        """
        if downstream_offset < 0:
            raise ValueError(f"downstream offset must be >= 0, got {downstream_offset}")
        if self._start is None or self._up_end is None:
            return None
        ds = self._ds
        k = bisect_right(ds, downstream_offset) - 1
        if k >= 0 and downstream_offset < ds[k] + self._ns[k]:
            upstream = self._us[k] + (downstream_offset - ds[k])
        elif k + 1 < len(ds):
            upstream = self._us[k + 1]
        else:
            upstream = self._up_end
        return max(upstream, self._start)

    # ---- going back, forgetting -------------------------------------------------------------------------
    def prune_below(self, upstream_log_start: int) -> None:
        """Forget history below the source log start; translation stays exact for U >= the new start.

        Whole segments only (a straddling one is kept, so keys never change); never beyond upstream_end.
        """
        if self._start is None or self._up_end is None:
            return
        x = min(upstream_log_start, self._up_end)
        if x <= self._start:
            return
        self._start = x
        us = self._us
        j = bisect_right(us, x) - 1
        k = j if j >= 0 and us[j] + self._ns[j] > x else j + 1
        if k > 0:
            self._drop_from_front(k)

    def _drop_from_front(self, k: int) -> None:
        down = self.downstream_end
        self._deletes.update(self._us[:k])
        del self._us[:k], self._ds[:k], self._ns[:k]
        if self._scan_from >= k:
            self._scan_from -= k
        else:
            self._scan_from, self._scan_len = 0, -1
        self._epoch += 1
        self._settle(down)

    def rewind(self, upstream: int) -> None:
        """Forget copies at upstream offsets >= `upstream`: an at-least-once copy restarts there.

        The old copies stay in the target log, so the replicated end does not move back; the re-copied
        records land after them. Consumers that crossed the duplicates re-read them (at-least-once).
        """
        if upstream < 0:
            raise ValueError(f"upstream offset must be >= 0, got {upstream}")
        if self._up_end is None or self._start is None:
            self._start = self._up_end = upstream
            return
        if upstream > self._up_end:
            raise ValueError(f"cannot rewind forward to {upstream}: consumed end is {self._up_end}")
        down = self.downstream_end
        us, ds, ns = self._us, self._ds, self._ns
        if upstream <= self._start:
            self._start = upstream
            first = 0
        else:
            first = bisect_left(us, upstream)
        dirty = first
        if first > 0 and us[first - 1] + ns[first - 1] > upstream:
            ns[first - 1] = upstream - us[first - 1]
            dirty = first - 1
        if first < len(us):
            self._deletes.update(us[first:])
            del us[first:], ds[first:], ns[first:]
        if self._scan_from >= dirty:
            self._scan_from, self._scan_len = max(dirty, 0), -1
            if self._scan_from >= len(us) > 0:
                self._scan_from = len(us) - 1
        self._epoch += 1
        self._up_end = upstream
        if self._sync_next is not None:
            self._sync_next = min(self._sync_next, upstream)
        self._settle(down)

    def reset(self, start: int | None = None) -> None:
        """Forget everything (target topic truncated or re-created): stored segments become tombstones."""
        self._deletes.update(self._us)
        del self._us[:], self._ds[:], self._ns[:]
        self._start = self._up_end = start
        self._ext_d, self._down_end = None, None
        self._scan_from, self._scan_len = 0, -1
        self._epoch += 1
        self._sync_next, self._sync_last_down = None, -1

    # ---- durable storage --------------------------------------------------------------------------------
    def unflushed(self) -> SegmentChanges:
        """Segments changed since the last `mark_flushed` and keys to tombstone; does not change the map."""
        us, ds, ns = self._us, self._ds, self._ns
        n = len(us)
        i = self._scan_from
        if i < n and ns[i] == self._scan_len:
            i += 1
        upserts = tuple(Segment(us[k], ds[k], ns[k]) for k in range(i, n))
        deletes = tuple(sorted(key for key in self._deletes if not self._has_key(key)))
        return SegmentChanges(upserts, deletes, self._epoch, n, ns[-1] if n else 0)

    def _has_key(self, upstream_start: int) -> bool:
        i = bisect_left(self._us, upstream_start)
        return i < len(self._us) and self._us[i] == upstream_start

    def mark_flushed(self, changes: SegmentChanges) -> None:
        """`changes` (from `unflushed`) is durable. Ignored if segments were removed or rewritten since."""
        if changes._epoch != self._epoch:
            return
        self._scan_from = max(changes._count - 1, 0)
        self._scan_len = changes._tail_length if changes._count else -1
        self._deletes.difference_update(changes.deletes)

    def merge(self, segments: Iterable[Segment]) -> None:
        """Add stored segments (already durable, already synced); re-applying known ones changes nothing.

        The segments must come from this partition's copy history: gaps between them are taken as gaps of
        that history. Segments wholly below `start` are ignored; a segment that disagrees with a recorded
        copy or gap raises ValueError.
        """
        for s in sorted(segments, key=lambda s: (s.upstream_start, s.length)):
            self._merge_one(s)
        self._epoch += 1

    def _merge_one(self, s: Segment) -> None:
        if self._start is None or self._up_end is None:
            self._start = self._up_end = s.upstream_start
        if s.upstream_end <= self._start:
            return
        us, ds, ns = self._us, self._ds, self._ns
        up_end = self._up_end
        a, b = max(s.upstream_start, self._start), min(s.upstream_end, up_end)
        if a < b:
            i = bisect_right(us, a) - 1
            if not (i >= 0 and us[i] + ns[i] >= b and ds[i] - us[i] == s.downstream_start - s.upstream_start):
                raise ValueError(f"stored {s} disagrees with the copy history in {self!r}")
        if s.upstream_end <= up_end:
            return
        n = len(us)
        clean_before = n == 0 or (self._scan_from == n - 1 and ns[-1] == self._scan_len)
        d_at_end = s.downstream_start + (up_end - s.upstream_start)
        if s.upstream_start < up_end or (s.upstream_start == up_end and self._ext_d == s.downstream_start):
            # continues the tail run (I3): the tail must end exactly where `s` goes on
            if self._ext_d != d_at_end:
                raise ValueError(f"stored {s} does not continue the tail run of {self!r}")
            ns[-1] += s.upstream_end - up_end
            if us[-1] != s.upstream_start:
                self._deletes.add(s.upstream_start)
                clean_before = False
            if self._scan_from == n - 1:
                self._scan_len = ns[-1] if clean_before or us[-1] == s.upstream_start else -1
        else:
            end = self.downstream_end
            if end is not None and s.downstream_start < end:
                raise ValueError(f"stored {s} goes below the replicated end {end} of {self!r}")
            us.append(s.upstream_start)
            ds.append(s.downstream_start)
            ns.append(s.length)
            self._deletes.discard(s.upstream_start)
            if clean_before:
                self._scan_from, self._scan_len = n, s.length
        self._up_end = s.upstream_end
        self._ext_d = s.downstream_end
        self._sync_next = s.upstream_end if self._sync_next is None else max(self._sync_next, s.upstream_end)

    @classmethod
    def restore(
        cls,
        segments: Iterable[Segment],
        *,
        next_upstream: int | None = None,
        downstream_end: int | None = None,
    ) -> OffsetMap:
        """Rebuild from the offset-map topic and the committed progress record of the partition.

        Segments beyond `next_upstream` (an at-least-once crash between writing segments and progress) are
        rewound away; the gap up to `next_upstream` counts as consumed.
        """
        m = cls()
        m.merge(segments)
        if next_upstream is not None:
            if m._up_end is not None and next_upstream < m._up_end:
                m.rewind(next_upstream)
            m.mark_consumed(next_upstream, downstream_end=downstream_end)
        elif downstream_end is not None and m._up_end is not None:
            m.mark_consumed(m._up_end, downstream_end=downstream_end)
        return m

    # ---- MM2 offset syncs -------------------------------------------------------------------------------
    def last_copied(self) -> tuple[int, int] | None:
        """(upstream, downstream) of the newest copied record: the pair of the "latest position" offset sync."""
        if not self._us:
            return None
        return self._us[-1] + self._ns[-1] - 1, self._ds[-1] + self._ns[-1] - 1

    def resync_after(self, upstream: int, downstream: int) -> None:
        """Consider the records after the sync (upstream, downstream) not synced yet, as if that sync were the
        last one written: the next `offset_syncs` call recomputes the syncs that followed it (to rewrite syncs
        an outage lost). A restored map otherwise counts its whole history as synced."""
        self._sync_next = upstream + 1
        self._sync_last_down = downstream

    def offset_syncs(self, offset_lag_max: int, *, flush_latest: bool = False) -> list[tuple[int, int]]:
        """MM2 offset syncs (upstream, downstream) for records recorded since the previous call.

        MM2-FACTS §4.6 adapted to runs: a sync at every segment start (covers MM2's upstream-gap and
        first-record rules, and downstream gaps too) and then whenever the downstream offset reaches
        last sync + 1 + offset.lag.max. `flush_latest=True` also syncs the newest record, as MM2 does with
        its delayed syncs every offset.flush.interval.ms. Every sync is a real copied pair, so MM2's
        `sync.down + 1` translation from them never skips; it re-reads at most `offset_lag_max` records.
        Call it before `prune_below`: records pruned before they were considered get no sync.
        """
        if offset_lag_max < 0:
            raise ValueError(f"offset.lag.max must be >= 0, got {offset_lag_max}")
        step = offset_lag_max + 1
        us, ds, ns = self._us, self._ds, self._ns
        nxt, last = self._sync_next, self._sync_last_down
        out: list[tuple[int, int]] = []
        first = 0 if nxt is None else max(bisect_right(us, nxt) - 1, 0)
        for k in range(first, len(us)):
            u0, d0, length = us[k], ds[k], ns[k]
            p = 0 if nxt is None or nxt <= u0 else nxt - u0
            if p >= length:
                continue
            j = max(last - d0 + step, p) if p > 0 and d0 <= last < d0 + p else p
            while j < length:
                out.append((u0 + j, d0 + j))
                last = d0 + j
                j += step
        if us:
            tail_u, tail_d = us[-1] + ns[-1] - 1, ds[-1] + ns[-1] - 1
            if flush_latest and last != tail_d:
                out.append((tail_u, tail_d))
                last = tail_d
            self._sync_next = tail_u + 1
        self._sync_last_down = last
        return out

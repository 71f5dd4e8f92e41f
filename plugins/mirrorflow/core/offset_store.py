"""The runs of an offset map as they are kept and stored: thinning, what to write to the offset-map topic, and
what offset_syncs has not seen yet. `OffsetMap` (core/offset_map.py) owns one `RunStore`; the invariants and
proofs are in its module docstring (T1-T3), the thinning schedule in core/offset_runs.py.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain

from mirrorflow.core.offset_runs import Runs
from mirrorflow.core.offset_sync_rule import sync_points
from mirrorflow.core.record_codec import Segment

Signature = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class SegmentChanges:
    """What to write to the offset-map topic: `upserts` as records, `deletes` (upstream starts) as tombstones.

    The two key sets are disjoint, so the write order does not matter to compaction; a reader that sees only
    part of an at-least-once write still reads every copy (`OffsetMap.merge` takes an exact run inside a
    thinned one as known), provided the upserts land before the tombstones. Pass the object back to
    `OffsetMap.mark_flushed` once the write is durable (after the transaction commits).
    """

    upserts: tuple[Segment, ...]
    deletes: tuple[int, ...]
    _epoch: int = field(repr=False, default=0)
    _tail_key: int | None = field(repr=False, default=None)
    _tail_signature: Signature | None = field(repr=False, default=None)
    _rewritten: tuple[tuple[int, int], ...] = field(repr=False, default=())


class RunStore:
    """Runs plus their bookkeeping. Attributes are the owning map's to read and update:

    - flush: runs before `scan_from` are stored as they are, except those in `rewritten` (key -> change number,
      rewritten by thinning); run `scan_from` is stored with `scan_sig` (None: unknown); `deletes` are keys to
      tombstone. `epoch` changes whenever runs are removed or rewritten other than by thinning, which shifts
      indices that a pending `SegmentChanges` refers to.
    - offset syncs: records at upstream >= `sync_next` are not yet considered (None: all); `unsynced` holds the
      exact runs (u, d, length) that thinning merged before they were considered.
    """

    __slots__ = (
        "deletes",
        "epoch",
        "rewritten",
        "runs",
        "scan_from",
        "scan_sig",
        "sync_last_down",
        "sync_next",
        "unsynced",
        "version",
        "window",
    )

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ValueError(f"exact_runs must be >= 1, got {window}")
        self.window = window
        self.runs = Runs()
        self.deletes: set[int] = set()
        self.scan_from = 0
        self.scan_sig: Signature | None = None
        self.epoch = 0
        self.rewritten: dict[int, int] = {}
        self.version = 0
        self.sync_next: int | None = None
        self.sync_last_down = -1
        self.unsynced: list[tuple[int, int, int]] = []

    # ---- changing the runs ------------------------------------------------------------------------------
    def add(self, s: Segment) -> None:
        """Append a run after every other one, then thin (O(runs below the window): about 2 log2(T / W))."""
        self.runs.append(s)
        self.deletes.discard(s.upstream_start)
        self.thin()

    def thin(self) -> None:
        """Merge old runs until T1 holds again, in one pass from the oldest: a merge never makes an older pair
        mergeable (the merged run is heavier and younger than the run it follows), nor changes a newer one.
        """
        runs, window = self.runs, self.window
        i = runs.merge_candidate(window)
        while i is not None:
            self._merge_pair(i)
            i = runs.merge_candidate(window, i)

    def _merge_pair(self, i: int) -> None:
        runs, nxt = self.runs, self.sync_next
        for j in (i, i + 1):  # keep what offset_syncs has not seen yet: a merged run has no known inner pairs
            if runs.exact(j) and (nxt is None or runs.up_end(j) > nxt):
                self.unsynced.append((runs.us[j], runs.ds[j], runs.ns[j]))
        absorbed = runs.us[i + 1]
        runs.put(i, runs.merged(i))
        runs.delete(i + 1, i + 2)
        self.deletes.add(absorbed)
        self.rewritten.pop(absorbed, None)
        self.version += 1
        self.rewritten[runs.us[i]] = self.version
        if self.scan_from > i + 1:
            self.scan_from -= 1
        elif self.scan_from >= i:
            self.scan_from, self.scan_sig = i, None

    def drop_front(self, k: int, upstream_start: int) -> None:
        """Forget the first `k` runs (pruned below `upstream_start`), and unsynced runs wholly below it."""
        self.unsynced = [p for p in self.unsynced if p[0] + p[2] > upstream_start]
        if k <= 0:
            return
        self._forget_keys(self.runs.us[:k])
        self.runs.delete(0, k)
        if self.scan_from >= k:
            self.scan_from -= k
        else:
            self.scan_from, self.scan_sig = 0, None
        self.epoch += 1

    def cut(self, upstream: int, first: int) -> None:
        """Forget copies at upstream >= `upstream`: runs from index `first` on, and the part of run first - 1
        at or above it (`Segment.head`: exact runs exactly, thinned ones conservatively, T3).
        """
        runs = self.runs
        dirty = first
        if first > 0 and runs.up_end(first - 1) > upstream:
            runs.put(first - 1, runs.get(first - 1).head(upstream))
            dirty = first - 1
        if first < len(runs):
            self._forget_keys(runs.us[first:])
            runs.delete(first, len(runs))
        self.unsynced = [(u, d, min(n, upstream - u)) for u, d, n in self.unsynced if u < upstream]
        if self.scan_from >= dirty:
            self.scan_from, self.scan_sig = max(dirty, 0), None
            if self.scan_from >= len(runs) > 0:
                self.scan_from = len(runs) - 1
        self.epoch += 1
        if self.sync_next is not None:
            self.sync_next = min(self.sync_next, upstream)

    def clear(self) -> None:
        """Forget every run (stored ones become tombstones) and the offset-sync position."""
        self._forget_keys(self.runs.us)
        self.runs.delete(0, len(self.runs))
        self.scan_from, self.scan_sig = 0, None
        self.epoch += 1
        self.sync_next, self.sync_last_down = None, -1
        self.unsynced = []

    def _forget_keys(self, keys: Iterable[int]) -> None:
        for key in keys:
            self.deletes.add(key)
            self.rewritten.pop(key, None)

    # ---- durable storage --------------------------------------------------------------------------------
    def index_of(self, upstream_start: int) -> int:
        """Index of the run stored under key `upstream_start`, or -1."""
        us = self.runs.us
        i = bisect_left(us, upstream_start)
        return i if i < len(us) and us[i] == upstream_start else -1

    def unflushed(self) -> SegmentChanges:
        """Runs changed since the last `mark_flushed` and keys to tombstone; changes nothing."""
        runs = self.runs
        n = len(runs)
        i = self.scan_from
        if i < n and runs.signature(i) == self.scan_sig:
            i += 1
        earlier = sorted(j for j in map(self.index_of, self.rewritten) if 0 <= j < i)
        upserts = tuple(runs.get(k) for k in chain(earlier, range(i, n)))
        # Highest key first: a key a fold dropped as stale lies after the run that made it stale, so a commit cut
        # short tombstones it before that run, and a compacted topic never holds the stale run alone.
        deletes = tuple(sorted((key for key in self.deletes if self.index_of(key) < 0), reverse=True))
        tail_key, tail_sig = (runs.us[n - 1], runs.signature(n - 1)) if n else (None, None)
        return SegmentChanges(upserts, deletes, self.epoch, tail_key, tail_sig, tuple(self.rewritten.items()))

    def mark_flushed(self, changes: SegmentChanges) -> None:
        """`changes` is durable (OffsetMap.mark_flushed)."""
        for key, version in changes._rewritten:
            if self.rewritten.get(key) == version:
                del self.rewritten[key]
        if changes._epoch != self.epoch:
            return
        if changes._tail_key is None:
            self.scan_from, self.scan_sig = 0, None
        elif (i := self.index_of(changes._tail_key)) >= 0:
            self.scan_from, self.scan_sig = i, changes._tail_signature
        self.deletes.difference_update(changes.deletes)

    # ---- MM2 offset syncs -------------------------------------------------------------------------------
    def offset_syncs(self, offset_lag_max: int, flush_latest: bool) -> list[tuple[int, int]]:
        """OffsetMap.offset_syncs: the exact runs not considered yet, those set aside by thinning first."""
        runs, nxt = self.runs, self.sync_next
        first = 0 if nxt is None else max(bisect_right(runs.us, nxt) - 1, 0)
        live = ((runs.us[k], runs.ds[k], runs.ns[k]) for k in range(first, len(runs)) if runs.exact(k))
        out: list[tuple[int, int]] = []
        last = sync_points(chain(sorted(self.unsynced), live), nxt, self.sync_last_down, offset_lag_max + 1, out)
        self.unsynced = []
        n = len(runs)
        if n:
            tail_down = runs.down_end(n - 1) - 1
            if flush_latest and runs.exact(n - 1) and last != tail_down:
                out.append((runs.up_end(n - 1) - 1, tail_down))
                last = tail_down
            self.sync_next = runs.up_end(n - 1)
        self.sync_last_down = last
        return out


class StoredRuns:
    """The live runs of one partition as a reader folds the offset-map topic in log order (later records win).

    `put` of a run that starts inside an older one cuts the older one at its start (`Segment.head`: conservative
    for a thinned run) and drops the later keys it makes stale: those inside its upstream span (runs it absorbed,
    or copies a resumed at-least-once copy made again) and those whose copies lie below its downstream start
    (an earlier attempt's tail: a live run further upstream always lies further downstream, I1). Runs after it
    that lie after it on both sides stay: a thinned run is re-written under an old key while newer runs follow.
    Amortised O(log n) a record: each key is dropped once, and the scan stops at the first run it keeps; a
    tombstone is O(1) amortised (the key list is cleaned lazily), so a year of retention prunes stays linear.

    A dropped key is still live in the topic until a tombstone for it is read (`stale_keys`). The copy writes
    those tombstones at its next commit: otherwise, once the log cleaner has removed the record that made the
    key stale (the copy tombstoned that run later), a reader of the compacted topic folds the stale run back in
    and disagrees with a reader of the full log.
    """

    __slots__ = ("_dropped", "_keys", "_runs")

    def __init__(self) -> None:
        self._runs: dict[int, Segment] = {}
        # Sorted; records mostly arrive in key order, so insort appends. It may hold keys of deleted runs: a
        # tombstone only leaves the dict (retention prunes the oldest runs, and deleting from the front of a
        # list of millions would cost O(n) each), and the list is rebuilt once half of it is stale.
        self._keys: list[int] = []
        self._dropped: set[int] = set()

    def put(self, s: Segment) -> None:
        start, keys, runs = s.upstream_start, self._keys, self._runs
        i = bisect_left(keys, start)
        b = i - 1  # the nearest live run before `start` is the only one reaching it
        while b >= 0 and keys[b] not in runs:
            b -= 1
        if b + 1 < i:  # deleted keys just below `start`: drop them, or every later put would scan them again
            del keys[b + 1 : i]
            i = b + 1
        if b >= 0 and (before := runs[keys[b]]).upstream_end > start:
            runs[keys[b]] = before.head(start)
        j = i + 1 if i < len(keys) and keys[i] == start else i
        k = j
        while k < len(keys):
            later = runs.get(keys[k])
            if later is not None:
                if keys[k] >= s.upstream_end and later.downstream_start >= s.downstream_end:
                    break
                del runs[keys[k]]
                self._dropped.add(keys[k])
            k += 1
        del keys[j:k]
        if j == i:
            keys.insert(i, start)
        runs[start] = s
        self._dropped.discard(start)

    def delete(self, upstream_start: int) -> None:
        """A tombstone."""
        self._dropped.discard(upstream_start)
        if self._runs.pop(upstream_start, None) is not None and len(self._keys) > 2 * len(self._runs) + 64:
            self._keys = [key for key in self._keys if key in self._runs]

    def runs(self) -> list[Segment]:
        """The live runs in upstream order, for `OffsetMap.restore`."""
        return [self._runs[key] for key in self._keys if key in self._runs]

    def stale_keys(self) -> list[int]:
        """Keys the fold dropped as stale whose tombstone it has not read: still live in the topic."""
        return sorted(self._dropped)

    def live_keys(self) -> list[int]:
        """Every key of the partition still live in the topic (its runs and the stale keys): what moving the
        partition's map to another slot tombstones where it was (`core.state_slots`)."""
        return sorted(self._dropped.union(self._runs))

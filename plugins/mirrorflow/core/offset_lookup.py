"""The questions asked of one partition's offset map: its bounds, and translation both ways (the rules and why
they never skip: core/offset_map.py's module docstring). `OffsetMap` adds what the copy does to it."""

from __future__ import annotations

from bisect import bisect_right

from mirrorflow.core.offset_runs import Runs
from mirrorflow.core.offset_store import RunStore
from mirrorflow.core.record_codec import Segment


class OffsetLookup:
    """Read-only view of an offset map's state: start, ends, runs."""

    __slots__ = ("_down_end", "_ext_d", "_runs", "_start", "_store", "_up_end")
    _down_end: int | None
    _ext_d: int | None
    _runs: Runs
    _start: int | None
    _store: RunStore
    _up_end: int | None

    def segments(self) -> tuple[Segment, ...]:
        runs = self._runs
        return tuple(runs.get(i) for i in range(len(runs)))

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

    @property
    def exact_runs(self) -> int:
        """W: how many of the newest runs stay exact."""
        return self._store.window

    # ---- translation ----------------------------------------------------------------------------------
    def translate(self, upstream_offset: int, *, clamp_ahead: bool = False) -> int | None:
        """Downstream offset for committed upstream offset U (module docstring: rules, None cases)."""
        found = self.translate_bounded(upstream_offset, clamp_ahead=clamp_ahead)
        return None if found is None else found[0]

    def translate_bounded(self, upstream_offset: int, *, clamp_ahead: bool = False) -> tuple[int, int] | None:
        """(downstream offset, at most how many already copied records a consumer there re-reads) for U.

        0 re-reads means exact. Never a skip either way. With `clamp_ahead`, records in [upstream_end, U) that
        are copied later are re-read too; they are not counted (the map cannot know them yet).
        """
        if self._start is None or upstream_offset < self._start:
            return None
        assert self._up_end is not None  # I4
        if upstream_offset > self._up_end:
            end = self.downstream_end if clamp_ahead else None
            return None if end is None else (end, 0)
        runs = self._runs
        i = bisect_right(runs.us, upstream_offset) - 1
        if i >= 0 and upstream_offset < runs.up_end(i):
            into, gaps = upstream_offset - runs.us[i], runs.gs[i]
            return runs.ds[i] + max(0, into - gaps), min(gaps + runs.ks[i], into)
        if i + 1 < len(runs):
            return runs.ds[i + 1], 0
        end = self.downstream_end
        return None if end is None else (end, 0)

    def untranslate(self, downstream_offset: int) -> int | None:
        """The inverse: the upstream offset a group resumes at on the source after reading the remote partition
        up to (not including) downstream offset D (a failback of a group that read the copy).

        The upstream offset of the first copied record at or after D; past every copy, the consumed end (all
        the copy read beyond its last copy were gaps, which no consumer of the copy saw); never below `start`
        (older upstream records were deleted at the source). Exact in exact runs and between runs: the copies
        below D are then exactly the copies of the upstream records below the answer. Inside a thinned run,
        conservative (module docstring). None when nothing was ever consumed.
        """
        found = self.untranslate_bounded(downstream_offset)
        return None if found is None else found[0]

    def untranslate_bounded(self, downstream_offset: int) -> tuple[int, int] | None:
        """(upstream offset, at most how many records a group resuming there re-reads) for D; 0 = exact."""
        if downstream_offset < 0:
            raise ValueError(f"downstream offset must be >= 0, got {downstream_offset}")
        if self._start is None or self._up_end is None:
            return None
        runs = self._runs
        k = bisect_right(runs.ds, downstream_offset) - 1
        if k >= 0 and downstream_offset < runs.down_end(k):
            into, extra = downstream_offset - runs.ds[k], runs.ks[k]
            upstream, rereads = runs.us[k] + max(0, into - extra), min(runs.gs[k] + extra, into)
        elif k + 1 < len(runs):
            k, upstream, rereads = k + 1, runs.us[k + 1], 0
        else:
            return max(self._up_end, self._start), 0
        if upstream < self._start and not runs.exact(k):
            # a thinned run that straddles start: its first copy at or above start is not known
            return self._start, runs.gs[k] + runs.ks[k]
        return max(upstream, self._start), rereads

    def last_copied(self) -> tuple[int, int] | None:
        """(upstream, downstream) of the newest copied record: the pair of the "latest position" offset sync.
        None when nothing was copied or the newest run is thinned (its last pair is not known exactly)."""
        runs = self._runs
        n = len(runs)
        if not n or not runs.exact(n - 1):
            return None
        return runs.up_end(n - 1) - 1, runs.down_end(n - 1) - 1

"""The runs of an offset map in parallel arrays, and thinning: the schedule by which old runs are merged.

Thinning keeps the newest `exact_runs` runs (the window, W) as they were copied and merges older neighbours in
a binary-counter schedule by weight (the number of exact runs merged into a run): below the window, runs are
merged from the newest end while the older of the last two weighs less than twice the newer, so the weights
below the window at least halve from each run to the next (T1 in core/offset_map.py). A map that opened T
runs then holds at most W + log2(T) + 1 runs, and a run's weight is at most about its age in runs: like MM2's
OffsetSyncStore (docs/mm2-reference.md §5.3), precision fades with age, never correctness.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right

from mirrorflow.core.record_codec import Segment

DEFAULT_EXACT_RUNS = 1024
"""The window W: how many of the newest runs stay exact. At one run per exactly-once transaction, 1024 runs
are the last 1024 commits (seconds to minutes of a caught-up continuous copy); a group further behind is
translated with at most the merged run's gaps re-read. Read when a map is built (tests may lower it)."""

NO_THINNING = 2**62
"""`exact_runs` that keeps every run exact (the behaviour before thinning; the benchmark's baseline)."""


class Runs:
    """Runs as six `array('q')`: upstream start, downstream start, copies, upstream gaps, downstream extra,
    weight (48 bytes a run). An exact run has both gap counts 0 and weight 1.
    """

    __slots__ = ("ds", "gs", "ks", "ns", "us", "ws")

    def __init__(self) -> None:
        self.us: array[int] = array("q")
        self.ds: array[int] = array("q")
        self.ns: array[int] = array("q")
        self.gs: array[int] = array("q")
        self.ks: array[int] = array("q")
        self.ws: array[int] = array("q")

    def __len__(self) -> int:
        return len(self.us)

    def get(self, i: int) -> Segment:
        return Segment(self.us[i], self.ds[i], self.ns[i], self.gs[i], self.ks[i], self.ws[i])

    def put(self, i: int, s: Segment) -> None:
        self.us[i], self.ds[i], self.ns[i] = s.upstream_start, s.downstream_start, s.length
        self.gs[i], self.ks[i], self.ws[i] = s.upstream_gaps, s.downstream_extra, s.weight

    def append(self, s: Segment) -> None:
        self.us.append(s.upstream_start)
        self.ds.append(s.downstream_start)
        self.ns.append(s.length)
        self.gs.append(s.upstream_gaps)
        self.ks.append(s.downstream_extra)
        self.ws.append(s.weight)

    def delete(self, lo: int, hi: int) -> None:
        del self.us[lo:hi], self.ds[lo:hi], self.ns[lo:hi], self.gs[lo:hi], self.ks[lo:hi], self.ws[lo:hi]

    def exact(self, i: int) -> bool:
        return self.gs[i] == 0 and self.ks[i] == 0

    def signature(self, i: int) -> tuple[int, int, int]:
        """What may change in a stored run without changing its key (the tail grows, a rewind cuts it)."""
        return self.ns[i], self.gs[i], self.ks[i]

    def up_end(self, i: int) -> int:
        return self.us[i] + self.ns[i] + self.gs[i]

    def down_end(self, i: int) -> int:
        return self.ds[i] + self.ns[i] + self.ks[i]

    def containing_up(self, upstream: int) -> int:
        """Index of the run whose upstream span holds `upstream`, or -1."""
        i = bisect_right(self.us, upstream) - 1
        return i if i >= 0 and upstream < self.up_end(i) else -1

    def containing_down(self, downstream: int) -> int:
        """Index of the run whose downstream span holds `downstream`, or -1."""
        i = bisect_right(self.ds, downstream) - 1
        return i if i >= 0 and downstream < self.down_end(i) else -1

    def merge_candidate(self, window: int) -> int | None:
        """The index i such that runs i and i+1 are to be merged next, or None (T1 holds)."""
        i = len(self.us) - window - 2
        if i >= 0 and self.ws[i] < 2 * self.ws[i + 1]:
            return i
        return None

    def merged(self, i: int) -> Segment:
        """Runs i and i+1 as one run: both spans from the start of i to the end of i+1, copies and weights summed;
        every offset in between that is not one of the copies counts as a gap or extra offset (proof: T2).
        """
        copies = self.ns[i] + self.ns[i + 1]
        up_span = self.up_end(i + 1) - self.us[i]
        down_span = self.down_end(i + 1) - self.ds[i]
        weight = self.ws[i] + self.ws[i + 1]
        return Segment(self.us[i], self.ds[i], copies, up_span - copies, down_span - copies, weight)

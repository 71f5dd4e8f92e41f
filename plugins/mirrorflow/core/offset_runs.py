"""The runs of an offset map in parallel arrays, and thinning: the schedule by which old runs are merged.

Thinning keeps the newest `exact_runs` runs (the window, W) as they were copied and merges older neighbours by
weight (the number of exact runs merged into a run, one per transaction in exactly-once mode) and age (the total
weight of the runs newer than a run: how many transactions ago its newest copy was made). Below the window, two
neighbours are merged when the merged run would weigh no more than its age: a run never covers more transactions
than have committed since its newest one, so a group N transactions behind lands in a run of weight <= N (its
re-reads are bounded by the gaps of at most N transactions; 0 inside the window). Once no pair can merge, for
neighbours a (older) and b: w(a) + w(b) > age(b), so the age at least doubles every two runs going back and a map
that opened T runs holds at most W + 2 log2(T / W) + 2 of them (T1 in core/offset_map.py). Like MM2's
OffsetSyncStore (docs/mm2-reference.md §5.3), precision fades with age, never correctness.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right

from mirrorflow.core.record_codec import Segment

NO_THINNING = 2**62
"""`exact_runs` that keeps every run exact (the behaviour before thinning; the benchmark's baseline)."""

THINNING_WINDOW = 1024
"""The window W thinning is designed and measured with (docs/offsets.md): at one run per exactly-once transaction,
the last 1024 commits (seconds to minutes of a caught-up continuous copy) stay exact."""

DEFAULT_EXACT_RUNS = THINNING_WINDOW
"""The window of maps built without `exact_runs` (read when a map is built; tests may lower it or turn thinning off
with `NO_THINNING`). On since session 16: an unthinned exactly-once map keeps one live run per transaction for as
long as the source keeps the records, and every copy start, checkpoint round and translation reads it, so a
continuous copy's start-up grew with the flow's age without bound (the deployed-path benchmark read 9.8k, 19.6k
and 30.4k map records per start at 2, 4 and 6 minutes). Thinned, a partition's map holds at most
W + 2 log2(T / W) + 2 runs. The price: a group more than W transactions behind translates with a bound,
"conservative (<= N re-reads)", N its thinned run's gaps and marker offsets (a run of at most as many transactions
as it is behind), never a skip (docs/offsets.md)."""


class Runs:
    """Runs as six `array('q')`: upstream start, downstream start, copies, upstream gaps, downstream extra,
    weight (48 bytes a run). An exact run has both gap counts 0 and weight 1.
    """

    __slots__ = ("ds", "gs", "ks", "ns", "total", "us", "ws")

    def __init__(self) -> None:
        self.us: array[int] = array("q")
        self.ds: array[int] = array("q")
        self.ns: array[int] = array("q")
        self.gs: array[int] = array("q")
        self.ks: array[int] = array("q")
        self.ws: array[int] = array("q")
        self.total = 0  # the sum of the weights

    def __len__(self) -> int:
        return len(self.us)

    def get(self, i: int) -> Segment:
        return Segment(self.us[i], self.ds[i], self.ns[i], self.gs[i], self.ks[i], self.ws[i])

    def put(self, i: int, s: Segment) -> None:
        self.total += s.weight - self.ws[i]
        self.us[i], self.ds[i], self.ns[i] = s.upstream_start, s.downstream_start, s.length
        self.gs[i], self.ks[i], self.ws[i] = s.upstream_gaps, s.downstream_extra, s.weight

    def append(self, s: Segment) -> None:
        self.us.append(s.upstream_start)
        self.ds.append(s.downstream_start)
        self.ns.append(s.length)
        self.gs.append(s.upstream_gaps)
        self.ks.append(s.downstream_extra)
        self.ws.append(s.weight)
        self.total += s.weight

    def delete(self, lo: int, hi: int) -> None:
        self.total -= sum(self.ws[lo:hi])
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

    def merge_candidate(self, window: int, first: int = 0) -> int | None:
        """The oldest index i >= `first` such that runs i and i+1, both below the window, are to be merged (their
        merged weight is at most the age of run i+1), or None when T1 holds from `first` on. O(runs below it).
        """
        ws = self.ws
        below = len(ws) - window
        newer = self.total - sum(ws[: first + 1])  # the age of run first + 1 plus its own weight
        for i in range(first, below - 1):
            newer -= ws[i + 1]
            if ws[i] + ws[i + 1] <= newer:
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

    def agrees(self, s: Segment, a: int, b: int) -> bool:
        """Does stored run `s`, which overlaps the consumed history on upstream [a, b), agree with the runs here?
        Exact against exact: the same offsets. With a thinned run on either side, `s` must lie inside run i (a
        straddling `s` began below the map's start; only its end can be checked), and a copy (u', d') there has
        d' - d - (u' - u) in [-g, k], since copies are in order on both sides.
        """
        i = bisect_right(self.us, a) - 1
        if i < 0 or self.up_end(i) < b:
            return False
        if self.exact(i) and s.exact:
            return self.ds[i] - self.us[i] == s.downstream_start - s.upstream_start
        if s.upstream_end > self.up_end(i) or s.downstream_end > self.down_end(i):
            return False
        if s.upstream_start < self.us[i]:
            return True
        drift = (s.downstream_start - self.ds[i]) - (s.upstream_start - self.us[i])
        return -self.gs[i] <= drift <= self.ks[i]

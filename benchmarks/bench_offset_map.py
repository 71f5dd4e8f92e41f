"""`make bench-offset-map`: what an exactly-once copy's offset map costs after 1k to 200k transactions, with
thinning (the newest `--window` runs exact, older ones merged: core/offset_runs.py) and without (the behaviour
before thinning, one run per transaction forever), measured side by side in the same run. docs/offsets.md has
the figures.

Model (no broker): one source partition copied by a caught-up continuous exactly-once copy. Transaction t copies
1 + t % 4 records; the source is not transactional, so upstream offsets are contiguous, while our commit marker
takes one downstream offset after every transaction, so each transaction starts a new exact run, as on the real
copy. After every transaction the driver does what copy_range does with the real `OffsetMap`: record the
batch, mark it consumed with the target end after the marker, take `unflushed()`, apply it to a simulated
compacted topic (the live key -> value bytes, `encode_segment`), `mark_flushed`, then `offset_syncs`. Reported per
partition, at each checkpoint:
* stored records and bytes: live keys of the compacted offset-map topic and their key + value bytes (record and
  batch framing on the wire add about 10 bytes a record, not counted);
* restore: the seconds a copy start spends turning those records back into a map (`decode_segment` of every record
  plus `OffsetMap.restore`), the median of `--repeat` runs; reading the bytes from Kafka comes on top and grows
  with them;
* per-txn: the map's share of each transaction's work over the last stretch (record, unflushed, mark_flushed,
  offset_syncs), in microseconds: flat means insertion is not quadratic;
* re-reads: with thinning, the most records a group that is N transactions behind can re-read after translation
  (the gaps of the run that holds its position; `translate_bounded` gives the bound for an exact position);
  without thinning always 0.
Times are CPU seconds of this process (`time.process_time`), so that other work on a shared machine does not
inflate them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugins"))

from mirrorflow.core.offset_map import (  # noqa: E402
    NO_THINNING,
    OffsetMap,
    Segment,
    StoredRuns,
    decode_segment,
    encode_segment,
)
from mirrorflow.core.offset_runs import THINNING_WINDOW  # noqa: E402
from report import text_table  # noqa: E402

CHECKPOINTS = (1_000, 10_000, 100_000, 200_000)
TOPIC, PARTITION = "orders", 7


class Copy:
    """One partition's copy: the live map and the compacted topic it writes to."""

    def __init__(self, window: int) -> None:
        self.map = OffsetMap(start=0, exact_runs=window)
        self.window = window
        self.topic: dict[bytes, bytes] = {}
        self.upstream = self.downstream = 0
        self.sizes: list[int] = []  # records of each transaction, to name the true answers
        self.busy_s = 0.0

    def transactions(self, first: int, end: int) -> None:
        m, topic = self.map, self.topic
        began = time.process_time()
        for t in range(first, end):
            n = 1 + t % 4
            m.record_batch(range(self.upstream, self.upstream + n), range(self.downstream, self.downstream + n))
            self.upstream += n
            self.downstream += n + 1  # our commit marker
            m.mark_consumed(self.upstream, downstream_end=self.downstream)
            changes = m.unflushed()
            for segment in changes.upserts:
                key, value = encode_segment(TOPIC, PARTITION, segment)
                topic[key] = value
            for start in changes.deletes:
                topic.pop(encode_segment(TOPIC, PARTITION, Segment(start, 0, 1))[0], None)
            m.mark_flushed(changes)
            m.offset_syncs(100)
            self.sizes.append(n)
        self.busy_s = time.process_time() - began

    def stored_bytes(self) -> int:
        return sum(len(k) + len(v) for k, v in self.topic.items())

    def restore_s(self, repeat: int) -> float:
        """Median seconds to rebuild the map from the stored records, as a copy start does."""
        times = []
        for _ in range(repeat):
            began = time.process_time()
            segments = [decode_segment(k, v)[2] for k, v in self.topic.items()]
            restored = OffsetMap.restore(
                segments, next_upstream=self.upstream, downstream_end=self.downstream, exact_runs=self.window
            )
            times.append(time.process_time() - began)
        if restored.segments() != self.map.segments():
            raise AssertionError(f"the stored map does not restore the live one ({len(segments)} records)")
        return statistics.median(times)

    def rereads_behind(self, behind: int) -> str:
        """The most records a group `behind` transactions from the newest re-reads: the gaps of the run that
        holds its position (`translate_bounded` answers between 0 and that, by position in the run)."""
        if behind > len(self.sizes):
            return "-"
        upstream = self.upstream - sum(self.sizes[-behind:])
        run = next(s for s in reversed(self.map.segments()) if s.upstream_start <= upstream)
        return f"{run.max_rereads:,}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_offset_map", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--window", type=int, default=THINNING_WINDOW, help="exact runs kept (default %(default)s)")
    parser.add_argument("--transactions", type=int, nargs="+", default=list(CHECKPOINTS))
    parser.add_argument("--repeat", type=int, default=3, help="restores timed per checkpoint (median)")
    args = parser.parse_args(argv)
    copies = {"thinned": Copy(args.window), "baseline": Copy(NO_THINNING)}
    behind = (100, 1_000, 10_000, 100_000)
    rows = []
    done = 0
    for total in sorted(args.transactions):
        cells: dict[str, tuple[str, ...]] = {}
        for name, copy in copies.items():
            copy.transactions(done, total)
            per_txn_us = copy.busy_s / (total - done) * 1e6
            cells[name] = (
                f"{len(copy.topic):,}",
                f"{copy.stored_bytes():,}",
                f"{copy.restore_s(args.repeat) * 1000:.1f}",
                f"{per_txn_us:.1f}",
            )
        thinned = copies["thinned"]
        rereads = " / ".join(thinned.rereads_behind(b) for b in behind)
        rows.append((f"{total:,}", *cells["thinned"], rereads, *cells["baseline"]))
        done = total
    header = (
        "transactions",
        "records",
        "bytes",
        "restore ms",
        "per-txn us",
        "re-reads at " + "/".join(f"{b:,}" for b in behind) + " behind",
        "baseline records",
        "baseline bytes",
        "baseline restore ms",
        "baseline per-txn us",
    )
    print(f"offset map of one partition, exactly-once copy, W = {args.window} exact runs (baseline: no thinning)")
    print(text_table(header, rows))
    print("\nreaders folding an unthinned map (StoredRuns): seconds, without and with retention tombstones for half")
    folds = [fold_row(n) for n in (100_000, 200_000, 400_000)]
    print(text_table(("records", "no tombstones s", "half pruned s"), folds))
    return 0


def fold_row(records: int) -> tuple[str, str, str]:
    """What a reader pays to fold `records` runs of a partition, without deletes and with retention pruning the
    oldest run for each new one past the middle (the tombstones a long retention leaves): both should be linear."""
    timings = []
    for prune in (False, True):
        folded, began = StoredRuns(), time.process_time()
        for i in range(records):
            folded.put(Segment(3 * i, 4 * i, 2))
            if prune and i >= records // 2:
                folded.delete(3 * (i - records // 2))
        timings.append(f"{time.process_time() - began:.2f}")
    return (f"{records:,}", *timings)


if __name__ == "__main__":
    raise SystemExit(main())

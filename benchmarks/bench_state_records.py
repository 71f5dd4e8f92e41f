"""Time for a reader to apply the offset-map records of one partition (issue 17: applying them used to rescan
every stored segment at each record, quadratic in the segments).

    PYTHONPATH=plugins python benchmarks/bench_state_records.py [SEGMENTS ...]

Prints one line per size. Only the record application is timed (no broker): the records are encoded first,
as a copy writes them: a segment per exactly-once commit (a marker between each), a tail rewrite every tenth
commit (the same key again, longer), and an at-least-once re-copy every hundredth.
"""

from __future__ import annotations

import sys
import time

from mirrorflow.core.offset_map import Segment, encode_segment
from mirrorflow.replication.state_records import apply_segment_records

RawRecord = tuple[bytes | None, bytes | None]


def history(segments: int) -> list[RawRecord]:
    records: list[RawRecord] = []
    u = d = 0
    for i in range(segments):
        if i % 100 == 99:
            u -= 3  # resumed from an older progress record: the last records copied again
        records.append(encode_segment("t", 0, Segment(u, d, 5)))
        if i % 10 == 9:
            records.append(encode_segment("t", 0, Segment(u, d, 6)))  # the tail grew
            u, d = u + 1, d + 1
        u, d = u + 6, d + 7  # an upstream gap of one, and the commit marker downstream
    return records


def main(sizes: list[int]) -> None:
    for size in sizes:
        records = history(size)
        started = time.perf_counter()
        apply_segment_records({}, records)
        print(f"{size:>7} segments ({len(records)} records): {time.perf_counter() - started:8.3f} s")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [5_000, 10_000, 20_000])

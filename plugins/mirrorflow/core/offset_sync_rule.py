"""Which copied pairs become MM2 offset syncs (docs/mm2-reference.md §4.6, adapted to exact runs).

A sync at the start of every exact run (covers MM2's upstream-gap and first-record rules, and downstream gaps
too) and then whenever the downstream offset reaches last sync + 1 + offset.lag.max. Every sync is a real copied
pair, so MM2's `sync.down + 1` translation from them never skips and re-reads at most offset.lag.max records.
`OffsetMap.offset_syncs` feeds this the exact runs (whole or in part) that it has not considered yet, including
those that thinning merged before they were considered; it never feeds a thinned run, whose inner pairs are not
known.
"""

from __future__ import annotations

from collections.abc import Iterable


def sync_points(
    runs: Iterable[tuple[int, int, int]],
    considered_to: int | None,
    last_down: int,
    step: int,
    out: list[tuple[int, int]],
) -> int:
    """Append to `out` the syncs of exact `runs` (upstream start, downstream start, length) in copy order, past
    upstream `considered_to` (None: all); `last_down` is the previous sync's downstream offset and `step` is
    offset.lag.max + 1. Returns the downstream offset of the last sync.
    """
    nxt, last = considered_to, last_down
    for u0, d0, length in runs:
        p = 0 if nxt is None or nxt <= u0 else nxt - u0
        if p >= length:
            continue
        j = max(last - d0 + step, p) if p > 0 and d0 <= last < d0 + p else p
        while j < length:
            out.append((u0 + j, d0 + j))
            last = d0 + j
            j += step
    return last

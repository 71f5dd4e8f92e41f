"""Pure pieces of the copy: pruning keeps offset syncs for the records it forgets, and the copy's client tuning
never overrides what the operator configured."""

from __future__ import annotations

from dataclasses import replace

from mirrorflow.core.offset_map import OffsetMap, Segment
from mirrorflow.core.progress import Progress
from mirrorflow.kafka.partition_reader import READER_DEFAULTS, tuned
from mirrorflow.kafka.transfer import WRITER_DEFAULTS
from mirrorflow.replication.copy_claims import run_order
from mirrorflow.replication.copy_setup import prune


def test_prune_syncs_the_records_it_forgets_then_tombstones_whole_segments() -> None:
    m = OffsetMap(start=0)
    m.record_batch([0, 1, 2], [0, 1, 2])
    m.record_batch([5, 6], [4, 5])  # upstream gap: a second segment
    m.record_batch([9, 10, 11], [7, 8, 9])
    flushed = m.unflushed()
    m.mark_flushed(flushed)

    syncs = prune(m, 7, offset_lag_max=100)

    assert syncs == [(0, 0), (5, 4), (9, 7)], "every segment start is synced before it can be forgotten"
    assert m.segments() == (Segment(9, 7, 3),)
    assert m.unflushed().deletes == (5, 0)
    assert m.translate(7) == 7 and m.translate(10) == 8
    assert prune(m, 7, offset_lag_max=100) is None, "an unmoved log start changes nothing"
    assert prune(m, None, offset_lag_max=100) is None


def test_prune_keeps_a_segment_that_straddles_the_log_start() -> None:
    m = OffsetMap(start=0)
    m.record_batch(list(range(10)), list(range(10)))
    assert prune(m, 4, offset_lag_max=100) == [(0, 0)]
    assert m.segments() == (Segment(0, 0, 10),)
    assert m.unflushed().deletes == ()
    assert m.translate(4) == 4


def test_operator_settings_win_over_the_copy_defaults() -> None:
    assert tuned({"linger.ms": "5", "bootstrap.servers": "x:9092"}, WRITER_DEFAULTS) == {
        k: v for k, v in WRITER_DEFAULTS.items() if k != "linger.ms"
    }
    assert tuned({}, READER_DEFAULTS) == dict(READER_DEFAULTS)
    assert "fetch.message.max.bytes" not in tuned({"fetch.message.max.bytes": "1048576"}, READER_DEFAULTS)


def test_claims_are_ordered_by_their_runs_starts_unless_a_clock_disagrees() -> None:
    """`copy_claims.run_order`: later start 1, earlier -1; the same run, an unknown start (0: an older release),
    or a start in this host's future (the clocks disagree) 0, which falls back to the epoch."""
    stored = Progress("t", 0, 10, 10, 10, 3, 0, run_started_ms=2_000)
    assert run_order(stored, 1_000, now_ms=5_000) == 1
    assert run_order(stored, 3_000, now_ms=5_000) == -1
    assert run_order(stored, 2_000, now_ms=5_000) == 0
    assert run_order(stored, 0, now_ms=5_000) == 0
    assert run_order(replace(stored, run_started_ms=0), 1_000, now_ms=5_000) == 0
    assert run_order(stored, 1_000, now_ms=1_500) == 0  # started "after now": a clock is wrong

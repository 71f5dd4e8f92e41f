"""The audit's pure comparison: each kind of fault is counted exactly, and a clean copy counts zero faults."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from mirrorflow.core.offset_map import OffsetMap, Segment
from mirrorflow.core.provenance import ORIGIN_HEADER
from mirrorflow.replication.audit import (
    PartitionRecords,
    _drop_expired_head,
    _skip_expired,
    compare_topic,
    latency_report,
    percentile,
    record_hash,
)


def side(*partitions: list[str]) -> dict[int, PartitionRecords]:
    out = {}
    for p, names in enumerate(partitions):
        records = PartitionRecords()
        for i, name in enumerate(names):
            records.add(record_hash(name.encode(), b"v", [], 1000), 1000 + i, i)
        out[p] = records
    return out


def test_hash_ignores_only_the_provenance_header() -> None:
    plain = record_hash(b"k", b"v", [("h", b"1")], 5)
    assert record_hash(b"k", b"v", [("h", b"1"), (ORIGIN_HEADER, b"A")], 5) == plain
    assert record_hash(b"k", b"v", [("h", b"2")], 5) != plain
    assert record_hash(b"k", b"v", [("h", b"1")], 6) != plain
    assert record_hash(b"k", None, [("h", b"1")], 5) != record_hash(b"k", b"", [("h", b"1")], 5)
    assert record_hash(None, b"kv", [], 5) != record_hash(b"k", b"v", [], 5)


def test_clean_copy_has_no_faults() -> None:
    result = compare_topic("t", "A.t", side(["a", "b", "a"], ["c"]), side(["a", "b", "a"], ["c"]))
    assert result.counts() == {
        "checked": 4,
        "lost": 0,
        "duplicated": 0,
        "out_of_order": 0,
        "misplaced": 0,
        "unexpected": 0,
        "ahead": 0,
        "not_yet_copied": 0,
    }


def test_each_fault_is_counted() -> None:
    assert compare_topic("t", "r", side(["a", "b", "c"]), side(["a", "c"])).lost == 1
    assert compare_topic("t", "r", side(["a", "b"]), side(["a", "b", "b", "a"])).duplicated == 2
    moved = compare_topic("t", "r", side(["a", "b"], ["c"]), side(["a"], ["c", "b"]))
    assert (moved.misplaced, moved.lost, moved.duplicated) == (1, 0, 0)
    assert compare_topic("t", "r", side(["a", "b", "c", "d"]), side(["b", "c", "d", "a"])).out_of_order == 1
    assert compare_topic("t", "r", side(["a"]), side(["a", "zz"])).unexpected == 1


def test_pending_records_are_not_lost_and_an_early_copy_is_not_a_duplicate() -> None:
    pending = Counter([record_hash(b"x", b"v", [], 1000), record_hash(b"y", b"v", [], 1000)])
    result = compare_topic("t", "r", side(["a"]), side(["a", "x"]), pending)
    assert (result.not_yet_copied, result.ahead, result.duplicated, result.unexpected, result.lost) == (2, 1, 0, 0, 0)


def test_latency_sources() -> None:
    assert percentile([5, 1, 3, 2, 4], 50) == 3
    assert percentile(list(range(1, 101)), 99) == 99
    measured = latency_report([10, 20, 30], None)
    assert measured["measurable"] and measured["source"] == "log-append-time" and measured["max_ms"] == 30
    from_metrics = latency_report([], [{"replication-latency-ms-max": 40.0, "replication-latency-ms-avg": 5.0}])
    assert from_metrics["source"] == "copy-metrics" and from_metrics["max_ms"] == 40.0
    assert latency_report([], None)["measurable"] is False


def test_records_whose_source_expired_inside_a_thinned_run_are_not_faults() -> None:
    """Retention deleted source records 0..4 of a copy whose map thinned them into one run: the log start
    translates early (conservative), so the target head still holds copies of deleted records. The audit drops at
    most the run's re-read bound of them, up to the copy of the first surviving record, and nothing else."""
    thinned = OffsetMap.restore([Segment(0, 0, 8, upstream_gaps=2, downstream_extra=2, weight=2)], exact_runs=4)
    maps = SimpleNamespace(get=lambda _topic, _p: thinned)
    found = thinned.translate_bounded(5, clamp_ahead=True)
    assert found is not None and found[1] > 0  # the test's premise: a conservative translation
    names = [f"r{i}" for i in range(10)]  # target: copies of source records 0..9 (two were gaps: 10 offsets)

    def audit(source_from: int, target: list[str]) -> dict[str, int]:
        actual, expected = side(target), side(names[source_from:])
        unsure = _skip_expired(actual, maps, "t", 0, source_from)
        _drop_expired_head(actual[0], expected[0], unsure)
        return compare_topic("t", "A.t", expected, actual).counts()

    assert audit(5, names)["unexpected"] == 0 and audit(5, names)["checked"] == 5
    assert audit(5, [*names[:6], "x9", *names[6:]])["unexpected"] == 1  # a stray record stays visible
    without = side(names)
    _skip_expired(without, maps, "t", 0, 5)
    assert compare_topic("t", "A.t", side(names[5:]), without).counts()["unexpected"] == 5 - found[0]

"""Rebuilding a flow's offset maps from the stored records, exact translation statuses, and the checkpoint store."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mirrorflow.core.checkpoint import Checkpoint
from mirrorflow.core.offset_map import OffsetMap, Segment, encode_segment, encode_segment_key
from mirrorflow.core.progress import Progress, encode_progress
from mirrorflow.replication.checkpoint_store import CheckpointStore
from mirrorflow.replication.offset_translation import (
    FlowOffsetMaps,
    RawRecord,
    TranslatedOffset,
    Translation,
    assemble_offset_maps,
    checkpoints_as_offsets,
)


def progress(topic: str, partition: int, next_upstream: int, downstream_end: int, copied: int = 0) -> RawRecord:
    return encode_progress(Progress(topic, partition, next_upstream, downstream_end, copied, 0, 0))


def segment(topic: str, partition: int, u: int, d: int, n: int) -> RawRecord:
    return encode_segment(topic, partition, Segment(u, d, n))


def test_translation_statuses() -> None:
    # t-0: upstream 0..9 -> 0..9, a transaction marker at 10, 11..14 -> 12..15 (our marker at 10..11 downstream)
    maps = FlowOffsetMaps(
        assemble_offset_maps(
            [segment("t", 0, 0, 0, 10), segment("t", 0, 11, 12, 4)],
            [progress("t", 0, 16, 17)],
        )
    )
    assert maps.translate("t", 0, 0) == Translation(0, "exact")
    assert maps.translate("t", 0, 9).offset == 9
    assert maps.translate("t", 0, 10).offset == 12, "inside the gap: the next copied record"
    assert maps.translate("t", 0, 14).offset == 15
    assert maps.translate("t", 0, 15).offset == 17, "past the last copy: the replicated end"
    assert maps.translate("t", 0, 16).offset == 17, "the copy's end: the replicated end"
    ahead = maps.translate("t", 0, 40)
    assert (ahead.offset, ahead.status) == (17, "ahead-of-copy")
    assert maps.translate("t", 1, 3).status == "not-copied"
    assert maps.translate("u", 0, 0).status == "not-copied"


def test_tail_past_last_copy_translates_to_replicated_end() -> None:
    maps = FlowOffsetMaps(assemble_offset_maps([segment("t", 0, 0, 0, 10)], [progress("t", 0, 16, 17)]))
    assert [maps.translate("t", 0, u).offset for u in (10, 12, 15, 16)] == [17, 17, 17, 17]


def test_history_start_and_records_of_other_topics() -> None:
    maps = FlowOffsetMaps.assemble(
        [segment("t", 0, 5, 0, 5), segment("other", 0, 0, 0, 3)],
        [progress("t", 0, 10, 5, copied=5), progress("other", 0, 3, 3, copied=3)],
        topics={"t"},
    )
    assert maps.translate("t", 0, 4).status == "before-history"
    assert maps.translate("t", 0, 5).offset == 0
    assert maps.get("other", 0) is None and len(maps) == 1
    # the copy read from log start 3: offsets 3 and 4 were a leading gap, 2 is older than the source keeps
    maps.learn_log_starts({("t", 0): 3})
    assert maps.translate("t", 0, 4) == Translation(0, "exact")
    assert maps.translate("t", 0, 3).offset == 0
    assert maps.translate("t", 0, 2).status == "before-history"


def test_later_records_win_tombstones_delete_and_a_recopied_tail_cuts_older_segments() -> None:
    key_0 = encode_segment_key("t", 0, 0)
    records: list[RawRecord] = [
        segment("t", 0, 0, 0, 5),
        segment("t", 0, 0, 0, 100),  # the tail grew: same key rewritten
        segment("t", 0, 50, 100, 50),  # at-least-once resume at 50 after a crash: 50.. copied again at 100..
        segment("x", 0, 0, 0, 1),
        (encode_segment_key("x", 0, 0), None),  # pruned
    ]
    maps = assemble_offset_maps(records, [progress("t", 0, 100, 150)])
    assert maps[("t", 0)].segments() == (Segment(0, 0, 50), Segment(50, 100, 50))
    assert ("x", 0) not in maps
    flow_maps = FlowOffsetMaps(maps)
    assert flow_maps.translate("t", 0, 49).offset == 49
    assert flow_maps.translate("t", 0, 60).offset == 110, "the later copy is the one a consumer reads"
    assert key_0 == records[0][0]


def test_progress_only_partition_and_a_map_that_cannot_be_rebuilt_is_left_out() -> None:
    maps = assemble_offset_maps(
        # downstream going backwards between two segments cannot come from one copy history
        [segment("bad", 0, 0, 10, 5), segment("bad", 0, 5, 2, 5)],
        [progress("empty", 0, 7, 3)],
    )
    assert ("bad", 0) not in maps
    flow_maps = FlowOffsetMaps(maps)
    assert flow_maps.translate("empty", 0, 7).offset == 3
    assert flow_maps.translate("empty", 0, 6).status == "before-history"


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(1, 6), st.booleans()), min_size=1, max_size=25
    )
)
def test_stored_records_rebuild_a_map_that_translates_like_the_copy(steps: list[tuple[int, int, int, bool]]) -> None:
    """Copy random runs with upstream and downstream gaps, flushing as the copy does; the maps rebuilt from
    the written records translate every offset as brute force over the copied pairs does."""
    live = OffsetMap(start=0)
    written: list[RawRecord] = []
    pairs: list[tuple[int, int]] = []
    u = d = 0
    for up_gap, down_gap, run, flush in steps:
        u += up_gap
        d += down_gap
        live.record_run(u, d, run)
        pairs += [(u + i, d + i) for i in range(run)]
        u += run
        d += run
        if flush:
            live.mark_consumed(u, downstream_end=d)
            changes = live.unflushed()
            written += [encode_segment("t", 0, s) for s in changes.upserts]
            written += [(encode_segment_key("t", 0, k), None) for k in changes.deletes]
            live.mark_flushed(changes)
    live.mark_consumed(u, downstream_end=d)
    changes = live.unflushed()
    written += [encode_segment("t", 0, s) for s in changes.upserts]
    maps = FlowOffsetMaps.assemble(written, [progress("t", 0, u, d, copied=len(pairs))])
    maps.learn_log_starts({("t", 0): 0})  # the copy began at the log start, 0
    for upstream in range(u + 2):
        expected = next((down for up, down in pairs if up >= upstream), d)
        assert maps.translate("t", 0, upstream).offset == expected


def test_checkpoint_store_keeps_the_last_checkpoint_per_partition_and_skips_other_records() -> None:
    def record(c: Checkpoint) -> RawRecord:
        return c.record_key(), c.record_value()

    records: list[RawRecord] = [
        record(Checkpoint("g1", "A.t", 0, 10, 9)),
        (b"garbage", b"\x00"),
        record(Checkpoint("g1", "A.t", 0, 5, 4)),  # the group rewound: last wins, not max
        record(Checkpoint("g1", "A.t", 1, 7, 7, "meta")),
        (Checkpoint("g1", "A.t", 2, 1, 1).record_key(), None),
        record(Checkpoint("g2", "A.t", 0, 3, 3)),
    ]
    store = CheckpointStore.from_records(records)
    assert store.malformed == 2
    assert store.groups() == ["g1", "g2"] and len(store) == 3
    assert store.last("g1", "A.t", 0) == Checkpoint("g1", "A.t", 0, 5, 4)
    assert store.last("g1", "A.t", 2) is None
    assert checkpoints_as_offsets(store.group_checkpoints("g1")) == [
        TranslatedOffset("A.t", 0, 4, 5, ""),
        TranslatedOffset("A.t", 1, 7, 7, "meta"),
    ]
    only_g2 = CheckpointStore.from_records(records, group_matches=lambda g: g == "g2")
    assert only_g2.groups() == ["g2"]


def test_json_shape_names_the_target_side() -> None:
    assert TranslatedOffset("A.orders", 3, 1200, 1234, "m").to_json() == {
        "topic": "A.orders",
        "partition": 3,
        "offset": 1200,
    }

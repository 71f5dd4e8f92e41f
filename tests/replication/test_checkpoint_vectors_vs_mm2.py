"""MirrorCheckpointTaskTest's translation vectors, with MM2's answer and ours side by side.

MM2 knows only sparse offset syncs and answers `sync.downstream + 1` for any committed offset past a sync (it
cannot know how many records after the sync were copied). Mirrorflow keeps the whole offset map, so it answers
the exact downstream position. Where the two differ, both values are stated; ours is never behind MM2's and
never skips a record.
"""

from __future__ import annotations

from mirrorflow.core.offset_map import OffsetMap


def mm2_translate(sync_upstream: int, sync_downstream: int, committed: int) -> int:
    """docs/mm2-reference.md §5.3: `s.down + (0 if U == s.up else 1)` for the latest sync with s.up <= U."""
    return sync_downstream + (0 if committed == sync_upstream else 1)


def test_checkpoint_vector_group_past_the_sync() -> None:
    # testCheckpoint: sync 3->4 on source1.topic1, group committed at 10: MM2 checkpoints downstream 5.
    assert mm2_translate(3, 4, 10) == 5
    # The same copy, known exactly: upstream 3..11 went to downstream 4..12 in one run.
    exact = OffsetMap(start=3)
    exact.record_run(3, 4, 9)
    assert exact.translate(10) == 11
    # MM2 would make the consumer re-read downstream 5..10 (the copies of upstream 4..9): 6 records; ours, 0.
    assert exact.translate(10) - mm2_translate(3, 4, 10) == 6


def test_checkpoint_vector_group_at_the_sync() -> None:
    # testCheckpoint: sync 7->8 on target2.topic5, group committed at 7: both answer 8.
    assert mm2_translate(7, 8, 7) == 8
    exact = OffsetMap(start=7)
    exact.record_run(7, 8, 6)
    assert exact.translate(7) == 8


def test_checkpoint_vector_group_far_past_the_sync() -> None:
    # testCheckpoint: sync 7->8, group committed at 12: MM2 answers 9, the exact map 13.
    assert mm2_translate(7, 8, 12) == 9
    exact = OffsetMap(start=7)
    exact.record_run(7, 8, 6)
    assert exact.translate(12) == 13


def test_no_checkpoint_for_a_partition_never_copied() -> None:
    # testNoCheckpointForTopicWithoutOffsetSyncs: MM2 emits nothing without syncs; we emit nothing without a map.
    assert OffsetMap().translate(0) is None


def test_exact_translation_across_an_upstream_gap_where_mm2_must_stay_behind() -> None:
    # Upstream 0..4 copied to 0..4, then a transaction marker at upstream 5, then 6..9 to 5..8. MM2 has syncs
    # at 0->0 and 6->5 (a new sync at every upstream gap); a group at 5 gets MM2's 0+1 = 1, ours the exact 5.
    exact = OffsetMap(start=0)
    exact.record_run(0, 0, 5)
    exact.record_run(6, 5, 4)
    assert mm2_translate(0, 0, 5) == 1
    assert exact.translate(5) == 5

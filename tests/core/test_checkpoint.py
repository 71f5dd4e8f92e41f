"""`Checkpoint` records (docs/mm2-reference.md §2.4) and MirrorCheckpointTask's "more recent" emission rule (§5.4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirrorflow.core.checkpoint import Checkpoint, is_more_recent
from mirrorflow.core.wire import WireFormatError

EXAMPLE = Checkpoint("my-group", "primary.orders", 3, upstream_offset=1234, downstream_offset=1200, metadata="")
EXAMPLE_KEY = bytes.fromhex("00 08 6d 79 2d 67 72 6f 75 70 00 0e 70 72 69 6d 61 72 79 2e 6f 72 64 65 72 73 00 00 00 03")
EXAMPLE_VALUE = bytes.fromhex("00 00 00 00 00 00 00 00 04 d2 00 00 00 00 00 00 04 b0 00 00")


def test_documented_example_bytes() -> None:
    assert EXAMPLE.record_key() == EXAMPLE_KEY
    assert EXAMPLE.record_value() == EXAMPLE_VALUE
    assert Checkpoint.from_record(EXAMPLE_KEY, EXAMPLE_VALUE) == EXAMPLE


def test_serde() -> None:  # CheckpointTest.testSerde
    checkpoint = Checkpoint("group-1", "topic-2", 3, 4, 5, "metadata-6")
    assert Checkpoint.from_record(checkpoint.record_key(), checkpoint.record_value()) == checkpoint


def test_unknown_version_is_rejected() -> None:
    with pytest.raises(WireFormatError, match="checkpoint record value: unsupported version 7"):
        Checkpoint.from_record(EXAMPLE_KEY, bytes.fromhex("0007") + EXAMPLE_VALUE[2:])


def test_truncated_record_is_rejected() -> None:
    with pytest.raises(WireFormatError, match="checkpoint record value"):
        Checkpoint.from_record(EXAMPLE_KEY, EXAMPLE_VALUE[:-1])


@given(
    group=st.text(max_size=40),
    topic=st.text(max_size=40),
    partition=st.integers(-(2**31), 2**31 - 1),
    upstream=st.integers(-(2**63), 2**63 - 1),
    downstream=st.integers(-(2**63), 2**63 - 1),
    metadata=st.text(max_size=40),
    tail=st.binary(max_size=4),
)
def test_round_trip_ignoring_trailing_bytes(
    group: str, topic: str, partition: int, upstream: int, downstream: int, metadata: str, tail: bytes
) -> None:
    checkpoint = Checkpoint(group, topic, partition, upstream, downstream, metadata)
    decoded = Checkpoint.from_record(checkpoint.record_key() + tail, checkpoint.record_value() + tail)
    assert decoded == checkpoint


def _cp(upstream: int, downstream: int) -> Checkpoint:
    return Checkpoint("g1", "source1.topic1", 0, upstream, downstream)


def test_first_checkpoint_is_always_emitted() -> None:
    assert is_more_recent(_cp(13, 6), None)


def test_checkpoint_records_monotonic_if_store_rewinds() -> None:
    # MirrorCheckpointTaskTest.testCheckpointRecordsMonotonicIfStoreRewinds: the sync store drops the sync
    # that translated upstream 13 to 6, so the same group offset now translates lower: not emitted.
    last = _cp(13, 6)
    assert not is_more_recent(_cp(13, 4), last)
    assert not is_more_recent(_cp(13, 6), last)  # a repeat is not emitted either
    # The group itself rewinds upstream and is still translatable: emitted, even though downstream goes back.
    assert is_more_recent(_cp(12, 4), last)


def test_checkpoints_task_restart_uses_existing_checkpoints() -> None:
    # MirrorCheckpointTaskTest.testCheckpointsTaskRestartUsesExistingCheckpoints: loaded 250->201, then the
    # restarted store translates 250 and 370 to 176 (suppressed) and 400 to 376 (emitted).
    loaded = _cp(250, 201)
    assert not is_more_recent(_cp(250, 176), loaded)
    assert not is_more_recent(_cp(370, 176), loaded)
    assert is_more_recent(_cp(400, 376), loaded)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=30))
def test_emitted_downstream_only_moves_back_when_the_group_rewinds(
    translations: list[tuple[int, int]],
) -> None:
    # Invariant: between two consecutive emitted checkpoints, downstream increases unless upstream decreased.
    last: Checkpoint | None = None
    for upstream, downstream in translations:
        candidate = _cp(upstream, downstream)
        if is_more_recent(candidate, last):
            if last is not None:
                assert candidate.downstream_offset > last.downstream_offset or (
                    candidate.upstream_offset < last.upstream_offset
                )
            last = candidate
        else:
            assert last is not None and candidate.upstream_offset >= last.upstream_offset
            assert candidate.downstream_offset <= last.downstream_offset

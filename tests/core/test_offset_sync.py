"""`OffsetSync` records, byte-compatible with MM2 (docs/mm2-reference.md §2.5); OffsetSyncTest.testSerde."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirrorflow.core.offset_sync import OffsetSync
from mirrorflow.core.wire import WireFormatError

EXAMPLE = OffsetSync("orders", 3, 1234, 1199)
EXAMPLE_KEY = bytes.fromhex("00 06 6f 72 64 65 72 73 00 00 00 03")
EXAMPLE_VALUE = bytes.fromhex("00 00 00 00 00 00 04 d2 00 00 00 00 00 00 04 af")


def test_documented_example_bytes_have_no_version_header() -> None:
    assert EXAMPLE.record_key() == EXAMPLE_KEY
    assert EXAMPLE.record_value() == EXAMPLE_VALUE
    assert OffsetSync.from_record(EXAMPLE_KEY, EXAMPLE_VALUE) == EXAMPLE


def test_serde() -> None:  # OffsetSyncTest.testSerde
    offset_sync = OffsetSync("topic-1", 2, 3, 4)
    assert OffsetSync.from_record(offset_sync.record_key(), offset_sync.record_value()) == offset_sync


def test_truncated_records_are_rejected() -> None:
    with pytest.raises(WireFormatError, match="offset-sync record key"):
        OffsetSync.from_record(EXAMPLE_KEY[:-2], EXAMPLE_VALUE)
    with pytest.raises(WireFormatError, match="offset-sync record value"):
        OffsetSync.from_record(EXAMPLE_KEY, EXAMPLE_VALUE[:8])


@given(
    topic=st.text(max_size=60),
    partition=st.integers(-(2**31), 2**31 - 1),
    upstream=st.integers(-(2**63), 2**63 - 1),
    downstream=st.integers(-(2**63), 2**63 - 1),
    tail=st.binary(max_size=4),
)
def test_round_trip_ignoring_trailing_bytes(
    topic: str, partition: int, upstream: int, downstream: int, tail: bytes
) -> None:
    offset_sync = OffsetSync(topic, partition, upstream, downstream)
    assert OffsetSync.from_record(offset_sync.record_key() + tail, offset_sync.record_value() + tail) == offset_sync

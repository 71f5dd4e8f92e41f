"""`Heartbeat` records, byte-compatible with MM2 (docs/mm2-reference.md §2.3); HeartbeatTest.testSerde."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirrorflow.core.heartbeat import Heartbeat
from mirrorflow.core.wire import WireFormatError

EXAMPLE = Heartbeat("primary", "backup", 1_700_000_000_000)
EXAMPLE_KEY = bytes.fromhex("00 07 70 72 69 6d 61 72 79 00 06 62 61 63 6b 75 70")
EXAMPLE_VALUE = bytes.fromhex("00 00 00 00 01 8b cf e5 68 00")


def test_documented_example_bytes() -> None:
    assert EXAMPLE.record_key() == EXAMPLE_KEY
    assert EXAMPLE.record_value() == EXAMPLE_VALUE
    assert Heartbeat.from_record(EXAMPLE_KEY, EXAMPLE_VALUE) == EXAMPLE


def test_serde() -> None:  # HeartbeatTest.testSerde
    heartbeat = Heartbeat("source-1", "target-2", 1234567890)
    assert Heartbeat.from_record(heartbeat.record_key(), heartbeat.record_value()) == heartbeat


def test_unknown_version_is_rejected() -> None:
    with pytest.raises(WireFormatError, match="unsupported version 1"):
        Heartbeat.from_record(EXAMPLE_KEY, bytes.fromhex("0001") + EXAMPLE_VALUE[2:])


def test_truncated_or_null_records_are_rejected() -> None:
    with pytest.raises(WireFormatError):
        Heartbeat.from_record(EXAMPLE_KEY[:-1], EXAMPLE_VALUE)
    with pytest.raises(WireFormatError):
        Heartbeat.from_record(EXAMPLE_KEY, EXAMPLE_VALUE[:-1])
    with pytest.raises(WireFormatError, match="heartbeat record value is missing"):
        Heartbeat.from_record(EXAMPLE_KEY, None)


@given(
    source=st.text(max_size=50),
    target=st.text(max_size=50),
    timestamp=st.integers(-(2**63), 2**63 - 1),
    key_tail=st.binary(max_size=4),
    value_tail=st.binary(max_size=4),
)
def test_round_trip_ignoring_trailing_bytes(
    source: str, target: str, timestamp: int, key_tail: bytes, value_tail: bytes
) -> None:
    heartbeat = Heartbeat(source, target, timestamp)
    assert Heartbeat.from_record(heartbeat.record_key() + key_tail, heartbeat.record_value() + value_tail) == heartbeat

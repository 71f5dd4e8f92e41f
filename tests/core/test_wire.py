"""Kafka protocol primitives (`Type.INT16/INT32/INT64/STRING`) as MM2 records use them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirrorflow.core.wire import WireFormatError, WireReader, WireWriter


def test_primitives_are_big_endian_and_fixed_width() -> None:
    data = WireWriter().int16(1).int32(-2).int64(3).string("é").to_bytes()
    assert data.hex() == "0001" + "fffffffe" + "0000000000000003" + "0002c3a9"


def test_string_length_limit_is_int16_max() -> None:
    assert len(WireWriter().string("x" * 32767).to_bytes()) == 2 + 32767
    with pytest.raises(WireFormatError, match="longer than STRING"):
        WireWriter().string("x" * 32768)
    with pytest.raises(WireFormatError, match="longer than STRING"):
        WireWriter().string("é" * 16384)  # 32768 UTF-8 bytes


@pytest.mark.parametrize(
    ("method", "value"),
    [("int16", 2**15), ("int16", -(2**15) - 1), ("int32", 2**31), ("int64", 2**63), ("int64", -(2**63) - 1)],
)
def test_out_of_range_integers_are_refused(method: str, value: int) -> None:
    with pytest.raises(WireFormatError, match="does not fit"):
        getattr(WireWriter(), method)(value)


def test_unencodable_string_is_refused() -> None:
    with pytest.raises(WireFormatError, match="UTF-8"):
        WireWriter().string("\ud800")


def test_reader_bounds_checks_name_the_record_part() -> None:
    with pytest.raises(WireFormatError, match="checkpoint record key: INT32 needs 4 bytes at offset 0, only 3 left"):
        WireReader(b"\x00\x00\x00", "checkpoint record key").int32()
    with pytest.raises(WireFormatError, match="STRING needs 5 bytes"):
        WireReader(b"\x00\x05abc", "x").string()
    with pytest.raises(WireFormatError, match="negative"):
        WireReader(b"\xff\xff", "x").string()
    with pytest.raises(WireFormatError, match="missing"):
        WireReader(None, "x")


def test_malformed_utf8_decodes_with_replacement_like_java() -> None:
    assert WireReader(b"\x00\x02\xff\x41", "x").string() == "\ufffdA"


def test_reader_leaves_trailing_bytes_alone() -> None:
    reader = WireReader(b"\x00\x01\x02\x03", "x")
    assert reader.int16() == 1
    assert reader.remaining == 2


@given(
    a=st.integers(-(2**15), 2**15 - 1),
    b=st.integers(-(2**31), 2**31 - 1),
    c=st.integers(-(2**63), 2**63 - 1),
    s=st.text(max_size=200),
    tail=st.binary(max_size=8),
)
def test_round_trip(a: int, b: int, c: int, s: str, tail: bytes) -> None:
    reader = WireReader(WireWriter().int16(a).int32(b).int64(c).string(s).to_bytes() + tail, "x")
    assert (reader.int16(), reader.int32(), reader.int64(), reader.string()) == (a, b, c, s)
    assert reader.remaining == len(tail)

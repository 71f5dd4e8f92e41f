"""Confluent's wire format: what counts as framed, and a rewrite that changes the 4 ID bytes and nothing else."""

from __future__ import annotations

import pytest

from mirrorflow.core.schema_wire import HEADER_BYTES, MAX_ID, frame, schema_id, with_schema_id


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x00\x00\x00\x00\x07avro", 7),
        (b"\x00\x00\x00\x01\x00", 256),  # an empty payload is still framed
        (b"\x00\xff\xff\xff\xff\x01", MAX_ID),
        (b"\x01\x00\x00\x00\x07avro", None),  # another magic byte
        (b"\x00\x00\x00\x07", None),  # too short for an ID
        (b"", None),
        (None, None),
        (b'{"json": true}', None),
    ],
)
def test_schema_id_reads_the_big_endian_id_after_magic_zero(data: bytes | None, expected: int | None) -> None:
    assert schema_id(data) == expected


def test_rewrite_changes_the_id_bytes_only() -> None:
    payload = bytes(range(256)) * 3
    framed = frame(12, payload)
    assert framed[:HEADER_BYTES] == b"\x00\x00\x00\x00\x0c"
    moved = with_schema_id(framed, 0x01020304)
    assert moved == b"\x00\x01\x02\x03\x04" + payload
    assert schema_id(moved) == 0x01020304 and moved[HEADER_BYTES:] == framed[HEADER_BYTES:]


def test_rewrite_refuses_unframed_data_and_ids_out_of_range() -> None:
    with pytest.raises(ValueError, match="wire format"):
        with_schema_id(b"plain text", 1)
    with pytest.raises(ValueError, match="4 unsigned bytes"):
        frame(MAX_ID + 1, b"")
    with pytest.raises(ValueError, match="4 unsigned bytes"):
        frame(-1, b"")

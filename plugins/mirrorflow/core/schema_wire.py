"""Confluent's wire format of serialised keys and values: magic byte 0, a 4-byte big-endian schema ID, the payload.

Serialisers that use a schema registry (Avro, Protobuf, JSON Schema) write it; a consumer reads the ID and asks
its registry for the schema. Replicated to a cluster with its own registry, the ID must be rewritten to the ID
that registry gave the same schema (`schema_translation`). Protobuf's message indexes follow the ID inside the
payload and stay as they are: they index the schema text, which is copied unchanged.
"""

from __future__ import annotations

MAGIC = 0
HEADER_BYTES = 5
MAX_ID = 0xFFFFFFFF


def schema_id(data: bytes | None) -> int | None:
    """The schema ID of `data` in the wire format; None when it is null, too short or starts with another byte."""
    if data is None or len(data) < HEADER_BYTES or data[0] != MAGIC:
        return None
    return int.from_bytes(data[1:HEADER_BYTES], "big")


def with_schema_id(data: bytes, new_id: int) -> bytes:
    """`data` (in the wire format) carrying `new_id` instead; the payload is left byte for byte."""
    if schema_id(data) is None:
        raise ValueError("the data is not in the schema registry wire format (magic byte 0 and a 4-byte ID)")
    return frame(new_id, data[HEADER_BYTES:])


def frame(schema: int, payload: bytes) -> bytes:
    """A payload framed with `schema` (what a registry-aware serialiser writes); used by tests and benchmarks."""
    if not 0 <= schema <= MAX_ID:
        raise ValueError(f"schema ID {schema} does not fit the wire format's 4 unsigned bytes")
    return b"\x00" + schema.to_bytes(4, "big") + payload

"""Wire form of Mirrorflow's own compacted records: the offset-map segment here, and the layout it shares with
the progress record (core/progress.py), so both are read with the same checks.

Both kinds are keyed by the source topic as STRING (INT16 byte length + UTF-8) followed by fixed-width
integers, and their values begin with an INT16 format version; all integers big-endian and signed (MM2's
encoding, docs/mm2-reference.md §2.2). Keys carry no version: a key is the compaction identity and must never change.
Readers reject other versions rather than guess at their meaning, and ignore bytes after the last field.

Offset-map topic (`offset_map_topic`, core/offset_map.py), one record per segment of an `OffsetMap`:
  key   = topic STRING, partition INT32, upstream_start INT64
  value = version INT16 (= 0), downstream_start INT64, length INT64;  null value = segment deleted.
Only the tail segment grows, and it is re-written under the same key, so compaction keeps one record per
segment.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mirrorflow.core.errors import MirrorflowError

T = TypeVar("T")

SEGMENT_FORMAT_VERSION = 0
_INT16 = struct.Struct(">h")
_SEGMENT_KEY_TAIL = struct.Struct(">iq")
_SEGMENT_VALUE = struct.Struct(">hqq")

BadRecord = Callable[[str, bytes, str], MirrorflowError]
"""`bad(part, data, why)`: the error for a record `part` ("key" or "value") its topic should not hold."""


def encode_topic_key(topic: str, tail: bytes) -> bytes:
    """An internal record key: the source topic as STRING, then the fixed-width `tail`."""
    raw = topic.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"topic name of {len(raw)} bytes does not fit an INT16 length")
    return _INT16.pack(len(raw)) + raw + tail


def decode_topic_key(key: bytes, tail: struct.Struct, bad: BadRecord) -> tuple[str, tuple[Any, ...]]:
    """(source topic, the `tail` fields) of an internal record key."""
    if len(key) < _INT16.size:
        raise bad("key", key, "too short")
    (size,) = _INT16.unpack_from(key, 0)
    if size < 0 or len(key) < _INT16.size + size + tail.size:
        raise bad("key", key, "truncated")
    try:
        topic = key[_INT16.size : _INT16.size + size].decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad("key", key, "topic is not UTF-8") from e
    return topic, tail.unpack_from(key, _INT16.size + size)


def decode_versioned_value(
    value: bytes, fields: struct.Struct, version: int, what: str, bad: BadRecord, make: Callable[..., T]
) -> T:
    """`make(*fields)` of an internal record value: the fields after its leading INT16 version (`fields` includes
    it). Another version was written by another Mirrorflow (`what` names the record in that error); a
    ValueError of `make` means the value is not one of ours.
    """
    if len(value) < _INT16.size:
        raise bad("value", value, "truncated")
    (found,) = _INT16.unpack_from(value, 0)
    if found != version:
        raise MirrorflowError(
            f"{what} has format version {found}; this Mirrorflow reads version {version}: upgrade Mirrorflow"
        )
    if len(value) < fields.size:
        raise bad("value", value, "truncated")
    try:
        return make(*fields.unpack_from(value, 0)[1:])
    except ValueError as e:
        raise bad("value", value, str(e)) from e


@dataclass(frozen=True, slots=True)
class Segment:
    """Upstream offsets `upstream_start + i` were copied to `downstream_start + i`, for 0 <= i < length."""

    upstream_start: int
    downstream_start: int
    length: int

    def __post_init__(self) -> None:
        if self.upstream_start < 0 or self.downstream_start < 0 or self.length < 1:
            raise ValueError(f"invalid segment {self}: offsets must be >= 0 and length >= 1")

    @property
    def upstream_end(self) -> int:
        return self.upstream_start + self.length

    @property
    def downstream_end(self) -> int:
        return self.downstream_start + self.length


def encode_segment_key(topic: str, partition: int, upstream_start: int) -> bytes:
    return encode_topic_key(topic, _SEGMENT_KEY_TAIL.pack(partition, upstream_start))


def encode_segment(topic: str, partition: int, segment: Segment) -> tuple[bytes, bytes]:
    """(key, value) of a stored segment; a deleted segment is `encode_segment_key(...)` with a null value."""
    value = _SEGMENT_VALUE.pack(SEGMENT_FORMAT_VERSION, segment.downstream_start, segment.length)
    return encode_segment_key(topic, partition, segment.upstream_start), value


def decode_segment_key(key: bytes) -> tuple[str, int, int]:
    """(source topic, partition, upstream_start) of an offset-map record key."""
    topic, (partition, upstream_start) = decode_topic_key(key, _SEGMENT_KEY_TAIL, _bad_segment)
    return topic, partition, upstream_start


def decode_segment(key: bytes, value: bytes) -> tuple[str, int, Segment]:
    """(source topic, partition, segment) of an offset-map record; tombstones are the caller's to skip."""
    topic, partition, upstream_start = decode_segment_key(key)
    what = f"offset-map record for {topic}-{partition} at upstream {upstream_start}"

    def make(downstream_start: int, length: int) -> Segment:
        return Segment(upstream_start, downstream_start, length)

    segment = decode_versioned_value(value, _SEGMENT_VALUE, SEGMENT_FORMAT_VERSION, what, _bad_segment, make)
    return topic, partition, segment


def _bad_segment(part: str, data: bytes, why: str) -> MirrorflowError:
    return MirrorflowError(
        f"offset-map record {part} {data[:40].hex()} is not a Mirrorflow segment ({why}): only Mirrorflow "
        "may write to the offset-map topic; delete the stray record or the topic and let the copy rebuild it"
    )

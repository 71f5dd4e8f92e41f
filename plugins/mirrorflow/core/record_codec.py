"""Wire form of Mirrorflow's own compacted records: the offset-map segment here, and the layout it shares with
the progress record (core/progress.py), so both are read with the same checks.

Both kinds are keyed by the source topic as STRING (INT16 byte length + UTF-8) followed by fixed-width
integers, and their values begin with an INT16 format version; all integers big-endian and signed (MM2's
encoding, docs/mm2-reference.md §2.2). Keys carry no version: a key is the compaction identity and must never change.
Readers reject other versions rather than guess at their meaning, and ignore bytes after the last field.

Offset-map topic (`offset_map_topic`, core/offset_map.py), one record per run of an `OffsetMap`:
  key   = topic STRING, partition INT32, upstream_start INT64
  value = version INT16 = 0, downstream_start INT64, length INT64                       (an exact run)
        | version INT16 = 1, downstream_start INT64, copies INT64, upstream_gaps INT64,
          downstream_extra INT64, weight INT64                                         (a thinned run)
  null value = run deleted.
A run is written in the smallest version that holds it: exact runs (the newest ones, and every run written by
Mirrorflow before thinning) stay version 0, so an older Mirrorflow reads a map that was never thinned and stops
with "upgrade Mirrorflow" at the first thinned run instead of guessing. Only the tail run grows, and it is
re-written under the same key, so compaction keeps one record per run; thinning re-writes the merged run under
the key of its first part and tombstones the keys of the others.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mirrorflow.core.errors import MirrorflowError

T = TypeVar("T")

SEGMENT_FORMAT_VERSION = 1
"""The newest offset-map value version; readers take every version up to it (`_SEGMENT_VALUES`)."""
_INT16 = struct.Struct(">h")
_SEGMENT_KEY_TAIL = struct.Struct(">iq")
_SEGMENT_VALUES = {0: struct.Struct(">hqq"), 1: struct.Struct(">hqqqqq")}

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
    """A run of the copy history (core/offset_map.py): `length` copies, in order on both sides, spread over the
    upstream offsets [upstream_start, upstream_end) and the downstream offsets [downstream_start, downstream_end).

    Upstream, `upstream_gaps` offsets of the span were not copied; downstream, `downstream_extra` offsets of the
    span are not copies (commit markers, other writers). With both 0 the run is exact: upstream
    `upstream_start + i` was copied to `downstream_start + i` for 0 <= i < length (the only kind before thinning).
    `weight`: how many exact runs were merged into this one (thinning's schedule, core/offset_thinning.py).
    """

    upstream_start: int
    downstream_start: int
    length: int
    upstream_gaps: int = 0
    downstream_extra: int = 0
    weight: int = 1

    def __post_init__(self) -> None:
        if (
            min(self.upstream_start, self.downstream_start, self.length, self.upstream_gaps, self.downstream_extra) < 0
            or self.weight < 1
            or self.upstream_length < 1
            or self.downstream_length < 1
        ):
            raise ValueError(
                f"invalid segment {self}: offsets, length and gaps must be >= 0, weight >= 1, both spans >= 1"
            )

    @property
    def exact(self) -> bool:
        return self.upstream_gaps == 0 and self.downstream_extra == 0

    @property
    def max_rereads(self) -> int:
        """The most records a translation inside this run re-reads (0 for an exact run)."""
        return self.upstream_gaps + self.downstream_extra

    @property
    def upstream_length(self) -> int:
        return self.length + self.upstream_gaps

    @property
    def downstream_length(self) -> int:
        return self.length + self.downstream_extra

    @property
    def upstream_end(self) -> int:
        return self.upstream_start + self.upstream_length

    @property
    def downstream_end(self) -> int:
        return self.downstream_start + self.downstream_length

    def head(self, upstream_end: int) -> Segment:
        """This run cut to the copies of upstream offsets below `upstream_end` (upstream_start < it).

        Exact runs are cut exactly. In a thinned run the copies below the cut are not known: at least
        `length - (self.upstream_end - upstream_end)` of them (at most that many lie at or above the cut), so the
        head keeps the whole downstream span and counts the unknown rest as gaps and extra offsets, which keeps
        every translation through it conservative (never a skip).
        """
        if not self.upstream_start < upstream_end:
            raise ValueError(f"cannot cut {self} at upstream {upstream_end}")
        if upstream_end >= self.upstream_end:
            return self
        span = upstream_end - self.upstream_start
        if self.exact:
            return Segment(self.upstream_start, self.downstream_start, span)
        copies = max(self.length - (self.upstream_end - upstream_end), 0)
        extra = self.downstream_length - copies
        return Segment(self.upstream_start, self.downstream_start, copies, span - copies, extra, self.weight)


def encode_segment_key(topic: str, partition: int, upstream_start: int) -> bytes:
    return encode_topic_key(topic, _SEGMENT_KEY_TAIL.pack(partition, upstream_start))


def encode_segment(topic: str, partition: int, segment: Segment) -> tuple[bytes, bytes]:
    """(key, value) of a stored run; a deleted run is `encode_segment_key(...)` with a null value."""
    if segment.exact and segment.weight == 1:
        value = _SEGMENT_VALUES[0].pack(0, segment.downstream_start, segment.length)
    else:
        value = _SEGMENT_VALUES[1].pack(
            1,
            segment.downstream_start,
            segment.length,
            segment.upstream_gaps,
            segment.downstream_extra,
            segment.weight,
        )
    return encode_segment_key(topic, partition, segment.upstream_start), value


def decode_segment_key(key: bytes) -> tuple[str, int, int]:
    """(source topic, partition, upstream_start) of an offset-map record key."""
    topic, (partition, upstream_start) = decode_topic_key(key, _SEGMENT_KEY_TAIL, _bad_segment)
    return topic, partition, upstream_start


def decode_segment(key: bytes, value: bytes) -> tuple[str, int, Segment]:
    """(source topic, partition, segment) of an offset-map record; tombstones are the caller's to skip."""
    topic, partition, upstream_start = decode_segment_key(key)
    what = f"offset-map record for {topic}-{partition} at upstream {upstream_start}"

    def make(downstream_start: int, length: int, *rest: int) -> Segment:
        return Segment(upstream_start, downstream_start, length, *rest)

    version = _INT16.unpack_from(value, 0)[0] if len(value) >= _INT16.size else SEGMENT_FORMAT_VERSION
    if version not in _SEGMENT_VALUES:  # the error names the newest version this Mirrorflow reads
        version = SEGMENT_FORMAT_VERSION
    segment = decode_versioned_value(value, _SEGMENT_VALUES[version], version, what, _bad_segment, make)
    return topic, partition, segment


def _bad_segment(part: str, data: bytes, why: str) -> MirrorflowError:
    return MirrorflowError(
        f"offset-map record {part} {data[:40].hex()} is not a Mirrorflow segment ({why}): only Mirrorflow "
        "may write to the offset-map topic; delete the stray record or the topic and let the copy rebuild it"
    )

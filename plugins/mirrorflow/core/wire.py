"""Kafka protocol primitives as MM2's record formats use them (`org.apache.kafka.common.protocol.types.Type`).

Rules (docs/mm2-reference.md §2.2):
* INT16/INT32/INT64 are signed, big-endian, fixed width.
* STRING is an INT16 byte length N (0..32767) then N bytes of UTF-8; null is not representable.
* A struct is its fields in order: no tags, no length prefix. Readers stop after the last field and ignore
  whatever follows, so a newer writer may append fields.
* Malformed UTF-8 inside a STRING decodes with U+FFFD replacements, as Java's `new String(bytes, UTF_8)` does:
  MM2 does not treat it as a bad record, so neither do we.
"""

from __future__ import annotations

import struct

INT16_MAX = 2**15 - 1
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class WireFormatError(ValueError):
    """Bytes that are not a valid MM2 record, or a value that cannot be written in MM2's format."""


class WireWriter:
    """Appends primitives to a growing buffer; chain the calls and finish with `to_bytes()`."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def _pack(self, fmt: struct.Struct, value: int, kind: str) -> WireWriter:
        try:
            self._buffer += fmt.pack(value)
        except struct.error as exc:
            raise WireFormatError(f"{value!r} does not fit in {kind}") from exc
        return self

    def int16(self, value: int) -> WireWriter:
        return self._pack(_INT16, value, "INT16")

    def int32(self, value: int) -> WireWriter:
        return self._pack(_INT32, value, "INT32")

    def int64(self, value: int) -> WireWriter:
        return self._pack(_INT64, value, "INT64")

    def string(self, value: str) -> WireWriter:
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise WireFormatError(f"{value!r} cannot be encoded as UTF-8: {exc.reason}") from exc
        if len(data) > INT16_MAX:
            raise WireFormatError(f"string of {len(data)} UTF-8 bytes is longer than STRING's {INT16_MAX}")
        self._buffer += _INT16.pack(len(data))
        self._buffer += data
        return self

    def to_bytes(self) -> bytes:
        return bytes(self._buffer)


class WireReader:
    """Reads primitives from the front of `data`; `what` names the record part in error messages."""

    __slots__ = ("_data", "_position", "_what")

    def __init__(self, data: bytes | bytearray | memoryview | None, what: str) -> None:
        if data is None:
            raise WireFormatError(f"{what} is missing (null)")
        self._data = bytes(data)
        self._position = 0
        self._what = what

    @property
    def remaining(self) -> int:
        return len(self._data) - self._position

    def _take(self, size: int, kind: str) -> bytes:
        if size > self.remaining:
            raise WireFormatError(
                f"{self._what}: {kind} needs {size} bytes at offset {self._position}, "
                f"only {self.remaining} left (record truncated or not an MM2 record)"
            )
        start = self._position
        self._position += size
        return self._data[start : self._position]

    def int16(self) -> int:
        value: int = _INT16.unpack(self._take(2, "INT16"))[0]
        return value

    def int32(self) -> int:
        value: int = _INT32.unpack(self._take(4, "INT32"))[0]
        return value

    def int64(self) -> int:
        value: int = _INT64.unpack(self._take(8, "INT64"))[0]
        return value

    def string(self) -> str:
        length = self.int16()
        if length < 0:
            raise WireFormatError(f"{self._what}: STRING length {length} is negative (null strings are not allowed)")
        return self._take(length, "STRING").decode("utf-8", errors="replace")

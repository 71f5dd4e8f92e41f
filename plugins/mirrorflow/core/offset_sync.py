"""MM2's `OffsetSync` record (connect-mirror `OffsetSync`), in `mm2-offset-syncs.<alias>.internal`.

Format (docs/mm2-reference.md §2.5), byte-compatible with MM2; unlike heartbeats and checkpoints, no version header:
* key:   topic STRING (the *upstream* topic, not renamed), partition INT32
* value: upstreamOffset INT64, offset INT64 (downstream offset of the same record)
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorflow.core.wire import WireReader, WireWriter


@dataclass(frozen=True, slots=True)
class OffsetSync:
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def record_key(self) -> bytes:
        return WireWriter().string(self.topic).int32(self.partition).to_bytes()

    def record_value(self) -> bytes:
        return WireWriter().int64(self.upstream_offset).int64(self.downstream_offset).to_bytes()

    @classmethod
    def from_record(
        cls, key: bytes | bytearray | memoryview | None, value: bytes | bytearray | memoryview | None
    ) -> OffsetSync:
        """Decode a record of an offset-syncs topic; raises `WireFormatError` if it is not one."""
        key_reader = WireReader(key, "offset-sync record key")
        topic, partition = key_reader.string(), key_reader.int32()
        value_reader = WireReader(value, "offset-sync record value")
        return cls(topic, partition, value_reader.int64(), value_reader.int64())

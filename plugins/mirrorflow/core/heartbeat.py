"""MM2's `Heartbeat` record (connect-mirror-client `Heartbeat`), written to the `heartbeats` topic.

Format (docs/mm2-reference.md §2.3), byte-compatible with MM2:
* key:   sourceClusterAlias STRING, targetClusterAlias STRING
* value: version INT16 (= 0), then timestamp INT64 (epoch milliseconds)
Downstream clusters learn their upstream topology from the replicated copies of these records' topic
(`A.heartbeats`, `B.A.heartbeats`, ...), so the names matter more than the payload.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorflow.core.wire import WireFormatError, WireReader, WireWriter

VERSION = 0


@dataclass(frozen=True, slots=True)
class Heartbeat:
    source_cluster_alias: str
    target_cluster_alias: str
    timestamp: int

    def record_key(self) -> bytes:
        return WireWriter().string(self.source_cluster_alias).string(self.target_cluster_alias).to_bytes()

    def record_value(self) -> bytes:
        return WireWriter().int16(VERSION).int64(self.timestamp).to_bytes()

    @classmethod
    def from_record(
        cls, key: bytes | bytearray | memoryview | None, value: bytes | bytearray | memoryview | None
    ) -> Heartbeat:
        """Decode a record of the heartbeats topic; raises `WireFormatError` if it is not one."""
        key_reader = WireReader(key, "heartbeat record key")
        source, target = key_reader.string(), key_reader.string()
        value_reader = WireReader(value, "heartbeat record value")
        version = value_reader.int16()
        if version != VERSION:
            raise WireFormatError(f"heartbeat record value: unsupported version {version} (only {VERSION} exists)")
        return cls(source, target, value_reader.int64())

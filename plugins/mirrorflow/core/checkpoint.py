"""MM2's `Checkpoint` record (connect-mirror-client `Checkpoint`), in `<source>.checkpoints.internal`.

Format (docs/mm2-reference.md §2.4), byte-compatible with MM2 and Java's `RemoteClusterUtils.translateOffsets`:
* key:   group STRING, topic STRING (the *downstream*, renamed topic), partition INT32
* value: version INT16 (= 0), upstreamOffset INT64, offset INT64 (downstream), metadata STRING

Emission rule (`MirrorCheckpointTask.checkpointIsMoreRecent`, docs/mm2-reference.md §5.4), per (group, downstream
partition): a checkpoint is emitted if there is none yet, if the group rewound upstream
(`new.upstream < last.upstream`), or if it moves the downstream offset forward (`new.downstream >
last.downstream`). Otherwise it is dropped, so a coarser translation never rewinds a consumer on failover.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorflow.core.wire import WireFormatError, WireReader, WireWriter

VERSION = 0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    consumer_group_id: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def record_key(self) -> bytes:
        return WireWriter().string(self.consumer_group_id).string(self.topic).int32(self.partition).to_bytes()

    def record_value(self) -> bytes:
        writer = WireWriter().int16(VERSION)
        return writer.int64(self.upstream_offset).int64(self.downstream_offset).string(self.metadata).to_bytes()

    @classmethod
    def from_record(
        cls, key: bytes | bytearray | memoryview | None, value: bytes | bytearray | memoryview | None
    ) -> Checkpoint:
        """Decode a record of a checkpoints topic; raises `WireFormatError` if it is not one."""
        key_reader = WireReader(key, "checkpoint record key")
        group, topic, partition = key_reader.string(), key_reader.string(), key_reader.int32()
        value_reader = WireReader(value, "checkpoint record value")
        version = value_reader.int16()
        if version != VERSION:
            raise WireFormatError(f"checkpoint record value: unsupported version {version} (only {VERSION} exists)")
        upstream, downstream = value_reader.int64(), value_reader.int64()
        return cls(group, topic, partition, upstream, downstream, value_reader.string())


def is_more_recent(new: Checkpoint, last: Checkpoint | None) -> bool:
    """Whether `new` should be emitted after `last`, the latest checkpoint of the same group and partition."""
    if last is None:
        return True
    if new.upstream_offset < last.upstream_offset:
        return True
    return new.downstream_offset > last.downstream_offset

"""The progress record of a copy task: where the copy of one source partition stands (DESIGN §1.4, §3 step 4).

In exactly-once mode it is written in the same Kafka transaction as the copied records, so the target holds
either both or neither; the next run resumes at `next_upstream` with no gap and no duplicate. In at-least-once
mode it is written after the producer flush, so a crash re-copies at most the unflushed tail.

Topic `mirrorflow-progress<sep><source><sep>internal` on the target (compacted; `progress_topic`), all
integers big-endian and signed, strings as INT16 byte length + UTF-8 (MM2's encoding, MM2-FACTS §2.2):
  key   = source topic STRING, partition INT32        (no version: it is the compaction identity)
  value = version INT16 (= 0), next_upstream INT64, downstream_end INT64, records_copied INT64,
          epoch INT32, timestamp_ms INT64              (38 bytes)
Readers reject other versions rather than guess at their meaning.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mirrorflow.core.errors import MirrorflowError

PROGRESS_FORMAT_VERSION = 0
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_VALUE = struct.Struct(">hqqqiq")
_INT32_MAX = 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def progress_topic(source_alias: str, separator: str = ".") -> str:
    """Target-side progress topic of flow `source_alias`->target; `separator` is the replication policy's
    internal-topic separator (pass "." when `replication.policy.internal.topic.separator.enabled=false`)."""
    if not source_alias:
        raise ValueError("source cluster alias must not be empty")
    return f"mirrorflow-progress{separator}{source_alias}{separator}internal"


@dataclass(frozen=True, slots=True)
class Progress:
    """Committed state of the copy of one source partition.

    next_upstream:  the next upstream offset to copy (the source consumer's position after the last batch).
    downstream_end: the target's next offset after our last write, as known when committing.
    records_copied: cumulative count of records written downstream (dropped records not counted).
    epoch:          attempt counter of the task owning the partition; grows on every (re)start.
    timestamp_ms:   wall-clock time of the commit, epoch milliseconds.
    """

    topic: str
    partition: int
    next_upstream: int
    downstream_end: int
    records_copied: int
    epoch: int
    timestamp_ms: int

    def __post_init__(self) -> None:
        if not self.topic:
            raise ValueError("progress topic must not be empty")
        if not 0 <= self.partition <= _INT32_MAX:
            raise ValueError(f"partition {self.partition} out of INT32 range")
        if not 0 <= self.epoch <= _INT32_MAX:
            raise ValueError(f"epoch {self.epoch} out of INT32 range")
        for name in ("next_upstream", "downstream_end", "records_copied"):
            value = getattr(self, name)
            if not 0 <= value <= _INT64_MAX:
                raise ValueError(f"{name} {value} must be >= 0 and fit INT64")
        if not _INT64_MIN <= self.timestamp_ms <= _INT64_MAX:
            raise ValueError(f"timestamp_ms {self.timestamp_ms} out of INT64 range")


def encode_progress_key(topic: str, partition: int) -> bytes:
    raw = topic.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"topic name of {len(raw)} bytes does not fit an INT16 length")
    return _INT16.pack(len(raw)) + raw + _INT32.pack(partition)


def encode_progress(progress: Progress) -> tuple[bytes, bytes]:
    """(key, value) of the progress record."""
    value = _VALUE.pack(
        PROGRESS_FORMAT_VERSION,
        progress.next_upstream,
        progress.downstream_end,
        progress.records_copied,
        progress.epoch,
        progress.timestamp_ms,
    )
    return encode_progress_key(progress.topic, progress.partition), value


def decode_progress_key(key: bytes) -> tuple[str, int]:
    """(source topic, partition) of a progress record key."""
    if len(key) < 2:
        raise _bad_record("key", key, "too short")
    (size,) = _INT16.unpack_from(key, 0)
    if size < 0 or len(key) < 2 + size + _INT32.size:
        raise _bad_record("key", key, "truncated")
    try:
        topic = key[2 : 2 + size].decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad_record("key", key, "topic is not UTF-8") from e
    (partition,) = _INT32.unpack_from(key, 2 + size)
    return topic, partition


def decode_progress(key: bytes, value: bytes) -> Progress:
    topic, partition = decode_progress_key(key)
    if len(value) < _INT16.size:
        raise _bad_record("value", value, "truncated")
    (version,) = _INT16.unpack_from(value, 0)
    if version != PROGRESS_FORMAT_VERSION:
        raise MirrorflowError(
            f"progress record of {topic}-{partition} has format version {version}; this Mirrorflow reads "
            f"version {PROGRESS_FORMAT_VERSION}: upgrade Mirrorflow"
        )
    if len(value) < _VALUE.size:
        raise _bad_record("value", value, "truncated")
    _, next_upstream, downstream_end, copied, epoch, timestamp_ms = _VALUE.unpack_from(value, 0)
    try:
        return Progress(topic, partition, next_upstream, downstream_end, copied, epoch, timestamp_ms)
    except ValueError as e:
        raise _bad_record("value", value, str(e)) from e


def _bad_record(part: str, data: bytes, why: str) -> MirrorflowError:
    return MirrorflowError(
        f"progress record {part} {data[:48].hex()} is not a Mirrorflow progress record ({why}): only "
        "Mirrorflow may write to the progress topic; delete the stray record so the copy can resume"
    )

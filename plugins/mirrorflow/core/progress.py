"""The progress record of a copy task: where the copy of one source partition stands (docs/design.md §1.4, §3 step 4).

In exactly-once mode it is written in the same Kafka transaction as the copied records, so the target holds
either both or neither; the next run resumes at `next_upstream` with no gap and no duplicate. In at-least-once
mode it is written after the producer flush, so a crash re-copies at most the unflushed tail.

Topic `mirrorflow-progress<sep><source><sep>internal` on the target (compacted; `progress_topic`), all
integers big-endian and signed, strings as INT16 byte length + UTF-8 (MM2's encoding, docs/mm2-reference.md §2.2):
  key   = source topic STRING, partition INT32        (no version: it is the compaction identity)
  value = version INT16 (= 0), next_upstream INT64, downstream_end INT64, records_copied INT64,
          epoch INT32, timestamp_ms INT64              (38 bytes)
Readers reject other versions rather than guess at their meaning; the key and version checks are the
offset-map record's (core/record_codec.py).
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.record_codec import decode_topic_key, decode_versioned_value, encode_topic_key

PROGRESS_FORMAT_VERSION = 0
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
    return encode_topic_key(topic, _INT32.pack(partition))


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
    topic, (partition,) = decode_topic_key(key, _INT32, _bad_record)
    return topic, partition


def decode_progress(key: bytes, value: bytes) -> Progress:
    topic, partition = decode_progress_key(key)
    what = f"progress record of {topic}-{partition}"
    return decode_versioned_value(
        value, _VALUE, PROGRESS_FORMAT_VERSION, what, _bad_record, functools.partial(Progress, topic, partition)
    )


def _bad_record(part: str, data: bytes, why: str) -> MirrorflowError:
    return MirrorflowError(
        f"progress record {part} {data[:48].hex()} is not a Mirrorflow progress record ({why}): only "
        "Mirrorflow may write to the progress topic; delete the stray record so the copy can resume"
    )

"""The progress record of a copy task: where the copy of one source partition stands (docs/design.md §1.4, §3 step 4).

In exactly-once mode it is written in the same Kafka transaction as the copied records, so the target holds
either both or neither; the next run resumes at `next_upstream` with no gap and no duplicate. In at-least-once
mode it is written after the producer flush, so a crash re-copies at most the unflushed tail.

Topic `mirrorflow-progress<sep><source><sep>internal` on the target (compacted; `progress_topic`), all
integers big-endian and signed, strings as INT16 byte length + UTF-8 (MM2's encoding, docs/mm2-reference.md §2.2):
  key   = source topic STRING, partition INT32        (no version: it is the compaction identity)
  value = version INT16 (= 1), next_upstream INT64, downstream_end INT64, records_copied INT64,
          epoch INT32, timestamp_ms INT64, source_topic_id UUID, remote_topic_id UUID      (70 bytes)
          [, settled_slots INT32 [, run_started_ms INT64]]                       (74 or 82 bytes)
A UUID is Kafka's topic ID as 16 raw bytes (KIP-516); all zeros means "not known" (Kafka never assigns the zero
UUID): a broker older than topic IDs, or a record written before they were recorded. The IDs tell a topic that was
deleted and re-created under the same name (a new ID) from the one whose progress this is, whatever its length.

Version 0 (Mirrorflow before topic IDs) is the same value without the two UUIDs (38 bytes). It still decodes, with
unknown IDs; the copy's next commit writes version 1 with the topics' current IDs, which is the whole migration.
`settled_slots` is an optional trailing field of version 1, not a new version: a release that does not know it
reads the 70 bytes it knows and ignores the rest (so a rollback, or an older worker during an upgrade, still
reads every progress), and a record without it reads as 0, "not settled", which is always safe. `run_started_ms`
(when the run that wrote it started) follows it the same way; without it, 0: "not known", and claims are then
ordered by the epoch alone, as before it existed.
Readers reject other versions rather than guess at their meaning; the key and version checks are the
offset-map record's (core/record_codec.py).

In Python a topic ID is the string Kafka prints (`Uuid.toString()`: URL-safe base64 of the 16 bytes, unpadded,
as confluent-kafka's `str(topic_id)` gives it); "" is the unknown ID.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import struct
from dataclasses import dataclass

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.record_codec import decode_topic_key, decode_versioned_value, encode_topic_key

PROGRESS_FORMAT_VERSION = 1
_INT32 = struct.Struct(">i")
_VALUES = {0: struct.Struct(">hqqqiq"), 1: struct.Struct(">hqqqiq16s16s")}
_SETTLED = struct.Struct(">i")  # the optional trailing fields of version 1
_RUN_STARTED = struct.Struct(">q")
_INT16 = struct.Struct(">h")
_NO_ID = bytes(16)
_URL_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
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
    source_topic_id, remote_topic_id: Kafka's IDs of the source topic copied and of the remote topic written,
                    "" when not known (see the module docstring).
    settled_slots:  the slot count of the progress and offset-map topics at which, with this record committed,
                    all of the partition's progress and map state lies in its head slot (`core.state_slots`):
                    a copy start that finds the topics at that count reads the head alone, not the chain below
                    it. 0 when not known (state may lie below: read the whole chain).
    run_started_ms: when the run that wrote the record started, epoch milliseconds (`CopyTask.run_started_ms`);
                    0 when not known, and for an interval copy's record (the failover drain's). It orders the
                    claims of overlapping continuous runs (`copy_claims`).
    """

    topic: str
    partition: int
    next_upstream: int
    downstream_end: int
    records_copied: int
    epoch: int
    timestamp_ms: int
    source_topic_id: str = ""
    remote_topic_id: str = ""
    settled_slots: int = 0
    run_started_ms: int = 0

    def __post_init__(self) -> None:
        if not self.topic:
            raise ValueError("progress topic must not be empty")
        if not 0 <= self.partition <= _INT32_MAX:
            raise ValueError(f"partition {self.partition} out of INT32 range")
        if not 0 <= self.epoch <= _INT32_MAX:
            raise ValueError(f"epoch {self.epoch} out of INT32 range")
        if not 0 <= self.settled_slots <= _INT32_MAX:
            raise ValueError(f"settled_slots {self.settled_slots} out of INT32 range")
        for name in ("next_upstream", "downstream_end", "records_copied"):
            value = getattr(self, name)
            if not 0 <= value <= _INT64_MAX:
                raise ValueError(f"{name} {value} must be >= 0 and fit INT64")
        if not 0 <= self.run_started_ms <= _INT64_MAX:
            raise ValueError(f"run_started_ms {self.run_started_ms} must be >= 0 and fit INT64")
        if not _INT64_MIN <= self.timestamp_ms <= _INT64_MAX:
            raise ValueError(f"timestamp_ms {self.timestamp_ms} out of INT64 range")
        topic_id_bytes(self.source_topic_id)
        topic_id_bytes(self.remote_topic_id)


def topic_id_bytes(topic_id: str) -> bytes:
    """The 16 bytes of a topic ID as Kafka prints it; "" (unknown) is the zero UUID."""
    if not topic_id:
        return _NO_ID
    raw = b""
    if len(topic_id) == 22 and set(topic_id) <= _URL_SAFE:
        try:
            raw = base64.urlsafe_b64decode(topic_id + "==")
        except (binascii.Error, ValueError):
            raw = b""
    if len(raw) != 16 or topic_id_text(raw) != topic_id:
        raise ValueError(f"topic ID {topic_id!r} is not a Kafka topic ID (22 characters of URL-safe base64)")
    if raw == _NO_ID:
        raise ValueError('the zero UUID is not a topic ID; write the unknown ID as ""')
    return raw


def topic_id_text(raw: bytes) -> str:
    """A topic ID as Kafka prints it; the zero UUID (unknown) is ""."""
    if raw == _NO_ID:
        return ""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def encode_progress_key(topic: str, partition: int) -> bytes:
    return encode_topic_key(topic, _INT32.pack(partition))


def encode_progress(progress: Progress) -> tuple[bytes, bytes]:
    """(key, value) of the progress record, in the current format version."""
    value = (
        _VALUES[PROGRESS_FORMAT_VERSION].pack(
            PROGRESS_FORMAT_VERSION,
            progress.next_upstream,
            progress.downstream_end,
            progress.records_copied,
            progress.epoch,
            progress.timestamp_ms,
            topic_id_bytes(progress.source_topic_id),
            topic_id_bytes(progress.remote_topic_id),
        )
        + _SETTLED.pack(progress.settled_slots)
        + _RUN_STARTED.pack(progress.run_started_ms)
    )
    return encode_progress_key(progress.topic, progress.partition), value


def decode_progress_key(key: bytes) -> tuple[str, int]:
    """(source topic, partition) of a progress record key."""
    topic, (partition,) = decode_topic_key(key, _INT32, _bad_record)
    return topic, partition


def decode_progress(key: bytes, value: bytes) -> Progress:
    """A progress record of any version this Mirrorflow reads (version 0 has unknown topic IDs)."""
    topic, partition = decode_progress_key(key)
    what = f"progress record of {topic}-{partition}"
    version = _INT16.unpack_from(value, 0)[0] if len(value) >= _INT16.size else PROGRESS_FORMAT_VERSION
    if version not in _VALUES:
        version = PROGRESS_FORMAT_VERSION  # refused below, naming the version this Mirrorflow writes
    make = functools.partial(Progress if version == 0 else _with_ids, topic, partition)
    decoded = decode_versioned_value(value, _VALUES[version], version, what, _bad_record, make)
    end = _VALUES[version].size
    if version == 1 and len(value) >= end + _SETTLED.size:
        settled = _SETTLED.unpack_from(value, end)[0]
        if settled < 0:
            raise _bad_record("value", value, f"settled_slots {settled} is negative")
        started = 0
        if len(value) >= end + _SETTLED.size + _RUN_STARTED.size:
            started = _RUN_STARTED.unpack_from(value, end + _SETTLED.size)[0]
            if started < 0:
                raise _bad_record("value", value, f"run_started_ms {started} is negative")
        return dataclasses.replace(decoded, settled_slots=settled, run_started_ms=started)
    return decoded


def _with_ids(
    topic: str,
    partition: int,
    next_upstream: int,
    downstream_end: int,
    records_copied: int,
    epoch: int,
    timestamp_ms: int,
    source_id: bytes,
    remote_id: bytes,
) -> Progress:
    return Progress(
        topic,
        partition,
        next_upstream,
        downstream_end,
        records_copied,
        epoch,
        timestamp_ms,
        topic_id_text(source_id),
        topic_id_text(remote_id),
    )


def _bad_record(part: str, data: bytes, why: str) -> MirrorflowError:
    return MirrorflowError(
        f"progress record {part} {data[:48].hex()} is not a Mirrorflow progress record ({why}): only "
        "Mirrorflow may write to the progress topic; delete the stray record so the copy can resume"
    )

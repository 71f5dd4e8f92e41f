"""What one copy range is given and what it reports: plain data, so Spark can ship it and the driver sum it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from mirrorflow.core.transforms import ChainSpec

if TYPE_CHECKING:
    from mirrorflow.config.model import Flow


# The commit interval (`batch_min_ms`) spares light partitions a commit per fetch (44 a second at 500 records/s), each
# read back by every copy start. A loaded partition's commits are spaced by their own round trips, and holding its
# transaction open stalled the copy (one process, 8 x 2,000 records/s: p99 1-5 s, not 0.1 s; docs/benchmarks.md):
# a transaction holding this many records (`mirrorflow.copy.transaction.min.records`) commits once caught up, whatever
# its age. At the default interval the linger applies below ~320 records/s per partition.
LINGER_RECORDS = 32


FIRST_TRANSACTION_MS = 100
"""A continuous run's first transaction with records stays open this long at most (`batch_ms` if shorter): at a run
boundary it carries the backlog of the handover, which at the full `batch_ms` (500 ms) plus its flush kept the
target without a new record for 0.5-1.4 s after the claim at 46k records/s (docs/benchmarks.md "Session 18")."""


def transaction_ms(task: CopyTask, first: bool) -> int:
    """How long the transaction being filled may stay open: `batch_ms`, or at most `FIRST_TRANSACTION_MS` for a
    continuous run's `first` one with records (before it consumed any: a partition whose transforms drop every
    record would otherwise count as never having had one)."""
    return min(task.batch_ms, FIRST_TRANSACTION_MS) if first and task.end is None else task.batch_ms


def lingered(linger_until: float, records: int, linger_records: int) -> bool:
    """Whether a caught-up continuous transaction may commit: it is `batch_min_ms` old (`linger_until`, monotonic), or
    it holds `linger_records` (0: never early)."""
    return 0 < linger_records <= records or time.monotonic() >= linger_until


@dataclass(frozen=True)
class CopyTask:
    """Everything one executor needs for one source partition; plain data so Spark can ship it.

    The client configs hold revealed secrets (executors must connect), so `repr` hides them.
    """

    flow: str
    source: str
    target: str
    topic: str
    partition: int
    remote_topic: str
    end: int | None
    run_seconds: float | None
    exactly_once: bool
    start_at_latest: bool
    transactional_id: str
    progress_topic: str
    offset_map_topic: str
    offset_syncs_topic: str | None
    offset_syncs_on_target: bool
    offset_lag_max: int
    provenance: bool
    timeout_s: float
    batch_records: int = 50000
    batch_ms: int = 500  # the longest a transaction stays open (`mirrorflow.copy.transaction.max.ms`)
    # Continuous: the shortest a transaction holding records stays open (`mirrorflow.copy.transaction.min.ms`),
    # unless it holds `linger_records` (`mirrorflow.copy.transaction.min.records`; 0: the time applies to all).
    batch_min_ms: int = 0
    linger_records: int = LINGER_RECORDS
    batch_bytes: int = 64 * 1024 * 1024  # value bytes a transaction may hold, bounding a task's memory
    # The buffers of this range (see `buffer_settings`); `copy_ranges` divides a Spark task's budget among its ranges.
    memory_bytes: int = 256 * 1024 * 1024
    # What a buffered record costs beyond its bytes (`RECORD_OVERHEAD_BYTES`); 0 counts bytes only (a baseline).
    record_overhead_bytes: int = 512
    # The source reader's isolation: always read_committed in exactly-once mode; at-least-once too unless the
    # operator sets `<source>.consumer.isolation.level = read_uncommitted` (then aborted records are copied).
    read_committed: bool = True
    # The remote topic's `max.message.bytes` when the run was planned: the writer's librdkafka
    # `message.max.bytes` follows it (None: unknown, librdkafka's 1 MB default), unless the operator sets it.
    max_message_bytes: int | None = None
    metrics_topic: str | None = None  # MM2's per-partition metrics go here (best-effort); None: not recorded
    metrics_replication_factor: int = 1
    transforms: ChainSpec | None = None  # None (or no transforms): records are copied as read
    # Kafka's IDs of the source and remote topics seen at planning ("" unknown): the progress records them, and a
    # recorded ID that differs means the topic was deleted and re-created since (`copy_setup.check_identity`).
    source_topic_id: str = ""
    remote_topic_id: str = ""
    # The fewest partitions of the flow's state topics when the run was planned (1: unknown or one): a copy never
    # reads its slots at a smaller count (`copy_slots`), which a broker behind a growth could still answer.
    state_partitions: int = 1
    # When the run that planned this task started (epoch ms; 0: not known, an older release): the claims of
    # overlapping continuous runs are ordered by it, so a run that started earlier never takes a partition from
    # a newer one, whichever fences first (`copy_claims`).
    run_started_ms: int = 0
    source_consumer: Mapping[str, str] = field(default_factory=dict, repr=False)
    target_producer: Mapping[str, str] = field(default_factory=dict, repr=False)
    target_consumer: Mapping[str, str] = field(default_factory=dict, repr=False)
    offset_syncs_producer: Mapping[str, str] = field(default_factory=dict, repr=False)


RECORD_OVERHEAD_BYTES = 512
"""What a record costs beyond its key and value bytes while it waits in a copy's buffers: librdkafka's message
and queue op on both clients, the Python message object and the offsets kept for the open transaction. The
byte budgets below do not see it, so 100-byte records would take several times their budget; each buffer is
therefore also capped in records (`buffer_settings`)."""


class Buffers(NamedTuple):
    """How a range spends `CopyTask.memory_bytes` (`buffer_settings`)."""

    batch_bytes: int
    """Value bytes one transaction may hold."""
    batch_records: int
    """Records one transaction may hold."""
    reader: dict[str, int]
    """librdkafka settings of the source reader (prefetch)."""
    writer: dict[str, int]
    """librdkafka settings of the target writer (records not yet acknowledged)."""


def buffer_settings(task: CopyTask) -> Buffers:
    """How `task.memory_bytes` is spent: a quarter each for the consumer's prefetch queue and the open
    transaction's values, half for the producer's records not yet acknowledged, each counted in bytes and in
    records at `RECORD_OVERHEAD_BYTES` a record (`record_overhead_bytes = 0` counts bytes only). The operator's
    own `<alias>.consumer.*`/`producer.*` settings of these keys still win."""
    quarter_kib = max(task.memory_bytes // 4 // 1024, 1024)
    quarter = quarter_kib * 1024
    reader = {"queued.max.messages.kbytes": quarter_kib}
    writer = {"queue.buffering.max.kbytes": 2 * quarter_kib}
    batch_records = task.batch_records
    if task.record_overhead_bytes > 0:
        records = max(quarter // task.record_overhead_bytes, 1000)
        batch_records = min(batch_records, records)
        # One fetch lands in the prefetch queue whole, however many records it holds: sized for the record cap at
        # 64 bytes a record (the smallest records' batch share), so small records cannot overshoot it.
        reader["fetch.message.max.bytes"] = min(8 * 1024 * 1024, max(1024 * 1024, records * 64))
        reader["queued.min.messages"] = min(100_000, records)
        writer["queue.buffering.max.messages"] = min(100_000, 2 * records)
    return Buffers(min(task.batch_bytes, quarter), batch_records, reader, writer)


@dataclass
class CopyResult:
    """What one range did; summed by the driver into the job summary."""

    topic: str
    partition: int
    remote_topic: str
    start: int
    next_upstream: int
    downstream_end: int
    records: int = 0
    bytes: int = 0
    dropped: int = 0
    transactions: int = 0
    offset_syncs: int = 0
    max_latency_ms: int = 0
    latency_sum_ms: int = 0
    filtered: int = 0  # records transforms dropped (also counted in `dropped`)
    dead_lettered: int = 0  # records a transform failed on, sent to the dead-letter topic (also in `dropped`)
    # records whose key or value looked like a schema registry's wire format but named no schema of the topic's
    # subjects: copied as they were (core/schema_translation.py)
    schema_ids_not_ours: int = 0
    # continuous mode: the next run's copy of this partition fenced this one (its handover), which ended cleanly
    # with what it had committed; the open transaction was aborted and the new owner resumes from the progress
    handed_over: bool = False


def reads_committed(exactly_once: bool, source_consumer: Mapping[str, str]) -> bool:
    """The copy's source isolation. Exactly-once reads committed records only (a transaction on the target cannot
    make an aborted source record right). At-least-once does too by default, so records of a source transaction
    that later aborts never reach the target; `<source>.consumer.isolation.level = read_uncommitted` is honoured
    there, as MM2 honours it: it copies every record written, aborted ones included, and copies records of open
    transactions without waiting for their outcome."""
    if exactly_once:
        return True
    return source_consumer.get("isolation.level", "read_committed").strip().lower() != "read_uncommitted"


def flow_reads_committed(flow: Flow) -> bool:
    """`reads_committed` for a flow. Every read of a source end the copy must reach (the drain's end, the lag,
    where a reset copy starts) uses the copy's own isolation: a read_committed reader never passes the last
    stable offset, so an end taken at the high watermark would wait for every open source transaction."""
    return reads_committed(flow.delivery == "exactly-once", flow.source_consumer.librdkafka())

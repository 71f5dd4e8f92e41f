"""Planning the copy on the driver: one `CopyTask` per replicated source partition.

A range is never split across tasks, so per-partition order holds whatever Spark does. The end offset of an
interval run is the source end seen now (the last stable offset when the copy reads read_committed, as it does
unless an at-least-once flow asks for read_uncommitted, so that the reader can reach it); resume points are not
decided here but by each task after it has fenced older attempts.

Topic identity is looked up here too: one DescribeTopics request per cluster and run gives every task the IDs of
its source and remote topics, which its progress records. That is cheaper than a lookup per task (an admin
client and a round trip for each of thousands of partitions, on executors that otherwise need no admin client),
and as correct where it matters: a task checks the recorded IDs against the planned ones before it reads any
record, a retried Spark task (minutes after planning) asks again (`refresh_identities`), and a topic re-created
after planning gets a new ID that the next run's planning sees (docs/copy.md, "A topic re-created").
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from mirrorflow.config.model import Flow
from mirrorflow.core.offset_map import offset_map_topic
from mirrorflow.core.progress import progress_topic
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.offsets import list_offsets
from mirrorflow.kafka.topics import max_message_bytes, topic_ids
from mirrorflow.replication.copy_task import CopyResult, CopyTask, reads_committed
from mirrorflow.replication.discovery import FlowPlan
from mirrorflow.replication.metrics import metrics_topic
from mirrorflow.replication.slot_groups import pack

IDENTITY_RETRY_S = 10.0  # how long a topic discovery listed may stay unknown to DescribeTopics


@dataclass(frozen=True)
class SourcePartitions:
    """A replicated source topic: its remote name and partition count (from discovery)."""

    topic: str
    remote_topic: str
    partitions: int


def internal_separator(flow: Flow) -> str:
    """The separator MM2 puts in internal-topic names (KIP-949)."""
    return flow.replication_policy_separator if flow.internal_topic_separator_enabled else "."


def transactional_id(flow: Flow, topic: str, partition: int) -> str:
    """Fixed per flow and source partition, so any later attempt fences every earlier one."""
    return f"mirrorflow|{flow.source}->{flow.target}|{topic}|{partition}"


def plan_copy(
    flow: Flow,
    topics: list[SourcePartitions],
    *,
    interval: bool,
    run_seconds: float | None = None,
    end_offsets: Mapping[tuple[str, int], int] | None = None,
    identities: Mapping[str, tuple[str, str]] | None = None,
    size_limits: Mapping[str, int] | None = None,
    state_partitions: int | None = None,
    run_started_ms: int | None = None,
) -> list[CopyTask]:
    """The copy tasks of one run; `interval` copies up to the source end seen now, else runs `run_seconds`.
    `identities` ({source: (its ID, remote ID)}), `size_limits` ({remote: max.message.bytes}) and
    `state_partitions` (the fewest partitions of the state topics): looked up if None. `run_started_ms`: the
    run's start (`CopyTask.run_started_ms`), now if None: planning is the first thing a run does."""
    started_ms = int(time.time() * 1000) if run_started_ms is None else run_started_ms
    exactly_once = flow.delivery == "exactly-once"
    if identities is None:
        identities = planned_identities(flow, topics)
    source_consumer = flow.source_consumer.librdkafka()
    read_committed = reads_committed(exactly_once, source_consumer)
    if interval and end_offsets is None:
        end_offsets = source_ends(flow, topics, read_committed)
    # One describe per run, so each writer can take records as large as its remote topic accepts.
    if size_limits is None:
        size_limits = max_message_bytes(
            admin_client(flow.target_admin.librdkafka()), [t.remote_topic for t in topics], flow.admin_timeout_ms / 1000
        )
    sep = internal_separator(flow)
    if state_partitions is None:
        state_partitions = planned_state_partitions(flow, sep)
    policy = flow.policy()
    syncs_on_target = flow.offset_syncs_topic_location == "target"
    syncs_name = policy.offset_syncs_topic(flow.source if syncs_on_target else flow.target)
    syncs_topic = syncs_name if flow.emit_offset_syncs_enabled else None
    syncs_producer = (flow.target_producer if syncs_on_target else flow.source_producer).librdkafka()
    target_producer, target_consumer = flow.target_producer.librdkafka(), flow.target_consumer.librdkafka()
    tasks = []
    for t in topics:
        for p in range(t.partitions):
            tasks.append(
                CopyTask(
                    flow=flow.name,
                    source=flow.source,
                    target=flow.target,
                    topic=t.topic,
                    partition=p,
                    remote_topic=t.remote_topic,
                    end=end_offsets[(t.topic, p)] if interval and end_offsets is not None else None,
                    run_seconds=None if interval else run_seconds,
                    exactly_once=exactly_once,
                    read_committed=read_committed,
                    max_message_bytes=size_limits.get(t.remote_topic),
                    start_at_latest=source_consumer.get("auto.offset.reset", "earliest") == "latest",
                    transactional_id=transactional_id(flow, t.topic, p),
                    progress_topic=progress_topic(flow.source, sep),
                    offset_map_topic=offset_map_topic(flow.source, sep),
                    offset_syncs_topic=syncs_topic,
                    offset_syncs_on_target=syncs_on_target,
                    offset_lag_max=flow.offset_lag_max,
                    provenance=flow.provenance_headers,
                    timeout_s=flow.admin_timeout_ms / 1000,
                    batch_ms=flow.copy_transaction_max_ms,
                    batch_min_ms=min(flow.copy_transaction_min_ms, flow.copy_transaction_max_ms),
                    linger_records=flow.copy_transaction_min_records,
                    source_consumer=source_consumer,
                    target_producer=target_producer,
                    target_consumer=target_consumer,
                    offset_syncs_producer=syncs_producer,
                    metrics_topic=metrics_topic(flow.source, sep),
                    metrics_replication_factor=flow.checkpoints_topic_replication_factor,
                    transforms=None if flow.transforms.empty else flow.transforms,
                    source_topic_id=identities.get(t.topic, ("", ""))[0],
                    remote_topic_id=identities.get(t.topic, ("", ""))[1],
                    state_partitions=state_partitions,
                    run_started_ms=started_ms,
                )
            )
    return tasks


def source_ends(flow: Flow, topics: list[SourcePartitions], read_committed: bool) -> dict[tuple[str, int], int]:
    """Where an interval run ends: each source partition's end as the copy's reader can reach it."""
    admin = admin_client(flow.source_admin.librdkafka())
    wanted = [(t.topic, p) for t in topics for p in range(t.partitions)]
    timeout_s = flow.admin_timeout_ms / 1000
    return list_offsets(admin, flow.source, wanted, latest=True, read_committed=read_committed, timeout_s=timeout_s)


def planned_state_partitions(flow: Flow, sep: str) -> int:
    """The fewest partitions among the flow's state topics that exist (1 if none does): one metadata request
    each. A copy never reads its slots at a smaller count (`copy_slots`)."""
    names = (progress_topic(flow.source, sep), offset_map_topic(flow.source, sep), metrics_topic(flow.source, sep))
    admin = admin_client(flow.target_admin.librdkafka())
    timeout_s = flow.admin_timeout_ms / 1000
    counts = []
    for name in names:
        found = admin.list_topics(name, timeout=timeout_s).topics.get(name)
        if found is not None and found.error is None and found.partitions:
            counts.append(len(found.partitions))
    return min(counts, default=1)


def planned_identities(flow: Flow, topics: list[SourcePartitions]) -> dict[str, tuple[str, str]]:
    """{source topic: (its topic ID, its remote topic's ID)}, "" where unknown; one request per cluster."""
    if not topics:
        return {}
    timeout_s = flow.admin_timeout_ms / 1000
    source = _ids_of(flow.source_admin.librdkafka(), flow.source, [t.topic for t in topics], timeout_s)
    remote = _ids_of(flow.target_admin.librdkafka(), flow.target, [t.remote_topic for t in topics], timeout_s)
    return {t.topic: (source.get(t.topic, ""), remote.get(t.remote_topic, "")) for t in topics}


def _ids_of(conf: Mapping[str, str], cluster: str, names: list[str], timeout_s: float) -> dict[str, str]:
    """`topic_ids`, asked again for a few seconds about topics the broker does not know yet: discovery listed
    them, and a topic just (re-)created can be missing from a broker's metadata for a moment. Unknown for good
    (deleted since), a topic is left out; its copy fails on its own."""
    admin = admin_client(conf)
    found = topic_ids(admin, cluster, names, timeout_s)
    deadline = time.monotonic() + min(timeout_s, IDENTITY_RETRY_S)
    while len(found) < len(set(names)) and time.monotonic() < deadline:
        time.sleep(0.2)
        found.update(topic_ids(admin, cluster, [n for n in names if n not in found], timeout_s))
    return found


def refresh_identities(tasks: list[CopyTask]) -> list[CopyTask]:
    """The tasks with the topic IDs their clusters report now, for a retried Spark task: a retry starts minutes
    after planning when a topic deleted mid-run failed its first attempt, and a topic re-created meanwhile must
    not be resumed under the IDs planned before (one DescribeTopics per cluster and retried task; first attempts
    keep the planned IDs). An ID unknown now keeps the planned one."""
    if not tasks:
        return tasks
    first = tasks[0]
    source = _ids_of(first.source_consumer, first.source, sorted({t.topic for t in tasks}), first.timeout_s)
    remote = _ids_of(first.target_producer, first.target, sorted({t.remote_topic for t in tasks}), first.timeout_s)
    return [
        replace(
            t,
            source_topic_id=source.get(t.topic) or t.source_topic_id,
            remote_topic_id=remote.get(t.remote_topic) or t.remote_topic_id,
        )
        for t in tasks
    ]


def spread(
    tasks: list[CopyTask], slots: int, most_per_task: int, most_groups: int | None = None
) -> list[list[CopyTask]]:
    """Group copy ranges into Spark tasks: one per slot when partitions outnumber slots (more groups only when a
    group would exceed `most_per_task`), else one range per task. The groups have round-robin's sizes and keep
    the partitions of one topic spread over them; within that, ranges whose state shares a slot go together, so
    that the task fetches the slot once (`slot_groups`, which argues the order). `most_groups` (a continuous
    copy's cores) wins over `most_per_task`: a group beyond the cores would wait, copying nothing, until another
    one's whole run has ended."""
    if not tasks:
        return []
    groups = min(len(tasks), max(slots, 1, -(-len(tasks) // max(most_per_task, 1))))
    if most_groups is not None:
        groups = max(1, min(groups, most_groups))
    return pack(tasks, groups)


def spread_quiet(
    tasks: list[CopyTask],
    quiet: set[tuple[str, int]],
    slots: int,
    most_per_task: int,
    most_groups: int | None = None,
) -> list[list[CopyTask]]:
    """`spread` for a continuous copy that knows its quiet partitions (`copy_quiet`): they share one Spark task
    (a thread each, nearly no CPU), and the busy ones spread over the other slots. An idle flow then holds one
    slot, not one per `most_per_task` partitions. With fewer than two slots nothing is set aside: the quiet
    task would wait for a core behind the busy one for the whole run."""
    cores = min(slots, most_groups) if most_groups is not None else slots
    idle = [t for t in tasks if (t.topic, t.partition) in quiet]
    busy = [t for t in tasks if (t.topic, t.partition) not in quiet]
    if not idle or cores < 2:
        return spread(tasks, slots, most_per_task, most_groups)
    if not busy:
        return [idle]
    rest = None if most_groups is None else most_groups - 1
    return [*spread(busy, slots - 1, most_per_task, rest), idle]


def summarise(results: list[CopyResult]) -> dict[str, object]:
    """The job summary: totals plus one line per partition range (JSON-friendly)."""
    records = sum(r.records for r in results)
    latency_sum = sum(r.latency_sum_ms for r in results)
    return {
        "records": records,
        "bytes": sum(r.bytes for r in results),
        "dropped": sum(r.dropped for r in results),
        "filtered": sum(r.filtered for r in results),
        "dead_lettered": sum(r.dead_lettered for r in results),
        "schema_ids_not_ours": sum(r.schema_ids_not_ours for r in results),
        "transactions": sum(r.transactions for r in results),
        "offset_syncs": sum(r.offset_syncs for r in results),
        "handed_over": sum(1 for r in results if r.handed_over),
        "max_latency_ms": max((r.max_latency_ms for r in results), default=0),
        "avg_latency_ms": round(latency_sum / records, 1) if records else 0.0,
        "ranges": [
            {
                "topic": r.topic,
                "partition": r.partition,
                "remote_topic": r.remote_topic,
                "start": r.start,
                "next_upstream": r.next_upstream,
                "downstream_end": r.downstream_end,
                "records": r.records,
            }
            for r in sorted(results, key=lambda r: (r.topic, r.partition))
        ],
    }


def idle_counts(groups: list[list[tuple[str, int]]], results: list[CopyResult]) -> dict[str, int]:
    """How many partitions copied nothing this run, and how many Spark tasks (each holding a core slot for a
    continuous run's whole length) had only such partitions: what idle partitions cost in slots."""
    busy = {(r.topic, r.partition) for r in results if r.records}
    idle_tasks = sum(1 for group in groups if group and not any(tp in busy for tp in group))
    idle_partitions = sum(1 for r in results if not r.records)
    return {"idle_partitions": idle_partitions, "idle_spark_tasks": idle_tasks}


def totals_line(summary: dict[str, object]) -> str:
    """What the job prints (it lands in the Airflow task log): the totals on one JSON line, the same size at 10
    or 100,000 partitions. The per-partition lines go only to `--summary-file` (a continuous flow's log would
    otherwise grow by ~2 MB per run at 10,000 partitions)."""
    ranges = summary.get("ranges")
    totals = {k: v for k, v in summary.items() if k != "ranges"}
    if isinstance(ranges, list):
        totals["partitions"] = len(ranges)
        totals["topics"] = len({r.get("topic") for r in ranges if isinstance(r, dict)})
    return json.dumps(totals, sort_keys=True)


def copyable(plan: FlowPlan) -> list[SourcePartitions]:
    """The partitions that can be copied now: those whose remote partition exists (topic sync creates the rest)."""
    return [
        SourcePartitions(t.topic, t.remote_topic, min(t.partitions, t.remote_partitions))
        for t in plan.replicated()
        if t.remote_partitions
    ]

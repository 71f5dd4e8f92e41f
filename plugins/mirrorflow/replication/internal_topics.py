"""The internal topics a flow needs (docs/mm2-reference.md §2.1), all compacted with one partition:

* `heartbeats` on the target, RF `heartbeats.topic.replication.factor`;
* `<source>.checkpoints.internal` on the target, RF `checkpoints.topic.replication.factor`;
* `mm2-offset-syncs.<target>.internal` on the source (`offset-syncs.topic.location=source`, the default), or
  `mm2-offset-syncs.<source>.internal` on the target (location `target`), RF `offset-syncs.topic.replication.factor`;
* Mirrorflow's `mirrorflow-progress.<source>.internal`, `mirrorflow-offset-map.<source>.internal` and
  `mirrorflow-metrics.<source>.internal` on the target, RF `checkpoints.topic.replication.factor`. These three
  are the flow's state topics and have one partition per slot (`core.state_slots`): a power of two sized from
  the flow's partitions when the cycle knows them (`flow_state_partitions`), grown by the same rule when the
  flow outgrows them (never shrunk: Kafka cannot). Topics of older versions have one partition and grow too:
  each copy moves its partition's state to its new slot at its first commit. They also get segment settings
  (`STATE_TOPIC_CONFIGS`), set on older versions' topics too unless the topic sets the key itself to anything
  but a previous release's default.

Names come from the policy (a custom separator applies when
`replication.policy.internal.topic.separator.enabled`, the default); no offset-syncs topic when
`emit.offset-syncs.enabled=false`. As in MM2, a topic that exists already, or that we may not create
(authorization), counts as present.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from mirrorflow.config.model import Flow
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import offset_map_topic
from mirrorflow.core.progress import progress_topic
from mirrorflow.core.state_slots import check_count, flow_state_partitions
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.topics import (
    REFUSALS,
    VALUE_REFUSALS,
    ConfigChange,
    ConfigValue,
    alter_topic_configs,
    await_leaders,
    create_compacted_topic,
    create_partitions,
    describe_topic_configs,
    list_topic_partitions,
)
from mirrorflow.replication.flow_clients import Admin, FlowClients
from mirrorflow.replication.flow_rules import FlowRules
from mirrorflow.replication.metrics import metrics_topic

log = logging.getLogger(__name__)

Side = Literal["source", "target"]


@dataclass(frozen=True)
class InternalTopic:
    name: str
    cluster: str
    side: Side
    purpose: str
    replication_factor: int
    partitions: int = 1


@dataclass(frozen=True)
class InternalTopicsReport:
    flow: str
    dry_run: bool
    created: tuple[InternalTopic, ...]
    """Created by this call (or, in a dry run, that would be)."""
    present: tuple[str, ...]
    """Already there (or created concurrently, or not ours to create for lack of authorization)."""
    grown: tuple[tuple[str, int, int], ...] = ()
    """State topics given more partitions by this call (or, in a dry run, that would be): (name, before, after)."""
    configured: tuple[tuple[str, str, str], ...] = ()
    """Existing internal topics given settings by this call (or, in a dry run, that would be): (name, key, value);
    `STATE_TOPIC_CONFIGS` on state topics, `cleanup.policy=compact` on any left at the broker's default."""


STATE_PURPOSES = frozenset({"progress", "offset-map", "metrics"})

STATE_TOPIC_CONFIGS: dict[str, str] = {
    "segment.ms": "120000",
    "segment.bytes": str(16 * 1024 * 1024),
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": "3600000",
    "min.compaction.lag.ms": "300000",
    "message.timestamp.type": "LogAppendTime",
}
"""Segment settings of the state topics. A copy start reads its slots to their ends, and the log cleaner never compacts
a partition's active segment: with the broker's defaults (1 GiB, 7 days) a start would read every record ever written
to its slots (200,000 transactions: 800,000 records; docs/offsets.md). Rolling every 2 minutes or 16 MiB, and
cleaning once a tenth of the log is dirty, bounds a start's read to about the last 7 minutes of its slots' writes
(the open segment, and `min.compaction.lag.ms` below, plus the cleaner's 15 s backoff) plus the live state and what
the cleaner keeps for `delete.retention.ms` after it passed: tombstones and the commit marker of every exactly-once
transaction (about 80 bytes each on disk, fetched by every start). One hour instead of Kafka's 24 h keeps those to an
hour of commits; a long-running reader that tails the state topics reads them again from their start after half of
that without a read (`STATE_TAIL_MAX_GAP_S`), so it never misses a tombstone the cleaner dropped: a tombstone written
just after its last read stays at least `min.compaction.lag.ms` + `delete.retention.ms`, more than that half plus a
read, whatever the lag. Lowering `delete.retention.ms` below an hour on a state topic by hand breaks that guarantee.

`min.compaction.lag.ms` keeps a record out of the cleaner's reach until it is that old, also as the newer record that
would make an older one go: a reader takes each partition's end and then fetches up to it, and a record whose key is
written again beyond that end could otherwise be cleaned away before the fetch reaches it, so the reader would find the
key in neither place (a tail run missing: offsets translated past copies, labelled exact; found by review,
`tests/replication/test_state_cleaner_race.py`). So the lag must exceed the longest time from a read taking its ends to
its fetch reaching the last record below them. That time is the watermark requests (one per partition, taken in spans of
`compacted_log.ENDS_SPAN_S` that are each fetched before the next: a whole-flow read of 4,096 slots asks them one round
trip after the other, 3.4 minutes at 50 ms before its first fetch when it took every end first, found by review), the
wait for transactions open below the ends (their coordinator aborts a copy's within its 60 s `transaction.timeout.ms`
plus a 10 s check; a read that makes no progress for `OPEN_TRANSACTION_WAIT_S`, 90 s, fails instead of answering), and
the bytes themselves (a copy start's head slots: a few MB, under a second; a whole-flow read: the flow's live state and
its tail). 5 minutes is over three times the 90 s wait. The lag is measured on the records' timestamps, so the broker
stamps them (`LogAppendTime`): with the writers' clocks (`CreateTime`) a copy whose clock ran behind the broker's took
its skew off that margin, and a skew of the lag less a read's window (3.5 minutes) reopened the race (found by review,
`tests/kafka/test_log_reader_cleaner.py`); the one reader of their timestamps, the job-summary search in the metrics
topic (`kafka/tail_record.py`), compares them with the Airflow worker's clock, which a broker's serves as well as a
Spark driver's. A whole-flow read can only outgrow it when the flow writes its state nearly as fast as a reader reads
it: the bytes below the ends are the live state plus (lag + segment.ms) of writes, and a read that cannot keep ahead of
that would not end anyway. `segment.ms` adds to every start's read but not to the guarantee; below 2 minutes the rolls
(a segment's files, and a cleaning of each written partition per roll, by one cleaner thread per broker) would cost more
than the tail they save.

Until session 15 the times were 10 min (`segment.ms`) and 15 min (the lag): a tail of 25 minutes
(`PREVIOUS_STATE_TOPIC_CONFIGS`).

A cluster that refuses these settings (a policy, or no permission to describe or alter configs) gets its state topics
without them, with a warning. A value the topic sets itself (an operator's `kafka-configs --alter`) is kept, unless it
is a previous release's default (`PREVIOUS_STATE_TOPIC_CONFIGS`): those are updated. MM2's topics (heartbeats,
checkpoints, offset syncs) keep the broker's defaults, as MM2 leaves them."""

PREVIOUS_STATE_TOPIC_CONFIGS: dict[str, frozenset[str]] = {
    "segment.ms": frozenset({"600000"}),
    "min.compaction.lag.ms": frozenset({"900000"}),
}
"""Values of `STATE_TOPIC_CONFIGS` keys that earlier releases set on the state topics they created or configured
(sessions 13 and 14), per key. They are topic-level settings like an operator's own, so the topic step tells them
apart by value: one equal to an earlier default is taken for ours and set to today's. An operator who chose exactly
that value by hand has it replaced (`plan` shows it first); any other value stays."""

STATE_TAIL_MAX_GAP_S = int(STATE_TOPIC_CONFIGS["delete.retention.ms"]) / 1000 / 2
"""The longest a tailing reader of the state topics goes on from where it stopped (`CompactedTail.max_gap_s`)."""


def heartbeats_topic(flow: Flow, rules: FlowRules | None = None) -> InternalTopic:
    policy = (rules or FlowRules.of(flow)).policy
    return InternalTopic(
        policy.heartbeats_topic(), flow.target, "target", "heartbeats", flow.heartbeats_topic_replication_factor
    )


def offset_syncs_topic(flow: Flow, rules: FlowRules | None = None) -> InternalTopic | None:
    """Where MM2 writes offset syncs for this flow: named after the *other* cluster's alias."""
    if not flow.emit_offset_syncs_enabled:
        return None
    policy = (rules or FlowRules.of(flow)).policy
    rf = flow.offset_syncs_topic_replication_factor
    if flow.offset_syncs_topic_location == "target":
        return InternalTopic(policy.offset_syncs_topic(flow.source), flow.target, "target", "offset-syncs", rf)
    return InternalTopic(policy.offset_syncs_topic(flow.target), flow.source, "source", "offset-syncs", rf)


def flow_internal_topics(
    flow: Flow, rules: FlowRules | None = None, *, source_partitions: int = 0
) -> tuple[InternalTopic, ...]:
    """The flow's internal topics; the state topics sized for `source_partitions` (0: unknown, the minimum)."""
    rules = rules or FlowRules.of(flow)
    slots = flow_state_partitions(source_partitions, flow.state_partitions_max)
    sep = rules.internal_separator
    rf = flow.checkpoints_topic_replication_factor
    topics = [
        heartbeats_topic(flow, rules),
        InternalTopic(rules.policy.checkpoints_topic(flow.source), flow.target, "target", "checkpoints", rf),
    ]
    syncs = offset_syncs_topic(flow, rules)
    if syncs is not None:
        topics.append(syncs)
    topics.append(InternalTopic(progress_topic(flow.source, sep), flow.target, "target", "progress", rf, slots))
    topics.append(InternalTopic(offset_map_topic(flow.source, sep), flow.target, "target", "offset-map", rf, slots))
    topics.append(InternalTopic(metrics_topic(flow.source, sep), flow.target, "target", "metrics", rf, slots))
    return tuple(topics)


def ensure_internal_topics(
    flow: Flow, clients: FlowClients, topics: tuple[InternalTopic, ...], *, dry_run: bool = False
) -> InternalTopicsReport:
    created: list[InternalTopic] = []
    present: list[str] = []
    grown: list[tuple[str, int, int]] = []
    configured: list[tuple[str, str, str]] = []
    for side in ("source", "target"):
        wanted = [t for t in topics if t.side == side]
        if not wanted:
            continue
        admin = clients.admin(side)
        existing = list_topic_partitions(admin, clients.alias(side), clients.timeout_s)
        made: dict[str, int] = {}
        first_new: dict[str, int] = {}
        for topic in wanted:
            if topic.name in existing:
                present.append(topic.name)
                growth = _grow(admin, topic, existing[topic.name], dry_run, clients.timeout_s)
                made.update({name: after for name, _before, after in growth})
                first_new.update({name: before for name, before, _after in growth})
                grown += growth
            elif dry_run or create_compacted_topic(
                admin,
                topic.cluster,
                topic.name,
                topic.replication_factor,
                clients.timeout_s,
                topic.partitions,
                topic_configs(topic),
            ):
                created.append(topic)
                made[topic.name] = topic.partitions
            else:
                present.append(topic.name)
        if not dry_run:
            await_leaders(admin, clients.alias(side), made, clients.timeout_s, first_new)
        old = [t for t in wanted if t.name in existing]
        configured += configure_state_topics(admin, clients.alias(side), old, dry_run, clients.timeout_s)
    return InternalTopicsReport(flow.name, dry_run, tuple(created), tuple(present), tuple(grown), tuple(configured))


def topic_configs(topic: InternalTopic) -> dict[str, str]:
    """The configs a topic is created with, beyond `cleanup.policy=compact`."""
    return dict(STATE_TOPIC_CONFIGS) if topic.purpose in STATE_PURPOSES else {}


def configure_state_topics(
    admin: Admin, cluster: str, topics: list[InternalTopic], dry_run: bool, timeout_s: float
) -> list[tuple[str, str, str]]:
    """Set `STATE_TOPIC_CONFIGS` on existing state topics that do not set a key themselves (topics created by an
    older version, or by hand) or set it to a previous release's default, and `cleanup.policy=compact` on every
    existing internal topic left at the broker's default (`_check_cleanup`); returns (topic, key, value) for each
    key set (or, in a dry run, to be set)."""
    try:
        return _configure(admin, cluster, topics, dry_run, timeout_s)
    except KafkaOperationError as err:
        if err.code not in REFUSALS:
            raise
        log.warning(
            "could not check or set the settings of the internal topics %s on '%s' (%s): copies start slower as "
            "the state topics grow; set them by hand (docs/offsets.md) or grant DescribeConfigs and AlterConfigs",
            ", ".join(t.name for t in topics),
            cluster,
            err,
        )
        return []


def _configure(
    admin: Admin, cluster: str, topics: list[InternalTopic], dry_run: bool, timeout_s: float
) -> list[tuple[str, str, str]]:
    described = describe_topic_configs(admin, cluster, [t.name for t in topics], timeout_s) if topics else {}
    by_name = {t.name: t for t in topics}
    changes: dict[str, list[ConfigChange]] = {}
    for name, entries in described.items():
        wanted = {CLEANUP_POLICY: "compact"}
        if name in by_name and by_name[name].purpose in STATE_PURPOSES:
            wanted.update(STATE_TOPIC_CONFIGS)
        _check_cleanup(name, by_name.get(name), entries.get(CLEANUP_POLICY), cluster)
        for key, value in wanted.items():
            if _ours_to_set(entries.get(key), key, value):
                changes.setdefault(name, []).append(ConfigChange(key, "SET", value))
    if changes and not dry_run:
        try:
            alter_topic_configs(admin, cluster, changes, timeout_s)
        except KafkaOperationError as err:
            if err.code not in VALUE_REFUSALS:
                raise  # no permission: `configure_state_topics` warns once
            changes = _one_by_one(admin, cluster, changes, timeout_s)
    return [(name, c.name, c.value or "") for name, cs in sorted(changes.items()) for c in cs]


CLEANUP_POLICY = "cleanup.policy"


def _check_cleanup(name: str, topic: InternalTopic | None, entry: ConfigValue | None, cluster: str) -> None:
    """An internal topic must be compacted: one a write created before the topic step (the broker's
    auto-creation, with its default `delete`) is set to compact by `_configure`; one whose own setting deletes
    old records is the operator's, and for a state topic that loses the progress of partitions idle longer than
    its retention (their copy would start again: duplicates), so the flow refuses it, as Kafka Connect refuses
    an offsets topic that is not compacted. MM2's topics only get a warning (MM2 does not look)."""
    policies = (entry.value or "").replace(" ", "").split(",") if entry is not None else ["compact"]
    if entry is None or entry.source != "DYNAMIC_TOPIC_CONFIG" or policies == ["compact"]:
        return
    state = topic is not None and topic.purpose in STATE_PURPOSES
    fix = f"kafka-configs --alter --entity-type topics --entity-name {name} --add-config cleanup.policy=compact"
    if state and "compact" not in policies:
        raise MirrorflowError(
            f"the state topic '{name}' on '{cluster}' has cleanup.policy={entry.value}: the broker would delete the "
            f"copy's progress and offset map with old segments, and copies would start over (duplicates). Make it "
            f"compacted ({fix})"
        )
    log.warning(
        "internal topic '%s' on '%s' has cleanup.policy=%s, not compact: records it needs can be deleted with old "
        "segments (%s)",
        name,
        cluster,
        entry.value,
        fix,
    )


def _one_by_one(
    admin: Admin, cluster: str, changes: dict[str, list[ConfigChange]], timeout_s: float
) -> dict[str, list[ConfigChange]]:
    """After a refusal of the whole set: each key on its own, so that one the cluster refuses (a managed cluster's
    minimum `segment.ms`) does not keep the others off, `min.compaction.lag.ms` first of all (without it a topic
    that `create_compacted_topic` had to create bare races its readers at every roll); what was set."""
    done: dict[str, list[ConfigChange]] = {}
    for name, topic_changes in changes.items():
        for change in topic_changes:
            try:
                alter_topic_configs(admin, cluster, {name: [change]}, timeout_s)
            except KafkaOperationError as err:
                if err.code not in VALUE_REFUSALS:
                    raise
                log.warning("'%s' refused %s=%s on state topic '%s': %s", cluster, change.name, change.value, name, err)
                continue
            done.setdefault(name, []).append(change)
    return done


def _ours_to_set(entry: ConfigValue | None, key: str, value: str) -> bool:
    """Whether the topic step sets `key` to `value`: missing, or left to the broker's default and differing, or a
    previous release's default (`PREVIOUS_STATE_TOPIC_CONFIGS`); never a value the topic set itself otherwise."""
    if entry is None:
        return True
    if entry.value == value:
        return False
    return entry.source != "DYNAMIC_TOPIC_CONFIG" or entry.value in PREVIOUS_STATE_TOPIC_CONFIGS.get(key, frozenset())


def _grow(
    admin: Admin, topic: InternalTopic, count: int, dry_run: bool, timeout_s: float
) -> list[tuple[str, int, int]]:
    """Grow a state topic to its wanted partitions (from a power of two: the slot rules need it). The caller then
    waits until the metadata shows them (`await_leaders`): the copy planned next records the count as the least
    its tasks may read their slots at (`copy_slots`), and a count from before the growth would hide their heads."""
    if topic.purpose not in STATE_PURPOSES or count >= topic.partitions:
        return []
    check_count(count, topic.name)
    if not dry_run:
        create_partitions(admin, topic.cluster, {topic.name: topic.partitions}, timeout_s)
    return [(topic.name, count, topic.partitions)]


def create_internal_topics(
    flow: Flow,
    clients: FlowClients,
    *,
    dry_run: bool = False,
    rules: FlowRules | None = None,
    source_partitions: int = 0,
) -> InternalTopicsReport:
    """Create whatever of `flow_internal_topics(flow)` is missing, and grow the state topics the flow outgrew."""
    wanted = flow_internal_topics(flow, rules, source_partitions=source_partitions)
    return ensure_internal_topics(flow, clients, wanted, dry_run=dry_run)

"""The state-topic side of `bench_map_growth`: each variant's segment settings, set at topic level; what a copy's
start-up reads of its state, counted in the copy's own process; and how far the log cleaner got, read from the
target broker's log directory (the bench's clusters are local, so their files are at hand).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from mirrorflow.config.model import Flow
from mirrorflow.core.offset_map import decode_segment_key
from mirrorflow.core.progress import decode_progress_key
from mirrorflow.core.state_slots import head_slot
from mirrorflow.kafka import compacted_log
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.topics import ConfigChange, alter_topic_configs, describe_topic_configs
from mirrorflow.replication import copy_slots
from mirrorflow.replication.copy_task import CopyTask
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.internal_topics import STATE_PURPOSES, STATE_TOPIC_CONFIGS, flow_internal_topics

BROKER_DEFAULTS = {
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "min.cleanable.dirty.ratio": "0.5",
    "delete.retention.ms": "86400000",
    "min.compaction.lag.ms": "0",
}
"""The broker's defaults for the keys of `STATE_TOPIC_CONFIGS`: what the state topics had before them."""
ACCELERATED = ("segment.ms", "min.compaction.lag.ms", "delete.retention.ms")
"""The settings that are times: scaled together, so that an accelerated run keeps their ratios. Scaling
segment.ms alone left min.compaction.lag.ms at 15 minutes, and a run of minutes then never compacted anything."""
CLEANER_BACKOFF_S = 15.0
"""`log.cleaner.backoff.ms` (the broker's default, which the local clusters keep): how long the cleaner sleeps
when no log is due."""

Record = tuple[int, int, bytes | None, bytes | None, int]


def accelerated(segment_ms: int) -> tuple[dict[str, str], float]:
    """The product's time settings (`ACCELERATED`) scaled by the factor that takes its segment.ms to
    `segment_ms`, and that factor: the rest of `STATE_TOPIC_CONFIGS` (sizes, the dirty ratio) stays as shipped."""
    factor = segment_ms / int(STATE_TOPIC_CONFIGS["segment.ms"])
    return {key: str(round(int(STATE_TOPIC_CONFIGS[key]) * factor)) for key in ACCELERATED}, factor


def set_state_configs(flow: Flow, clients: FlowClients, configs: dict[str, str]) -> dict[str, str]:
    """Sets `configs` at topic level on the flow's state topics (incremental alter configs, as an operator's
    `kafka-configs --alter` would: `configure_state_topics` keeps such values); returns the effective values of
    the keys of `STATE_TOPIC_CONFIGS` on the offset-map topic, as the broker describes them."""
    names = [t.name for t in flow_internal_topics(flow) if t.purpose in STATE_PURPOSES]
    admin = clients.admin("target")
    if configs:
        changes = {name: [ConfigChange(k, "SET", v) for k, v in configs.items()] for name in names}
        alter_topic_configs(admin, flow.target, changes, clients.timeout_s)
    described = describe_topic_configs(admin, flow.target, names, clients.timeout_s)
    entries = next(v for name, v in described.items() if "offset-map" in name)
    return {key: str(entries[key].value) for key in STATE_TOPIC_CONFIGS}


@dataclass
class TopicRead:
    """What reads of one state topic delivered: every record (tombstones included) and the task's own keys as
    compaction leaves them (latest per key, no tombstones)."""

    records: int = 0
    tombstones: int = 0
    size: int = 0
    live: dict[bytes, int] = field(default_factory=dict)
    """key -> key + value bytes, for the task's partition."""


class ReadCounter:
    """Counts every record `copy_slots` reads (`load_state` reads through it), by topic. Installed in the copy's
    process by replacing `copy_slots.read_to_end` with a wrapper that tallies what it yields."""

    def __init__(self, task: CopyTask) -> None:
        self.reads: dict[str, TopicRead] = {}
        self._ours = (task.topic, task.partition)
        self._decoders: dict[str, Callable[[bytes], tuple[Any, ...]]] = {
            task.progress_topic: decode_progress_key,
            task.offset_map_topic: decode_segment_key,
        }

    def install(self) -> None:
        original = compacted_log.read_to_end  # what copy_slots imported

        def counting(cluster: str, conf: Any, topic: str, **options: Any) -> Iterator[Record]:
            tally = self.reads.setdefault(topic, TopicRead())
            for record in original(cluster, conf, topic, **options):
                self._add(tally, topic, record)
                yield record

        copy_slots.read_to_end = counting  # type: ignore[attr-defined]

    def _add(self, tally: TopicRead, topic: str, record: Record) -> None:
        key, value = record[2], record[3]
        tally.records += 1
        tally.tombstones += value is None
        tally.size += len(key or b"") + len(value or b"")
        decode = self._decoders.get(topic)
        if key is None or decode is None or tuple(decode(key)[:2]) != self._ours:
            return
        if value is None:
            tally.live.pop(key, None)
        else:
            tally.live[key] = len(key) + len(value)

    def reset(self) -> None:
        self.reads = {}

    def of(self, topic: str) -> TopicRead:
        return self.reads.get(topic, TopicRead())


@dataclass(frozen=True)
class Broker:
    """The target cluster: its bootstrap and its log directory, and how long to wait for its cleaner."""

    bootstrap: str
    data_dir: Path
    wait_bound_s: float


@dataclass(frozen=True)
class LogOnDisk:
    """One partition's log as the broker's files show it: the active segment is never cleaned; below it, what
    the cleaner has not reached is dirty."""

    segments: int
    active_base: int
    clean_bytes: int
    dirty_bytes: int
    size: int
    """Bytes of all its segments, the active one included."""

    def settled(self, ratio: float) -> bool:
        """Nothing the cleaner would clean now (`min.cleanable.dirty.ratio` is `ratio`)."""
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes == 0 or self.dirty_bytes / total < ratio


def log_on_disk(data_dir: Path, topic: str, partition: int) -> LogOnDisk:
    """The partition's segments in `data_dir` (the broker's log.dirs) and its cleaner checkpoint; read again if
    the cleaner swaps files while they are listed."""
    folder = data_dir / f"{topic}-{partition}"
    for _ in range(10):
        try:
            sizes = sorted((int(p.name[:-4]), p.stat().st_size) for p in folder.iterdir() if _segment(p.name))
            break
        except FileNotFoundError:
            time.sleep(0.1)
    else:
        raise RuntimeError(f"{folder}: the segment files keep changing")
    active = sizes[-1][0]
    first_dirty = max(_cleaner_checkpoint(data_dir).get((topic, partition), 0), sizes[0][0])
    clean = sum(size for base, size in sizes if base < first_dirty and base != active)
    dirty = sum(size for base, size in sizes if first_dirty <= base < active)
    return LogOnDisk(len(sizes), active, clean, dirty, sum(size for _base, size in sizes))


def _segment(name: str) -> bool:
    return name.endswith(".log") and name[:-4].isdigit()


def _cleaner_checkpoint(data_dir: Path) -> dict[tuple[str, int], int]:
    """`cleaner-offset-checkpoint`: a version line, a count line, then `topic partition first-dirty-offset`."""
    path = data_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return {}
    found: dict[tuple[str, int], int] = {}
    for line in path.read_text().splitlines()[2:]:
        topic, partition, offset = line.rsplit(" ", 2)
        found[(topic, int(partition))] = int(offset)
    return found


def head_partitions(task: CopyTask) -> list[tuple[str, int]]:
    """The head slots of the task's progress and offset-map topics: what its start-up reads once settled."""
    head = head_slot(task.topic, task.partition, task.state_partitions)
    return [(task.progress_topic, head), (task.offset_map_topic, head)]


def await_cleaner(data_dir: Path, watched: list[tuple[str, int, float]], bound_s: float) -> float:
    """Waits until none of the `watched` partitions (topic, partition, min.cleanable.dirty.ratio) has anything
    the cleaner would clean, or `bound_s` has passed; the seconds waited."""
    began = time.monotonic()
    while time.monotonic() - began < bound_s:
        if all(log_on_disk(data_dir, t, p).settled(ratio) for t, p, ratio in watched):
            break
        time.sleep(1)
    return time.monotonic() - began


def on_disk(bootstrap: str, data_dir: Path, partitions: list[tuple[str, int]]) -> list[tuple[int, int, int]]:
    """(segments, offsets in the active segment: records and commit markers, bytes of all segments) of each
    partition."""
    consumer = Consumer(with_logger({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}"}))
    try:
        found = []
        for topic, p in partitions:
            log = log_on_disk(data_dir, topic, p)
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)
            found.append((log.segments, high - log.active_base, log.size))
        return found
    finally:
        consumer.close()

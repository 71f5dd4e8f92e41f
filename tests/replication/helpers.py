"""Helpers of the replication tests on real brokers: the `A->B` flow of a test config, copy tasks and their
internal topics, source group commits, and the offset map as stored. The map is read back independently of the
code under test (only the record codecs are shared), so a test compares the copy with what the brokers hold."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from tests.kafka_helpers import create_topic, read_partition

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.offset_map import OffsetMap, Segment, decode_segment, decode_segment_key
from mirrorflow.core.progress import Progress, decode_progress
from mirrorflow.core.state_slots import head_slot
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.runtime import kafka_runtime
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.flow_cycle import run_control_plane

# Records carry old timestamps; without this the brokers' time-based retention would delete them mid-test.
KEEP_FOREVER = {"retention.ms": "-1"}
FAULT_KEYS = ("lost", "duplicated", "out_of_order", "misplaced", "unexpected")
"""The audit's counts of what replication got wrong: all 0 in exactly-once mode."""
PROGRESS_TOPIC = "mirrorflow-progress.A.internal"
MAP_TOPIC = "mirrorflow-offset-map.A.internal"


def a_to_b(write_config: Callable[..., MirrorConfig], body: str = "", **keys: str) -> Flow:
    """The enabled `A->B` flow with `A->B.<key> = <value>` per keyword (dotted keys via `**{...}`), then `body`."""
    lines = "".join(f"A->B.{key} = {value}\n" for key, value in keys.items())
    return write_config(f"A->B.enabled = true\n{lines}{body}").flow("A->B")


def failover_config(
    write_config: Callable[..., MirrorConfig],
    admin: AdminClient,
    topic: str,
    partitions: int,
    groups: str,
    body: str = "",
) -> MirrorConfig:
    """`topic` created on A, and a config mirroring it and the `groups` regex from A to B (then `body`).
    Heartbeats are not replicated: the session clusters are shared, and other tests' heartbeats must not count
    in a drain."""
    create_topic(admin, topic, partitions)
    config: MirrorConfig = write_config(
        f"A->B.enabled = true\nA->B.topics = {topic}\nA->B.groups = {groups}\n"
        "A->B.heartbeats.replication.enabled = false\n" + body
    )
    return config


def copy_tasks(flow: Flow, topic: str, partitions: int = 1, **changes: Any) -> list[CopyTask]:
    """The interval tasks copying `topic` to `A.<topic>`, each with `changes` applied (fields by name, so new
    fields of CopyTask keep their defaults)."""
    tasks = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", partitions)], interval=True)
    return [replace(task, **changes) for task in tasks]


def copy_all(flow: Flow, topic: str, partitions: int = 1) -> int:
    """Run every interval task of `topic` in this process; the number of records copied."""
    return sum(copy_range(task).records for task in copy_tasks(flow, topic, partitions))


def create_copy_topics(
    admin: Callable[..., AdminClient], topic: str, partitions: int, source_config: Mapping[str, str] | None = None
) -> None:
    """`topic` on A, and what the topic-sync step would create, done by hand so a test exercises the copy
    alone: `A.<topic>` on B (kept forever) and the copy's internal topics (idempotent: shared by tests)."""
    create_topic(admin("A"), topic, partitions, dict(source_config or {}))
    create_topic(admin("B"), f"A.{topic}", partitions, KEEP_FOREVER)
    for name in (PROGRESS_TOPIC, MAP_TOPIC):
        create_compacted_topic(admin("B"), "B", name, 1, 30)
    create_compacted_topic(admin("A"), "A", "mm2-offset-syncs.B.internal", 1, 30)


def state_slot(admin: AdminClient, state_topic: str, topic: str, partition: int = 0) -> int:
    """The partition of state topic `state_topic` (on the cluster of `admin`) that holds the state of source
    partition `topic`-`partition` now: its head slot at the topic's current partition count."""
    count = len(admin.list_topics(state_topic, timeout=30).topics[state_topic].partitions)
    return head_slot(topic, partition, count)


def commit_offsets(
    admin: AdminClient, group: str, offsets: Mapping[tuple[str, int], int], timeout_s: float = 30.0
) -> None:
    """Commit `{(topic, partition): offset}` for `group` through the admin API, retrying while a fresh
    cluster's group coordinator is still loading; fails with the errors once `timeout_s` has passed."""
    partitions = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    deadline = time.monotonic() + timeout_s
    while True:
        errors: list[Any] = []
        try:
            result = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, partitions)])[group]
            errors = [(tp.topic, tp.partition, tp.error) for tp in result.result().topic_partitions if tp.error]
        except KafkaException as err:
            errors = [err]
        if not errors:
            return
        assert time.monotonic() < deadline, f"committing {group}: {errors}"
        time.sleep(0.2)


def live_segments(flow: Flow, topic: str, partition: int = 0) -> list[Segment]:
    """The segments of a partition the offset-map topic still holds (tombstones applied, as compaction will)."""
    live: dict[int, Segment] = {}
    for _p, _o, key, value, _ts in read_to_end("B", flow.target_consumer.librdkafka(), MAP_TOPIC):
        assert key is not None
        t, p, upstream_start = decode_segment_key(key)
        if (t, p) != (topic, partition):
            continue
        if value is None:
            live.pop(upstream_start, None)
        else:
            live[upstream_start] = decode_segment(key, value)[2]
    return sorted(live.values(), key=lambda s: s.upstream_start)


def stored_progress(flow: Flow, topic: str, partition: int = 0) -> Progress:
    """The latest stored progress of a partition (it must have one)."""
    progress: Progress | None = None
    for _p, _o, key, value, _ts in read_to_end("B", flow.target_consumer.librdkafka(), PROGRESS_TOPIC):
        if key is not None and value is not None:
            stored = decode_progress(key, value)
            if (stored.topic, stored.partition) == (topic, partition):
                progress = stored
    assert progress is not None
    return progress


def stored_map(flow: Flow, topic: str, partition: int = 0) -> OffsetMap:
    """The offset map a restart would continue: the live segments and the latest stored progress."""
    progress = stored_progress(flow, topic, partition)
    return OffsetMap.restore(
        live_segments(flow, topic, partition),
        next_upstream=progress.next_upstream,
        downstream_end=progress.downstream_end,
    )


def translate_by_hand(pairs: list[tuple[int, int]], upstream: int, replicated_end: int) -> int:
    """Where a group at `upstream` resumes downstream, from the (upstream, downstream) offsets of the copies:
    at the copy of the first record at or after it, else at the end of what was replicated."""
    return next((d for u, d in pairs if u >= upstream), replicated_end)


def continuous_tasks(
    write_config: Callable[..., MirrorConfig], topic: str, partitions: int, **keys: str
) -> list[CopyTask]:
    """Continuous tasks (300 s) copying `topic` to `A.<topic>`, with `A->B.<key> = <value>` per keyword, after the
    control plane created the remote and internal topics."""
    extra = "".join(f"A->B.{k} = {v}\n" for k, v in keys.items())
    flow = write_config(f"A->B.enabled = true\nA->B.topics = {topic}\n{extra}").flow("A->B")
    run_control_plane(flow)  # remote topic and internal topics, as the flow DAG's sync tasks create them
    return plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", partitions)], interval=False, run_seconds=300)


def committed_count(clusters: LocalClusters, topic: str, partition: int) -> int:
    """How many records of `topic`-`partition` on B a read_committed consumer sees."""
    consumer = Consumer(
        with_logger(
            {
                "bootstrap.servers": clusters.bootstrap("B"),
                "group.id": "copy-group-check",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    seen = 0
    try:
        while True:
            m = consumer.poll(5)
            if m is None or m.error() is not None:
                return seen
            seen += 1
    finally:
        consumer.close()


def copied_pairs(consumer: Callable[..., Consumer], topic: str) -> list[tuple[int, int]]:
    """(upstream, downstream) of every copied record of partition 0 of `topic`, matched by value (the records of
    the test must have distinct values), read back from both clusters with read_committed."""
    committed = {"isolation.level": "read_committed"}
    target = {m.value(): m.offset() for m in read_partition(consumer("B", committed), f"A.{topic}")}
    return [(m.offset(), target[m.value()]) for m in read_partition(consumer("A", committed), topic)]


def compile_java_probe(source: Path, classes: Path) -> str:
    """Compile a probe of tests/fixtures/java against the pinned Kafka jars; the classpath to run it with."""
    javac = shutil.which("javac")
    assert javac, "javac (JDK 17+) must be on PATH for the MM2 compatibility tests"
    jars = f"{kafka_runtime().lib_dir}/*"
    subprocess.run([javac, "-d", str(classes), "-cp", jars, str(source)], check=True, timeout=120)
    return f"{classes}:{jars}"


def start_feeder(
    kafka_producer: Callable[..., Producer], topic: str, pause_s: float, partitions: int | Callable[[], int] = 1
) -> tuple[threading.Event, list[int], threading.Thread]:
    """A producer thread writing r0, r1, ... round-robin over `partitions` of `topic` on A (a callable: the count
    now, for a topic that grows), one record every `pause_s`, until the event is cleared; the numbers it sent,
    and the thread (join it after clearing)."""
    producing, sent = threading.Event(), []
    producing.set()
    count = partitions if callable(partitions) else lambda: partitions

    def produce() -> None:
        producer = kafka_producer("A")
        while producing.is_set():
            try:
                producer.produce(topic, value=f"r{len(sent)}".encode(), partition=len(sent) % count())
            except KafkaException as err:  # a partition added since: the producer learns of it from metadata
                if err.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                    raise
                producer.list_topics(topic, timeout=10)
                continue
            sent.append(len(sent))
            producer.poll(0)
            time.sleep(pause_s)
        assert producer.flush(30) == 0

    feeder = threading.Thread(target=produce)
    feeder.start()
    return producing, sent, feeder


def runner(task: CopyTask | Mapping[str, CopyTask], outcomes: dict[str, Any]) -> Callable[..., None]:
    """`run(name, **kwargs)`: `copy_range(task, **kwargs)` (with `task[name]` when given one task per name), its
    result or error stored under `name`."""

    def run(name: str, **kwargs: Any) -> None:
        try:
            outcomes[name] = copy_range(task if isinstance(task, CopyTask) else task[name], **kwargs)
        except BaseException as err:
            outcomes[name] = err

    return run


def start_copy(
    task: CopyTask, on_batch: Callable[[CopyResult], object]
) -> tuple[threading.Event, dict[str, Any], threading.Thread]:
    """`copy_range(task, on_batch=..., stop=...)` started in a thread: the event that stops it, its outcome under
    "copy" once it ended (`runner`), and the thread to join."""
    stop, outcomes = threading.Event(), {}
    copier = threading.Thread(
        target=runner(task, outcomes), args=("copy",), kwargs={"on_batch": on_batch, "stop": stop.is_set}
    )
    copier.start()
    return stop, outcomes, copier


def hand_over_mid_copy(
    run: Callable[..., None],
    kafka_producer: Callable[..., Producer],
    kafka_clusters: LocalClusters,
    kafka_consumer: Callable[..., Consumer],
    topic: str,
) -> None:
    """Under a steady producer, `run("old")` copies `topic` until it has committed three times, then `run("new")`
    starts and takes over; once "old" has ended and the producer stopped, "new" runs until the target holds
    every record, then stops. Checks that every record is on the target once, in order; the callers check how
    each run ended (`runner`'s outcomes)."""
    producing, sent, feeder = start_feeder(kafka_producer, topic, 0.005)
    old_commits: list[object] = []
    old = threading.Thread(target=run, args=("old",), kwargs={"on_batch": lambda r: old_commits.append(replace(r))})
    old.start()
    deadline = time.monotonic() + 60
    while len(old_commits) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(old_commits) >= 3, "the first run never committed"
    stop_new = threading.Event()
    new = threading.Thread(target=run, args=("new",), kwargs={"stop": stop_new.is_set})
    new.start()
    old.join(90)
    assert not old.is_alive(), "the old run did not end"
    producing.clear()
    feeder.join(60)
    deadline = time.monotonic() + 60
    while committed_count(kafka_clusters, f"A.{topic}", 0) < len(sent) and time.monotonic() < deadline:
        time.sleep(0.5)
    stop_new.set()
    new.join(60)
    copied = [
        m.value() for m in read_partition(kafka_consumer("B", {"isolation.level": "read_committed"}), f"A.{topic}")
    ]
    assert copied == [f"r{i}".encode() for i in sent], "every record once, in order"

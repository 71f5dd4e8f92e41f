"""`make bench-state-startup`: what a copy task reads of its flow's state at its start, on real brokers.

For each flow size (100, 500 and 2,000 source partitions by default) two flows are measured in the same run: one
whose state topics have one partition (the layout before state slots: every task reads all of it) and one whose
state topics have the slots the cycle's topic step gives them (`core.state_slots`). Each flow has its own source
alias (so its own state topics) on the same two local clusters. The state is seeded as copies leave it: per
source partition `--dirty` progress records (an uncleaned compacted log holds every commit's), one offset-map run
and one metrics snapshot, each in the partition's head slot, the progress saying the partition is settled there
(`Progress.settled_slots`: what a commit writes once nothing of the partition is left below). Then the copy's own
start-up reads run for a sample of partitions: `load_progress`, `load_segments` and `load_snapshot`
(`replication/copy_slots.py`), and the bench prints, per task, the state bytes they decoded (keys and values) and
the wall seconds they took (median), with the one-partition layout as the baseline.

Then, on the slots layout, per Spark task of 8 ranges (`state_tasks.py`): today's round-robin groups with a read
per range beside the groups by slot with reads shared by the task's ranges (issue 17, docs/scaling.md item 1),
both measured in the same run on the same seeded state.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

import mirrorflow.replication.copy_slots as copy_slots
from harness import bench_clusters, create_topics, run_id
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.core.offset_map import Segment, encode_segment
from mirrorflow.core.progress import Progress, encode_progress
from mirrorflow.core.state_slots import head_slot
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_task import CopyTask
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.internal_topics import create_internal_topics
from mirrorflow.replication.metrics import PartitionMetrics, snapshot_key
from state_tasks import PER_TASK, TaskFigures, measure_tasks

LAYOUTS = ("one partition", "slots")


def write_config(path: Path, source: str, target: str, flows: list[tuple[str, str]]) -> None:
    """One flow per (alias, topic), each alias on the same source cluster."""
    lines = [f"clusters = B, {', '.join(alias for alias, _ in flows)}", f"B.bootstrap.servers = {target}"]
    for alias, topic in flows:
        lines += [f"{alias}.bootstrap.servers = {source}", f"{alias}->B.enabled = true", f"{alias}->B.topics = {topic}"]
    lines += ["replication.factor = 1", "checkpoints.topic.replication.factor = 1"]
    lines += ["heartbeats.topic.replication.factor = 1", "offset-syncs.topic.replication.factor = 1"]
    path.write_text("\n".join(lines) + "\n")


def prepare(flow: Flow, topic: str, partitions: int, layout: str) -> list[CopyTask]:
    """The flow's state topics in `layout`, and its planned copy tasks (planned against the real topics)."""
    conf = flow.target_admin.librdkafka()
    tasks = plan_copy(
        flow,
        [SourcePartitions(topic, f"{flow.source}.{topic}", partitions)],
        interval=True,
        end_offsets=dict.fromkeys(((topic, p) for p in range(partitions)), 0),
        identities={},
        size_limits={},
        state_partitions=1,
    )
    names = (tasks[0].progress_topic, tasks[0].offset_map_topic, str(tasks[0].metrics_topic))
    if layout == "slots":
        with FlowClients(flow) as clients:
            create_internal_topics(flow, clients, source_partitions=partitions)
    else:
        for name in names:
            create_compacted_topic(admin_client(conf), "B", name, 1, 30)
    admin = admin_client(conf)
    deadline = time.monotonic() + 60
    while True:  # a topic just created can show no partitions yet
        counts = {n: len(admin.list_topics(n, timeout=30).topics[n].partitions) for n in names}
        if min(counts.values()) > 0 and len(set(counts.values())) == 1:
            break
        assert time.monotonic() < deadline, f"state topics not ready: {counts}"
        time.sleep(0.2)
    return [replace(t, state_partitions=min(counts.values())) for t in tasks]


def seed(bootstrap: str, tasks: list[CopyTask], dirty: int) -> None:
    """What copies leave: `dirty` progress records, one map run and one metrics snapshot per partition."""
    producer = Producer(with_logger({"bootstrap.servers": bootstrap, "linger.ms": 20}))
    count = tasks[0].state_partitions
    for t in tasks:
        slot = head_slot(t.topic, t.partition, count)
        for v in range(dirty):
            settled = Progress(t.topic, t.partition, 1000 + v, 1000 + v, 1000 + v, 1, 0, settled_slots=count)
            key, value = encode_progress(settled)
            producer.produce(t.progress_topic, key=key, value=value, partition=slot)
        key, value = encode_segment(t.topic, t.partition, Segment(0, 0, 1000))
        producer.produce(t.offset_map_topic, key=key, value=value, partition=slot)
        metrics = PartitionMetrics(
            source=t.source, target=t.target, source_topic=t.topic, remote_topic=t.remote_topic, partition=t.partition
        )
        snapshot = metrics.snapshot(now_ms=1)
        producer.produce(str(t.metrics_topic), key=snapshot.key(), value=snapshot.encode(), partition=slot)
        producer.poll(0)
    assert producer.flush(60) == 0


def measure(tasks: list[CopyTask], sample: int) -> tuple[float, float, float]:
    """(median state bytes decoded per task, median wall seconds per task, mean partitions whose progress a task
    read) over `sample` tasks. The reads are the copy start's: `load_state` (progress, then the map) and
    `load_snapshot`."""
    decoded = [0]
    partitions: set[bytes] = set()
    real = copy_slots.read_to_end  # type: ignore[attr-defined]

    def counted(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for record in real(*args, **kwargs):
            decoded[0] += len(record[2] or b"") + len(record[3] or b"")
            if args[2] == tasks[0].progress_topic:
                partitions.add(record[2])
            yield record

    copy_slots.read_to_end = counted  # type: ignore[attr-defined]
    sizes, seconds, shared = [], [], []
    try:
        for t in tasks[:: max(len(tasks) // sample, 1)][:sample]:
            decoded[0] = 0
            partitions.clear()
            started = time.perf_counter()
            state = copy_slots.load_state(t)
            snapshot, _ = copy_slots.load_snapshot(t, str(t.metrics_topic), snapshot_key(t.remote_topic, t.partition))
            seconds.append(time.perf_counter() - started)
            sizes.append(decoded[0])
            shared.append(len(partitions))
            found = state.progress is not None and state.segments.runs and snapshot
            assert found, f"{t.topic}-{t.partition}: its state is missing"
    finally:
        copy_slots.read_to_end = real  # type: ignore[attr-defined]
    return statistics.median(sizes), statistics.median(seconds), statistics.mean(shared)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="100,500,2000", help="source partitions of each flow")
    parser.add_argument("--sample", type=int, default=40, help="tasks measured per flow")
    parser.add_argument("--dirty", type=int, default=10, help="progress records per partition (uncleaned log)")
    parser.add_argument("--task-sample", type=int, default=8, help="Spark tasks of 8 ranges measured per way")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    rid = run_id()
    with bench_clusters("mirrorflow-bench-state-") as (directory, source, target):
        flows = [(f"s{size}{layout[0]}", f"state-{size}-{rid}") for size in sizes for layout in LAYOUTS]
        create_topics(source, [NewTopic(f"state-{size}-{rid}", size, 1) for size in sizes])
        config = directory / "state.properties"
        write_config(config, source, target, flows)
        loaded = load_config(config)
        rows = []
        task_rows: list[tuple[int, int, dict[str, TaskFigures]]] = []
        for size in sizes:
            for layout in LAYOUTS:
                flow = loaded.flow(f"s{size}{layout[0]}->B")
                tasks = prepare(flow, f"state-{size}-{rid}", size, layout)
                seed(target, tasks, args.dirty)
                decoded, seconds, shared = measure(tasks, args.sample)
                rows.append((size, layout, tasks[0].state_partitions, decoded, seconds, shared))
                print(f"{size} partitions, {layout}: {decoded / 1000:.1f} KB, {seconds * 1000:.0f} ms", flush=True)
                if layout == "slots":
                    task_rows.append((size, tasks[0].state_partitions, measure_tasks(tasks, args.task_sample)))
                    print(f"{size} partitions, per task: {task_rows[-1][2]}", flush=True)
    print("\n| source partitions | layout | state topic partitions | partitions' state read per task (mean) |", end="")
    print(" state bytes decoded per task | start-up reads per task |")
    print("|---|---|---|---|---|---|")
    for size, layout, count, decoded, seconds, shared in rows:
        row = f"| {size:,} | {layout} | {count} | {shared:.1f} | {decoded / 1000:.1f} KB | {seconds * 1000:.0f} ms |"
        print(row)
    print_tasks(task_rows)
    return 0


def print_tasks(rows: list[tuple[int, int, dict[str, TaskFigures]]]) -> None:
    print(f"\nPer Spark task of {PER_TASK} ranges (slots layout; medians over the sampled tasks):\n")
    print("| source partitions | slots | today: round-robin, a read per range | grouped by slot, shared reads |")
    print("|---|---|---|---|")
    for size, count, ways in rows:
        cells = [
            f"{f.partitions:.0f} partitions' state, {f.fetched / 1000:.1f} KB, {f.seconds * 1000:.0f} ms"
            for f in (ways["today"], ways["grouped, shared"])
        ]
        print(f"| {size:,} | {count} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    raise SystemExit(main())

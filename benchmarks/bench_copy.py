"""`make bench-copy`: Mirrorflow's copy against a bare confluent-kafka consume->produce loop, in one run.

Starts two local clusters (source `A`, target `B`), writes N records to a source topic, then copies the same
data with: the bare loop (no transactions, no progress, no offset map), `copy_range` per partition in this
process (exactly-once and at-least-once), and Spark local `copy_flow` (both modes). Each Mirrorflow variant is its
own flow from an alias pointing at the same source cluster, so every variant starts from offset 0 into its own
remote topic. Prints records/s and MB/s (value bytes) with the ratio to the bare loop.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition, libversion
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range

TOPIC = "bench"
KEEP = {"retention.ms": "-1"}
VARIANTS = {"eos": "exactly-once", "alos": "at-least-once", "sparkeos": "exactly-once", "sparkalos": "at-least-once"}


def produce_source(bootstrap: str, records: int, size: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
    payload = os.urandom(size)
    now = int(time.time() * 1000)
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, key=b"k%d" % i, value=payload, partition=i % partitions, timestamp=now)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def bare_copy(source: str, target: str, records: int, partitions: int) -> float:
    """The floor: one consumer, one idempotent producer, nothing else."""
    consumer = Consumer({"bootstrap.servers": source, "group.id": "bench-bare", "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": target, "enable.idempotence": True, "linger.ms": 5})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    started = time.perf_counter()
    copied = 0
    while copied < records:
        for m in consumer.consume(10000, 1.0):
            if m.error() is not None:
                continue
            while True:
                try:
                    producer.produce(
                        "bare",
                        m.value(),
                        m.key(),
                        partition=m.partition(),
                        timestamp=m.timestamp()[1],
                        headers=m.headers(),
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            copied += 1
        producer.poll(0)
    assert producer.flush(60) == 0
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def write_config(path: Path, clusters: LocalClusters) -> None:
    lines = [f"clusters = B, {', '.join(VARIANTS)}", f"B.bootstrap.servers = {clusters.bootstrap('B')}"]
    for alias, delivery in VARIANTS.items():
        lines += [
            f"{alias}.bootstrap.servers = {clusters.bootstrap('A')}",
            f"{alias}->B.enabled = true",
            f"{alias}->B.topics = {TOPIC}",
            f"{alias}->B.mirrorflow.delivery = {delivery}",
        ]
    lines += [
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "admin.timeout.ms = 30000",
    ]
    path.write_text("\n".join(lines) + "\n")


def prepare_targets(clusters: LocalClusters, partitions: int) -> None:
    target = AdminClient({"bootstrap.servers": clusters.bootstrap("B")})
    source = AdminClient({"bootstrap.servers": clusters.bootstrap("A")})
    names = [NewTopic("bare", partitions, 1, config=KEEP)]
    names += [NewTopic(f"{a}.{TOPIC}", partitions, 1, config=KEEP) for a in VARIANTS]
    compact = {"cleanup.policy": "compact"}
    for alias in VARIANTS:
        names += [
            NewTopic(f"mirrorflow-{kind}.{alias}.internal", 1, 1, config=compact)
            for kind in ("progress", "offset-map", "metrics")
        ]
    for f in target.create_topics(names).values():
        f.result(30)
    syncs = NewTopic("mm2-offset-syncs.B.internal", 1, 1, config=compact)
    for f in source.create_topics([NewTopic(TOPIC, partitions, 1, config=KEEP), syncs]).values():
        f.result(30)


def in_process(flow: Flow, partitions: int) -> float:
    tasks = plan_copy(flow, [SourcePartitions(TOPIC, f"{flow.source}.{TOPIC}", partitions)], interval=True)
    started = time.perf_counter()
    copied = sum(copy_range(t).records for t in tasks)
    elapsed = time.perf_counter() - started
    assert copied == sum(t.end or 0 for t in tasks), copied
    return elapsed


def on_spark(flow: Flow, master: str) -> Callable[[], float]:
    from mirrorflow.spark.copy_job import copy_flow, spark_session

    spark = spark_session(master, "mirrorflow-bench")
    spark.sparkContext.parallelize([0], 1).count()  # start the JVM and a Python worker before timing

    def run() -> float:
        started = time.perf_counter()
        summary = copy_flow(flow, spark, interval=True)
        elapsed = time.perf_counter() - started
        assert summary["records"], summary
        return elapsed

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[4]", help="Spark master of the Spark variants")
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--dir", type=Path, default=None, help="clusters' directory (default: a temporary one)")
    args = parser.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="mirrorflow-bench-"))
    clusters = LocalClusters.up(["A", "B"], directory)
    try:
        prepare_targets(clusters, args.partitions)
        t0 = time.perf_counter()
        produce_source(clusters.bootstrap("A"), args.records, args.size, args.partitions)
        print(
            f"prepared {args.records} x {args.size} B over {args.partitions} partitions in "
            f"{time.perf_counter() - t0:.1f}s"
        )
        config = directory / "bench-mm2.properties"
        write_config(config, clusters)
        loaded = load_config(config)
        results: list[tuple[str, float]] = [
            (
                "bare confluent-kafka loop",
                bare_copy(clusters.bootstrap("A"), clusters.bootstrap("B"), args.records, args.partitions),
            ),
            ("copy_range in-process, exactly-once", in_process(loaded.flow("eos->B"), args.partitions)),
            ("copy_range in-process, at-least-once", in_process(loaded.flow("alos->B"), args.partitions)),
        ]
        if not args.no_spark:
            results.append(
                (f"Spark {args.master} copy_flow, exactly-once", on_spark(loaded.flow("sparkeos->B"), args.master)())
            )
            results.append(
                (f"Spark {args.master} copy_flow, at-least-once", on_spark(loaded.flow("sparkalos->B"), args.master)())
            )
        mb = args.records * args.size / 1e6
        base = args.records / results[0][1]
        print()
        print("| variant | seconds | records/s | MB/s | vs bare |")
        print("|---|---:|---:|---:|---:|")
        for name, seconds in results:
            rate = args.records / seconds
            print(f"| {name} | {seconds:.2f} | {rate:,.0f} | {mb / seconds:.1f} | {rate / base:.2f} |")
        print()
        print(
            f"Python {platform.python_version()}, librdkafka {libversion()[0]}, Kafka {clusters.runtime.version}, "
            f"nproc {os.cpu_count()}"
        )
    finally:
        clusters.down(purge=True)
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

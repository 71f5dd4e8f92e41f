"""`make bench-copy`: Mirrorflow's copy against a bare confluent-kafka consume->produce loop, in one run.

Starts two local clusters (source `A`, target `B`), writes N records to a source topic, then copies the same
data with: the bare loop (no transactions, no progress, no offset map), `copy_range` per partition in this
process (exactly-once and at-least-once), and Spark local `copy_flow` (both modes). Each Mirrorflow variant is its
own flow from an alias pointing at the same source cluster, so every variant starts from offset 0 into its own
remote topic. Prints records/s and MB/s (value bytes) with the ratio to the bare loop, and the peak RSS of one
exactly-once copy task run alone in a child process.

With `--dir D --clusters SRC,DST` it uses (starting them if needed) the clusters of `mirrorflow local up` in D and
leaves them running; topic names carry a run id, so runs against the same clusters do not interfere.
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing
import os
import platform
import pstats
import resource
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition, libversion
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.clients import admin_client
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyTask

KEEP = {"retention.ms": "-1"}
VARIANTS = {
    "eos": "exactly-once",
    "alos": "at-least-once",
    "sparkeos": "exactly-once",
    "sparkalos": "at-least-once",
    "rss": "exactly-once",
}


def produce_source(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> None:
    producer = Producer(with_logger({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000}))
    payload = os.urandom(size)
    now = int(time.time() * 1000)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=b"k%d" % i, value=payload, partition=i % partitions, timestamp=now)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def bare_copy(source: str, target: str, topic: str, records: int, partitions: int) -> float:
    """The floor: one consumer, one idempotent producer, nothing else."""
    consumer = Consumer(
        with_logger({"bootstrap.servers": source, "group.id": "bench-bare", "enable.auto.commit": False})
    )
    producer = Producer(with_logger({"bootstrap.servers": target, "enable.idempotence": True, "linger.ms": 5}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    started = time.perf_counter()
    copied = 0
    while copied < records:
        for m in consumer.consume(10000, 1.0):
            if m.error() is not None:
                continue
            while True:
                try:
                    producer.produce(
                        f"bare-{topic}",
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


def write_config(path: Path, source: str, target: str, topic: str) -> None:
    lines = [f"clusters = B, {', '.join(VARIANTS)}", f"B.bootstrap.servers = {target}"]
    for alias, delivery in VARIANTS.items():
        lines += [
            f"{alias}.bootstrap.servers = {source}",
            f"{alias}->B.enabled = true",
            f"{alias}->B.topics = {topic}",
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


def create(admin: AdminClient, topics: list[NewTopic]) -> None:
    """Creates `topics`; internal topics left by an earlier run against the same clusters are reused."""
    for f in admin.create_topics(topics).values():
        try:
            f.result(30)
        except KafkaException as err:
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def prepare_topics(source: str, target: str, topic: str, partitions: int) -> None:
    compact = {"cleanup.policy": "compact"}
    names = [NewTopic(f"bare-{topic}", partitions, 1, config=KEEP)]
    names += [NewTopic(f"{a}.{topic}", partitions, 1, config=KEEP) for a in VARIANTS]
    for alias in VARIANTS:
        names += [
            NewTopic(f"mirrorflow-{kind}.{alias}.internal", 1, 1, config=compact)
            for kind in ("progress", "offset-map", "metrics")
        ]
    create(admin_client({"bootstrap.servers": target}), names)
    syncs = NewTopic("mm2-offset-syncs.B.internal", 1, 1, config=compact)
    create(admin_client({"bootstrap.servers": source}), [NewTopic(topic, partitions, 1, config=KEEP), syncs])


def warm_up(bootstrap: str) -> None:
    """A fresh cluster creates its transaction-state topic on the first transactional producer; a real target
    has it long since, so that is done here, before timing."""
    producer = Producer(
        with_logger({"bootstrap.servers": bootstrap, "transactional.id": f"bench-warm-up-{uuid.uuid4()}"})
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.commit_transaction(60)


def tasks_of(flow: Flow, topic: str, partitions: int) -> list[CopyTask]:
    return plan_copy(flow, [SourcePartitions(topic, f"{flow.source}.{topic}", partitions)], interval=True)


def in_process(flow: Flow, topic: str, partitions: int, profile: Path | None = None) -> float:
    tasks = tasks_of(flow, topic, partitions)
    profiler = cProfile.Profile() if profile is not None else None
    started = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    copied = sum(copy_range(t).records for t in tasks)
    if profiler is not None:
        profiler.disable()
    elapsed = time.perf_counter() - started
    assert copied == sum(t.end or 0 for t in tasks), copied
    if profiler is not None and profile is not None:
        profiler.dump_stats(profile)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    return elapsed


def _peak_rss_kib() -> int:
    """This process's peak RSS. Linux keeps `ru_maxrss` across fork and exec (a spawned child would report its
    parent's peak), so the kernel's per-address-space high-water mark comes first."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _copy_and_measure(task: CopyTask) -> tuple[int, int, int]:
    before = _peak_rss_kib()
    records = copy_range(task).records
    return records, before, _peak_rss_kib()


def peak_rss_one_task(flow: Flow, topic: str, partitions: int) -> tuple[int, int, int]:
    """(records, RSS before copying, peak RSS; KiB) of one exactly-once copy task alone in a fresh process."""
    task = tasks_of(flow, topic, partitions)[0]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_copy_and_measure, (task,))


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
    parser.add_argument("--dir", type=Path, default=None, help="clusters' directory, kept (default: a temporary one)")
    parser.add_argument("--clusters", default="A,B", help="source and target aliases of the clusters in --dir")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile the exactly-once copy into this file")
    args = parser.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="mirrorflow-bench-"))
    src_alias, dst_alias = args.clusters.split(",")
    clusters = LocalClusters.up([src_alias, dst_alias], directory)
    source, target = clusters.bootstrap(src_alias), clusters.bootstrap(dst_alias)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        prepare_topics(source, target, topic, args.partitions)
        warm_up(source)
        warm_up(target)
        t0 = time.perf_counter()
        produce_source(source, topic, args.records, args.size, args.partitions)
        print(
            f"prepared {args.records} x {args.size} B over {args.partitions} partitions in "
            f"{time.perf_counter() - t0:.1f}s"
        )
        config = directory / f"bench-{topic}.properties"
        write_config(config, source, target, topic)
        loaded = load_config(config)
        results: list[tuple[str, float]] = [
            ("bare confluent-kafka loop", bare_copy(source, target, topic, args.records, args.partitions)),
            (
                "copy_range in-process, exactly-once",
                in_process(loaded.flow("eos->B"), topic, args.partitions, args.profile),
            ),
            ("copy_range in-process, at-least-once", in_process(loaded.flow("alos->B"), topic, args.partitions)),
        ]
        if not args.no_spark:
            results.append(
                (f"Spark {args.master} copy_flow, exactly-once", on_spark(loaded.flow("sparkeos->B"), args.master)())
            )
            results.append(
                (f"Spark {args.master} copy_flow, at-least-once", on_spark(loaded.flow("sparkalos->B"), args.master)())
            )
        rss_records, rss_before, rss_peak = peak_rss_one_task(loaded.flow("rss->B"), topic, args.partitions)
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
            f"peak RSS of one exactly-once copy task ({rss_records} records, own process): {rss_peak / 1024:.0f} MiB "
            f"({rss_before / 1024:.0f} MiB before copying: Python and imports)"
        )
        print(
            f"Python {platform.python_version()}, librdkafka {libversion()[0]}, Kafka {clusters.runtime.version}, "
            f"nproc {os.cpu_count()}"
        )
    finally:
        if args.dir is None:
            clusters.down(purge=True)
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

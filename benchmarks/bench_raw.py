"""The raw limits: Kafka's own producer performance tool writing to the target, and a bare confluent-kafka
consume->produce loop (bench_copy.bare_copy) from the source to the target."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import time
from pathlib import Path

from confluent_kafka.admin import NewTopic

from bench_copy import bare_copy
from harness import KEEP, Case, RssSampler, create_topics, delete_topics
from mirrorflow.local.runtime import PRODUCER_PERFORMANCE_MAIN, KafkaRuntime
from report import RAW, Run

# "1000000 records sent, 151975.7 records/sec (148.41 MB/sec), 180.2 ms avg latency, ..."
_SUMMARY = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)")


def parse_producer_performance(output: str) -> tuple[int, float]:
    """(records, records/s) of the tool's final summary line (the last one matching)."""
    found = _SUMMARY.findall(output)
    if not found:
        raise ValueError(f"no summary line in the producer performance output:\n{output[-2000:]}")
    records, rate, _mb = found[-1]
    return int(records), float(rate)


# The Java producer's defaults, and the sweep the raw limit is the best of (issue 19: a physical limit is what
# a tuned producer reaches, not what its 16 KB default batches reach).
JAVA_DEFAULT = (16384, 0)
SWEEP = tuple((batch, linger) for batch in (65536, 327680, 1048576) for linger in (5, 20, 100))
QUICK_SWEEP = ((327680, 20), (1048576, 100))


def producer_performance(
    runtime: KafkaRuntime, target: str, case: Case, log_dir: Path, batch_size: int = 524288, linger_ms: int = 20
) -> Run:
    """The JVM producer at full speed (acks=all, idempotent: what a replicator must pay) with the given batching
    into a fresh topic with the case's partition count. Its own rate excludes the JVM start; the wall time is
    printed beside."""
    topic = f"raw-{case.topic}-{batch_size}-{linger_ms}"
    create_topics(target, [NewTopic(topic, case.partitions, 1, config=KEEP)])
    command = runtime.command(
        PRODUCER_PERFORMANCE_MAIN,
        [
            "--bootstrap-server",
            target,
            "--topic",
            topic,
            "--num-records",
            str(case.records),
            "--record-size",
            str(case.size),
            "--throughput",
            "-1",
            "--command-property",
            "acks=all",
            "enable.idempotence=true",
            f"batch.size={batch_size}",
            f"linger.ms={linger_ms}",
            "--reporting-interval",
            "60000",
        ],
        heap_max="1g",
        log_file=log_dir / f"{topic}.log",
    )
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with RssSampler(process.pid) as rss:
        output, _ = process.communicate(timeout=1800)
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"ProducerPerformance exited with {process.returncode}:\n{output[-2000:]}")
    records, rate = parse_producer_performance(output)
    print(
        f"  ProducerPerformance batch.size={batch_size} linger.ms={linger_ms}: {rate:,.0f} records/s "
        f"({wall:.1f}s wall with the JVM's start)",
        flush=True,
    )
    delete_topics(target, [topic])
    return Run(
        case.name,
        f"ProducerPerformance (JVM, batch.size={batch_size}, linger.ms={linger_ms}) -> target",
        RAW,
        records,
        records * case.size,
        records / rate,
        peak_rss_mib=rss.peak_mib,
    )


def best_producer_performance(
    runtime: KafkaRuntime, target: str, case: Case, log_dir: Path, grid: tuple[tuple[int, int], ...] = SWEEP
) -> Run:
    """The fastest point of `grid` (each point is printed): the raw limit (`report.raw_baseline`)."""
    best = max((producer_performance(runtime, target, case, log_dir, *point) for point in grid), key=lambda r: r.rate)
    return dataclasses.replace(best, variant=best.variant.replace("(JVM, ", "(JVM, best of sweep: "))


def bare_loop(source: str, target: str, case: Case) -> Run:
    create_topics(target, [NewTopic(f"bare-{case.topic}", case.partitions, 1, config=KEEP)])
    seconds = bare_copy(source, target, case.topic, case.records, case.partitions)
    delete_topics(target, [f"bare-{case.topic}"])
    return Run(case.name, "bare confluent-kafka loop", RAW, case.records, case.value_bytes, seconds)

"""The raw limits: Kafka's own producer performance tool writing to the target, and a bare confluent-kafka
consume->produce loop (bench_copy.bare_copy) from the source to the target."""

from __future__ import annotations

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


def producer_performance(runtime: KafkaRuntime, target: str, case: Case, log_dir: Path) -> Run:
    """The JVM producer at full speed (acks=all, idempotent: what a replicator must pay; batching like the
    copy's producers) into a fresh topic with the case's partition count. Its own rate excludes the JVM start;
    the wall time is printed beside."""
    topic = f"raw-{case.topic}"
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
            # The Java default 16 KB batch caps one partition at ~5 in-flight batches per round trip; the copy's
            # librdkafka producers batch up to 1 MB with a 20 ms linger, so the raw limit gets the same room.
            "batch.size=524288",
            "linger.ms=20",
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
    print(f"  ProducerPerformance: {time.perf_counter() - started:.1f}s wall with the JVM's start", flush=True)
    if process.returncode != 0:
        raise RuntimeError(f"ProducerPerformance exited with {process.returncode}:\n{output[-2000:]}")
    records, rate = parse_producer_performance(output)
    delete_topics(target, [topic])
    return Run(
        case.name,
        "ProducerPerformance (JVM) -> target",
        RAW,
        records,
        records * case.size,
        records / rate,
        peak_rss_mib=rss.peak_mib,
    )


def bare_loop(source: str, target: str, case: Case) -> Run:
    create_topics(target, [NewTopic(f"bare-{case.topic}", case.partitions, 1, config=KEEP)])
    seconds = bare_copy(source, target, case.topic, case.records, case.partitions)
    delete_topics(target, [f"bare-{case.topic}"])
    return Run(case.name, "bare confluent-kafka loop", RAW, case.records, case.value_bytes, seconds)

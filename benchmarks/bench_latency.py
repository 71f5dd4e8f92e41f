"""End-to-end latency under a steady producer: source produce time to the moment a read_committed consumer on
the target receives the copy (what an application on the target sees; with exactly-once that includes waiting
for the transaction's commit).

The replicator (Mirrorflow continuous mode, or MM2) runs first and is shown live by probe records; then a
producer in its own process writes `rate` records/s for `seconds`, stamping about 2,000 records/s with a header
holding its produce time (ms), while a consumer in another process reads the remote topic and notes the
arrival time of each stamped record. The first second of samples is dropped (clients' first round trips).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from bench_mirrorflow import _copy_child, flow_of, prepare_flow_topics, tasks_of
from bench_mm2 import start_mm2, stop, variant
from harness import KEEP, Case, create_topics, delete_topics
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.local.runtime import KafkaRuntime
from report import Latency, window_p99s

HEADER = "bench-sent-ms"
PROBE = b"probe"


def steady_producer(
    bootstrap: str, topic: str, partitions: int, size: int, rate: float, seconds: float, conn: Connection
) -> None:
    """In a child process: `rate` records/s for `seconds`, round-robin over partitions; sends the achieved rate."""
    # linger.ms 5: the default of librdkafka and, since Kafka 4.0 (KIP-1030), of the Java producer. A 1 ms linger
    # sends a request per partition per millisecond, which on a 2-core host saturates the source broker before
    # any replicator is measured.
    producer = Producer(with_logger({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"}))
    payload = os.urandom(size)
    sample_every = max(1, int(rate // 2000))  # ~2,000 samples per second at most
    started = time.monotonic()
    sent = 0
    while True:
        elapsed = time.monotonic() - started
        if elapsed >= seconds:
            break
        due = int(rate * elapsed)
        while sent < due:
            headers = [(HEADER, b"%d" % int(time.time() * 1000))] if sent % sample_every == 0 else None
            try:
                producer.produce(topic, payload, None, sent % partitions, headers=headers)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0.002)
    producer.flush(60)
    conn.send(sent / (time.monotonic() - started))


def probe_until_live(source: str, target: str, topic: str, remote: str, partitions: int, timeout_s: float) -> None:
    """Probe records every 0.5 s until each remote partition holds one: the replicator is copying."""
    producer = Producer(with_logger({"bootstrap.servers": source, "linger.ms": 0}))
    watch = Consumer(with_logger({"bootstrap.servers": target, "group.id": f"bench-probe-{uuid.uuid4().hex[:8]}"}))
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            for p in range(partitions):
                producer.produce(topic, PROBE, None, p)
            producer.flush(10)
            time.sleep(0.5)
            ends = []
            for p in range(partitions):
                try:
                    ends.append(watch.get_watermark_offsets(TopicPartition(remote, p), timeout=5)[1])
                except Exception:
                    ends.append(0)
            if all(e > 0 for e in ends):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the replicator did not copy probes to {remote} within {timeout_s:.0f}s")
    finally:
        watch.close()


def latency_consumer(target: str, remote: str, partitions: int, conn: Connection) -> None:
    """In a child process: reads `remote` live (says "ready" once its first fetch returned) until told to stop
    and nothing new arrived for 3 s; sends (produce time, latency) in ms of every stamped record."""
    consumer = Consumer(
        with_logger(
            {
                "bootstrap.servers": target,
                "group.id": f"bench-lat-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
    )
    consumer.assign([TopicPartition(remote, p, 0) for p in range(partitions)])
    consumer.consume(10000, 1.0)  # connected and fetching before the producer starts
    conn.send("ready")
    samples: list[tuple[int, int]] = []
    stopping = False
    last = time.monotonic()
    while not stopping or time.monotonic() - last < 3.0:
        messages = consumer.consume(10000, 0.05)
        now_ms = int(time.time() * 1000)
        for m in messages:
            headers = m.headers() if m.error() is None else None
            for name, value in headers or ():
                if name == HEADER and value is not None:
                    sent = int(value)
                    samples.append((sent, now_ms - sent))
        if messages:
            last = time.monotonic()
        if not stopping and conn.poll():
            stopping, last = True, time.monotonic()
    consumer.close()
    conn.send(samples)


def steady_samples(samples: list[tuple[int, int]], warm_up_ms: int = 1000) -> list[tuple[int, int]]:
    """The (produce time, latency) samples of records produced at least `warm_up_ms` after the first stamped one."""
    if not samples:
        return []
    first = min(sent for sent, _ in samples)
    return [(sent, latency) for sent, latency in samples if sent >= first + warm_up_ms]


def longest_gap_ms(samples: list[tuple[int, int]]) -> float | None:
    """The longest wait between two consecutive arrivals (produce time + latency) of the samples."""
    arrivals = sorted(sent + latency for sent, latency in samples)
    return float(max((b - a for a, b in itertools.pairwise(arrivals)), default=0)) if arrivals else None


def measure(
    name: str,
    case: Case,
    source: str,
    target: str,
    topic: str,
    remote: str,
    rate: float,
    seconds: float,
    stop_replicator: Callable[[], None],
    live_timeout_s: float = 180,
) -> Latency:
    probe_until_live(source, target, topic, remote, case.partitions, timeout_s=live_timeout_s)
    spawn = multiprocessing.get_context("spawn")
    reader_end, reader_child = spawn.Pipe()
    reader = spawn.Process(target=latency_consumer, args=(target, remote, case.partitions, reader_child))
    reader.start()
    if not reader_end.poll(180) or reader_end.recv() != "ready":
        raise TimeoutError("the latency consumer did not start")
    producer_end, producer_child = spawn.Pipe()
    producer = spawn.Process(
        target=steady_producer, args=(source, topic, case.partitions, case.size, rate, seconds, producer_child)
    )
    producer.start()
    producer.join(seconds + 180)
    achieved = float(producer_end.recv()) if producer_end.poll(5) else 0.0
    reader_end.send("stop")
    samples: list[tuple[int, int]] = reader_end.recv() if reader_end.poll(seconds + 300) else []
    reader.join(30)
    stop_replicator()
    steady = steady_samples(samples)
    lats = tuple(lat for _, lat in steady)
    return Latency(case.name, name, rate, achieved, lats, longest_gap_ms(steady), window_p99s(steady))


def latency_floor(source: str, case: Case, alias: str, rate: float, seconds: float) -> Latency:
    """No replicator: the same producer and the same read_committed consumer on one source topic. What is left is
    the host's own floor (produce, broker, fetch) at this load, which every replicator's figure includes twice."""
    topic = f"lat-{alias}-{case.topic}"
    create_topics(source, [NewTopic(topic, case.partitions, 1, config=KEEP)])
    return measure(
        "no replicator (producer -> source -> consumer)",
        case,
        source,
        source,
        topic,
        topic,
        rate,
        seconds,
        lambda: None,
    )


def latency_mirrorflow(
    config: Path, source: str, target: str, case: Case, alias: str, rate: float, seconds: float, *, eos: bool = True
) -> Latency:
    """Mirrorflow continuous mode (the flow `alias` says which delivery), one copy thread per partition in its
    own process."""
    topic = f"lat-{alias}-{case.topic}"
    create_topics(source, [NewTopic(topic, case.partitions, 1, config=KEEP)])
    lat_case = Case(case.records, case.size, case.partitions, topic)
    prepare_flow_topics(source, target, alias, lat_case, KEEP)
    tasks = tasks_of(flow_of(config, alias), lat_case, interval=False, run_seconds=seconds + 600)
    _parent, child = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(target=_copy_child, args=(tasks, child), daemon=True)
    process.start()

    def stop_copy() -> None:
        process.terminate()
        process.join(30)

    try:
        result = measure(
            f"Mirrorflow continuous, {'exactly-once' if eos else 'at-least-once'}",
            case,
            source,
            target,
            topic,
            f"{alias}.{topic}",
            rate,
            seconds,
            stop_copy,
        )
    finally:
        if process.is_alive():
            stop_copy()
    delete_topics(target, [f"{alias}.{topic}"])
    return result


def latency_mm2(
    runtime: KafkaRuntime,
    source: str,
    target: str,
    case: Case,
    alias: str,
    eos: bool,
    rate: float,
    seconds: float,
    work: Path,
    tuned: bool = False,
) -> Latency:
    topic = f"lat-{alias}-{case.topic}"
    create_topics(source, [NewTopic(topic, case.partitions, 1, config=KEEP)])
    create_topics(target, [NewTopic(f"{alias}.{topic}", case.partitions, 1, config=KEEP)])
    lat_case = Case(case.records, case.size, case.partitions, topic)
    process: subprocess.Popen[bytes] = start_mm2(runtime, source, target, lat_case, alias, eos, work, tuned)
    try:
        result = measure(
            variant(eos, tuned),
            case,
            source,
            target,
            topic,
            f"{alias}.{topic}",
            rate,
            seconds,
            lambda: stop(process),
        )
    finally:
        stop(process)
    delete_topics(target, [f"{alias}.{topic}"])
    return result

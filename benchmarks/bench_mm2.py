"""Real MirrorMaker 2 in dedicated mode (`connect-mirror-maker`'s main class, the pinned Maven jars), one flow
`<alias>->B` with `tasks.max` = partitions, exactly-once off or on, timed from the JVM's start until the target
holds every source record. Everything but the data copy (heartbeats, checkpoints, config/ACL/group sync) is off,
so MM2 pays for nothing Mirrorflow's copy does not do.

Exactly-once in dedicated mode (Kafka >= 3.5, KIP-618 + KIP-710): `<target>.exactly.once.source.support =
enabled`, `dedicated.mode.enable.internal.rest = true` with a `listeners` address, and a read_committed source
consumer.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from harness import ArrivalWatch, Case, RssSampler, delete_topics
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.local.runtime import MIRROR_MAKER_MAIN, KafkaRuntime
from report import MM2, Run

# The tuning an operator applies from the published guides (tuned MM2 rows; the default rows keep every default):
# Strimzi's MM2 tuning article: producer batch.size 327680 and consumer fetch.max.bytes 52428800; Confluent's
# producer tuning guide: linger.ms 10-100 (20 here, the low end that still fills batches: it bounds latency);
# Kafka's producer docs: idempotence with 5 requests in flight keeps order; max.poll.records 2000 and
# fetch.min.bytes 64 KiB feed each task bigger polls (the combination the trial measured).
TUNED = {
    "B.producer.batch.size": "327680",
    "B.producer.linger.ms": "20",
    "B.producer.enable.idempotence": "true",
    "B.producer.max.in.flight.requests.per.connection": "5",
    "B.producer.acks": "all",
    "{alias}.consumer.fetch.max.bytes": "52428800",
    "{alias}.consumer.max.poll.records": "2000",
    "{alias}.consumer.fetch.min.bytes": "65536",
}

# What bin/kafka-run-class.sh gives connect-mirror-maker.sh: G1 and a 2 GB heap ceiling.
MM2_JVM_OPTIONS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def variant(eos: bool, tuned: bool) -> str:
    return f"MM2 dedicated{' tuned' if tuned else ''}, {'exactly-once' if eos else 'at-least-once'}"


def mm2_config(
    alias: str, source: str, target: str, topics: list[str], tasks: int, eos: bool, tuned: bool = False
) -> str:
    """mm2.properties of one flow `alias->B`; `alias` is fresh per run so MM2's internal topics start empty;
    `tuned` adds `TUNED` (tasks.max is the partition count either way)."""
    body = [
        f"{alias}->B.enabled = true",
        f"B->{alias}.enabled = false",
        f"{alias}->B.topics = {', '.join(topics)}",
        f"tasks.max = {tasks}",
        "emit.heartbeats.enabled = false",
        "emit.checkpoints.enabled = false",
        "sync.group.offsets.enabled = false",
        "sync.topic.configs.enabled = false",
        "sync.topic.acls.enabled = false",
        "refresh.groups.enabled = false",
        "offset-syncs.topic.replication.factor = 1",
        f"{alias}.offset.flush.interval.ms = 1000",
        "B.offset.flush.interval.ms = 1000",
    ]
    if tuned:
        body += [f"{key.format(alias=alias)} = {value}" for key, value in TUNED.items()]
    if eos:
        body += [
            "B.exactly.once.source.support = enabled",
            "dedicated.mode.enable.internal.rest = true",
            f"listeners = http://127.0.0.1:{free_port()}",
            f"{alias}.consumer.isolation.level = read_committed",
        ]
    return mm2_config_text({alias: source, "B": target}, "\n".join(body) + "\n")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def run_mm2(
    runtime: KafkaRuntime,
    source: str,
    target: str,
    case: Case,
    alias: str,
    eos: bool,
    work: Path,
    timeout_s: float,
    tuned: bool = False,
) -> Run:
    """Starts MM2, waits until `alias.<topic>` on the target holds the whole source topic, stops MM2."""
    log_file = work / f"mm2-{alias}.log"
    watch = ArrivalWatch(target, f"{alias}.{case.topic}", case)
    started = time.perf_counter()
    process = start_mm2(runtime, source, target, case, alias, eos, work, tuned)
    try:
        with RssSampler(process.pid) as rss:
            deadline = time.monotonic() + timeout_s
            while not watch.complete():
                if process.poll() is not None:
                    raise RuntimeError(f"MM2 exited with {process.returncode}; see {log_file}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"MM2 did not copy {case.topic} within {timeout_s:.0f}s; see {log_file}")
                time.sleep(0.1)
            done = time.perf_counter()
    finally:
        stop(process)
        watch.close()
        delete_topics(target, [f"{alias}.{case.topic}"])
    first = watch.first_arrival or done
    return Run(
        case.name,
        variant(eos, tuned),
        MM2,
        case.records,
        case.value_bytes,
        done - started,
        eos=eos,
        startup_s=first - started,
        peak_rss_mib=rss.peak_mib,
    )


def start_mm2(
    runtime: KafkaRuntime,
    source: str,
    target: str,
    case: Case,
    alias: str,
    eos: bool,
    work: Path,
    tuned: bool = False,
) -> subprocess.Popen[bytes]:
    """MM2 left running (the latency part stops it)."""
    config = work / f"mm2-{alias}.properties"
    config.write_text(mm2_config(alias, source, target, [case.topic], case.partitions, eos, tuned))
    command = runtime.command(
        MIRROR_MAKER_MAIN,
        [str(config), "--clusters", "B"],
        log_file=work / f"mm2-{alias}.log",
        heap_min="256m",
        heap_max="2g",
        jvm_options=MM2_JVM_OPTIONS,
    )
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

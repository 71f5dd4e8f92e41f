"""`make soak`: continuous replication under a steady load for an hour; lag bounded, RSS flat, nothing leaked.

What runs: two local clusters (source `A`, target `B`) of their own, a producer writing a fixed modest rate to a
source topic, and the replicator as production runs it outside Airflow: `mirrorflow run CONFIG --flow A->B`, one
long-lived process (with its Spark session and Python workers) looping copy cycles back to back. That is the
honest shape for a leak hunt: an Airflow deployment starts a fresh task process per run, which would hide a
leak, while the `run` loop keeps every client, JVM and worker for the whole hour.

Every `--interval` seconds it samples: replication lag (source end offsets minus the flow's committed progress),
and the RSS, open file descriptors and process count of the replicator's whole process tree (from /proc). After
the duration the producer stops, the replicator must catch up (lag 0), then it is interrupted (Ctrl-C, its clean
shutdown) and `mirrorflow audit` logic checks every record: 0 lost, 0 duplicated (exactly-once).

Pass criteria (after a warm-up: Spark start, the first backlog, JIT, heap sizing), see `judge`: lag below
`--max-lag` seconds of production; no upward lag trend (second-half median within a slack of the first half's);
RSS flat (second-half max within 15% + 64 MB of first-half max); fds within +20 and processes within +2 likewise.
On a machine so busy that the warm-up eats most of a short run, the load goes on (up to twice the duration + 600 s)
until 12 samples follow the warm-up. Exit 0 on pass, 1 on fail. Samples go to a CSV (`--csv`, default
var/soak/soak-<time>.csv) and a table on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.clients import admin_client
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.audit import audit_flow, committed_progress

FAULT_KEYS = ("lost", "duplicated", "out_of_order", "misplaced", "unexpected")
DURATION_ENV = "MIRRORFLOW_SOAK_SECONDS"
VALUE_BYTES = 200
MIN_STEADY_SAMPLES = 12
HEADER = f"{'t(s)':>8} {'produced':>10} {'copied':>10} {'lag':>8} {'lag(s)':>7} {'rss(MB)':>8} {'fds':>5} {'procs':>5}"


@dataclass(frozen=True)
class SoakOptions:
    seconds: float
    work_dir: Path
    csv_path: Path
    rate: int = 100  # records per second
    interval_s: float = 10.0
    partitions: int = 2
    warmup_s: float | None = None  # default: a fifth of the run, at least 60 s
    max_lag_s: float = 120.0  # lag bound, in seconds of production
    trend_slack_s: float = 30.0  # allowed rise of the median lag, in seconds of production
    rss_tolerance: float = 0.15
    rss_slack_mb: float = 64.0
    fd_slack: int = 20
    process_slack: int = 2
    drain_timeout_s: float = 300.0
    spark_master: str = "local[1]"

    @property
    def max_seconds(self) -> float:
        """The load runs `seconds`, longer (up to this) until MIN_STEADY_SAMPLES follow a slow warm-up."""
        return 2 * self.seconds + 600

    @property
    def warmup(self) -> float:
        return self.warmup_s if self.warmup_s is not None else max(60.0, self.seconds / 5)


@dataclass(frozen=True)
class Sample:
    elapsed_s: float
    produced: int
    source_end: int
    copied: int
    lag_records: int
    lag_s: float
    rss_mb: float
    fds: int
    processes: int


@dataclass
class SoakResult:
    samples: list[Sample]
    failures: list[str]
    audit: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


# ------------------------------------------------------------------------------------------- process tree


def tree_pids(root: int) -> list[int]:
    """`root` and all its descendants, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tree_usage(root: int) -> tuple[float, int, int]:
    """(RSS in MB summed over the tree, open fds, processes besides `root`); vanished processes count as 0."""
    rss_kb = fds = alive = 0
    for pid in tree_pids(root):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            fds += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
        alive += 1
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss_kb += int(line.split()[1])
    return rss_kb / 1024, fds, max(alive - 1, 0)


# --------------------------------------------------------------------------------------------- verdict


def warmup_end(samples: Sequence[Sample], options: SoakOptions) -> float:
    first_copy = next((s.elapsed_s for s in samples if s.copied > 0), 0.0)
    return max(options.warmup, first_copy + 30.0)


def steady_count(samples: Sequence[Sample], options: SoakOptions) -> int:
    """Samples past the warm-up (none before the first copy committed)."""
    if not any(s.copied > 0 for s in samples):
        return 0
    warmup = warmup_end(samples, options)
    return sum(1 for s in samples if s.elapsed_s >= warmup)


def summary(samples: Sequence[Sample], options: SoakOptions) -> str:
    """One line on the steady phase, first half -> second half, for the docs and the log."""
    warmup = warmup_end(samples, options)
    steady = [s for s in samples if s.elapsed_s >= warmup]
    if len(steady) < 2:
        return f"steady phase: {len(steady)} samples after the {warmup:.0f} s warm-up"
    first, second = steady[: len(steady) // 2], steady[len(steady) // 2 :]
    lag_1, lag_2 = statistics.median(s.lag_s for s in first), statistics.median(s.lag_s for s in second)
    return (
        f"steady phase from {warmup:.0f} s, {len(steady)} samples: lag median {lag_1:.1f} -> {lag_2:.1f} s, "
        f"max {max(s.lag_s for s in steady):.1f} s; "
        f"RSS max {max(s.rss_mb for s in first):.0f} -> {max(s.rss_mb for s in second):.0f} MB; "
        f"fds max {max(s.fds for s in first)} -> {max(s.fds for s in second)}; "
        f"processes max {max(s.processes for s in first)} -> {max(s.processes for s in second)}"
    )


def judge(samples: Sequence[Sample], options: SoakOptions) -> list[str]:
    """The pass criteria over the samples taken after the warm-up; one line per failed criterion.

    The warm-up lasts `options.warmup` and at least until 30 s after the first copy committed: on a busy machine
    the Spark session alone can take minutes to start, and the backlog it then copies says nothing about leaks."""
    first_copy = next((s.elapsed_s for s in samples if s.copied > 0), None)
    if first_copy is None:
        return ["the replicator never committed a copy: see its log"]
    warmup = warmup_end(samples, options)
    steady = [s for s in samples if s.elapsed_s >= warmup]
    if len(steady) < 4:
        return [f"only {len(steady)} samples after the {warmup:.0f} s warm-up: run longer or sample more often"]
    failures = []
    worst = max(steady, key=lambda s: s.lag_s)
    if worst.lag_s > options.max_lag_s:
        failures.append(
            f"lag {worst.lag_records} records ({worst.lag_s:.0f} s of production) at {worst.elapsed_s:.0f} s "
            f"exceeds the {options.max_lag_s:g} s bound"
        )
    first, second = steady[: len(steady) // 2], steady[len(steady) // 2 :]
    lag_1 = statistics.median(s.lag_records for s in first)
    lag_2 = statistics.median(s.lag_records for s in second)
    if lag_2 > lag_1 + options.rate * options.trend_slack_s:
        failures.append(f"lag grows: median {lag_1:.0f} records in the first half, {lag_2:.0f} in the second")
    rss_1, rss_2 = max(s.rss_mb for s in first), max(s.rss_mb for s in second)
    if rss_2 > rss_1 * (1 + options.rss_tolerance) + options.rss_slack_mb:
        failures.append(f"RSS grows: max {rss_1:.0f} MB in the first half, {rss_2:.0f} MB in the second")
    fds_1, fds_2 = max(s.fds for s in first), max(s.fds for s in second)
    if fds_2 > fds_1 + options.fd_slack:
        failures.append(f"open file descriptors grow: max {fds_1} in the first half, {fds_2} in the second")
    procs_1, procs_2 = max(s.processes for s in first), max(s.processes for s in second)
    if procs_2 > procs_1 + options.process_slack:
        failures.append(f"child processes grow: max {procs_1} in the first half, {procs_2} in the second")
    return failures


# -------------------------------------------------------------------------------------------- load


class SteadyProducer(threading.Thread):
    """Writes `rate` records per second (keys are sequence numbers) until stopped; counts acknowledged ones."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self._servers = bootstrap
        self._topic = topic
        self._rate = rate
        self._halt = threading.Event()
        self.sent = 0
        self.acked = 0
        self.errors: list[str] = []

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.acked += 1
        else:
            self.errors.append(str(err))

    def run(self) -> None:
        # Made here so that it is gone with the thread, before the clusters stop (no reconnect noise).
        producer = Producer(
            with_logger({"bootstrap.servers": self._servers, "linger.ms": 50, "enable.idempotence": True})
        )
        start = time.monotonic()
        padding = os.urandom(VALUE_BYTES // 2).hex().encode()
        while not self._halt.is_set():
            due = int((time.monotonic() - start) * self._rate)
            while self.sent < due:
                producer.produce(self._topic, key=str(self.sent).encode(), value=padding, on_delivery=self._on_delivery)
                self.sent += 1
            producer.poll(0.05)
        producer.flush(60)

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout=120)


# --------------------------------------------------------------------------------------------- run


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = admin_client({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})])[topic].result(60)


def write_config(path: Path, clusters: LocalClusters, topic: str, spark_master: str) -> Flow:
    body = (
        "admin.timeout.ms = 30000\n"
        "A->B.enabled = true\n"
        f"A->B.topics = {topic}\n"
        "A->B.mirrorflow.delivery = exactly-once\n"
        f"mirrorflow.spark.master = {spark_master}\n"
    )
    path.write_text(mm2_config_text(clusters.bootstraps(), body))
    return load_config(path).flow("A->B")


class ReplicatorDied(Exception):
    """`mirrorflow run` ended by itself: it fails on the first error, which the soak reports."""


class Replicator:
    """`mirrorflow run CONFIG --flow A->B` as a child process in its own session, output to a log file."""

    def __init__(self, config: Path, work_dir: Path) -> None:
        self.log = work_dir / "replicator.log"
        env = {**os.environ, "MIRRORFLOW_STATE_DIR": str(work_dir / "state")}
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mirrorflow", "run", str(config), "--flow", "A->B"],
                cwd=work_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise ReplicatorDied(f"the replicator exited with code {self.proc.returncode}:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Ctrl-C (its clean shutdown, Spark included); the whole session is killed if that hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=120)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # leftovers of the session this run started
        self.proc.wait(timeout=30)


class LagProbe:
    """Source end offsets of the topic and the flow's committed progress, summed over partitions."""

    def __init__(self, flow: Flow, bootstrap: str, topic: str, partitions: int) -> None:
        self._flow = flow
        self._consumer = Consumer(
            with_logger({"bootstrap.servers": bootstrap, "group.id": f"soak-probe-{uuid.uuid4().hex}"})
        )
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]
        self._topic = topic

    def measure(self, timeout_s: float = 120.0) -> tuple[int, int]:
        """Retried: a new topic's leader or a busy broker may answer with a transient error for a while."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._measure()
            except (KafkaException, MirrorflowError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def _measure(self) -> tuple[int, int]:
        end = sum(self._consumer.get_watermark_offsets(tp, timeout=30, cached=False)[1] for tp in self._tps)
        progress = committed_progress(self._flow, timeout_s=60)
        copied = sum(offset for (topic, _p), offset in progress.items() if topic == self._topic)
        return end, copied

    def close(self) -> None:
        self._consumer.close()


def print_row(sample: Sample) -> None:
    if sample.elapsed_s <= 0:
        return
    print(
        f"{sample.elapsed_s:8.0f} {sample.produced:10d} {sample.copied:10d} {sample.lag_records:8d} "
        f"{sample.lag_s:7.1f} {sample.rss_mb:8.0f} {sample.fds:5d} {sample.processes:5d}",
        flush=True,
    )


def run_soak(options: SoakOptions) -> SoakResult:
    """Start clusters, load and replicator; sample for `options.seconds`; drain, stop, audit, judge."""
    options.work_dir.mkdir(parents=True, exist_ok=True)
    options.csv_path.parent.mkdir(parents=True, exist_ok=True)
    topic = f"soak-{uuid.uuid4().hex[:8]}"
    samples: list[Sample] = []
    failures: list[str] = []
    clusters = LocalClusters(options.work_dir / "clusters", tie_to_parent=True, heap_max="384m", timeout_s=240)
    try:
        clusters.start("A", "B")
        create_topic(clusters.bootstrap("A"), topic, options.partitions)
        flow = write_config(options.work_dir / "mm2.properties", clusters, topic, options.spark_master)
        producer = SteadyProducer(clusters.bootstrap("A"), topic, options.rate)
        probe = LagProbe(flow, clusters.bootstrap("A"), topic, options.partitions)
        replicator = Replicator(options.work_dir / "mm2.properties", options.work_dir)
        print(f"soak: {options.seconds:g} s at {options.rate} records/s into {topic}; samples -> {options.csv_path}")
        print(HEADER, flush=True)
        try:
            producer.start()
            start = time.monotonic()
            with options.csv_path.open("w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow([f.name for f in fields(Sample)])
                draining_since: float | None = None
                while True:
                    next_at = time.monotonic() + options.interval_s
                    replicator.check_alive()
                    end, copied = probe.measure()
                    rss, fds, procs = tree_usage(replicator.proc.pid)
                    elapsed = time.monotonic() - start
                    lag = max(end - copied, 0)
                    sample = Sample(elapsed, producer.sent, end, copied, lag, lag / options.rate, rss, fds, procs)
                    writer.writerow(asdict(sample).values())
                    handle.flush()
                    print_row(sample)
                    if draining_since is None:
                        samples.append(sample)
                        if elapsed >= options.seconds and (
                            steady_count(samples, options) >= MIN_STEADY_SAMPLES or elapsed >= options.max_seconds
                        ):
                            producer.stop()
                            draining_since = time.monotonic()
                            print("load stopped; waiting for the replicator to catch up", flush=True)
                    elif lag == 0 and end >= producer.acked:
                        break
                    elif time.monotonic() - draining_since > options.drain_timeout_s:
                        failures.append(f"the replicator did not catch up within {options.drain_timeout_s:g} s")
                        break
                    time.sleep(max(0.0, next_at - time.monotonic()))
        except ReplicatorDied as err:
            failures.append(str(err))
        finally:
            producer.stop()
            replicator.stop()
            probe.close()
        if producer.errors:
            failures.append(f"{len(producer.errors)} produce errors, first: {producer.errors[0]}")
        audit = audit_flow(flow, topics=topic, timeout_s=300)
        faults = {key: audit[key] for key in FAULT_KEYS}
        if any(faults.values()) or audit["checked"] != producer.acked:
            failures.append(f"audit: {faults}, checked {audit['checked']} of {producer.acked} produced")
        failures.extend(judge(samples, options))
        return SoakResult(samples, failures, audit)
    finally:
        clusters.down(purge=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="soak", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--seconds", type=float, default=float(os.environ.get(DURATION_ENV, "3600")), help=f"(env {DURATION_ENV})"
    )
    parser.add_argument("--rate", type=int, default=100, help="records per second (default 100)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default 10)")
    parser.add_argument("--max-lag", type=float, default=120.0, help="lag bound in seconds of production")
    parser.add_argument("--csv", type=Path, default=None, help="where the samples go (default var/soak/...)")
    parser.add_argument("--dir", type=Path, default=None, help="working directory (default: a temporary one)")
    args = parser.parse_args(argv)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    csv_path = args.csv or Path("var/soak") / f"soak-{stamp}.csv"
    with tempfile.TemporaryDirectory(prefix="mirrorflow-soak-") as tmp:
        options = SoakOptions(
            seconds=args.seconds,
            work_dir=args.dir or Path(tmp),
            csv_path=csv_path,
            rate=args.rate,
            interval_s=args.interval,
            max_lag_s=args.max_lag,
        )
        result = run_soak(options)
    audit = {key: result.audit.get(key) for key in (*FAULT_KEYS, "checked")}
    print(summary(result.samples, options))
    print(f"audit: {audit}")
    print(f"samples: {csv_path}")
    if result.ok:
        print("soak: PASS")
        return 0
    print("soak: FAIL\n" + "\n".join(f"  - {line}" for line in result.failures))
    return 1


if __name__ == "__main__":
    sys.exit(main())

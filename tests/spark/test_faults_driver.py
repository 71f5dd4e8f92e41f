"""Fault matrix, Spark driver: `spark-submit` of the copy job (local master) is killed with SIGKILL, its whole
process group at once, at random points while records keep arriving; the next run resumes exactly where the
committed progress says and the audit finds every record once, in its partition and in order.

`make test` runs one trial (killed mid-copy); `make test-faults` runs MIRRORFLOW_FAULT_TRIALS (10) trials.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.audit import audit_flow, committed_progress
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("MIRRORFLOW_FAULT_TRIALS") or 1)
PARTITIONS = 4
RATE = 1000  # records per second produced while the copy runs...
PER_TRIAL = 30_000  # ...up to this many per trial, however long a slow machine takes to start Spark
FAULT_KEYS = ("lost", "duplicated", "out_of_order", "misplaced", "unexpected")


def write_config(tmp_path: Path, clusters: LocalClusters, topic: str) -> Path:
    path = tmp_path / "mm2.properties"
    flow_lines = (
        "admin.timeout.ms = 30000\n"
        "A->B.enabled = true\n"
        f"A->B.topics = {topic}\n"
        "A->B.heartbeats.replication.enabled = false\n"
        "A->B.mirrorflow.spark.master = local[2]\n"
    )
    path.write_text(mm2_config_text({a: clusters.bootstrap(a) for a in ("A", "B")}, flow_lines))
    return path


class SteadyProducer:
    """Produces numbered records round-robin over the partitions at a steady rate, within a budget that each
    trial raises (`allow`), until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.count = 0
        self.budget = 0
        self._producer = Producer(with_logger({"bootstrap.servers": bootstrap, "linger.ms": 20}))
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def allow(self, records: int) -> None:
        self.budget = self.count + records

    def _run(self) -> None:
        started, base = time.monotonic(), 0
        while not self._stop.is_set():
            if self.count >= self.budget:
                started, base = time.monotonic(), self.count
            due = min(base + int((time.monotonic() - started) * RATE), self.budget)
            while self.count < due:
                self._producer.produce(
                    self._topic, key=str(self.count).encode(), value=b"r" * 200, partition=self.count % PARTITIONS
                )
                self.count += 1
            self._producer.poll(0.01)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert self._producer.flush(60) == 0


def spark_submit(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """The copy job as Airflow starts it, in a process group of its own (what a kill of the driver hits)."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYSPARK_PYTHON": sys.executable}
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(bin_dir / "spark-submit"), str(REPO / "spark_jobs" / "mirrorflow_copy.py"), str(config), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill_driver(proc: subprocess.Popen[bytes]) -> int:
    """SIGKILL the driver's process group; then wait for every process it had started (PySpark's worker daemon
    runs in a group of its own and exits when the JVM's pipe closes), SIGKILL any still there after 30 s.
    Returns how many processes had to be killed that way."""
    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    _gone, alive = psutil.wait_procs(tree, timeout=30)
    for p in alive:
        p.kill()
    psutil.wait_procs(alive, timeout=30)
    return len(alive)


def remote_end(bootstrap: str, topic: str) -> int:
    consumer = Consumer(with_logger({"bootstrap.servers": bootstrap, "group.id": "faults-driver-probe"}))
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(PARTITIONS)
        )
    finally:
        consumer.close()


def copied(flow: Flow, topic: str) -> int:
    return sum(n for (t, _p), n in committed_progress(flow, 60).items() if t == topic)


@dataclass
class Trial:
    kill_at_s: float
    where: str  # "before writes" or "mid-copy"
    copied_by_trial: int
    leftovers: int


@pytest.fixture
def reap() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Drivers a failing test leaves behind are killed at its end."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            kill_driver(proc)


# Each trial starts a JVM and a SparkContext: minutes apiece when the machine is busy.
@pytest.mark.timeout(600 + 300 * TRIALS)
def test_killed_drivers_resume_exactly(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    unique_topic: Callable[..., str],
    reap: list[subprocess.Popen[bytes]],
) -> None:
    topic = unique_topic("driver")
    kafka_admin("A").create_topics([NewTopic(topic, PARTITIONS, 1, config={"retention.ms": "-1"})])[topic].result()
    config = write_config(tmp_path, kafka_clusters, topic)
    flow = load_config(config).flow("A->B")
    run_control_plane(flow)
    remote = f"A.{topic}"
    log = tmp_path / "spark-submit.log"
    rng = random.Random(topic)
    trials: list[Trial] = []
    with SteadyProducer(kafka_clusters.bootstrap("A"), topic) as source:
        for n in range(TRIALS):
            before, copied_before = remote_end(kafka_clusters.bootstrap("B"), remote), copied(flow, topic)
            source.allow(PER_TRIAL)
            proc = spark_submit(config, log, "--flow", "A->B", "--mode", "continuous", "--run-seconds", "120")
            reap.append(proc)
            started = time.monotonic()
            # The first trial always waits for the copy to write; the others also die at random earlier points.
            if n == 0 or rng.random() < 0.7:
                while proc.poll() is None and remote_end(kafka_clusters.bootstrap("B"), remote) == before:
                    assert time.monotonic() - started < 300, "the copy job wrote nothing in 300 s"
                    time.sleep(0.05)
                time.sleep(rng.uniform(0.0, 3.0))
            else:
                time.sleep(rng.uniform(0.5, 15.0))
            assert proc.poll() is None, f"the driver ended before the kill:\n{log.read_text()[-3000:]}"
            wrote = remote_end(kafka_clusters.bootstrap("B"), remote) > before
            kill_at = time.monotonic() - started
            leftovers = kill_driver(proc)
            trial = Trial(round(kill_at, 1), "mid-copy" if wrote else "before writes", 0, leftovers)
            trial.copied_by_trial = copied(flow, topic) - copied_before
            trials.append(trial)
            print(f"driver kill {n}: {trial}")
    assert any(t.where == "mid-copy" for t in trials)

    resumed_from = copied(flow, topic)
    summary_file = tmp_path / "summary.json"
    final = spark_submit(config, log, "--flow", "A->B", "--mode", "interval", "--summary-file", str(summary_file))
    reap.append(final)
    assert final.wait(timeout=600) == 0, log.read_text()[-3000:]
    summary = json.loads(summary_file.read_text())
    assert summary["records"] == source.count - resumed_from, "the run copies exactly what was left"

    report = audit_flow(flow, topics=topic, timeout_s=60)
    faults = {k: report[k] for k in FAULT_KEYS}
    print(f"driver kills: {len(trials)} trials, produced {source.count}, audit {faults}")
    assert report["checked"] == source.count and report["not_yet_copied"] == 0, report
    assert faults == dict.fromkeys(FAULT_KEYS, 0), report

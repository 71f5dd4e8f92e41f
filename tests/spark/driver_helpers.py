"""What the Spark driver fault trials share: the copy job started as Airflow starts it (`spark-submit` in a
process group of its own), a steady numbered producer, its whole process tree killed, frozen or thawed, and the
probes of what reached the target."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition

from mirrorflow.config.model import Flow
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.audit import committed_progress

REPO = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("MIRRORFLOW_FAULT_TRIALS") or 1)
PARTITIONS = 4
RATE = 1000  # records per second produced while the copy runs...


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

    def __init__(self, bootstrap: str, topic: str, rate: int = RATE) -> None:
        self.count = 0
        self.rate = rate
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
            due = min(base + int((time.monotonic() - started) * self.rate), self.budget)
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
    thaw(tree)  # a frozen worker daemon (a group of its own) must run to see the JVM's pipe close and exit
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    _gone, alive = psutil.wait_procs(tree, timeout=30)
    for p in alive:
        p.kill()
    psutil.wait_procs(alive, timeout=30)
    return len(alive)


def freeze(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """SIGSTOP the driver and every process under it (the JVM and PySpark's workers, which do the copying and
    live in a group of their own), deepest first, until a listing finds no process left running: a worker forked
    while the tree was being stopped is stopped too. Returns the frozen processes, for `thaw`."""
    frozen: dict[int, psutil.Process] = {}
    while True:
        root = psutil.Process(proc.pid)
        tree = [p for p in reversed([root, *root.children(recursive=True)]) if p.pid not in frozen]
        if not tree:
            return list(frozen.values())
        for p in tree:
            try:
                p.suspend()
                frozen[p.pid] = p
            except psutil.NoSuchProcess:
                pass


def thaw(frozen: list[psutil.Process]) -> None:
    """SIGCONT what `freeze` stopped, the driver last (as it was stopped first)."""
    for p in frozen:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.resume()


def remote_end(bootstrap: str, topic: str, committed: bool = False) -> int:
    """The target topic's end summed over its partitions: the high watermarks (records of open transactions
    included), or with `committed` the last stable offsets (up to the first record of an open transaction)."""
    conf = {"bootstrap.servers": bootstrap, "group.id": "faults-driver-probe"}
    if committed:
        conf["isolation.level"] = "read_committed"
    consumer = Consumer(with_logger(conf))
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(PARTITIONS)
        )
    finally:
        consumer.close()


def copied(flow: Flow, topic: str) -> int:
    return sum(n for (t, _p), n in committed_progress(flow, 60).items() if t == topic)


def wait_for_writes(
    proc: subprocess.Popen[bytes], bootstrap: str, remote: str, above: int, log: Path, committed: bool = False
) -> None:
    """Until the target topic's end (`remote_end`) passes `above` while `proc` runs (a Spark start takes minutes
    on a busy machine)."""
    started = time.monotonic()
    while remote_end(bootstrap, remote, committed) <= above:
        assert proc.poll() is None, f"the copy job ended before it wrote:\n{log.read_text()[-3000:]}"
        assert time.monotonic() - started < 300, "the copy job wrote nothing in 300 s"
        time.sleep(0.05)

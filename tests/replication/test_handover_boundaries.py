"""Five run boundaries of continuous exactly-once mode under a steady producer (issue 19): each run's copy is its
own process, as each DAG run's spark-submit is; the next run starts while the current one is still copying and
fences it (the handover: the old run ends cleanly as handed over), except at one boundary where the old run is
SIGKILLed first (the next run then resumes from the committed progress, and initialising its producers aborts
the killed run's open transaction). The audit then finds every record once: 0 lost, 0 duplicated (about 50 s on
2 cores).

The copy processes run `copy_range` of every task in threads until they end. The last run is in this process: it
takes over from the fifth and is stopped once the target has caught up, ending with a commit (a killed last run
would leave a transaction open for the audit's reads to wait out)."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from tests.kafka_helpers import create_topic
from tests.replication.conftest import WriteConfig
from tests.replication.helpers import FAULT_KEYS, committed_count, continuous_tasks, start_feeder

from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.audit import audit_flow
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyResult, CopyTask

pytestmark = pytest.mark.integration
PARTITIONS = 2
BOUNDARIES = 5
KILLED_AT = 3  # the boundary whose old run is SIGKILLed instead of handing over
RUN_S = 4.0  # how long each run copies before the next one starts
RUNNER = (
    "import pickle, sys, threading\n"
    "from mirrorflow.replication.copy_range import copy_range\n"
    "tasks = pickle.load(open(sys.argv[1], 'rb'))\n"
    "results = {}\n"
    "def run(t):\n"
    "    results[t.partition] = copy_range(t)\n"
    "threads = [threading.Thread(target=run, args=(t,)) for t in tasks]\n"
    "[t.start() for t in threads]\n"
    "[t.join() for t in threads]\n"
    "assert len(results) == len(tasks) and all(r.handed_over for r in results.values()), results\n"
)


@pytest.fixture
def steady_producer(
    kafka_producer: Callable[..., Producer],
) -> Iterator[Callable[[str], tuple[threading.Event, list[int]]]]:
    """Starts a producer writing ~300 records/s round-robin over the topic's partitions until its event clears."""
    feeders: list[tuple[threading.Event, list[int], threading.Thread]] = []

    def start(topic: str) -> tuple[threading.Event, list[int]]:
        feeders.append(start_feeder(kafka_producer, topic, 0.003, PARTITIONS))
        return feeders[-1][0], feeders[-1][1]

    yield start
    for producing, _sent, thread in feeders:
        producing.clear()
        thread.join(60)


def start_run(tasks: list[CopyTask], tmp_path: Path, n: int) -> subprocess.Popen[bytes]:
    path = tmp_path / f"run{n}.pickle"
    path.write_bytes(pickle.dumps(tasks))
    return subprocess.Popen([sys.executable, "-c", RUNNER, str(path)])


def wait_for_writes(clusters: LocalClusters, remote: str, above: list[int], timeout_s: float = 60) -> list[int]:
    """The target partitions' ends once each is above `above` (the new run writes; the audit checks the rest).
    Not a read_committed count: under a steady producer such a read chases the end and need not stop."""
    probe = Consumer(with_logger({"bootstrap.servers": clusters.bootstrap("B"), "group.id": "boundaries-probe"}))
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            ends = [probe.get_watermark_offsets(TopicPartition(remote, p), timeout=10)[1] for p in range(PARTITIONS)]
            if all(e > b for e, b in zip(ends, above, strict=True)):
                return ends
            assert time.monotonic() < deadline, f"the new run wrote nothing: {ends}"
            time.sleep(0.3)
    finally:
        probe.close()


@pytest.mark.timeout(600)
def test_five_run_boundaries_under_a_steady_producer_lose_and_duplicate_nothing(
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    unique_topic: Callable[..., str],
    write_config: WriteConfig,
    steady_producer: Callable[[str], tuple[threading.Event, list[int]]],
    tmp_path: Path,
) -> None:
    topic = unique_topic("boundaries")
    create_topic(kafka_admin("A"), topic, PARTITIONS)
    tasks = continuous_tasks(write_config, topic, PARTITIONS)
    flow = write_config(f"A->B.enabled = true\nA->B.topics = {topic}\n").flow("A->B")
    remote = f"A.{topic}"
    producing, sent = steady_producer(topic)
    current = start_run(tasks, tmp_path, 0)
    counts = wait_for_writes(kafka_clusters, remote, [0] * PARTITIONS)
    for boundary in range(1, BOUNDARIES + 1):
        time.sleep(RUN_S)
        if boundary == KILLED_AT:
            current.send_signal(signal.SIGKILL)
            assert current.wait(30) == -signal.SIGKILL
        began = time.monotonic()
        following = start_run(tasks, tmp_path, boundary)
        if boundary != KILLED_AT:
            assert current.wait(90) == 0, f"boundary {boundary}: the old run did not end as handed over"
        print(f"boundary {boundary}: old run ended {time.monotonic() - began:.1f} s", flush=True)
        counts = wait_for_writes(kafka_clusters, remote, counts)
        print(f"boundary {boundary}: new run copies {time.monotonic() - began:.1f} s {counts}", flush=True)
        assert following.poll() is None, f"boundary {boundary}: the new run ended early"
        current = following
    time.sleep(RUN_S)
    stop, results = threading.Event(), []  # the last run: takes over from the fifth, then stopped
    last = [threading.Thread(target=lambda t=t: results.append(copy_range(t, stop=stop.is_set))) for t in tasks]
    for thread in last:
        thread.start()
    assert current.wait(90) == 0, "the fifth run did not end as handed over"
    producing.clear()
    time.sleep(0.5)
    total = len(sent)
    deadline = time.monotonic() + 90
    while sum(committed_count(kafka_clusters, remote, p) for p in range(PARTITIONS)) < total:
        assert time.monotonic() < deadline, "the last run did not catch up"
        time.sleep(0.5)
    stop.set()
    for thread in last:
        thread.join(60)
    assert len(results) == PARTITIONS and all(isinstance(r, CopyResult) for r in results), results
    report = audit_flow(flow, topics=topic, timeout_s=60)
    assert report["checked"] == total and {k: report[k] for k in FAULT_KEYS} == dict.fromkeys(FAULT_KEYS, 0), report

"""Fault matrix, Airflow retry: the first attempt of a flow DAG's `copy` task dies (its spark-submit process tree
is SIGKILLed mid-copy) and Airflow's retry completes the run; try 2 resumes exactly at the committed progress and
the audit finds every record once, in its partition and in order.

`dag.test()` in Airflow 3.3 honours retries: it runs each task through the in-process Execution API, which
marks a failed try `up_for_retry` while retries remain, and its scheduling loop runs the next try once
`retry_delay` has passed. The test shortens that delay (and the backoff) on the `copy` task only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import threading
import time
import uuid
from typing import Any

import psutil
import pytest
from confluent_kafka import Consumer, TopicPartition
from tests.replication.helpers import FAULT_KEYS

from mirrorflow.config.loader import load_config
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.audit import audit_flow, committed_progress

pytestmark = pytest.mark.integration
PARTITIONS = 2
RECORDS = 300_000  # several transactions per partition: the copy is still writing after its first commit


def committed_end(bootstrap: str, topic: str) -> int:
    """The sum of the last stable offsets: what read_committed readers see of the remote topic."""
    consumer = Consumer(
        with_logger(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"probe-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
            }
        )
    )
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(PARTITIONS)
        )
    finally:
        consumer.close()


class FirstAttemptKiller(threading.Thread):
    """Finds the copy job's spark-submit (a child of this process, started by the task's SparkSubmitHook), waits
    until its first transaction commits, then SIGKILLs its whole process tree: what a worker crash does to it."""

    def __init__(self, marker: str, bootstrap: str, remote: str) -> None:
        super().__init__(daemon=True)
        self.marker, self.bootstrap, self.remote = marker, bootstrap, remote
        self.committed_at_kill: int | None = None
        self.error: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 600
            job = None
            while job is None:
                if time.monotonic() > deadline:
                    self.error = "no spark-submit of the copy job appeared in 600 s"
                    return
                job = next((p for p in psutil.Process().children(recursive=True) if self._is_job(p)), None)
                time.sleep(0.05)
            while committed_end(self.bootstrap, self.remote) == 0:
                if time.monotonic() > deadline or not job.is_running():
                    self.error = "the first attempt ended (or wrote nothing in 600 s) before the kill"
                    return
                time.sleep(0.02)
            tree = [job, *job.children(recursive=True)]
            for proc in tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.send_signal(signal.SIGKILL)
            psutil.wait_procs(tree, timeout=60)
            self.committed_at_kill = committed_end(self.bootstrap, self.remote)
        finally:
            self.done.set()

    def _is_job(self, proc: psutil.Process) -> bool:
        try:
            return any(self.marker in arg for arg in proc.cmdline())
        except psutil.Error:
            return False


def task_tries(dag_run: Any) -> dict[str, tuple[str, int]]:
    return {ti.task_id: (str(ti.state), ti.try_number) for ti in dag_run.get_task_instances()}


@pytest.mark.timeout(1800)  # two spark-submits and a whole DAG run: many minutes when the machine is busy
def test_a_copy_task_killed_mid_copy_is_completed_by_airflows_retry(airflow_db: None, live_flow: Any) -> None:
    kafka_clusters: LocalClusters = live_flow.clusters
    topic = live_flow.source_topic("retry", PARTITIONS, {"retention.ms": "-1"})
    producer = live_flow.producer("A", {"linger.ms": 50})
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=b"a" * 200, partition=i % PARTITIONS)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
    assert producer.flush(60) == 0
    config = live_flow.tmp_path / "mm2.properties"
    flow_lines = (
        "admin.timeout.ms = 30000\n"
        "A->B.enabled = true\n"
        f"A->B.topics = {topic}\n"
        "A->B.heartbeats.replication.enabled = false\n"
        "A->B.mirrorflow.copy.mode = interval\n"
        "A->B.mirrorflow.spark.master = local[2]\n"
    )
    config.write_text(live_flow.config_text(flow_lines))
    dag = live_flow.dag(config)
    copy = dag.task_dict["copy"]
    assert copy.retries >= 1, "the factory gives the copy task retries"
    copy.retry_delay = dt.timedelta(seconds=1)
    copy.retry_exponential_backoff = 0

    remote = f"A.{topic}"
    killer = FirstAttemptKiller(str(config), kafka_clusters.bootstrap("B"), remote)
    killer.start()
    started = time.monotonic()
    dag_run = dag.test()
    elapsed = time.monotonic() - started
    assert killer.done.wait(60) and killer.error is None, killer.error

    tries = task_tries(dag_run)
    print(f"airflow retry: {tries}, committed at the kill {killer.committed_at_kill}, dag.test {elapsed:.0f} s")
    assert dag_run.state == "success", tries
    assert tries["copy"] == ("success", 2), "the first try died, Airflow's second completed the copy"
    assert killer.committed_at_kill is not None
    # the remote topic's last stable offsets count one commit marker per transaction
    assert 0 < killer.committed_at_kill < RECORDS, "killed mid-copy, after a commit"

    flow = load_config(config).flow("A->B")
    result = live_flow.return_value(dag_run, "copy")
    report = audit_flow(flow, topics=topic, timeout_s=60)
    faults = {k: report[k] for k in FAULT_KEYS}
    print(f"airflow retry: try 2 copied {result['records']}, audit {faults}, checked {report['checked']}")
    assert sum(n for (t, _p), n in committed_progress(flow, 60).items() if t == topic) == RECORDS
    assert 0 < result["records"] < RECORDS, "try 2 resumed from the first try's committed progress"
    assert report["checked"] == RECORDS and report["not_yet_copied"] == 0, report
    assert faults == dict.fromkeys(FAULT_KEYS, 0), report
    assert os.environ.get("AIRFLOW_CONN_MIRRORFLOW_SPARK") is None, "the task's temporary connection is gone"

"""Rounds inside one Spark application (issue 19, `mirrorflow.copy.round.seconds`), on real Spark and brokers:
the copy job as Airflow runs it (`spark-submit spark_jobs/mirrorflow_copy.py`), a steady producer, and the
source topic grown by one partition five times while the run copies. Each growth changes the plan, so the next
round starts Spark tasks for the changed groups inside the same application; their ranges fence the running
ones of the same partitions (the handover), the unchanged tasks copy on. The audit then finds every record
once: 0 lost, 0 duplicated (about 70 s on 2 cores). Just after one growth every Python worker of the application
is SIGKILLed (those of the handing-over round and of the new one alike): Spark retries their tasks, the older
round's retries find the newer round's claims and leave, and still nothing is lost or duplicated."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from tests.replication.helpers import FAULT_KEYS, committed_count, start_feeder
from tests.spark.test_copy_job import spark_env, spark_submit_command, write_config

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.audit import audit_flow
from mirrorflow.replication.copy_loop import HANDOVER_CLAIM_WAIT_S
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration
GROWTHS = 5
KILLED_AT = 2  # the growth after which the copy's Python workers are SIGKILLed
ROUND_S = 4
RUN_S = 90  # rounds start up to RUN_S - ROUND_MARGIN_S (15 s) into the run: after the last growth


ROUNDS_CONFIG = (
    f"A->B.mirrorflow.copy.round.seconds = {ROUND_S}\n"
    "A->B.mirrorflow.copy.handover.seconds = 0\n"  # runs that overlap would stop rounds 60 s earlier
    "A->B.heartbeats.replication.enabled = false\n"
)


def kill_copy_workers(job: subprocess.Popen[str]) -> int:
    """SIGKILL the Python workers PySpark's daemon forked for the copy's tasks (not the daemon): what a worker
    crash does to a Spark task. Returns how many were killed."""
    daemons: dict[int, psutil.Process] = {}
    for p in psutil.Process(job.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a worker that ended meanwhile (a zombie has no command line)
            if "pyspark.daemon" in " ".join(p.cmdline()):
                daemons[p.pid] = p
    killed = 0
    for p in daemons.values():
        with contextlib.suppress(psutil.Error):
            if p.ppid() in daemons:
                p.kill()
                killed += 1
    return killed


def grow(admin: AdminClient, topic: str, count: int) -> None:
    admin.create_partitions([NewPartitions(topic, count)])[topic].result()


def continuous_flow(tmp_path: Path, clusters: LocalClusters, topic: str, settings: str) -> tuple[Path, Flow]:
    """mm2.properties of a continuous flow A->B of `topic` with `settings` added, and the flow, its control plane
    run (remote topics and state topics made)."""
    config = tmp_path / "mm2.properties"
    config.write_text(write_config(tmp_path, clusters, topic).read_text().replace("interval", "continuous") + settings)
    flow = load_config(config).flow("A->B")
    run_control_plane(flow)
    return config, flow


def start_rounds_job(tmp_path: Path, clusters: LocalClusters, topic: str) -> tuple[Flow, subprocess.Popen[str], Path]:
    """The flow (continuous, rounds of ROUND_S, control plane run) and its copy job started as Airflow starts
    it, for RUN_S; the job's summary file."""
    config, flow = continuous_flow(tmp_path, clusters, topic, ROUNDS_CONFIG)
    summary_file = tmp_path / "summary.json"
    args = ("--flow", "A->B", "--run-seconds", str(RUN_S), "--summary-file", str(summary_file))
    job = subprocess.Popen(
        spark_submit_command(str(config), *args),
        env=spark_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return flow, job, summary_file


def remote_ends(clusters: LocalClusters, remote: str, partitions: list[int]) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    from mirrorflow.kafka.client_logs import with_logger

    probe = Consumer(with_logger({"bootstrap.servers": clusters.bootstrap("B"), "group.id": "rounds-probe"}))
    try:
        return [int(probe.get_watermark_offsets(TopicPartition(remote, p), timeout=10)[1]) for p in partitions]
    finally:
        probe.close()


@pytest.mark.timeout(600)
def test_five_rounds_hand_over_inside_one_application_and_lose_nothing(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
) -> None:
    topic, partitions = unique_topic("rounds"), [2]
    kafka_admin("A").create_topics([NewTopic(topic, partitions[0], 1)])[topic].result()
    flow, job, summary_file = start_rounds_job(tmp_path, kafka_clusters, topic)
    remote = f"A.{topic}"
    producing, sent, feeder = start_feeder(kafka_producer, topic, 0.003, lambda: partitions[0])
    try:
        deadline = time.monotonic() + 120
        while sum(remote_ends(kafka_clusters, remote, list(range(partitions[0])))) == 0:
            assert job.poll() is None and time.monotonic() < deadline, "the copy wrote nothing"
            time.sleep(0.5)
        killed = 0
        for growth in range(GROWTHS):
            time.sleep(ROUND_S + 0.5)
            grow(kafka_admin("B"), remote, partitions[0] + 1)  # the remote first: copyable once both have it
            grow(kafka_admin("A"), topic, partitions[0] + 1)
            partitions[0] += 1
            if growth == KILLED_AT:
                time.sleep(ROUND_S / 2 + 1)  # the next round has planned and started its tasks by now
                killed = kill_copy_workers(job)
        time.sleep(ROUND_S)
    finally:
        producing.clear()
        feeder.join(60)
    output, _ = job.communicate(timeout=300)
    assert job.returncode == 0, output[-3000:]
    assert killed >= 1, "no copy worker was found to kill"
    summary = json.loads(summary_file.read_text())
    # a growth may land in the same round as the next one
    assert summary["round_handovers"] >= 3, (summary, output[-3000:])
    assert len(summary["ranges"]) > partitions[0], "ranges handed over within the run are in its results"
    report = audit_flow(flow, topics=topic, timeout_s=60)
    ranges = sorted((r["partition"], r["next_upstream"], r.get("handed_over")) for r in summary["ranges"])
    assert report["checked"] == len(sent), (report, ranges, summary, output[-6000:])
    assert {k: report[k] for k in FAULT_KEYS} == dict.fromkeys(FAULT_KEYS, 0), report


@pytest.mark.timeout(600)
def test_a_drain_in_the_middle_of_rounds_loses_and_duplicates_nothing(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
) -> None:
    """An interval copy of partition 0 (what a failover's drain does) fences the rounds' range of that partition
    mid-run and copies up to the end it saw. Records produced after it are still copied by the running
    application: its range takes the partition back from a copy that recorded no run start and has ended, or,
    when it had ended as handed over, the next round but one starts it again (failed first: never restarted,
    30 records waited for the run's end). The audit finds every record once."""
    from mirrorflow.replication.copy_plan import copyable, plan_copy
    from mirrorflow.replication.copy_range import copy_range
    from mirrorflow.replication.discovery import discover
    from mirrorflow.replication.flow_clients import FlowClients

    topic = unique_topic("rounds-retake")
    kafka_admin("A").create_topics([NewTopic(topic, 1, 1)])[topic].result()
    flow, job, summary_file = start_rounds_job(tmp_path, kafka_clusters, topic)
    remote = f"A.{topic}"
    producer = kafka_producer("A")

    def produce(count: int) -> None:
        for i in range(count):
            producer.produce(topic, value=f"v{i}".encode(), partition=0)
        assert producer.flush(30) == 0

    produce(100)
    try:
        deadline = time.monotonic() + 120
        while remote_ends(kafka_clusters, remote, [0])[0] < 100:
            assert job.poll() is None and time.monotonic() < deadline, "the rounds' copy wrote nothing"
            time.sleep(0.5)
        produce(50)
        with FlowClients(flow) as clients:
            planned = plan_copy(flow, copyable(discover(flow, clients)), interval=True)
        drained = copy_range(planned[0])  # fences the rounds' range; copies what it had not, up to the end seen
        assert drained.next_upstream == 150, drained
        produce(30)
        began = time.monotonic()
        while committed_count(kafka_clusters, remote, 0) < 180:  # (aborted writes count in the log's end)
            waited = time.monotonic() - began
            # a fenced range waits up to HANDOVER_CLAIM_WAIT_S for a successor's claim, then a round passes
            assert waited < HANDOVER_CLAIM_WAIT_S + 3 * ROUND_S + 10, f"partition 0 not copied for {waited:.0f} s"
            assert job.poll() is None, "the rounds' copy ended early"
            time.sleep(0.5)
    finally:
        output, _ = job.communicate(timeout=300)
    assert job.returncode == 0, output[-3000:]
    summary = json.loads(summary_file.read_text())
    rounds_log = [line for line in output.splitlines() if "copy round" in line]
    assert (summary["round_handovers"], summary["round_restarts"]) in ((0, 0), (0, 1)), (summary, rounds_log)
    report = audit_flow(flow, topics=topic, timeout_s=60)
    assert report["checked"] == 180 and {k: report[k] for k in FAULT_KEYS} == dict.fromkeys(FAULT_KEYS, 0), report

"""Faults in the copy: an executor killed with SIGKILL mid-range, then re-run, leaves the target equal to the
source with 0 duplicates in exactly-once mode; at-least-once duplicates stay within the unflushed batches; a
zombie writer is fenced. CI-sized here; `make test-faults` raises the trial count."""

from __future__ import annotations

import os
import pickle
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.kafka_helpers import KafkaKit
from tests.replication.helpers import a_to_b, copy_tasks

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.sample_data import read_topic
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyTask
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration
TRIALS = int(os.environ.get("MIRRORFLOW_FAULT_TRIALS", "3"))
RECORDS = 50_000
BATCH = 500
RUNNER = (
    "import pickle, sys; from mirrorflow.replication.copy_range import copy_range; "
    "copy_range(pickle.load(open(sys.argv[1], 'rb')))"
)


def make_flow(write_config: Callable[..., MirrorConfig], topic: str, delivery: str) -> Flow:
    """The flow of `topic`, with its remote topic and internal topics created by the control plane."""
    flow = a_to_b(write_config, topics=topic, **{"mirrorflow.delivery": delivery})
    run_control_plane(flow)
    return flow


def seed(admin: AdminClient, producer: Producer, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode() * 20, partition=0)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def kill_mid_copy(task: CopyTask, tmp_path: Path, rng: random.Random, probe: Consumer) -> bool:
    """Start the copy in its own process and SIGKILL it at a random moment after it began writing; False if it
    finished first."""
    task_file = tmp_path / "task.pickle"
    task_file.write_bytes(pickle.dumps(task))
    tp = TopicPartition(task.remote_topic, 0)
    before = probe.get_watermark_offsets(tp, timeout=10, cached=False)[1]
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(task_file)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        if probe.get_watermark_offsets(tp, timeout=10, cached=False)[1] > before:
            break
        time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 0.15))
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return killed


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_killed_copies_resume_without_loss(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit, delivery: str
) -> None:
    topic = kafka.topic("fault")
    seed(kafka.admin("A"), kafka.producer("A"), topic)
    flow = make_flow(write_config, topic, delivery)
    [task] = copy_tasks(flow, topic, batch_records=BATCH, batch_ms=100)
    rng = random.Random(f"{delivery}-{topic}")
    partial = []
    probe = kafka.consumer("B")
    for _ in range(TRIALS):
        if kill_mid_copy(task, tmp_path, rng, probe):
            partial.append(len(read_topic(kafka.bootstrap("B"), f"A.{topic}").get(0, [])))
    assert any(0 < n < RECORDS for n in partial), f"no kill landed mid-range (visible after kills: {partial})"
    copy_range(task)

    copied = [r[0] for r in read_topic(kafka.bootstrap("B"), f"A.{topic}")[0]]
    counts = Counter(copied)
    assert set(counts) == {str(i).encode() for i in range(RECORDS)}, "every record arrived"
    duplicates = sum(n - 1 for n in counts.values())
    if delivery == "exactly-once":
        assert duplicates == 0
        assert copied == [str(i).encode() for i in range(RECORDS)], "in order, once"
    else:
        # Each kill can re-copy at most what was flushed but not yet recorded as progress: one batch.
        assert duplicates <= TRIALS * BATCH


def test_a_zombie_writer_is_fenced(write_config: Callable[..., MirrorConfig], kafka: KafkaKit) -> None:
    topic = kafka.topic("zombie")
    seed(kafka.admin("A"), kafka.producer("A"), topic)
    [task] = copy_tasks(make_flow(write_config, topic, "exactly-once"), topic)
    zombie = TargetWriter("B", task.target_producer, transactional_id=task.transactional_id, timeout_s=30)
    zombie.begin()
    zombie.produce(task.remote_topic, 0, b"zombie", b"must never be visible")
    zombie.flush()
    assert copy_range(task).records == RECORDS  # the new attempt fences the zombie and copies everything
    with pytest.raises(MirrorflowError):
        zombie.commit()
    copied = read_topic(kafka.bootstrap("B"), task.remote_topic)[0]
    assert len(copied) == RECORDS and all(key != b"zombie" for key, *_ in copied)

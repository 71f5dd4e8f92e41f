"""`mirrorflow failover` really killed mid-way: SIGKILL while the runbook waits inside `verify_fence`, then the
same command again, from another working directory (another machine: the state is in Kafka, nothing on disk).
It must not be blocked by the dead run (its transactional writer is fenced by the new one), must resume at
`verify_fence` (the fence command is not run twice) and must complete with the group's offsets committed on B:
0 re-read, 0 skipped.

Runs on the session clusters A and B: nothing here stops or reconfigures a broker (~20 s).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.kafka_helpers import KafkaKit
from tests.replication.helpers import commit_offsets, failover_config
from tests.replication.runbook_helpers import MIRRORFLOW, machine_env, mirrorflow, runbook_statuses, unpause_all

from mirrorflow.config.model import MirrorConfig
from mirrorflow.kafka.groups import committed_offsets

pytestmark = pytest.mark.integration


def test_a_killed_runbook_resumes_after_its_last_completed_step(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    topic = kafka.topic("fokill")
    group = f"fokill-{uuid.uuid4().hex[:8]}"
    config = failover_config(write_config, kafka.admin("A"), topic, 1, group)
    producer = kafka.producer("A")
    for i in range(20):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    commit_offsets(kafka.admin("A"), group, {(topic, 0): 7})

    flow = config.flow("A->B")
    fence_log = tmp_path / "fence.log"
    command = [
        str(MIRRORFLOW),
        "failover",
        str(config.path),
        "--primary",
        "A",
        "--dr",
        "B",
        "--groups",
        group,
        "--fence",
        "command",
        "--fence-command",
        f"echo fenced >> {fence_log}",
        "--json",
    ]
    first_machine = tmp_path / "first"
    first_machine.mkdir()
    # A long verification window: the run is certainly inside verify_fence when it is killed. --restart: the
    # session's B may hold an earlier CLI failover A->B of another test.
    first = subprocess.Popen(
        [*command, "--fence-verify-seconds", "300", "--restart"],
        cwd=first_machine,
        env=machine_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while runbook_statuses(flow, "failover", "").get("fence") != "done":
            assert first.poll() is None, first.communicate()[1].decode()[-2000:]
            assert time.monotonic() < deadline, "the runbook never finished its fence step"
            time.sleep(0.2)
        time.sleep(1.0)  # well inside the 300 s window
        first.send_signal(signal.SIGKILL)
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL
    statuses = runbook_statuses(flow, "failover", "")
    assert statuses["preflight"] == statuses["fence"] == "done"
    assert statuses["verify_fence"] == "pending" and statuses["commit_offsets"] == "pending"
    assert [p for p in first_machine.rglob("*") if p.is_file()] == [], "the state is not on the first machine"

    # Same failover again, elsewhere (a shorter window: the window is not part of what identifies the failover).
    try:
        again = mirrorflow(tmp_path / "second", *command[1:], "--fence-verify-seconds", "1")
    finally:
        unpause_all(flow)
    assert again.returncode == 0, again.stderr[-3000:]
    report = json.loads(again.stdout)
    assert report["completed"] and report["fence"] == {"method": "command", "status": "fenced"}
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["fence"]["attempts"] == 1 and steps["preflight"]["attempts"] == 1
    assert steps["verify_fence"]["attempts"] == 2 and steps["verify_fence"]["status"] == "done"
    assert fence_log.read_text().splitlines() == ["fenced"], "the fence command ran once"
    (row,) = report["groups"]
    assert (row["upstream_offset"], row["translated_offset"], row["status"]) == (7, 7, "exact")
    on_b = committed_offsets(kafka.admin("B"), "B", group, 10)
    assert on_b[(f"A.{topic}", 0)].offset == 7

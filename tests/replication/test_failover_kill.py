"""`mirrorflow failover` really killed mid-way: SIGKILL while the runbook waits inside `verify_fence`, then the
same command again. It must not be blocked by the dead run's lock, must resume at `verify_fence` (the fence
command is not run twice) and must complete with the group's offsets committed on B.

Runs on the session clusters A and B: nothing here stops or reconfigures a broker (~15 s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.kafka_helpers import KafkaKit
from tests.replication.helpers import commit_offsets, failover_config

from mirrorflow.config.model import MirrorConfig
from mirrorflow.kafka.groups import committed_offsets
from mirrorflow.replication.failover.state import StateStore

pytestmark = pytest.mark.integration

MIRRORFLOW = Path(sys.executable).with_name("mirrorflow")


def _state(directory: Path) -> dict[str, str]:
    try:
        state = StateStore(directory).load()
    except Exception:  # written atomically, but a poll may still race the first write of the directory
        return {}
    return {} if state is None else {s.name: s.status for s in state.steps.values()}


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

    state_dir = tmp_path / "state"
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
        "--state-dir",
        str(state_dir),
        "--json",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # A long verification window: the run is certainly inside verify_fence when it is killed.
    first = subprocess.Popen(
        [*command, "--fence-verify-seconds", "300"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while _state(state_dir).get("fence") != "done":
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
    statuses = _state(state_dir)
    assert statuses["preflight"] == statuses["fence"] == "done"
    assert statuses["verify_fence"] == "pending" and statuses["commit_offsets"] == "pending"
    assert (state_dir / ".lock").exists(), "the killed run held the lock file"

    # Same failover again (a shorter window: the window is not part of what identifies the failover).
    again = subprocess.run(
        [*command, "--fence-verify-seconds", "1"], env=env, capture_output=True, text=True, timeout=300
    )
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

"""`mirrorflow failover` really killed mid-way: SIGKILL while the runbook waits inside `verify_fence`, then the
same command again, from another working directory (another machine: the state is in Kafka, nothing on disk).
It must not be blocked by the dead run (its transactional writer is fenced by the new one), must resume at
`verify_fence` (the fence command is not run twice) and must complete with the group's offsets committed on B:
0 re-read, 0 skipped.

A second test freezes the first run (SIGSTOP) while another process takes the runbook over: woken up, it fails as
fenced instead of writing its stale state back. Runs on the session clusters A and B: nothing here stops or
reconfigures a broker (~45 s).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.kafka_helpers import KafkaKit
from tests.replication.helpers import commit_offsets, failover_config
from tests.replication.runbook_helpers import MIRRORFLOW, machine_env, mirrorflow, runbook_statuses, unpause_all

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.kafka.group_coordinator import committed_offsets

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Runbook:
    """A failover A->B of one group at offset 7 of a 20-record topic, fenced by a command that logs each run."""

    command: list[str]
    flow: Flow
    topic: str
    group: str
    fence_log: Path

    def start_inside_verify_fence(self, machine: Path, verify_seconds: int) -> subprocess.Popen[bytes]:
        """The CLI run in `machine`, returned once its fence step is done (it then waits `verify_seconds`).
        --restart: the session's B may hold an earlier CLI failover A->B of another test."""
        machine.mkdir()
        run = subprocess.Popen(
            [*self.command, "--fence-verify-seconds", str(verify_seconds), "--restart"],
            cwd=machine,
            env=machine_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 120
        while runbook_statuses(self.flow, "failover", "", self.group).get("fence") != "done":
            if run.poll() is not None or time.monotonic() > deadline:
                run.kill()
                pytest.fail(f"the runbook never finished its fence step: {run.communicate()[1].decode()[-2000:]}")
            time.sleep(0.2)
        return run

    def run_again(self, machine: Path) -> dict[str, Any]:
        """The same failover from another machine (a shorter window: it does not identify the failover); its
        report, checked: completed, the fence run once, the group exactly at 7 on B."""
        try:
            again = mirrorflow(machine, *self.command[1:], "--fence-verify-seconds", "1")
        finally:
            unpause_all(self.flow)
        assert again.returncode == 0, again.stderr[-3000:]
        report: dict[str, Any] = json.loads(again.stdout)
        assert report["completed"] and report["fence"] == {"method": "command", "status": "fenced"}
        assert self.fence_log.read_text().splitlines() == ["fenced"], "the fence command ran once"
        (row,) = report["groups"]
        assert (row["upstream_offset"], row["translated_offset"], row["status"]) == (7, 7, "exact")
        return report


@pytest.fixture
def runbook(tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit) -> Runbook:
    topic = kafka.topic("fokill")
    group = f"fokill-{uuid.uuid4().hex[:8]}"
    config = failover_config(write_config, kafka.admin("A"), topic, 1, group)
    producer = kafka.producer("A")
    for i in range(20):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    commit_offsets(kafka.admin("A"), group, {(topic, 0): 7})
    fence_log = tmp_path / "fence.log"
    command = [
        str(MIRRORFLOW),
        "failover",
        str(config.path),
        *("--primary", "A", "--dr", "B", "--groups", group),
        *("--fence", "command", "--fence-command", f"echo fenced >> {fence_log}"),
        "--json",
    ]
    return Runbook(command, config.flow("A->B"), topic, group, fence_log)


def test_a_killed_runbook_resumes_after_its_last_completed_step(
    tmp_path: Path, runbook: Runbook, kafka: KafkaKit
) -> None:
    # A long verification window: the run is certainly inside verify_fence when it is killed.
    first = runbook.start_inside_verify_fence(tmp_path / "first", 300)
    time.sleep(1.0)  # well inside the 300 s window
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL
    statuses = runbook_statuses(runbook.flow, "failover", "", runbook.group)
    assert statuses["preflight"] == statuses["fence"] == "done"
    assert statuses["verify_fence"] == "pending" and statuses["commit_offsets"] == "pending"
    assert [p for p in (tmp_path / "first").rglob("*") if p.is_file()] == [], "no state on the first machine"

    report = runbook.run_again(tmp_path / "second")
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["fence"]["attempts"] == 1 and steps["preflight"]["attempts"] == 1
    assert steps["verify_fence"]["attempts"] == 2 and steps["verify_fence"]["status"] == "done"
    on_b = committed_offsets(kafka.admin("B"), "B", runbook.group, 10)
    assert on_b[(f"A.{runbook.topic}", 0)].offset == 7


def test_a_stopped_runbook_taken_over_by_another_process_cannot_overwrite_its_state(
    tmp_path: Path, runbook: Runbook
) -> None:
    """Two processes on one runbook: the first is frozen (SIGSTOP) inside verify_fence, a second completes the
    failover from elsewhere, then the first wakes up. Its next write must fail as fenced, leaving the second's
    completed state, instead of writing its stale view back."""
    first = runbook.start_inside_verify_fence(tmp_path / "first", 15)
    try:
        first.send_signal(signal.SIGSTOP)
        runbook.run_again(tmp_path / "second")
        first.send_signal(signal.SIGCONT)
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGCONT)
            first.kill()
            first.communicate(timeout=30)
    assert first.returncode == 1, err.decode()[-2000:]
    assert "another process took over this runbook" in err.decode()
    statuses = runbook_statuses(runbook.flow, "failover", "", runbook.group)
    assert set(statuses.values()) <= {"done", "skipped"}, statuses
    assert runbook.fence_log.read_text().splitlines() == ["fenced"]

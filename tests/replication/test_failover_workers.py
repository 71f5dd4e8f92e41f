"""A failover DAG run across workers with no shared disk, on the session clusters A and B.

Each task of `mirrorflow_failover` (the callables Airflow's workers run: `run_step`, then `report_step`) runs as
its own OS process, in a working directory of its own, without `MIRRORFLOW_STATE_DIR`: the only thing the
processes share is Kafka. This is the cheap but honest stand-in for a Celery/Kubernetes deployment: a task
finds what the earlier tasks did only through the runbook topic. Then the flow DAG's task callable, `mirrorflow
run`, and `mirrorflow unpause` run from yet other directories and see the pause (~30 s).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.kafka_helpers import KafkaKit
from tests.replication.helpers import commit_offsets, failover_config
from tests.replication.runbook_helpers import machine_env, mirrorflow, runbook_statuses, unpause_all

from mirrorflow.config.model import MirrorConfig
from mirrorflow.kafka.group_coordinator import committed_offsets
from mirrorflow.replication.failover.step import STEP_NAMES

pytestmark = pytest.mark.integration

WORKER = """
import json, sys
from mirrorflow.airflow import failover_dag, tasks
calls = {"step": failover_dag.run_step, "report": failover_dag.report_step, "discover": tasks.discover}
try:
    result = calls[sys.argv[1]](**json.loads(sys.argv[2]))
except Exception as err:  # the task's outcome, as Airflow would record it
    print(json.dumps({"raised": type(err).__name__, "message": str(err)}))
else:
    print(json.dumps(result, default=str))
"""


def _task(workdir: Path, task: str, **kwargs: Any) -> dict[str, Any]:
    """One task on a "machine" of its own: a process in `workdir` (empty), no shared state directory."""
    workdir.mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-c", WORKER, task, json.dumps(kwargs)],
        cwd=workdir,
        env=machine_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_failover_dag_run_completes_with_each_task_in_its_own_process_and_directory(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    topic = kafka.topic("fowork")
    group = f"fowork-{uuid.uuid4().hex[:8]}"
    config = failover_config(write_config, kafka.admin("A"), topic, 1, group)
    flow = config.flow("A->B")
    producer = kafka.producer("A")
    for i in range(20):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    commit_offsets(kafka.admin("A"), group, {(topic, 0): 7})
    fence_log = tmp_path / "fence.log"
    params = {
        "primary": "A",
        "dr": "B",
        "groups": group,
        "dry_run": False,
        "fence": "command",
        "fence_command": f"echo fenced >> {fence_log}",
        "fence_verify_seconds": 1.0,
        "redirect": "none",
    }
    run_id = f"manual__{uuid.uuid4().hex[:8]}"
    common = {"config_path": str(config.path), "direction": "failover", "params": params, "run_id": run_id}
    try:
        for index, name in enumerate(STEP_NAMES):
            workdir = tmp_path / f"worker-{index}"
            result = _task(workdir, "step", repo=str(workdir), index=index, **common)
            assert result.get("step") == name and result.get("status") in ("done", "skipped"), result
            assert runbook_statuses(flow, "failover", run_id)[name] == result["status"]
        pointer = _task(tmp_path / "worker-report", "report", repo=str(tmp_path / "worker-report"), **common)
        assert pointer["completed"] is True and pointer["fence"] == "fenced", pointer
        assert "mirrorflow-runbook.internal" in pointer["report"]
        assert fence_log.read_text().splitlines() == ["fenced"], "each step ran once"
        on_b = committed_offsets(kafka.admin("B"), "B", group, 10)
        assert on_b[(f"A.{topic}", 0)].offset == 7, "0 re-read, 0 skipped"
        # No task left anything on its machine's disk.
        assert [p for p in tmp_path.glob("worker-*/**/*") if p.is_file()] == []

        # The flow's DAG tasks and `mirrorflow run`, on other machines, honour the pause.
        flow_task = {"config_path": str(config.path), "flow_name": "A->B"}
        skipped = _task(tmp_path / "flow-worker", "discover", **flow_task)
        assert skipped.get("raised") == "AirflowSkipException", skipped
        assert "paused by a failover A->B" in skipped["message"]
        run = mirrorflow(tmp_path / "runner", "run", str(config.path), "--once", "--no-copy", "--flow", "A->B")
        assert "skipped: flow A->B is paused" in run.stderr, run.stderr[-2000:]
        resumed = mirrorflow(tmp_path / "operator", "unpause", str(config.path), "--flow", "A->B")
        assert resumed.returncode == 0 and "A->B: pause marker deleted" in resumed.stdout, resumed.stderr
        again = _task(tmp_path / "flow-worker-2", "discover", **flow_task)
        assert "raised" not in again and again.get("source_topics") == 1, again
    finally:
        unpause_all(flow)

"""Helpers of the runbook-state tests: the CLI as a separate process in a directory of its own (another
"machine": no shared disk, no `MIRRORFLOW_STATE_DIR`), the runbook topic read back, and pause markers removed
after a test so the shared session clusters stay unpaused for the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.core.runbook_record import DRILL, RUNBOOK_TOPIC, decode_key, decode_value
from mirrorflow.kafka.runbook_store import read_latest
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.pause_markers import unpause

MIRRORFLOW = Path(sys.executable).with_name("mirrorflow")


def machine_env() -> dict[str, str]:
    """This process's environment without the local-state override: state can only come from Kafka."""
    env = {k: v for k, v in os.environ.items() if k != "MIRRORFLOW_STATE_DIR"}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def mirrorflow(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`mirrorflow ARGS` run in `cwd` (created empty), as on a machine of its own."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [str(MIRRORFLOW), *args], cwd=cwd, env=machine_env(), capture_output=True, text=True, timeout=timeout
    )


def runbook_records(flow: Flow) -> dict[tuple[str, ...], dict[str, Any]]:
    """Every runbook and pause record of the runbook topic on the flow's target, by decoded key, read independently
    of the store (drill reports, kept in the same topic by the drill tests on the shared clusters, are left out)."""
    latest = read_latest(flow.target, flow.target_admin.librdkafka(), RUNBOOK_TOPIC, 30)
    found: dict[tuple[str, ...], dict[str, Any]] = {}
    for key, value in latest.items():
        parts = decode_key(key)
        if parts is not None and parts[0] != DRILL:
            found[tuple(parts)] = decode_value(value, RUNBOOK_TOPIC)
    return found


def runbook_statuses(flow: Flow, direction: str, run: str, groups: str | None = None) -> dict[str, str]:
    """{step: status} of the runbook `direction` of `run` (and of `groups`, when given: the CLI's runbook of a pair
    is shared by the tests on the session clusters) stored on the flow's target ({} before its first write)."""
    for parts, value in runbook_records(flow).items():
        if parts[0] != "runbook" or parts[1] != direction or parts[6] != run:
            continue
        if groups is None or value["state"]["key"].get("groups") == groups:
            return {s["name"]: s["status"] for s in value["state"]["steps"]}
    return {}


def unpause_all(*flows: Flow) -> None:
    for flow in flows:
        with FlowClients(flow) as clients:
            unpause(flow, clients)


def json_report(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, Any] = json.loads(result.stdout)
    return report

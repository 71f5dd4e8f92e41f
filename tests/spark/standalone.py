"""A real Spark standalone cluster on loopback (a master and one worker from the pyspark installation), shared by
the tests that submit the copy to one.

The daemons run without the dev venv's PYSPARK_PYTHON or PYTHONPATH, so an executor that silently used the dev
venv instead of the shipped env would show in the job's summary. The master's JSON endpoint (`/json/`) is the
test's window on what the cluster gave each application (cores, state).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mirrorflow.local.process import free_ports, start_detached, stop_processes, tail

BIN = Path(sys.executable).parent
STARTUP_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class Standalone:
    master: str
    work_dir: Path
    logs: tuple[Path, ...]
    web_port: int

    def state(self) -> dict[str, Any]:
        """The master's view: workers, cores, `activeapps` (each with `cores`, `state`), `completedapps`."""
        return master_state(self.web_port)

    def log_tails(self) -> str:
        return "\n".join(tail(log) for log in self.logs)


def daemon_command(tmp: Path, *args: str) -> list[str]:
    """`spark-class` with a clean environment: nothing of the dev venv may leak to the executors' Python."""
    env = {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_CONF_DIR": str(tmp / "conf"),
        "SPARK_LOG_DIR": str(tmp / "logs"),
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }
    unset = ["PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "VIRTUAL_ENV"]
    return [
        "env",
        *(f"-u{name}" for name in unset),
        *(f"{k}={v}" for k, v in env.items()),
        str(BIN / "spark-class"),
        *args,
    ]


def master_state(web_port: int) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
            return state
    except OSError:
        return {}


@contextmanager
def standalone_cluster(tmp: Path, cores: int, memory: str) -> Iterator[Standalone]:
    """A master and one worker of `cores` cores and `memory` for executors; both killed on exit."""
    (tmp / "conf").mkdir()
    work = tmp / "work"
    port, master_web, worker_web = free_ports(3)
    master = f"spark://127.0.0.1:{port}"
    master_props, worker_props = tmp / "master.properties", tmp / "worker.properties"
    master_props.write_text("spark.master.rest.enabled false\n")
    worker_props.write_text("spark.worker.cleanup.enabled false\n")
    master_log, worker_log = tmp / "master.out", tmp / "worker.out"
    pids: list[tuple[int, str]] = []
    try:
        master_cmd = daemon_command(tmp, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1")
        master_cmd += ["--port", str(port), "--webui-port", str(master_web), "--properties-file", str(master_props)]
        pids.append((start_detached(master_cmd, cwd=tmp, output=master_log, tie_to_parent=True), str(master_props)))
        worker_cmd = daemon_command(tmp, "org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1")
        worker_cmd += ["--cores", str(cores), "--memory", memory, "--work-dir", str(work)]
        worker_cmd += ["--webui-port", str(worker_web), "--properties-file", str(worker_props)]
        pids.append((start_detached(worker_cmd, cwd=tmp, output=worker_log, tie_to_parent=True), str(worker_props)))
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while master_state(master_web).get("aliveworkers") != 1:
            if time.monotonic() > deadline:
                pytest.fail(f"no live worker after {STARTUP_TIMEOUT_S}s\n{tail(master_log)}\n{tail(worker_log)}")
            time.sleep(1)
        yield Standalone(master, work, (master_log, worker_log), master_web)
    finally:
        stop_processes(pids, timeout_s=30)


@contextmanager
def history_server(tmp: Path, events: Path) -> Iterator[str]:
    """Spark's History Server reading the event logs in `events`; yields its REST API's base URL."""
    (tmp / "conf").mkdir(exist_ok=True)
    (port,) = free_ports(1)
    props = tmp / "history.properties"
    props.write_text(
        f"spark.history.fs.logDirectory {events.as_uri()}\nspark.history.ui.port {port}\n"
        "spark.history.fs.update.interval 1s\n"
    )
    output = tmp / "history.out"
    command = daemon_command(tmp, "org.apache.spark.deploy.history.HistoryServer", "--properties-file", str(props))
    pids = [(start_detached(command, cwd=tmp, output=output, tie_to_parent=True), str(props))]
    url = f"http://127.0.0.1:{port}/api/v1"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while get_json(f"{url}/version") is None:
            if time.monotonic() > deadline:
                pytest.fail(f"no History Server after {STARTUP_TIMEOUT_S}s\n{tail(output)}")
            time.sleep(1)
        yield url
    finally:
        stop_processes(pids, timeout_s=30)


def get_json(url: str) -> Any:
    """The JSON at `url`, or None while nothing answers there."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)
    except OSError:
        return None

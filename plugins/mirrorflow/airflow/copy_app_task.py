"""The copy task's side of a leased copy application (`replication/copy_app.py`): a detached `spark-submit` whose
driver outlives the task, and the supervision of it for the DAG run's length.

Only where the driver runs on the task's machine (local and `spark://` masters, client mode): the process is
started in its own session, so the task's end (or its kill) leaves it running, and it writes its output to
`<tmp>/mirrorflow-apps/<app>/spark-submit.log` (the package and env shipped to a standalone cluster's executors
live there too: the task's own temporary directory goes with the task). Directories of applications whose log
has not changed for `KEEP_DAYS` are deleted when a new application is submitted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.replication.copy_app import LEASE, read_state, write
from mirrorflow.replication.copy_supervisor import Launched, Supervisor
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.round_claims import rounds_apply

APPS_DIR = "mirrorflow-apps"
KEEP_DAYS = 7
TAIL_LINES = 15


def leased(flow: Flow, copy_mode: str, run_seconds: float, driver_here: bool, in_cluster: bool) -> bool:
    """Whether this copy runs as a leased application: continuous with rounds, its driver on this machine, and
    that machine outliving the task (not a pod of the KubernetesExecutor, which ends with the task)."""
    rounds = rounds_apply(flow.delivery, float(flow.copy_round_seconds), run_seconds)
    return copy_mode == "continuous" and rounds and driver_here and not in_cluster and not _task_pods()


def _task_pods() -> bool:
    from airflow.configuration import conf

    return "kubernetes" in str(conf.get("core", "executor", fallback="")).lower()


def with_run_seconds(args: list[str], seconds: float) -> list[str]:
    """The job's arguments with `--run-seconds` set to the lease it starts with."""
    out = list(args)
    if "--run-seconds" in out:
        out[out.index("--run-seconds") + 1] = f"{seconds:.0f}"
    else:
        out += ["--run-seconds", f"{seconds:.0f}"]
    return out


def apps_root() -> Path:
    return Path(tempfile.gettempdir()) / APPS_DIR


def app_dir(app: str) -> Path:
    """Where an application's log and shipped files live (made now; old ones swept)."""
    root = apps_root()
    cutoff = time.time() - KEEP_DAYS * 86400
    for old in root.glob("*/spark-submit.log") if root.is_dir() else ():
        if old.stat().st_mtime < cutoff and not _running(old.parent / "pid"):
            shutil.rmtree(old.parent, ignore_errors=True)
    path = root / app
    path.mkdir(parents=True, exist_ok=True)
    return path


def _running(pid_file: Path) -> bool:
    """Whether the spark-submit whose pid the file holds still runs (a quiet application writes no log)."""
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


class Detached:
    """A `spark-submit` started in its own session with its output in a file (`Launched`)."""

    def __init__(self, command: Sequence[str], env: dict[str, str], log_path: Path, mask: Callable[[str], str]):
        self.log_path, self._mask = log_path, mask
        with open(log_path, "ab") as out:
            self._process = subprocess.Popen(
                list(command),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        (log_path.parent / "pid").write_text(f"{self._process.pid}\n")

    @property
    def pid(self) -> int:
        return self._process.pid

    def poll(self) -> int | None:
        return self._process.poll()

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGTERM)

    def failure(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()[-TAIL_LINES:]
        except OSError as err:
            return f"its output ({self.log_path}) could not be read: {err}"
        return self._mask(" | ".join(lines)) + f" (all of it in {self.log_path})"


def supervise(
    flow: Flow,
    *,
    config: str,
    run_end_ms: int,
    by: str,
    command: Callable[[str, float, Path, int], list[str]],
    env: dict[str, str],
    mask: Callable[[str], str],
    log: Any,
) -> dict[str, Any]:
    """Adopt the flow's running application or submit one (`command(app, lease seconds, its directory, claims'
    start)` is the spark-submit command line), then watch it until `run_end_ms` (`copy_supervisor.Supervisor`)."""

    def submit(app: str, seconds: float, started_ms: int) -> Launched:
        where = app_dir(app)
        line = command(app, seconds, where, started_ms)
        launched = Detached(line, {**os.environ, **env}, where / "spark-submit.log", mask)
        log.info("copy application %s: spark-submit pid %s, output in %s", app, launched.pid, launched.log_path)
        return launched

    with FlowClients(flow) as clients:
        supervisor = Supervisor(
            flow,
            config,
            run_end_ms,
            by,
            submit,
            read=lambda: read_state(flow, clients),
            write=lambda kind, body: write(flow, clients, kind, body),
        )
        return supervisor.supervise()


def revoke_lease(flow: Flow, by: str, log: Any) -> None:
    """A continuous exactly-once copy without a lease (rounds turned off, or a master or executor where there is
    none) first takes the lease from a leased application still running: that one then starts no round, whose
    newer claims would otherwise make this run's ranges leave their partitions. Best effort: a failure is logged
    (the leased application then ends with its lease, at most a DAG run later)."""
    if flow.delivery != "exactly-once":
        return
    try:
        with FlowClients(flow) as clients:
            held = read_state(flow, clients).lease
            if held is not None and held.get("app") and int(held.get("until_ms", 0)) > time.time() * 1000:
                write(flow, clients, LEASE, {"app": "", "until_ms": 0, "by": by, "config": ""})
                log.warning(
                    "flow %s: copy application %s told to stop (this run copies without a lease)",
                    flow.name,
                    held["app"],
                )
    except Exception as err:  # best effort: the copy goes on either way
        log.warning("flow %s: a leased copy application's lease could not be checked: %s", flow.name, err)

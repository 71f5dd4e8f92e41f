"""A real Airflow scheduler on this machine: PostgreSQL metadata DB, LocalExecutor, no `dag.test()`.

What the scheduler tests and the deployed-path benchmark run against. Debian's PostgreSQL runs as its own user
(`mirrorflow.local.postgres`); a fresh AIRFLOW_HOME points at it; `airflow db migrate`, then the api-server
(the Execution API that LocalExecutor's task processes report to, and the REST API), the dag-processor and the
scheduler run as subprocesses with their own environment, so the caller's AIRFLOW_* settings stay untouched.
Each process runs in its own session (its task processes and spark-submit JVMs join it) and gets SIGTERM from
Linux if the caller dies first.

Cost on 2 cores: PostgreSQL ~5 s, migrate ~20 s, the processes ~30 s before the first DAG is parsed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mirrorflow.airflow.embedded import REPO, airflow_environment
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.local.postgres import LocalPostgres
from mirrorflow.local.process import free_ports, tail

BIN = Path(sys.executable).parent
API_USER = "admin"
T = TypeVar("T")


@dataclass
class LocalScheduler:
    """A running scheduler; `LocalScheduler.running(...)` starts and stops one."""

    env: dict[str, str]
    home: Path
    postgres: LocalPostgres
    api_password: str
    logs: list[Path] = field(default_factory=list)

    @classmethod
    @contextlib.contextmanager
    def running(
        cls, home: Path, config: Path, *, extra_env: Mapping[str, str] | None = None, parallelism: int = 2
    ) -> Iterator[LocalScheduler]:
        """Start PostgreSQL and the Airflow processes over `config` (the mm2.properties the DAGs read); stop
        them all when the block ends. `extra_env` is added to every process's environment."""
        postgres = LocalPostgres().start()
        processes: list[subprocess.Popen[bytes]] = []
        try:
            home.mkdir(parents=True, exist_ok=True)
            password = secrets.token_urlsafe(12)
            scheduler = cls(_environment(home, config, postgres, password, parallelism), home, postgres, password)
            scheduler.env.update(extra_env or {})
            migrated = scheduler.cli("db", "migrate")
            if migrated.returncode != 0:
                raise MirrorflowError(f"airflow db migrate failed: {migrated.stderr[-3000:]}")
            airflow = str(BIN / "airflow")
            for name, command in (
                ("api-server", [airflow, "api-server", "--apps", "all", "--workers", "1"]),
                ("dag-processor", [airflow, "dag-processor"]),
                ("scheduler", [airflow, "scheduler"]),
            ):
                log = home / f"{name}.log"
                scheduler.logs.append(log)
                processes.append(_start(command, scheduler.env, log))
            yield scheduler
        finally:
            try:
                _stop(processes)
            finally:
                _stop_leased_applications(home)
                postgres.stop()

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "airflow"), *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """A read of the metadata DB (psycopg2 is imported here only: the package itself never needs it)."""
        import psycopg2  # type: ignore[import-untyped]  # no stubs pinned; a test and benchmark helper

        connection = psycopg2.connect(host="127.0.0.1", port=self.postgres.port, user="postgres", dbname="airflow")
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return list(cursor.fetchall())
        finally:
            connection.close()

    def api(self, method: str, path: str, body: dict[str, Any] | None = None, token: str | None = None) -> Any:
        """Airflow's REST API as the admin user."""
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        data = None if body is None else json.dumps(body).encode()
        url = f"http://127.0.0.1:{self.env['AIRFLOW__API__PORT']}{path}"
        request = urllib.request.Request(url, data, headers, method=method)
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)

    def dag_paused(self, dag_id: str) -> bool:
        token = self.api("POST", "/auth/token", {"username": API_USER, "password": self.api_password})["access_token"]
        return bool(self.api("GET", f"/api/v2/dags/{dag_id}", token=token)["is_paused"])

    def diagnostics(self) -> str:
        return "\n".join(f"== {log.name}\n{tail(log, 30)}" for log in self.logs)

    def wait_for(self, what: str, probe: Callable[[], T | None], timeout_s: float) -> T:
        """Poll `probe` every 2 s until it answers; a TimeoutError with the processes' logs after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}\n{self.diagnostics()}")
            time.sleep(2)

    def wait_for_dag(self, dag_id: str, timeout_s: float = 300) -> None:
        """Until the dag-processor has stored `dag_id` in the metadata DB."""
        self.wait_for(
            f"{dag_id} in the metadata DB", lambda: self.query("SELECT 1 FROM dag WHERE dag_id = %s", dag_id), timeout_s
        )

    def run_to_end(
        self, dag_id: str, conf: Mapping[str, Any] | None = None, timeout_s: float = 900
    ) -> tuple[str, dict[str, str]]:
        """Trigger `dag_id` (with `conf`), wait for that run to end; its state and its task states."""
        run_id = f"manual__{uuid.uuid4().hex[:8]}"
        args = ["dags", "trigger", dag_id, "--run-id", run_id, *(["--conf", json.dumps(conf)] if conf else [])]
        triggered = self.cli(*args)
        if triggered.returncode != 0:
            raise MirrorflowError(f"airflow dags trigger {dag_id} failed: {triggered.stderr[-3000:]}")
        in_run = "WHERE dag_id = %s AND run_id = %s"

        def finished() -> str | None:
            [(state,)] = self.query(f"SELECT state FROM dag_run {in_run}", dag_id, run_id)
            return state if state in ("success", "failed") else None

        state = self.wait_for(f"the triggered run of {dag_id} to finish", finished, timeout_s)
        return state, dict(self.query(f"SELECT task_id, state FROM task_instance {in_run}", dag_id, run_id))


def _environment(home: Path, config: Path, postgres: LocalPostgres, password: str, parallelism: int) -> dict[str, str]:
    """A clean environment: none of the caller's AIRFLOW_* settings, all of this Airflow's."""
    api_port, log_port, trigger_log_port = free_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(airflow_environment(home, config, parallelism=parallelism))
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({API_USER: password}))
    passwords.chmod(0o600)
    api_conn = {"conn_type": "http", "host": f"http://127.0.0.1:{api_port}", "login": API_USER, "password": password}
    env.update(
        {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url,
            # Airflow derives an asyncpg URL for its async engine; asyncpg is not installed and none of these
            # processes need the async engine (the REST "wait for a DAG run" endpoint and multi-team do).
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": "",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            # Every process must sign and check task tokens with the same secret.
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            # The 5 s default read timeout of task processes on the Execution API fails tasks on a busy machine.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_port),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_log_port),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            # The REST API (and its token endpoint) for the runbook's native pause, as one admin user.
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{API_USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW_CONN_MIRRORFLOW_AIRFLOW_API": json.dumps(api_conn),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")])),
        }
    )
    return env


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A process in its own session; SIGTERM'd by Linux if its parent dies first."""
    with log.open("ab") as out:
        return subprocess.Popen(
            ["setpriv", "--pdeathsig", "TERM", "--", *command],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process group, then SIGKILL what is left after 30 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + 30
        for proc in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))


def _stop_leased_applications(home: Path) -> None:
    """SIGTERM the process groups of the leased copy applications this Airflow's tasks started
    (`airflow/copy_app_task.py`: detached, so stopping the scheduler leaves them running until their lease ends)."""
    marker = f"AIRFLOW_HOME={home}".encode()
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ProcessLookupError):
            ours = marker in (proc / "environ").read_bytes().split(b"\0")
            if ours and b"--app-id" in (proc / "cmdline").read_bytes():
                os.killpg(os.getpgid(int(proc.name)), signal.SIGTERM)

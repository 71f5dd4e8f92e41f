"""A throwaway PostgreSQL server on loopback from the Debian packages, for Airflow's metadata DB in tests.

PostgreSQL refuses to run as root, so when we are root `initdb` and `postgres` run as the `postgres` user
(util-linux `setpriv`), in a data directory outside root-only temp trees. The server runs in the foreground as
our child (no `pg_ctl` daemon), so it is stopped by PID and, with `tie_to_parent`, dies with its parent.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.local.process import (
    LOOPBACK,
    free_ports,
    is_alive,
    signal_process,
    start_detached,
    stop_processes,
    tail,
)

DATABASE = "airflow"
SERVER_USER = "postgres"


def postgres_bin_dir() -> Path:
    """The newest `/usr/lib/postgresql/<major>/bin` (Debian's layout), else the directory of `postgres` on PATH."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    found = candidates[-1] if candidates else shutil.which("postgres")
    if not found:
        raise MirrorflowError(
            "the PostgreSQL server is not installed; run `make postgres` (apt-get install postgresql)"
        )
    return Path(found).parent


class LocalPostgres:
    """`LocalPostgres().start()` -> a server with database `airflow`; `.url` for SQLAlchemy; `.stop()` ends it."""

    def __init__(self, *, tie_to_parent: bool = True) -> None:
        self.bin_dir = postgres_bin_dir()
        self.as_root = os.geteuid() == 0
        # Not under pytest's tmp_path: that tree is root-only (0700) and the server user must reach its data.
        self.directory = Path(tempfile.mkdtemp(prefix="mirrorflow-postgres-"))
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        self.port = free_ports(1)[0]
        self.tie_to_parent = tie_to_parent
        self.pid: int | None = None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://{SERVER_USER}@{LOOPBACK}:{self.port}/{DATABASE}"

    def _as_server_user(self, argv: list[str], *, pdeathsig: bool = False) -> list[str]:
        if not self.as_root:
            return argv
        # One setpriv for both: a parent-death signal set before the uid change would be cleared by it.
        tie = ["--pdeathsig", "INT"] if pdeathsig else []
        return ["setpriv", f"--reuid={SERVER_USER}", f"--regid={SERVER_USER}", "--init-groups", *tie, "--", *argv]

    def start(self, timeout_s: float = 120.0) -> LocalPostgres:
        if self.as_root:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(self.directory, user.pw_uid, user.pw_gid)
        init = [str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", SERVER_USER, "-A", "trust", "-E", "UTF8"]
        done = subprocess.run(self._as_server_user([*init, "--no-sync"]), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise MirrorflowError(f"initdb failed in {self.data}: {done.stderr.strip()[-2000:]}")
        server = [str(self.bin_dir / "postgres"), "-D", str(self.data), "-h", LOOPBACK, "-p", str(self.port)]
        server += ["-k", str(self.data), "-c", "fsync=off", "-c", "max_connections=100"]
        self.pid = start_detached(
            self._as_server_user(server, pdeathsig=self.tie_to_parent),
            cwd=self.directory,
            output=self.log,
            tie_to_parent=self.tie_to_parent and not self.as_root,
        )
        deadline = time.monotonic() + timeout_s
        createdb = [str(self.bin_dir / "createdb"), "-h", LOOPBACK, "-p", str(self.port), "-U", SERVER_USER, DATABASE]
        while True:
            done = subprocess.run(createdb, capture_output=True, text=True, check=False)
            if done.returncode == 0:
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise MirrorflowError(f"PostgreSQL did not start on port {self.port}:\n{tail(self.log)}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Fast shutdown (SIGINT: roll back open sessions; SIGTERM would wait for clients), then remove the data."""
        if self.pid is not None:
            marker = str(self.data)
            if is_alive(self.pid, marker):
                signal_process(self.pid, signal.SIGINT)
                deadline = time.monotonic() + 30
                while is_alive(self.pid, marker) and time.monotonic() < deadline:
                    time.sleep(0.1)
            stop_processes([(self.pid, marker)], timeout_s=10)
            self.pid = None
        shutil.rmtree(self.directory, ignore_errors=True)

"""Background JVMs that outlive the command that started them, found again later by PID and stopped safely.

A PID file can outlive its process and the number be reused by an unrelated program, so before any signal we
check that the PID still runs a command line naming our marker (e.g. the cluster's server.properties path).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """`count` distinct ports the kernel considers free now (all held open together so they differ)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_in_use(port: int) -> bool:
    """Whether a listener could not bind `port` on loopback (SO_REUSEADDR as the JVM sets it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return True
    return False


def port_accepts(port: int, timeout_s: float = 0.5, *, host: str = LOOPBACK) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def start_detached(command: Sequence[str], *, cwd: Path, output: Path, tie_to_parent: bool = False) -> int:
    """Start `command` in its own session (no terminal signals reach it), stdout+stderr into `output`.

    `tie_to_parent` asks Linux to SIGTERM the child when this process dies (pytest killed mid-session), using
    util-linux `setpriv`, which execs in place so the PID stays the JVM's.
    """
    argv = list(command)
    setpriv = shutil.which("setpriv") if tie_to_parent else None
    if setpriv is not None:
        argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
    with output.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    # We track the PID ourselves; marking the Popen done keeps its destructor and subprocess's internal
    # clean-up from reaping the JVM (and swallowing its exit status) behind our back.
    proc.returncode = 0
    return proc.pid


def command_line(pid: int) -> str | None:
    """The command line of `pid`, or None when no such (live, non-zombie) process exists."""
    proc = Path(f"/proc/{pid}")
    if proc.is_dir():
        try:
            if _proc_state(proc) == "Z":
                return None
            return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            return None
    try:  # no /proc (macOS): ask ps
        done = subprocess.run(
            ["ps", "-o", "stat=,command=", "-p", str(pid)], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    out = done.stdout.strip()
    if done.returncode != 0 or not out or out.startswith("Z"):
        return None
    return out.split(None, 1)[1] if " " in out else ""


def _proc_state(proc: Path) -> str:
    stat = (proc / "stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def is_alive(pid: int, marker: str) -> bool:
    """True when `pid` runs and its command line contains `marker`; reaps it if it is our dead child.

    While a process is inside execve (setpriv exec-ing the JVM, right after start) its command line reads as
    empty for a moment; that is a live process, not a dead one, so the read is retried.
    """
    _reap(pid)
    for _ in range(50):
        line = command_line(pid)
        if line is None:
            return False
        if line:
            return marker in line
        time.sleep(0.01)
    return True


def _reap(pid: int) -> None:
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        return
    if done == pid:
        _exit_codes[pid] = os.waitstatus_to_exitcode(status)


_exit_codes: dict[int, int] = {}


def exit_code(pid: int) -> int | None:
    """The exit status of a child of this process that is_alive() saw end (None otherwise)."""
    _reap(pid)
    return _exit_codes.get(pid)


def signal_process(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def stop_processes(pids: Sequence[tuple[int, str]], *, timeout_s: float = 30.0, kill: bool = False) -> None:
    """SIGTERM (or SIGKILL with `kill`) each `(pid, marker)` still ours, wait, SIGKILL the ones left."""
    targets = [(pid, marker) for pid, marker in pids if is_alive(pid, marker)]
    for pid, _marker in targets:
        signal_process(pid, signal.SIGKILL if kill else signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    remaining = targets
    while remaining and time.monotonic() < deadline:
        time.sleep(0.1)
        remaining = [(pid, marker) for pid, marker in remaining if is_alive(pid, marker)]
    for pid, _marker in remaining:
        signal_process(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while remaining and time.monotonic() < deadline:
        time.sleep(0.05)
        remaining = [(pid, marker) for pid, marker in remaining if is_alive(pid, marker)]


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, indented for an error message."""
    text = _read_end(path, 64 * 1024)
    if text is None:
        return f"  | ({path} not found)"
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(f"  | {line}" for line in kept) if kept else f"  | ({path} is empty)"


def error_lines(path: Path, max_bytes: int = 1024 * 1024) -> list[str]:
    """Each ERROR/FATAL line of a Log4j file with the line after it (usually the exception's message)."""
    lines = (_read_end(path, max_bytes) or "").splitlines()
    found: list[str] = []
    for index, line in enumerate(lines):
        if "] ERROR " in line or "] FATAL " in line:
            found.append(line)
            if index + 1 < len(lines) and not lines[index + 1].startswith("["):
                found.append("    " + lines[index + 1].strip())
    return found


def _read_end(path: Path, max_bytes: int) -> str | None:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - max_bytes))
            return handle.read().decode(errors="replace")
    except OSError:
        return None

"""Where the host's CPU went during a latency benchmark, per 10 s window (Linux `/proc`): to tell a window whose
p99 is above the goal from the copy's own events (the probe's marks) or from processes beside it (an Airflow
task's start, a broker's cleaner, the benchmark's own producer).

A thread reads every process's CPU time (`/proc/<pid>/stat` utime + stime) once a second and sums the growth by
the kind of process its command line names. A process first seen counts all its CPU time at that sample (it
started since the last one, or at the very first sample, which only sets the base)."""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
KINDS = (
    ("kafka.Kafka", "brokers"),
    ("pyspark.daemon", "spark python"),
    ("pyspark/worker", "spark python"),
    ("SparkSubmit", "spark JVM"),
    ("mirrorflow.spark", "spark python"),
    ("airflow scheduler", "airflow scheduler"),
    ("scheduler", "airflow scheduler"),
    ("dag-processor", "airflow dag-processor"),
    ("api-server", "airflow api-server"),
    ("triggerer", "airflow triggerer"),
    ("airflow", "airflow tasks"),
    ("supervisor", "airflow tasks"),
    ("postgres", "postgres"),
    ("multiprocessing", "bench producer+consumer"),
)


def kind_of(cmdline: str) -> str:
    """The kind of process a command line names (`KINDS`, first match), else "other"."""
    return next((kind for needle, kind in KINDS if needle in cmdline), "other")


def _read(pid: str) -> tuple[str, float] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return kind_of(cmdline or stat), (int(fields[11]) + int(fields[12])) / TICKS


class CpuSampler:
    """Samples once a second until stopped; `windows()` gives the cores each kind used per `window_ms`."""

    def __init__(self, period_s: float = 1.0) -> None:
        self._period_s = period_s
        self._seen: dict[str, float] = {}
        self.samples: list[tuple[int, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)

    def _sample(self, base: bool) -> None:
        grown: dict[str, float] = defaultdict(float)
        now: dict[str, float] = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            read = _read(pid)
            if read is None:
                continue
            kind, cpu = read
            now[pid] = cpu
            grown[kind] += cpu - self._seen.get(pid, 0.0)
        self._seen = now
        if not base:
            self.samples.append((int(time.time() * 1000), dict(grown)))

    def _loop(self) -> None:
        self._sample(base=True)
        while not self._stop.wait(self._period_s):
            self._sample(base=False)

    def windows(self, window_ms: int = 10_000) -> dict[int, dict[str, float]]:
        """Cores used per kind (CPU seconds over wall seconds) per window, keyed by the window's start (epoch ms,
        aligned to `window_ms`)."""
        by: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for at, grown in self.samples:
            for kind, cpu in grown.items():
                by[at - at % window_ms][kind] += cpu / (window_ms / 1000)
        return {start: dict(kinds) for start, kinds in sorted(by.items())}


@contextmanager
def sampling() -> Iterator[CpuSampler]:
    """A `CpuSampler` running for the `with` block."""
    sampler = CpuSampler()
    sampler._thread.start()
    try:
        yield sampler
    finally:
        sampler._stop.set()
        sampler._thread.join(5)


def cpu_text(sampler: CpuSampler, marked: list[int], window_ms: int = 10_000, top: int = 5) -> str:
    """Per window of the run (`*` before the ones whose start is in `marked`, e.g. the latency windows above the
    goal): the cores used in all and the `top` kinds that used most."""
    flagged = {m - m % window_ms for m in marked}
    lines = []
    for start, kinds in sampler.windows(window_ms).items():
        total = sum(kinds.values())
        ranked = sorted(kinds.items(), key=lambda kv: -kv[1])[:top]
        stamp = time.strftime("%H:%M:%S", time.gmtime(start / 1000))
        parts = ", ".join(f"{kind} {cores:.2f}" for kind, cores in ranked)
        lines.append(f"{'*' if start in flagged else ' '} {stamp} cores {total:.2f}: {parts}")
    return "CPU per 10 s window (cores; * = a latency window above the goal):\n" + "\n".join(lines)

"""Where a run boundary of continuous exactly-once mode spends its time (issue 19): the copy-level handover of
`tests/replication/test_handover_boundaries.py`, timed, without Airflow or Spark.

Two local clusters; a steady producer (`bench_latency.steady_producer`: `--rate` records/s of `--size` bytes over
`--partitions`), a read_committed consumer on the remote topic noting when each partition's records arrive, and
one copy process per run (each `copy_range` of the run's tasks in a thread, as one Spark task runs them), the next
started every `--interval` seconds while the current one copies: it fences the current one, which ends as handed
over. Every process marks its phases (`handover_probe`). The report puts, per boundary, each phase of both runs
and the target's arrivals on one time line whose zero is the new run's first `init_transactions`.

Run: `python benchmarks/profile_handover.py [--boundaries 3 --interval 20] [--out FILE]` (~2 minutes).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import pickle
import re
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from bench_latency import steady_producer
from bench_mirrorflow import flow_of, prepare_flow_topics, tasks_of, write_config
from harness import KEEP, Case, bench_clusters, create_topics
from mirrorflow.kafka.client_logs import with_logger

ALIAS = "gap"
LINE = re.compile(r"^(?P<ms>[\d.]+) run=(?P<run>-?\d+) p=(?P<p>\S+) (?P<event>\S+) ?(?P<detail>.*)$")


def start_run(run: int, tasks: Path, events: Path, plugins: Path) -> subprocess.Popen[bytes]:
    """Run `run`'s copy process (`handover_probe`) with `plugins` first on its path: the version it runs."""
    env = {**os.environ, "PYTHONPATH": f"{plugins}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    probe = Path(__file__).with_name("handover_probe.py")
    return subprocess.Popen([sys.executable, str(probe), str(run), str(tasks), str(events)], env=env)


def arrivals(target: str, remote: str, partitions: int, conn: Connection) -> None:
    """In a child process: read `remote` read_committed (as the benchmark's consumer) until told to stop; sends
    [(arrival ms, partition, records)] per partition per consume()."""
    consumer = Consumer(
        with_logger(
            {
                "bootstrap.servers": target,
                "group.id": f"gap-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
    )
    consumer.assign([TopicPartition(remote, p, 0) for p in range(partitions)])
    consumer.consume(1000, 1.0)
    conn.send("ready")
    seen: list[tuple[float, int, int]] = []
    while not conn.poll():
        messages = consumer.consume(10000, 0.05)
        now = time.time() * 1000
        counts: dict[int, int] = defaultdict(int)
        for m in messages:
            if m.error() is None:
                counts[m.partition()] += 1
        seen += [(now, p, n) for p, n in counts.items()]
    consumer.close()
    conn.send(seen)


def sample_cpu(events: Path, stop: threading.Event) -> None:
    """Marks the host's busy CPU share (of all cores) every 0.5 s, from /proc/stat."""

    def busy() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields) - fields[3] - fields[4], sum(fields)

    before = busy()
    with open(events, "a") as out:
        while not stop.wait(0.5):
            now = busy()
            share = (now[0] - before[0]) / max(now[1] - before[1], 1)
            out.write(f"{time.time() * 1000:.1f} run=-1 p=- cpu busy={share:.0%}\n")
            out.flush()
            before = now


def parse(path: Path) -> list[tuple[float, int, str, str, str]]:
    """(ms, run, partition, event, detail) of every mark, in time order."""
    found = []
    for line in path.read_text().splitlines():
        m = LINE.match(line)
        if m:
            found.append((float(m["ms"]), int(m["run"]), m["p"], m["event"], m["detail"]))
    return sorted(found)


def _first(marks: list[Any], run: int, p: str, event: str, after: float = 0.0, detail: str = "") -> float | None:
    return next(
        (t for t, r, q, e, d in marks if r == run and q == p and e == event and t >= after and detail in d), None
    )


def _last(marks: list[Any], run: int, p: str, event: str, before: float) -> float | None:
    times = [t for t, r, q, e, _ in marks if r == run and q == p and e == event and t <= before]
    return times[-1] if times else None


def _first_data(marks: list[Any], run: int, p: str) -> float | None:
    """When `run`'s first commit with records of partition `p` ended."""
    data = (t for t, r, q, e, d in marks if (r, q, e) == (run, p, "commit.end") and not d.startswith("records=0 "))
    return next(data, None)


def boundary_report(
    marks: list[Any],
    seen: list[tuple[float, int, int]],
    new: int,
    partitions: int,
    totals: dict[str, list[dict[str, list[float]]]],
) -> list[str]:
    """The time line of boundary `new` (run new-1 -> new): ms relative to the new run's first init_transactions;
    its phases' figures also go to `totals` under the new run's version."""
    summary: dict[str, list[float]] = defaultdict(list)
    zero = min(t for t, r, _, e, _ in marks if r == new and e == "init_transactions.start")
    out = [f"== boundary {new}: run {new - 1} -> run {new} (0 = {zero:.0f}, the new run's first init_transactions)"]
    start = _first(marks, new, "-", "process.start")
    version = next((d for t, r, q, e, d in marks if r == new and e == "process.start"), "?")
    out.append(f"  new run's code: {version}")
    out.append(f"  new process started {(start or zero) - zero:+.0f}")
    old_phases = ("commit.error", "loop.error", "fenced_check.end", "claim_wait.start", "claim_wait.end", "loop.end")
    new_phases = (
        "writer.start",
        "init_transactions.start",
        "init_transactions.end",
        "load_progress.end",
        "load_segments.end",
        "load_state.end",
        "partition_bounds.end",
        "load_metric_bytes.end",
        "newest_offset_sync.end",
        "heal.end",
        "reader.ready",
        "loop.start",
    )
    for p in map(str, range(partitions)):
        init_end = _first(marks, new, p, "init_transactions.end") or zero
        last_commit = _last(marks, new - 1, p, "commit.end", init_end + 60000)
        old = [f"last commit.end {(last_commit or zero) - zero:+.0f}"]
        old += [f"{e} {t - zero:+.0f}" for e in old_phases if (t := _first(marks, new - 1, p, e, zero - 2000))]
        phases = [f"{e} {t - zero:+.0f}" for e in new_phases if (t := _first(marks, new, p, e))]
        claim = _first(marks, new, p, "commit.end", detail=" n=1 ")
        first_read = _first(marks, new, p, "first_read")
        first_data = _first_data(marks, new, p)
        init_start = _first(marks, new, p, "init_transactions.start") or zero
        state_end = _first(marks, new, p, "load_state.end") or zero
        summary["init"].append(init_end - init_start)
        summary["state"].append(state_end - init_end)
        summary["to first data"].append((first_data or zero) - state_end)
        summary["fence to first data"].append((first_data or zero) - init_end)
        phases += [f"claim commit.end {(claim or zero) - zero:+.0f}", f"first_read {(first_read or zero) - zero:+.0f}"]
        phases.append(f"first data commit.end {(first_data or zero) - zero:+.0f}")
        out.append(f"  p{p} old: " + ", ".join(old))
        out.append(f"  p{p} new: " + ", ".join(phases))
        took = [
            f"{e.split('.')[0]} {d} at {t - zero:+.0f}"
            for t, r, q, e, d in marks
            if r == new and q == p and e.endswith(".took") and t <= (first_data or zero) + 1
        ]
        out.append(f"  p{p} new flush/commit: " + "; ".join(took))
        times = [a for a, q, _ in seen if q == int(p) and zero - 5000 <= a <= (first_data or zero) + 5000]
        if len(times) > 1:
            gap, before = max((b - a, a) for a, b in itertools.pairwise(times))
            summary["partition gap"].append(gap)
            out.append(f"  p{p} target: longest gap {gap:.0f} ms, {before - zero:+.0f} to {before + gap - zero:+.0f}")
    window = [d for t, _, _, e, d in marks if e == "cpu" and zero - 3000 <= t <= zero + 8000]
    cpu = [float(d.split("=")[1].rstrip("%")) for d in window]
    if cpu:
        out.append(f"  host CPU busy -3..+8 s: mean {sum(cpu) / len(cpu):.0f}%, max {max(cpu):.0f}%")
    every = sorted(a for a, _, _ in seen if zero - 5000 <= a <= zero + 15000)
    if len(every) > 1:
        gap, before = max((b - a, a) for a, b in itertools.pairwise(every))
        summary["all partitions gap"].append(gap)
        out.append(f"  all partitions: longest gap {gap:.0f} ms, {before - zero:+.0f} to {before + gap - zero:+.0f}")
    medians = ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in summary.items() if v)
    out.append(f"  summary (ms, median over partitions): {medians}")
    totals.setdefault(version, []).append(summary)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=2000, help="records/s")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=1024, help="value bytes")
    parser.add_argument("--boundaries", type=int, default=3)
    parser.add_argument("--interval", type=float, default=20.0, help="seconds between the starts of runs")
    parser.add_argument("--warm-up", type=float, default=15.0, help="seconds of the first run before the next")
    parser.add_argument("--out", type=Path, default=Path("handover-profile.txt"))
    parser.add_argument("--extra", action="append", default=[], help="one more line of the flow config")
    parser.add_argument(
        "--before",
        type=Path,
        help="a `plugins` directory of another version: even runs use it, odd runs this one (A/B in one run)",
    )
    args = parser.parse_args(argv)
    spawn = multiprocessing.get_context("spawn")
    with bench_clusters("mirrorflow-gap-") as (directory, source, target):
        case = Case(0, args.size, args.partitions, f"gap{uuid.uuid4().hex[:6]}")
        create_topics(source, [NewTopic(case.topic, case.partitions, 1, config=KEEP)])
        prepare_flow_topics(source, target, ALIAS, case, KEEP)
        config = directory / "gap.properties"
        write_config(config, source, target, {ALIAS: (case.topic, "exactly-once")}, tuple(args.extra))
        tasks = tasks_of(flow_of(config, ALIAS), case, interval=False, run_seconds=3600)
        events = directory / "events.txt"
        reader_end, reader_child = spawn.Pipe()
        reader = spawn.Process(target=arrivals, args=(target, f"{ALIAS}.{case.topic}", case.partitions, reader_child))
        reader.start()
        assert reader_end.poll(120) and reader_end.recv() == "ready"
        total = args.warm_up + args.boundaries * args.interval + 10
        _producer_end, producer_child = spawn.Pipe()
        producer_args = (source, case.topic, case.partitions, case.size, args.rate, total, producer_child)
        producer = spawn.Process(target=steady_producer, args=producer_args)
        producer.start()
        stop_cpu = threading.Event()
        cpu = threading.Thread(target=sample_cpu, args=(events, stop_cpu), daemon=True)
        cpu.start()
        tasks_path = directory / "tasks.pickle"
        tasks_path.write_bytes(pickle.dumps(tasks))
        mine = Path(__file__).resolve().parents[1] / "plugins"
        versions = [args.before or mine, mine]
        runs = [start_run(0, tasks_path, events, versions[0])]
        time.sleep(args.warm_up)
        for n in range(1, args.boundaries + 1):
            runs.append(start_run(n, tasks_path, events, versions[n % 2]))
            time.sleep(args.interval)
        producer.join(total + 120)
        time.sleep(3)
        runs[-1].terminate()
        for run in runs:
            run.wait(60)
        stop_cpu.set()
        reader_end.send("stop")
        seen = reader_end.recv() if reader_end.poll(120) else []
        reader.join(30)
        marks = parse(events)
        lines = [f"profile_handover: {vars(args)}", f"exit codes: {[r.returncode for r in runs]}"]
        totals: dict[str, list[dict[str, list[float]]]] = {}
        for n in range(1, args.boundaries + 1):
            lines += boundary_report(marks, seen, n, case.partitions, totals)
        for version, found in totals.items():
            lines.append(f"== new runs of {version}: {len(found)} boundaries")
            for key in found[0]:
                every = [x for f in found for x in f.get(key, [])]
                lines.append(f"  {key}: median {statistics.median(every):.0f} ms, max {max(every):.0f} ms")
        text = "\n".join(lines) + "\n"
        print(text)
        args.out.write_text(text + "\n-- raw marks --\n" + events.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""End-to-end latency on the path operators run: the continuous flow DAG under a real Airflow scheduler
(`make bench-deployed`, issue 19), beside the in-process copy the latency goal was measured on.

Two local clusters; then, at the same offered load and for the same time:
1. the host's floor (the same producer and read_committed consumer, no replicator);
2. `copy_range` threads in one spawned process (what `make bench-latency` measures);
3. the flow DAG `mirrorflow__dep__B` under `LocalScheduler` (PostgreSQL, LocalExecutor), each run's `copy` task a
   spark-submit that copies for `--run-seconds`, twice: with `mirrorflow.copy.handover.seconds = 0` (one
   `@continuous` run after the other: the baseline) and with `--handover-seconds` (runs start every run.seconds -
   handover.seconds, two at once, the next copy fencing the current one: `airflow.schedule.overlapping_runs`).
   Overlap needs S < handover <= (run.seconds - S) / 2, S being a run's start (discovery, spark-submit, a Spark
   session: ~37 s on the 2-core host): two runs at most are active and each lasts S + run.seconds. Hence the
   defaults `--run-seconds 180 --handover-seconds 60` (a run every 120 s; the product's are 300 and 60): with
   `--seconds 400` three boundaries fall inside the window. A continuous run holds two executor slots for its
   whole length (`copy`, `loops`), so overlapping runs need five (two runs and the next run's control-plane
   tasks): `--parallelism` 6. With the LocalExecutor's 2 of the test set-up, the third run's tasks waited for the
   second run's end and the gap came back (session 13's first run: copies overlapped 74 s and 25 s, longest gap
   37.7 s).

Each row gives p50/p99/max latency and the longest gap between two arrivals on the target (how long the copy
stood still). For the deployed path it also lists, from Airflow's metadata DB, each boundary: the time between
one run's `copy` task ending and the next one's starting. Takes ~(3 x seconds + 3 min).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
from pathlib import Path
from typing import Any

from confluent_kafka.admin import NewTopic

import report
from bench_latency import latency_floor, latency_mirrorflow, measure
from bench_mirrorflow import flow_settings, prepare_flow_topics, write_config
from cpu_sampler import cpu_text, sampling
from harness import KEEP, Case, bench_clusters, create_topics, run_id
from mirrorflow.airflow.local_scheduler import LocalScheduler

DEPLOYED = "dep"
DAG_ID = f"mirrorflow__{DEPLOYED}__B"
FLOW_DAG = report.FLOW_DAG


def in_suite(
    runs: list[report.Run],
    cases: list[Case],
    directory: Path,
    clusters: tuple[str, str],
    seconds: float = 400.0,
    run_seconds: int = 180,
    handover_seconds: int = 60,
) -> tuple[report.Latency | None, str]:
    """`make bench`'s deployed row: the 1 KB case with the most partitions, at half of the Spark exactly-once
    copy's rate in this run (whole run, start-up included, as the other latency rows), 400 s with `run.seconds`
    180 and `handover.seconds` 60 (overlapping runs, three boundaries); the latency row, and the boundaries as
    text for the page."""
    case = max(cases, key=lambda c: (c.size, c.partitions))
    spark = [r for r in runs if r.case == case.name and report.DEPLOYED in r.variant and r.eos]
    if not spark:
        return None, "the deployed path: no Spark exactly-once rate measured, skipped"
    rate = spark[0].rate / 2
    print(f"- deployed path: the flow DAG under a real scheduler at {rate:,.0f} records/s ...", flush=True)
    deployed = Case(0, case.size, case.partitions, f"deployed{run_id()}")
    latency, found = latency_deployed(directory, *clusters, deployed, rate, seconds, run_seconds, handover_seconds)
    return latency, f"{report.windows_text(latency)}\n\n{boundaries_text(found)}"


Boundary = tuple[str, float | None, float | None, str]
"""A copy task (`boundaries`): run id, seconds since the previous copy ended, seconds it ran, its start (UTC)."""


def boundaries_text(found: list[Boundary]) -> str:
    return report.text_table(
        ("run", "copy started (UTC)", "s since the previous copy ended", "copy task ran s"),
        [(r, at, report.fmt(since, "{:.1f}"), report.fmt(ran, "{:.1f}")) for r, since, ran, at in found],
    )


def latency_deployed(
    directory: Path,
    source: str,
    target: str,
    case: Case,
    rate: float,
    seconds: float,
    run_seconds: int,
    handover_seconds: int = 0,
    parallelism: int = 6,
    keep_logs: Path | None = None,
    settings: tuple[str, ...] = (),
) -> tuple[report.Latency, list[Boundary]]:
    """The flow DAG under a real scheduler: its latency, and its `copy` tasks (`boundaries`). `keep_logs`: where
    the Airflow home's task logs go afterwards (each copy task's log tells which ranges handed over, left or
    took a partition back, and when), before the benchmark's directory is removed."""
    topic = f"lat-{DEPLOYED}-{case.topic}-h{handover_seconds}"
    create_topics(source, [NewTopic(topic, case.partitions, 1, config=KEEP)])
    prepare_flow_topics(source, target, DEPLOYED, Case(case.records, case.size, case.partitions, topic), KEEP)
    config = directory / f"deployed-h{handover_seconds}.properties"
    write_config(
        config,
        source,
        target,
        {DEPLOYED: (topic, "exactly-once")},
        (
            f"{DEPLOYED}->B.mirrorflow.copy.run.seconds = {run_seconds}",
            f"{DEPLOYED}->B.mirrorflow.copy.handover.seconds = {handover_seconds}",
            f"{DEPLOYED}->B.mirrorflow.spark.master = local[2]",
            "emit.heartbeats.enabled = false",
            *flow_settings([DEPLOYED], settings),
        ),
    )
    home = directory / f"airflow-h{handover_seconds}"
    with LocalScheduler.running(home, config, parallelism=parallelism) as airflow:
        airflow.wait_for_dag(DAG_ID)
        name = f"{FLOW_DAG}, exactly-once, run.seconds {run_seconds}, handover.seconds {handover_seconds}"
        rounds = [s.split("=", 1)[1] for s in settings if s.startswith("mirrorflow.copy.round.seconds=")]
        name += f", round.seconds {rounds[-1]}" if rounds else ""
        with sampling() as cpu:
            remote = f"{DEPLOYED}.{topic}"
            latency = measure(name, case, source, target, topic, remote, rate, seconds, lambda: None, 600)
        print(cpu_text(cpu, [start for start, p99 in latency.windows if p99 > 1000]), flush=True)
        rows = airflow.query(
            "SELECT run_id, start_date, end_date FROM task_instance WHERE dag_id = %s AND task_id = 'copy' "
            "AND start_date IS NOT NULL ORDER BY start_date",
            DAG_ID,
        )
    if keep_logs is not None and (home / "logs").is_dir():
        shutil.copytree(home / "logs", keep_logs / f"handover-{handover_seconds}", dirs_exist_ok=True)
    return latency, boundaries(rows)


def boundaries(rows: list[tuple[Any, ...]]) -> list[Boundary]:
    """Per copy task (start order): its run id, the seconds from the previous copy's end to its start (negative:
    the runs overlapped), how long it ran (None while it still runs), and its start (UTC)."""
    found: list[Boundary] = []
    previous_end: dt.datetime | None = None
    for run, started, ended in rows:
        since = None if previous_end is None else (started - previous_end).total_seconds()
        ran = None if ended is None else (ended - started).total_seconds()
        found.append((str(run), since, ran, f"{started.astimezone(dt.UTC):%H:%M:%S}"))
        previous_end = ended
    return found


def probe_marks(events: Path) -> None:
    """Have every Spark worker of the DAG's copy tasks mark its phases in `events`: the scheduler's processes
    inherit this environment, spark-submit too, and its Python workers run `probe_site/sitecustomize.py`."""
    here = Path(__file__).resolve().parent
    os.environ["MIRRORFLOW_PROBE_EVENTS"] = str(events.resolve())
    path = [str(here / "probe_site"), str(here), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, path))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=2000, help="records/s")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=1024, help="value bytes")
    parser.add_argument("--seconds", type=float, default=400.0)
    parser.add_argument("--run-seconds", type=int, default=180, help="mirrorflow.copy.run.seconds of the DAG")
    parser.add_argument("--handover-seconds", type=int, default=60, help="mirrorflow.copy.handover.seconds")
    parser.add_argument("--no-in-process", action="store_true", help="skip the floor and in-process rows")
    parser.add_argument("--no-baseline", action="store_true", help="skip the deployed row with handover 0")
    parser.add_argument("--parallelism", type=int, default=6, help="the LocalExecutor's slots")
    parser.add_argument("--keep-logs", type=Path, default=None, help="copy the Airflow task logs here")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a flow key for every row, e.g. mirrorflow.copy.transaction.min.ms=0",
    )
    parser.add_argument(
        "--probe", type=Path, default=None, help="write the Spark copy's phase marks here (probe_site/sitecustomize.py)"
    )
    args = parser.parse_args(argv)
    if args.probe is not None:
        probe_marks(args.probe)
    with bench_clusters("mirrorflow-deployed-") as (directory, source, target):
        case = Case(0, args.size, args.partitions, f"deployed{run_id()}")
        config = directory / "in-process.properties"
        settings = flow_settings(["inp"], args.set)
        write_config(config, source, target, {"inp": (f"lat-inp-{case.topic}", "exactly-once")}, settings)
        found = []
        if not args.no_in_process:
            found.append(latency_floor(source, case, "floor", args.rate, args.seconds))
            found.append(latency_mirrorflow(config, source, target, case, "inp", args.rate, args.seconds))
        boundaries_of = []
        for handover in (0, args.handover_seconds)[1 if args.no_baseline else 0 :]:
            deployed, runs = latency_deployed(
                directory,
                source,
                target,
                case,
                args.rate,
                args.seconds,
                args.run_seconds,
                handover,
                args.parallelism,
                args.keep_logs,
                tuple(args.set),
            )
            found.append(deployed)
            boundaries_of.append((handover, runs))
        print()
        header = (*report.LATENCY_HEADER, "longest gap ms")
        body = [
            (*row, report.fmt(lat.longest_gap_ms, "{:.0f}"))
            for row, lat in zip(report.latency_rows(found), found, strict=True)
        ]
        print(report.text_table(header, body))
        print()
        for lat in found:
            print(report.windows_text(lat))
        print()
        for handover, runs in boundaries_of:
            print(f"Deployed path, handover.seconds {handover}, each copy task (from Airflow's metadata DB):")
            print(boundaries_text(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

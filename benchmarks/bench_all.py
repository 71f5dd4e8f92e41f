"""`make bench` / `make bench-quick`: Mirrorflow against real MirrorMaker 2 and the target broker's raw limit, on
the same local clusters in one run (docs/benchmarks.md).

Starts two single-broker KRaft clusters (`A` source, `B` target) in a temporary directory, writes the source
topics, then per case measures: Kafka's ProducerPerformance into the target and a bare confluent-kafka
consume->produce loop (the raw limits), real MM2 in dedicated mode (at-least-once and exactly-once), and
Mirrorflow in interval mode (own process, and Spark local) and continuous mode, exactly-once and at-least-once.
Then the end-to-end latency of Mirrorflow's continuous mode and of MM2 under a steady producer at half of
Mirrorflow's continuous throughput; the deployed path (the continuous flow DAG under a real Airflow scheduler,
`bench_deployed.in_suite`) at half of the Spark copy's rate, with its run boundaries; and the fixed cost of one
`spark-submit` run. Prints a table; with
`--write-docs` also regenerates the results part of docs/benchmarks.md and docs/benchmarks.png.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from importlib.metadata import version
from pathlib import Path

from confluent_kafka import libversion
from confluent_kafka.admin import NewTopic

import bench_deployed
import report
from bench_airflow import airflow_overhead
from bench_latency import latency_floor, latency_mirrorflow, latency_mm2
from bench_mirrorflow import SparkBench, copy_in_process, spark_submit_overhead, write_config
from bench_mm2 import run_mm2
from bench_raw import JAVA_DEFAULT, QUICK_SWEEP, SWEEP, bare_loop, best_producer_performance, producer_performance
from harness import KEEP, Case, create_topics, produce_source, run_id, warm_up
from mirrorflow.local.cluster import LocalClusters

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@dataclass
class Plan:
    """What one run measures; `quick` trims it to fit in about three minutes."""

    records: dict[int, int]  # value size -> records
    partitions: list[int]
    spark: bool = True
    mm2: bool = True
    continuous_alos: bool = True
    latency_seconds: float = 20.0
    mm2_latency_eos: bool = True
    mm2_all_cases: bool = True  # quick: MM2 only on the case with the most partitions
    mm2_tuned: bool = True  # beside the default MM2: the tuning guides' settings (bench_mm2.TUNED)
    raw_grid: tuple[tuple[int, int], ...] = SWEEP  # ProducerPerformance (batch.size, linger.ms) points
    spark_submit: bool = True
    deployed: bool = True  # the flow DAG under a real scheduler (bench_deployed.in_suite, ~10 min)
    timeout_s: float = 900.0
    skip: set[str] = field(default_factory=set)


def plan_of(args: argparse.Namespace) -> Plan:
    if args.quick:
        plan = Plan(
            {1024: args.records or 100_000},
            args.partitions or [1, 8],
            spark=not args.no_spark,
            mm2=not args.no_mm2,
            continuous_alos=False,
            latency_seconds=8.0,
            mm2_latency_eos=False,
            mm2_all_cases=False,
            raw_grid=QUICK_SWEEP,
            spark_submit=False,
            deployed=False,
            timeout_s=300.0,
        )
        plan.skip |= {"spark-alos"}
        return plan
    n = args.records or 1_000_000
    return Plan({100: n, 1024: n}, args.partitions or [1, 8], spark=not args.no_spark, mm2=not args.no_mm2)


def mm2_variants(plan: Plan, latency: bool = False) -> list[tuple[bool, bool]]:
    """(eos, tuned) pairs of the MM2 runs `plan` asks for."""
    modes = (False, True) if (plan.mm2_latency_eos or not latency) else (False,)
    return [(eos, tuned) for eos in modes for tuned in ((False, True) if plan.mm2_tuned else (False,))]


def step(name: str, fn: Callable[[], report.Run], runs: list[report.Run]) -> None:
    """One measurement; a failure is reported and the run goes on (the table shows what was measured)."""
    started = time.perf_counter()
    print(f"- {name} ...", flush=True)
    try:
        run = fn()
    except Exception as err:
        print(f"  FAILED after {time.perf_counter() - started:.0f}s: {err!r}", flush=True)
        return
    runs.append(run)
    print(f"  {run.rate:,.0f} records/s, {run.mb_per_s:.1f} MB/s in {run.seconds:.2f}s", flush=True)


def versions(kafka: str) -> str:
    return (
        f"Kafka {kafka} (single-node KRaft brokers on this host), pyspark {version('pyspark')}, confluent-kafka "
        f"{version('confluent-kafka')} (librdkafka {libversion()[0]}), Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC"
    )


def run_transforms_bench(directory: Path, quick: bool) -> str | None:
    """benchmarks/bench_transforms.py (another part of the suite) when present, on this run's clusters: its
    stdout goes into the page."""
    script = Path(__file__).with_name("bench_transforms.py")
    if not script.exists():
        return None
    print(f"- {script.name} ...", flush=True)
    command = [sys.executable, str(script), "--dir", str(directory), "--clusters", "A,B"]
    command += ["--records", "20000", "--rounds", "1"] if quick else []
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    out = done.stdout.strip() or done.stderr.strip()[-2000:]
    print(out, flush=True)
    return out if done.returncode == 0 else f"(exit {done.returncode})\n{out}"


def run_schema_ids_bench(quick: bool) -> str | None:
    """benchmarks/bench_schema_ids.py: the per-record cost of schema-ID translation (no broker, no registry)."""
    script = Path(__file__).with_name("bench_schema_ids.py")
    print(f"- {script.name} ...", flush=True)
    command = [sys.executable, str(script), *(["--records", "50000", "--rounds", "3"] if quick else [])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout.strip() or done.stderr.strip()[-2000:]
    print(out, flush=True)
    return out if done.returncode == 0 else f"(exit {done.returncode})\n{out}"


def render(
    command: str,
    about: str,
    runs: list[report.Run],
    latencies: list[report.Latency],
    overheads: list[report.Overhead],
    transforms: str | None,
    schema_ids: str | None = None,
    deployed: str | None = None,
) -> str:
    parts = [
        f"Command: `{command}`; {about}.",
        "",
        report.markdown_table(report.HEADER, report.rows(runs)),
        "",
        "`vs MM2`: against MM2 of the same guarantee in the same case; `vs raw`: against ProducerPerformance "
        "into the target. `start-up s`: from the copy process's start (MM2: the JVM's) to the first record on "
        "the target. Peak RSS: the copy's process tree (MM2's JVM; Mirrorflow's copy process with one thread per "
        "partition; Spark's JVM with its Python workers), sampled every 0.2 s from /proc.",
        "",
    ]
    if latencies:
        parts += [
            "End-to-end latency (produce time at the source to arrival at a read_committed consumer on the target):",
            "",
            report.markdown_table(report.LATENCY_HEADER, report.latency_rows(latencies)),
            "",
        ]
    if deployed:
        parts += ["The deployed path's copy tasks (Airflow's metadata DB; a gap is the time between two):", ""]
        parts += ["```", deployed, "```", ""]
    for o in overheads:
        copy = f" (the copy itself: {o.copy_seconds:.2f}s)" if o.copy_seconds is not None else ""
        parts += [f"Fixed cost per run: {o.what}: {o.seconds:.1f}s{copy}.", ""]
    parts += [
        "Goals:",
        "",
        report.markdown_table(("goal", "measured", "verdict"), report.goal_rows(report.goals(runs, latencies))),
        "",
    ]
    if transforms:
        parts += ["`benchmarks/bench_transforms.py`:", "", "```", transforms, "```", ""]
    if schema_ids:
        parts += ["`benchmarks/bench_schema_ids.py` (schema-ID translation, per record):", "", schema_ids, ""]
    parts += ["![records/s per variant](benchmarks.png)"]
    return "\n".join(parts)


def write_docs(page: Path, section: str) -> None:
    """Replaces the generated part of the page (between the markers), keeping the hand-written analysis."""
    page.write_text(report.replace_section(page.read_text() if page.exists() else "# Benchmarks\n", section))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the ~3-minute version (100 k records of 1 KB)")
    parser.add_argument("--records", type=int, default=None, help="records per source topic")
    parser.add_argument("--partitions", type=int, nargs="*", default=None, help="default: 1 8")
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--no-mm2", action="store_true")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--write-docs", action="store_true", help="regenerate docs/benchmarks.md and .png")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown section and chart here")
    args = parser.parse_args(argv)
    # SIGTERM (timeout, Ctrl-C of make) must still run the `finally` below that stops the clusters.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    plan = plan_of(args)
    command = "make bench-quick" if args.quick else "make bench"
    directory = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-"))
    t0 = time.perf_counter()
    clusters = LocalClusters.up(["A", "B"], directory, heap_max="1g", tie_to_parent=True)
    try:
        source, target = clusters.bootstrap("A"), clusters.bootstrap("B")
        runtime = clusters.runtime
        rid = run_id()
        cases = [
            Case(n, size, p, f"bench-{rid}-{size}b-{p}p")
            for size, n in sorted(plan.records.items())
            for p in sorted(plan.partitions)
        ]
        create_topics(source, [NewTopic(c.topic, c.partitions, 1, config=KEEP) for c in cases])
        warm_up(source)
        warm_up(target)
        for c in cases:
            started = time.perf_counter()
            produce_source(source, c)
            print(f"prepared {c.topic}: {c.records:,} x {c.size} B in {time.perf_counter() - started:.1f}s", flush=True)
        aliases: dict[str, tuple[str, str]] = {}
        for i, c in enumerate(cases):
            for kind in ("ie", "ia", "se", "sa", "ce", "ca"):
                aliases[f"{kind}{i}"] = (c.topic, "exactly-once" if kind.endswith("e") else "at-least-once")
            aliases[f"le{i}"] = (f"lat-le{i}-{c.topic}", "exactly-once")
            aliases[f"la{i}"] = (f"lat-la{i}-{c.topic}", "at-least-once")
        config = directory / "bench-mirrorflow.properties"
        write_config(config, source, target, aliases)
        runs: list[report.Run] = []
        spark = SparkBench("local[*]") if plan.spark else None
        for i, c in enumerate(cases):
            print(f"\n== {c.name}: {c.records:,} records", flush=True)
            raw = partial(producer_performance, runtime, target, c, directory, *JAVA_DEFAULT)
            step("ProducerPerformance, Java defaults", raw, runs)
            step(
                "ProducerPerformance sweep",
                partial(best_producer_performance, runtime, target, c, directory, plan.raw_grid),
                runs,
            )
            step("bare loop", partial(bare_loop, source, target, c), runs)
            if plan.mm2 and (plan.mm2_all_cases or c.partitions == max(plan.partitions)):
                for eos, tuned in mm2_variants(plan):
                    alias = f"mm2{'e' if eos else 'a'}{'t' if tuned else ''}{i}"
                    step(
                        f"MM2 eos={eos} tuned={tuned}",
                        partial(run_mm2, runtime, source, target, c, alias, eos, directory, plan.timeout_s, tuned),
                        runs,
                    )
            for kind, eos, continuous in (("ie", True, False), ("ia", False, False), ("ce", True, True)) + (
                (("ca", False, True),) if plan.continuous_alos else ()
            ):
                step(
                    f"Mirrorflow {kind}",
                    partial(
                        copy_in_process,
                        config,
                        source,
                        target,
                        c,
                        f"{kind}{i}",
                        eos=eos,
                        continuous=continuous,
                        timeout_s=plan.timeout_s,
                    ),
                    runs,
                )
            if spark is not None:
                for kind, eos in (("se", True), ("sa", False)):
                    if f"spark-{'alos' if not eos else 'eos'}" in plan.skip:
                        continue
                    step(
                        f"Spark {kind}",
                        # se0 is the flow of the fixed-cost runs below: its remote topic stays
                        partial(
                            spark.copy, config, source, target, c, f"{kind}{i}", eos=eos, keep=kind == "se" and i == 0
                        ),
                        runs,
                    )
        if spark is not None:
            spark.stop()
        overheads: list[report.Overhead] = []
        if plan.spark and plan.spark_submit:
            spark_runs = [r for r in runs if r.variant.startswith("Mirrorflow interval Spark") and r.eos]
            print("- spark-submit of an empty range ...", flush=True)
            try:
                overheads.append(spark_submit_overhead(config, "se0", spark_runs[0].seconds if spark_runs else None))
                print(f"  {overheads[-1].seconds:.1f}s", flush=True)
            except Exception as err:
                print(f"  FAILED: {err!r}", flush=True)
            print("- Airflow dag.test() of a flow with nothing to copy ...", flush=True)
            try:
                airflow_config = directory / "bench-airflow.properties"
                flow_lines = ("se0->B.mirrorflow.copy.mode = interval",)
                write_config(airflow_config, source, target, {"se0": aliases["se0"]}, flow_lines)
                found = airflow_overhead(airflow_config, "se0->B", spark_runs[0].seconds if spark_runs else None)
                overheads += found
                print(f"  {found[0].seconds:.1f}s, then {found[1].seconds:.1f}s", flush=True)
            except Exception as err:
                print(f"  FAILED: {err!r}", flush=True)
        latencies: list[report.Latency] = []
        deployed_text = None
        if not args.no_latency:
            latencies = measure_latencies(plan, cases, runs, runtime, config, source, target, directory)
            if plan.deployed:
                deployed, deployed_text = bench_deployed.in_suite(runs, cases, directory, (source, target))
                latencies += [deployed] if deployed is not None else []
        transforms = run_transforms_bench(directory, args.quick)
        schema_ids = run_schema_ids_bench(args.quick)
        about = versions(runtime.version) + f"; whole run {time.perf_counter() - t0:.0f}s"
        print()
        print(report.text_table(report.HEADER, report.rows(runs)))
        if latencies:
            print()
            print(report.text_table(report.LATENCY_HEADER, report.latency_rows(latencies)))
        for o in overheads:
            print(f"\nfixed cost per run: {o.what}: {o.seconds:.1f}s")
        print()
        print(report.text_table(("goal", "measured", "verdict"), report.goal_rows(report.goals(runs, latencies))))
        print(f"\n{about}")
        section = render(command, about, runs, latencies, overheads, transforms, schema_ids, deployed_text)
        title = f"{command}: records/s ({os.cpu_count()} cores, {dt.date.today()})"
        if args.write_docs:
            write_docs(DOCS / "benchmarks.md", section)
            report.chart(runs, DOCS / "benchmarks.png", title)
            print(f"wrote {DOCS / 'benchmarks.md'} and {DOCS / 'benchmarks.png'}")
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "benchmarks.md").write_text(section + "\n")
            report.chart(runs, args.out / "benchmarks.png", title)
            print(f"wrote {args.out / 'benchmarks.md'} and {args.out / 'benchmarks.png'}")
    finally:
        clusters.down(purge=True)
        shutil.rmtree(directory, ignore_errors=True)
    return 0


def measure_latencies(
    plan: Plan,
    cases: list[Case],
    runs: list[report.Run],
    runtime: object,
    config: Path,
    source: str,
    target: str,
    work: Path,
) -> list[report.Latency]:
    """Latency on the 1 KB case with the most partitions, at half of Mirrorflow's continuous exactly-once rate
    (whole run, start-up included)."""
    from mirrorflow.local.runtime import KafkaRuntime

    assert isinstance(runtime, KafkaRuntime)
    index, case = max(enumerate(cases), key=lambda ic: (ic[1].size, ic[1].partitions))
    cont = report.baseline(runs, case.name, report.MIRRORFLOW, True)
    found = [r for r in runs if r.case == case.name and r.variant.startswith("Mirrorflow continuous") and r.eos]
    best = found[0] if found else cont
    if best is None:
        print("- latency: no continuous throughput measured, skipped", flush=True)
        return []
    # The whole run's rate, not the steady one: a late first-arrival reading would inflate that, and an offered
    # load above what the copy sustains measures a growing backlog, not latency.
    rate = best.rate / 2
    out: list[report.Latency] = []
    print(f"\n== latency on {case.name} at {rate:,.0f} records/s for {plan.latency_seconds:.0f}s", flush=True)
    jobs: list[tuple[str, Callable[[], report.Latency]]] = [
        (
            f"Mirrorflow continuous eos={eos}",
            partial(
                latency_mirrorflow,
                config,
                source,
                target,
                case,
                f"{'le' if eos else 'la'}{index}",
                rate,
                plan.latency_seconds,
                eos=eos,
            ),
        )
        for eos in (True, False)
    ]
    jobs.append(("no replicator", partial(latency_floor, source, case, f"lf{index}", rate, plan.latency_seconds)))
    if plan.mm2:
        for eos, tuned in mm2_variants(plan, latency=True):
            own = report.baseline([r for r in runs if ("tuned" in r.variant) == tuned], case.name, report.MM2, eos)
            if own is None:
                print(f"- MM2 eos={eos} tuned={tuned}: no throughput of its own measured, latency skipped", flush=True)
                continue
            # At half of MM2's own maximum: above it, latency measures a growing backlog, not MM2.
            jobs.append(
                (
                    f"MM2 eos={eos} tuned={tuned} at {own.rate / 2:,.0f} records/s (half of its own max)",
                    partial(
                        latency_mm2,
                        runtime,
                        source,
                        target,
                        case,
                        f"mm2l{'e' if eos else 'a'}{'t' if tuned else ''}",
                        eos,
                        own.rate / 2,
                        plan.latency_seconds,
                        work,
                        tuned,
                    ),
                )
            )
    for name, job in jobs:
        print(f"- {name} ...", flush=True)
        try:
            lat = job()
        except Exception as err:
            print(f"  FAILED: {err!r}", flush=True)
            continue
        out.append(lat)
        print(f"  p50 {lat.p50:.0f} ms, p99 {lat.p99:.0f} ms over {len(lat.samples)} samples", flush=True)
    return out


if __name__ == "__main__":
    raise SystemExit(main())

"""End-to-end latency of Mirrorflow's continuous copy against offered load, and the host's own floor at each load
(the same producer and consumer with no replicator): `make bench-latency` (docs/benchmarks.md).

Starts two local clusters, warms them with one discarded round (a fresh broker's JIT skews the first tens of
seconds), then per rate: the floor, then Mirrorflow (the delivery given), each for `--seconds`.
"""

from __future__ import annotations

import argparse

import report
from bench_latency import latency_floor, latency_mirrorflow
from bench_mirrorflow import flow_settings, write_config
from harness import Case, bench_clusters, run_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rates", type=float, nargs="+", default=[2000, 8000, 16000, 27000], help="records/s")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--size", type=int, default=1024, help="value bytes")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--delivery", choices=("exactly-once", "at-least-once"), default="exactly-once")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a flow key, e.g. mirrorflow.copy.transaction.max.ms=250",
    )
    args = parser.parse_args(argv)
    with bench_clusters("mirrorflow-latency-") as (directory, source, target):
        rid = run_id()
        case = Case(0, args.size, args.partitions, f"sweep{rid}")
        rounds = [args.rates[len(args.rates) // 2], *args.rates]  # the first round warms the brokers
        aliases = {f"s{i}": (f"lat-s{i}-{case.topic}", args.delivery) for i in range(len(rounds))}
        config = directory / "sweep.properties"
        write_config(config, source, target, aliases, flow_settings(aliases, args.set))
        eos = args.delivery == "exactly-once"
        found: list[report.Latency] = []
        for i, rate in enumerate(rounds):
            floor = latency_floor(source, case, f"f{i}", rate, args.seconds)
            copy = latency_mirrorflow(config, source, target, case, f"s{i}", rate, args.seconds, eos=eos)
            if i == 0:
                print(f"warm-up round at {rate:,.0f} records/s: p99 {copy.p99:.0f} ms (not reported)", flush=True)
                continue
            found += [floor, copy]
            print(f"{rate:,.0f} records/s: floor p99 {floor.p99:.0f} ms, Mirrorflow p99 {copy.p99:.0f} ms", flush=True)
        print()
        print(report.text_table(report.LATENCY_HEADER, report.latency_rows(found)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`make bench-memory`: the peak RSS of one process copying 8 partitions (what one Spark task holding 8 ranges
does), with the copy's buffers capped in bytes only (the baseline: librdkafka's record counts) beside the
buffers capped in bytes and in records (`copy_task.RECORD_OVERHEAD_BYTES`), in the same run on the same
clusters. Small records are where the byte budgets miss: librdkafka's and Python's per-record cost is not in
them. The goal is 512 MB per process running copy tasks (docs/benchmarks.md).

    python benchmarks/bench_task_memory.py [--records-100b N] [--records-1kb N]
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka.admin import NewTopic

from bench_mirrorflow import copy_in_process, write_config
from harness import KEEP, Case, bench_clusters, create_topics, produce_source, run_id
from mirrorflow.replication.copy_task import RECORD_OVERHEAD_BYTES

PARTITIONS = 8
GOAL_MIB = 512


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records-100b", type=int, default=2_000_000)
    parser.add_argument("--records-1kb", type=int, default=400_000)
    args = parser.parse_args(argv)
    with bench_clusters("mirrorflow-bench-memory-") as (directory, source, target):
        rid = run_id()
        cases = [
            Case(args.records_100b, 100, PARTITIONS, f"mem-{rid}-100b"),
            Case(args.records_1kb, 1024, PARTITIONS, f"mem-{rid}-1kb"),
        ]
        create_topics(source, [NewTopic(c.topic, c.partitions, 1, config=KEEP) for c in cases])
        for c in cases:
            produce_source(source, c)
        variants = {"bytes only (baseline)": 0, f"bytes and records ({RECORD_OVERHEAD_BYTES} B a record)": None}
        aliases = {f"m{i}{j}": (c.topic, "at-least-once") for i, c in enumerate(cases) for j in range(len(variants))}
        config = directory / "bench-memory.properties"
        write_config(config, source, target, aliases)
        rows = []
        for i, c in enumerate(cases):
            for j, (label, overhead) in enumerate(variants.items()):
                run = copy_in_process(
                    config, source, target, c, f"m{i}{j}", eos=False, continuous=True, timeout_s=600,
                    record_overhead_bytes=overhead,
                )  # fmt: skip
                rows.append((c.name, label, run.records / run.seconds, run.peak_rss_mib or 0.0))
                print(f"{c.name}, {label}: {rows[-1][2]:,.0f} records/s, peak RSS {rows[-1][3]:.0f} MiB", flush=True)
        print(f"\n| case | buffers | records/s | peak RSS MiB (goal <= {GOAL_MIB}) |\n| --- | --- | --- | --- |")
        for name, label, rate, rss in rows:
            print(f"| {name} | {label} | {rate:,.0f} | {rss:.0f} |")
        print(f"\ncommand: python benchmarks/bench_task_memory.py {' '.join(argv or sys.argv[1:])}".rstrip())
        return 0


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - started:.0f} s)")
    sys.exit(code)

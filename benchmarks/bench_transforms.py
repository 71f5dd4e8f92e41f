"""Copy throughput with no transform chain, an empty chain and a one-InsertHeader chain, side by side.

Starts two local clusters (source `A`, target `B`) unless `--dir` names running ones, writes N records, then copies
them in this process with `copy_range` (exactly-once) once per variant and round. Each variant of each round is its
own flow (an alias pointing at the same source cluster), so every copy starts at offset 0 into its own remote
topic. Rounds interleave the variants (after one untimed warm-up copy) so that noise on a shared machine hits
them alike; the table shows the median. An empty chain (`transforms =`) must match no chain: both take the plain
copy path.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import NewTopic

from bench_copy import KEEP, create, in_process, produce_source, warm_up
from mirrorflow.config.loader import load_config
from mirrorflow.kafka.clients import admin_client
from mirrorflow.local.cluster import LocalClusters

VARIANTS = {
    "none": "",
    "empty": "{alias}->B.transforms =\n",
    "header": (
        "{alias}->B.transforms = addHeaders\n"
        "{alias}->B.transforms.addHeaders.type = org.apache.kafka.connect.transforms.InsertHeader\n"
        "{alias}->B.transforms.addHeaders.header = X-Replicated-From\n"
        "{alias}->B.transforms.addHeaders.value.literal = source-cluster\n"
    ),
}
LABELS = {"none": "no chain", "empty": "empty chain", "header": "one InsertHeader"}


def write_config(path: Path, source: str, target: str, topic: str, aliases: dict[str, str]) -> None:
    lines = [f"clusters = B, {', '.join(aliases)}", f"B.bootstrap.servers = {target}"]
    for alias, variant in aliases.items():
        lines += [f"{alias}.bootstrap.servers = {source}", f"{alias}->B.enabled = true", f"{alias}->B.topics = {topic}"]
        lines += VARIANTS[variant].format(alias=alias).splitlines()
    lines += [
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "admin.timeout.ms = 30000",
    ]
    path.write_text("\n".join(lines) + "\n")


def prepare_topics(source: str, target: str, topic: str, partitions: int, aliases: list[str]) -> None:
    compact = {"cleanup.policy": "compact"}
    names = [NewTopic(f"{a}.{topic}", partitions, 1, config=KEEP) for a in aliases]
    for alias in aliases:
        names += [
            NewTopic(f"mirrorflow-{kind}.{alias}.internal", 1, 1, config=compact)
            for kind in ("progress", "offset-map", "metrics")
        ]
    create(admin_client({"bootstrap.servers": target}), names)
    syncs = NewTopic("mm2-offset-syncs.B.internal", 1, 1, config=compact)
    create(admin_client({"bootstrap.servers": source}), [NewTopic(topic, partitions, 1, config=KEEP), syncs])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="clusters' directory, kept (default: a temporary one)")
    parser.add_argument("--clusters", default="A,B", help="source and target aliases of the clusters in --dir")
    args = parser.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="mirrorflow-bench-transforms-"))
    src_alias, dst_alias = args.clusters.split(",")
    clusters = LocalClusters.up([src_alias, dst_alias], directory)
    source, target = clusters.bootstrap(src_alias), clusters.bootstrap(dst_alias)
    run = uuid.uuid4().hex[:6]
    topic = f"bench-smt-{run}"
    warm = f"warmx{run}"  # an untimed first copy: the first task of a process pays one-off set-up costs
    aliases = {warm: "none", **{f"{v}{r}x{run}": v for r in range(args.rounds) for v in VARIANTS}}
    try:
        prepare_topics(source, target, topic, args.partitions, list(aliases))
        warm_up(source)
        warm_up(target)
        produce_source(source, topic, args.records, args.size, args.partitions)
        config = directory / f"{topic}.properties"
        write_config(config, source, target, topic, aliases)
        loaded = load_config(config)
        rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for alias, variant in aliases.items():  # rounds interleave the variants
            started = time.perf_counter()
            seconds = in_process(loaded.flow(f"{alias}->B"), topic, args.partitions)
            if alias == warm:
                continue
            rates[variant].append(args.records / seconds)
            print(
                f"{LABELS[variant]:>17}: {args.records / seconds:,.0f} records/s ({time.perf_counter() - started:.1f}s)"
            )
        base = statistics.median(rates["none"])
        print()
        print(f"{args.records} x {args.size} B, {args.partitions} partitions, exactly-once, median of {args.rounds}")
        print("| chain | records/s (median) | min | max | vs no chain |")
        print("|---|---:|---:|---:|---:|")
        for variant, values in rates.items():
            median = statistics.median(values)
            print(
                f"| {LABELS[variant]} | {median:,.0f} | {min(values):,.0f} | {max(values):,.0f} | {median / base:.2f} |"
            )
    finally:
        if args.dir is None:
            clusters.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

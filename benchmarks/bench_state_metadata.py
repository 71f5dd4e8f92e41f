"""`make bench-state-metadata`: what a Spark task's start asks of the state topics' metadata, counted by the broker.

Every metadata answer about a state topic lists all of its slots, so at thousands of slots the answers a start
asks for weigh more than the state it reads (issue 17, docs/scaling.md item 1). Here a flow of `--partitions`
source partitions has state topics sized by the topic step (`--slots`: 8 partitions per slot, as for a flow of
8 x slots partitions) and one Spark task's ranges are copied: the first group of the copy plan's grouping
(`copy_plan.spread`: 8 ranges, those of one slot together). Each round produces `--records` records to each of
its partitions and copies them as a run boundary's new run does: continuous exactly-once (read ahead, fence, read
after it, claim, copy, commits) for `--run-seconds`. The broker logs every metadata request
(`broker_metadata.py`), librdkafka's own included. Two ways, alternating in the same run:

- the Spark task (`copy_ranges`: its ranges share their reads, partition counts, fetching clients and the client
  asking true ends, `kafka/log_cache.py`);
- baseline: the same 8 ranges as 8 one-range Spark tasks (nothing shared between ranges).

Printed per Spark task (median over the rounds): the metadata answers listing a state topic, the state-topic
partitions they listed, and what those weigh on the wire here (replication factor 1) and at 3; the answers do not
depend on the slot count, their size grows with it (x 42 bytes at replication factor 3).
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from bench_mirrorflow import flow_of, write_config
from broker_metadata import MetadataLog, log_metadata, partition_bytes
from harness import COMPACT, bench_clusters, create_topics, run_id
from mirrorflow.core.state_slots import head_slot
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.replication.copy_group import copy_ranges
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy, spread
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.internal_topics import create_internal_topics

PER_TASK = 8
"""Ranges per Spark task: `mirrorflow.copy.partitions.per.task`'s default."""
WAYS = ("one Spark task of 8 ranges", "baseline: 8 one-range tasks")


def produce(bootstrap: str, topic: str, partitions: list[int], records: int) -> None:
    producer = Producer(with_logger({"bootstrap.servers": bootstrap, "linger.ms": 5}))
    for p in partitions:
        for i in range(records):
            producer.produce(topic, value=b"v%d" % i, partition=p)
    assert producer.flush(60) == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--partitions", type=int, default=512, help="source partitions of the flow")
    parser.add_argument("--records", type=int, default=100, help="records per partition and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each way")
    parser.add_argument("--run-seconds", type=float, default=2.0, help="how long each continuous run copies")
    args = parser.parse_args(argv)
    log_metadata()
    rid = run_id()
    topic, alias = f"meta-{rid}", "S"
    with bench_clusters("mirrorflow-bench-metadata-") as (directory, source, target):
        config = directory / "metadata.properties"
        write_config(config, source, target, {alias: (topic, "exactly-once")})
        flow = flow_of(config, alias)
        create_topics(source, [NewTopic(topic, args.partitions, 1)])
        create_topics(source, [NewTopic("mm2-offset-syncs.B.internal", 1, 1, config=COMPACT)])
        create_topics(target, [NewTopic(f"{alias}.{topic}", args.partitions, 1)])
        with FlowClients(flow) as clients:
            create_internal_topics(flow, clients, source_partitions=args.partitions)
        spec = [SourcePartitions(topic, f"{alias}.{topic}", args.partitions)]
        planned = [replace(t, run_seconds=args.run_seconds) for t in plan_copy(flow, spec, interval=False)]
        slots = planned[0].state_partitions
        group = spread(planned, slots, PER_TASK)[0]
        heads = {head_slot(t.topic, t.partition, slots) for t in group}
        print(f"one Spark task: {len(group)} ranges, their state in {len(heads)} of {slots} slots", flush=True)
        state = [group[0].progress_topic, group[0].offset_map_topic, str(group[0].metrics_topic)]
        log = MetadataLog(directory / "clusters", "B")
        figures: dict[str, list[tuple[int, int]]] = {way: [] for way in WAYS}
        produce(source, topic, [t.partition for t in group], args.records)
        copy_ranges(group)  # the first copy: state for every partition of the group
        for _ in range(args.rounds):
            for way in WAYS:
                produce(source, topic, [t.partition for t in group], args.records)
                log.mark()
                if way == WAYS[0]:
                    copied = sum(r.records for r in copy_ranges(group))
                else:
                    copied = sum(copy_ranges([t])[0].records for t in group)
                assert copied == len(group) * args.records, f"{way}: copied {copied}"
                answers, partitions = log.since_mark().of(state)
                figures[way].append((answers, partitions))
                print(f"{way}: {answers} answers, {partitions} state partitions listed", flush=True)
    report(slots, figures)
    return 0


def report(slots: int, figures: dict[str, list[tuple[int, int]]]) -> None:
    print(f"\nPer Spark task of {PER_TASK} ranges, state topics of {slots:,} slots (medians over the rounds):\n")
    print("| way | metadata answers listing a state topic | state partitions listed | bytes (RF 1) | bytes (RF 3) |")
    print("|---|---|---|---|---|")
    for way, rows in figures.items():
        answers = statistics.median(r[0] for r in rows)
        listed = statistics.median(r[1] for r in rows)
        rf1, rf3 = listed * partition_bytes(1), listed * partition_bytes(3)
        print(f"| {way} | {answers:.0f} | {listed:,.0f} | {rf1 / 1e6:.2f} MB | {rf3 / 1e6:.2f} MB |")


if __name__ == "__main__":
    raise SystemExit(main())

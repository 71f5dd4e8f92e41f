"""`make bench-flow-scale`: one flow of `--partitions` source partitions (2,000 by default) end to end on real brokers.

Two local clusters (`harness.bench_clusters`); on A one topic of `--partitions` partitions, `--records` records in
each (`harness.produce_source`), and a consumer group whose committed offset on partition p is `1 + p % records`
(the middle of most partitions, the end of some). Then one cycle as `mirrorflow run CONFIG --once` runs it, the
real CLI entry in this process (`mirrorflow.cli.app.main`): topic sync, internal topics (the state topics with
their slots), configs, ACLs, heartbeat, the exactly-once copy on Spark (`mirrorflow.spark.master`, `local[*]`),
checkpoints and group offset sync. The cycle's steps are timed by wrapping the functions `flow_cycle` calls
(`PHASES`, `copy_job.CopyStep.__call__`, `spark_session`, `copy_flow`); nothing of the product is replaced. A
failed cycle runs again, up to `--attempts` times, as a retried Airflow task would (a fresh target's first cycle
can fail its heartbeat: docs/scaling.md).

Checks (any failure: exit 1): every target partition holds, read_committed, as many records as its source
partition; `A.checkpoints.internal` on B has a checkpoint of the group for every partition; on `--sample`
partitions the translated offsets (from checkpoints, `translate_group` as `mirrorflow translate` calls it, and
`--live` from the offset maps) are exact: every record of the target below it is a copy of a record below the
committed upstream offset, every one at or above it of one at or above; the group's offsets synced to B equal the
checkpoints. Printed: seconds for topic creation, produce, each step and the whole cycle, a checkpoint read and
both translations, and the log segment bytes of the state topics on B.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import NewTopic

import mirrorflow.replication.flow_cycle as flow_cycle
import mirrorflow.spark.copy_job as copy_job
from harness import Case, bench_clusters, create_topics, produce_source, run_id
from mirrorflow.cli.app import main as mirrorflow_main
from mirrorflow.config.loader import load_config
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.replication.checkpoint_store import CheckpointStore
from mirrorflow.replication.remote_cluster_utils import translate_group

PHASES = (
    "discover",
    "sync_topics",
    "create_internal_topics",
    "sync_configs",
    "sync_acls",
    "emit_heartbeat",
    "emit_checkpoints",
    "sync_group_offsets",
)
GROUP = "scale-group"
STATE_TOPICS = ("mirrorflow-progress.A.internal", "mirrorflow-offset-map.A.internal", "mirrorflow-metrics.A.internal")


def write_config(path: Path, source: str, target: str, topic: str) -> None:
    lines = [
        "clusters = A, B",
        f"A.bootstrap.servers = {source}",
        f"B.bootstrap.servers = {target}",
        "A->B.enabled = true",
        f"A->B.topics = {topic}",
        f"A->B.groups = {GROUP}",
        "A->B.sync.group.offsets.enabled = true",
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
    ]
    path.write_text("\n".join(lines) + "\n")


def committed_offset(partition: int, records: int) -> int:
    return 1 + partition % records


def commit_group(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    """The group's offsets on A, committed by a consumer that never joins (so the group is inactive)."""
    consumer = Consumer(with_logger({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False}))
    try:
        offsets = [TopicPartition(topic, p, committed_offset(p, records)) for p in range(partitions)]
        for i in range(0, partitions, 500):
            consumer.commit(offsets=offsets[i : i + 500], asynchronous=False)
    finally:
        consumer.close()


@contextlib.contextmanager
def timed_steps(timings: dict[str, float]) -> Iterator[None]:
    """Adds each cycle step's wall seconds to `timings` while the cycle runs (the copy also split into the Spark
    session's start and `copy_flow`)."""
    wrapped = [(flow_cycle, name) for name in PHASES] + [(copy_job, "spark_session"), (copy_job, "copy_flow")]
    originals = [getattr(module, name) for module, name in wrapped]
    original_copy = copy_job.CopyStep.__call__

    def timer(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timings[name] = timings.get(name, 0.0) + time.perf_counter() - started

        return run

    for (module, name), fn in zip(wrapped, originals, strict=True):
        setattr(module, name, timer(name, fn))
    copy_job.CopyStep.__call__ = timer("copy", original_copy)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for (module, name), fn in zip(wrapped, originals, strict=True):
            setattr(module, name, fn)
        copy_job.CopyStep.__call__ = original_copy  # type: ignore[method-assign]


def run_once(config: Path) -> dict[str, Any]:
    """`mirrorflow run CONFIG --once --json` in this process; its JSON report."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            mirrorflow_main(["run", str(config), "--once", "--json"])
        except SystemExit as done:
            if done.code not in (0, None):
                sys.stderr.write(out.getvalue())
                raise RuntimeError(f"mirrorflow run --once exited {done.code}") from None
    text = out.getvalue()
    return json.loads(text[text.index("{") :])


def run_cycle(config: Path, timings: dict[str, float], steps: dict[str, float], attempts: int) -> dict[str, Any]:
    """`run_once` up to `attempts` times, as a retried Airflow task would (a fresh target can fail the first
    cycle: see docs/scaling.md, "A 2,000-partition flow end to end"); each failure is printed and timed."""
    for attempt in range(1, attempts + 1):
        name = "cycle (mirrorflow run --once)" + (f", attempt {attempt}" if attempt > 1 else "")
        started = time.perf_counter()
        try:
            with timed_steps(steps):
                return timed(timings, name, lambda: run_once(config))
        except RuntimeError as err:
            timings[f"{name}: failed"] = time.perf_counter() - started
            print(f"{name} failed after {timings[f'{name}: failed']:.1f} s: {err}", flush=True)
            if attempt == attempts:
                raise
            steps.clear()
    raise AssertionError("unreachable")


def read_target(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, int]]]:
    """Per target partition, read_committed: (downstream offset, source index `i` of key `k<i>`) of each record."""
    consumer = Consumer(
        with_logger(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-read-{run_id()}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
            }
        )
    )
    found: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    at_end: set[int] = set()
    deadline = time.monotonic() + 300
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for m in consumer.consume(1000, 1.0):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                    continue
                found[m.partition()].append((m.offset(), int(m.key()[1:])))
    finally:
        consumer.close()
    if len(at_end) < partitions:
        raise RuntimeError(f"{topic}: {partitions - len(at_end)} partitions not read to their end in 300 s")
    return found


def exact(records: list[tuple[int, int]], partition: int, partitions: int, upstream: int, downstream: int) -> bool:
    """True when every copied record below `downstream` came from below `upstream` and none at or above it did
    (records hold source index i = partition + upstream offset * partitions)."""
    for offset, index in records:
        source_offset = (index - partition) // partitions
        if (offset < downstream) != (source_offset < upstream):
            return False
    return True


def state_bytes(cluster_dir: Path) -> dict[str, tuple[int, int]]:
    """(partitions, bytes of log segments) of each state topic on B, from its log directories (the index files
    Kafka preallocates, 20 MB per partition, left out)."""
    sizes = dict.fromkeys(STATE_TOPICS, (0, 0))
    for part in cluster_dir.rglob("*-*"):
        name = part.name.rsplit("-", 1)[0]
        if part.is_dir() and name in sizes:
            count, size = sizes[name]
            sizes[name] = (count + 1, size + sum(f.stat().st_size for f in part.glob("*.log")))
    return sizes


class Checks:
    """Collects failed checks; `ok` prints each one's outcome."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def ok(self, name: str, passed: bool, detail: str) -> None:
        print(f"check {name}: {'PASS' if passed else 'FAIL'} ({detail})", flush=True)
        if not passed:
            self.failed.append(name)


def check_copy(checks: Checks, target: dict[int, list[tuple[int, int]]], records: int) -> None:
    wrong = {p: len(rs) for p, rs in target.items() if len(rs) != records}
    total = sum(len(rs) for rs in target.values())
    checks.ok(
        "copy",
        not wrong,
        f"{total:,} records on B, {len(wrong)} partitions not {records}: {dict(list(wrong.items())[:5])}",
    )


def check_translation(
    checks: Checks,
    name: str,
    found: dict[int, int],
    target: dict[int, list[tuple[int, int]]],
    sample: list[int],
    records: int,
) -> None:
    """`found`: partition -> downstream offset given for the group; exact on every sampled partition."""
    partitions = len(target)
    bad = [
        p
        for p in sample
        if p not in found or not exact(target[p], p, partitions, committed_offset(p, records), found[p])
    ]
    detail = f"{len(found):,} partitions translated, {len(sample)} sampled, inexact or missing: {bad[:10]}"
    checks.ok(name, len(found) == partitions and not bad, detail)


def group_on_target(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets on B (written by the group offset sync)."""
    consumer = Consumer(with_logger({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False}))
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=60)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in committed if tp.offset >= 0}


def timed(timings: dict[str, float], name: str, fn: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    result = fn()
    timings[name] = time.perf_counter() - started
    print(f"{name}: {timings[name]:.1f} s", flush=True)
    return result


def verify(checks: Checks, config: Path, target: str, remote: str, args: argparse.Namespace) -> dict[str, float]:
    """Every check after the cycle; returns their timings."""
    timings: dict[str, float] = {}
    partitions, records = args.partitions, args.records
    loaded = load_config(config)
    copied = timed(timings, "read the target (read_committed)", lambda: read_target(target, remote, partitions))
    check_copy(checks, copied, records)
    store = timed(timings, "checkpoint read", lambda: CheckpointStore.for_flow(loaded.flow("A->B")))
    checkpoints = {p: c.downstream_offset for (t, p), c in store.group_checkpoints(GROUP).items() if t == remote}
    checks.ok("checkpoints", len(checkpoints) == partitions, f"{len(checkpoints):,} of {partitions:,} partitions")
    step = max(partitions // args.sample, 1)
    sample = sorted({(i * step + i) % partitions for i in range(min(args.sample, partitions))})
    for name, live in (("translate", False), ("translate --live", True)):
        offsets = timed(timings, name, lambda live=live: translate_group(loaded, GROUP, "A", "B", live=live))
        found = {o.partition: o.offset for o in offsets if o.topic == remote}
        check_translation(checks, name, found, copied, sample, records)
    synced = group_on_target(target, remote, partitions)
    differ = [p for p in range(partitions) if synced.get(p) != checkpoints.get(p)]
    checks.ok("group sync", not differ, f"{len(synced):,} offsets on B, {len(differ)} differ from checkpoints")
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--partitions", type=int, default=2000, help="source partitions of the flow's one topic")
    parser.add_argument("--records", type=int, default=5, help="records per source partition")
    parser.add_argument("--sample", type=int, default=50, help="partitions whose translations are checked")
    parser.add_argument("--attempts", type=int, default=2, help="runs of the cycle before the bench fails")
    args = parser.parse_args(argv)
    topic = f"scale-{run_id()}"
    remote = f"A.{topic}"
    checks, timings, steps = Checks(), {}, {}
    with bench_clusters("mirrorflow-bench-flow-scale-") as (directory, source, target):
        print(f"{args.partitions:,} partitions x {args.records} records, topic {topic}", flush=True)
        timed(timings, "create topic", lambda: create_topics(source, [NewTopic(topic, args.partitions, 1)]))
        case = Case(args.partitions * args.records, 16, args.partitions, topic)
        timed(timings, "produce", lambda: produce_source(source, case))
        timed(timings, "commit group", lambda: commit_group(source, topic, args.partitions, args.records))
        config = directory / "mm2.properties"
        write_config(config, source, target, topic)
        report = run_cycle(config, timings, steps, args.attempts)
        flow = next(f for f in report["flows"] if f["flow"] == "A->B")
        copy = flow["copy"]
        print(f"cycle report: {flow['duration_ms'] / 1000:.1f} s, steps {', '.join(flow['steps'])}")
        print(
            f"copy: {copy.get('records')} records in {copy.get('transactions')} transactions, "
            f"{copy.get('spark_tasks')} Spark tasks"
        )
        for name, seconds in steps.items():
            print(f"  step {name}: {seconds:.1f} s")
        timings.update(verify(checks, config, target, remote, args))
        sizes = state_bytes(directory / "clusters" / "B")
    for name, (count, size) in sizes.items():
        print(f"state topic {name}: {count} partitions, {size / 1e6:.2f} MB of log segments")
    print("\n| phase | seconds |\n|---|---|")
    for name, seconds in {**timings, **{f"step {k}": v for k, v in steps.items()}}.items():
        print(f"| {name} | {seconds:.1f} |")
    if checks.failed:
        print(f"FAILED: {', '.join(checks.failed)}", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

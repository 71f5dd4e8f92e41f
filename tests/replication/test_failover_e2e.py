"""Failover and failback end to end, with the applications running: clusters `P` and `D` of this test's own
(brokers are killed), producers writing and two consumer groups (one fast, one lagging) reading the whole time,
both flows P->D and D->P replicating in background threads that honour the runbook's pause markers.

1. planned failover P->D, fenced by a command that stops the applications (`--fence command`, no broker auth
   here); the applications then find the new cluster through the `mirrorflow.bootstrap` redirect topic and carry
   on there, producers writing to D's own `orders`;
2. planned failback D->P: groups that read `P.orders` on D come home to `orders` on P through the inverse offset
   map, groups that read D's `orders` come home to `D.orders` on P through the D->P map;
3. the checker: per group and per stream (origin cluster, partition) the sequence numbers consumed across the
   three clusters-phases are exactly the produced ones, each once, in order: 0 re-read, 0 skipped (the
   applications commit what they processed when a rebalance takes partitions away, and one group goes through
   such a rebalance at home again, so what is counted is the runbook's doing, never the application's);
4. unplanned failover with P's broker killed while producers write and the copy lags: once P is back, the ledger
   of records at risk per partition equals what is on P and not on D, value by value.

RTO figures are printed (goal <= 60 s on local clusters), never asserted. Cost: ~2-3 min (two brokers).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import NewTopic

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.core.bootstrap_redirect import BOOTSTRAP_TOPIC, decode_redirect, resolve
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.checkpoints import emit_checkpoints
from mirrorflow.replication.copy_plan import copyable, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.discovery import discover
from mirrorflow.replication.failover.options import FailoverOptions
from mirrorflow.replication.failover.runbook import run_failover
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import TOPICS, paused_reason, run_control_plane

pytestmark = pytest.mark.integration

TOPIC = "orders"
PARTITIONS = 2
GROUPS = {"e2e-fast": 0.0, "e2e-slow": 0.15}  # seconds spent per record: the slow group lags
PRODUCE_EVERY_S = 0.1  # per partition: ~20 records/s in all
Stream = tuple[str, int]  # (origin cluster, partition)


@pytest.fixture
def own_clusters(tmp_path: Path) -> Iterator[LocalClusters]:
    clusters = LocalClusters.up(["P", "D"], tmp_path / "kafka", tie_to_parent=True)
    try:
        yield clusters
    finally:
        clusters.down()


@pytest.fixture
def stoppers() -> Iterator[list[Callable[[], None]]]:
    """Whatever the test started is stopped at the end, pass or fail (threads must not outlive the test)."""
    found: list[Callable[[], None]] = []
    yield found
    for stop in reversed(found):
        stop()


# ---- the applications ---------------------------------------------------------------------------------------
@dataclass
class Ledger:
    """What was produced (acknowledged) per stream, and what each group consumed, in order, per phase."""

    produced: dict[Stream, list[int]] = field(default_factory=dict)
    next_seq: dict[Stream, int] = field(default_factory=dict)
    consumed: dict[str, list[tuple[Stream, int, str]]] = field(default_factory=dict)
    first_read: dict[tuple[str, str], float] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)


class Apps:
    """Producers and consumer groups on one cluster; they stop when `stop_file` appears (what the fence command
    does), consumers committing their last position, and then write `<stop_file>.stopped`."""

    def __init__(self, ledger: Ledger, phase: str, stop_file: Path) -> None:
        self.ledger, self.phase, self.stop_file = ledger, phase, stop_file
        self.threads: list[threading.Thread] = []

    def start(self, bootstrap: str, *, origin: str | None, topics: list[str], groups: dict[str, float]) -> None:
        if origin is not None:
            self.threads.append(threading.Thread(target=self._produce, args=(bootstrap, origin), daemon=True))
        for group, delay in groups.items():
            consume = threading.Thread(target=self._consume, args=(bootstrap, group, topics, delay), daemon=True)
            self.threads.append(consume)
        for t in self.threads:
            t.start()
        threading.Thread(target=self._announce_stopped, daemon=True).start()

    def _announce_stopped(self) -> None:
        for t in self.threads:
            t.join()
        self.stop_file.with_name(self.stop_file.name + ".stopped").touch()

    def stop(self, timeout_s: float = 60) -> None:
        self.stop_file.touch()
        for t in self.threads:
            t.join(timeout_s)
            assert not t.is_alive(), f"{self.phase}: an application did not stop"

    def _produce(self, bootstrap: str, origin: str) -> None:
        producer = Producer(
            with_logger(
                {
                    "bootstrap.servers": bootstrap,
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "message.timeout.ms": 10000,
                }
            )
        )
        ledger = self.ledger

        def acked(err: Any, msg: Any) -> None:
            stream = (origin, msg.partition())
            if err is not None:
                ledger.failed.append(f"{self.phase} {stream}: {err}")
            else:
                ledger.produced.setdefault(stream, []).append(int(msg.value().decode().split(":")[2]))

        while not self.stop_file.exists():
            for p in range(PARTITIONS):
                seq = ledger.next_seq.get((origin, p), 0)
                ledger.next_seq[(origin, p)] = seq + 1
                producer.produce(TOPIC, value=f"{origin}:{p}:{seq}".encode(), partition=p, on_delivery=acked)
            producer.poll(0)
            time.sleep(PRODUCE_EVERY_S)
        producer.flush(15)

    def _consume(self, bootstrap: str, group: str, topics: list[str], delay: float) -> None:
        consumer = Consumer(
            with_logger(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": group,
                    "enable.auto.commit": False,
                    # Offsets are stored once a record is processed, never when librdkafka hands it over: a
                    # consumer's close() drops the records it had fetched ahead and, with the automatic store,
                    # a commit in the revocation callback would cover them (the group would skip them).
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "earliest",
                    "topic.metadata.refresh.interval.ms": 1000,
                    "fetch.wait.max.ms": 100,
                    "max.partition.fetch.bytes": 4096,  # small fetches: a lagging group reads both partitions in turn
                }
            )
        )
        consumer.subscribe(topics, on_revoke=lambda c, _parts: commit_position(c))
        seen = self.ledger.consumed.setdefault(group, [])
        try:
            while not self.stop_file.exists():
                msg = consumer.poll(0.1)
                if msg is None or msg.error() is not None:
                    continue
                origin, partition, seq = msg.value().decode().split(":")
                self.ledger.first_read.setdefault((group, self.phase), time.monotonic())
                seen.append(((origin, int(partition)), int(seq), self.phase))
                if delay:
                    time.sleep(delay)
                consumer.store_offsets(message=msg)
            commit_position(consumer)
        finally:
            consumer.close()


def commit_position(consumer: Consumer) -> None:
    """What a careful application does when it stops and when a rebalance takes its partitions away: commit
    where it is, so that whoever reads them next (itself included) starts at the next record."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as err:
        if err.args[0].code() != KafkaError._NO_OFFSET:
            raise


def fence_command(stop_file: Path) -> str:
    """Stop the applications and wait until they say they stopped (producers flushed, consumers committed)."""
    stopped = f"{stop_file}.stopped"
    return f"touch {stop_file}; for i in $(seq 1200); do [ -e {stopped} ] && exit 0; sleep 0.1; done; exit 1"


# ---- background replication ---------------------------------------------------------------------------------
class Replicator(threading.Thread):
    """One flow's cycle (topics, copy to the current end, checkpoints) again and again, as its DAG would run,
    skipped while a failover's pause marker names the flow."""

    def __init__(self, flow: Flow, state_root: Path) -> None:
        super().__init__(daemon=True)
        self.flow, self.state_root = flow, state_root
        self.halt = threading.Event()
        self.cycles = 0
        self.errors: list[str] = []

    def run(self) -> None:
        with FlowClients(self.flow) as clients:
            while not self.halt.is_set():
                if paused_reason(self.flow.name, self.state_root) is None:
                    try:
                        run_control_plane(self.flow, clients, steps={TOPICS})
                        for task in plan_copy(self.flow, copyable(discover(self.flow, clients)), interval=True):
                            copy_range(task)
                        emit_checkpoints(self.flow, clients)
                        self.cycles += 1
                    except Exception as err:  # fenced by the drain, a broker killed: the next cycle retries
                        self.errors.append(repr(err)[:300])
                self.halt.wait(0.3)

    def wait_cycles(self, n: int, timeout_s: float = 120) -> None:
        target = self.cycles + n
        deadline = time.monotonic() + timeout_s
        while self.cycles < target:
            assert time.monotonic() < deadline, f"{self.flow.name} made no progress: {self.errors[-3:]}"
            time.sleep(0.2)


# ---- checks -------------------------------------------------------------------------------------------------
def redirected_bootstrap(bootstrap: str, group: str) -> str:
    """What a client does at start-up: read the redirect topic, take the newest record matching its group."""
    records = read_to_end("any", {"bootstrap.servers": bootstrap}, BOOTSTRAP_TOPIC, timeout_s=30)
    found = resolve([decode_redirect(k, v) for _p, _o, k, v, _ts in records], group)
    assert found is not None, f"no redirect for {group}"
    return found.bootstrap_servers


def check_exactly_once(ledger: Ledger) -> dict[str, dict[Stream, tuple[int, int]]]:
    """Per group and stream: (re-read, skipped), comparing the consumed sequence with the produced one, and
    at every move between clusters the first record read after it with the last one read before."""
    result: dict[str, dict[Stream, tuple[int, int]]] = {}
    for group, seen in sorted(ledger.consumed.items()):
        per_stream: dict[Stream, list[tuple[int, str]]] = {}
        for stream, seq, phase in seen:
            per_stream.setdefault(stream, []).append((seq, phase))
        result[group] = {}
        for stream, produced in sorted(ledger.produced.items()):
            got = [seq for seq, _ in per_stream.get(stream, [])]
            reread = len(got) - len(set(got)) + sum(1 for a, b in itertools.pairwise(got) if b <= a)
            skipped = len(set(produced) - set(got))
            result[group][stream] = (reread, skipped)
            phases = per_stream.get(stream, [])
            for (before, was), (after, now) in itertools.pairwise(phases):
                if was != now:  # the move itself: the next record, exactly
                    assert after == before + 1, f"{group} {stream}: read {before} on {was}, then {after} on {now}"
    return result


def wait_until_consumed(ledger: Ledger, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    total = sum(len(v) for v in ledger.produced.values())
    while any(len(ledger.consumed.get(g, [])) < total for g in GROUPS):
        assert time.monotonic() < deadline, {g: len(ledger.consumed.get(g, [])) for g in GROUPS} | {"of": total}
        time.sleep(0.2)


def wait_reading(ledger: Ledger, phase: str, records: int = 20, timeout_s: float = 120) -> None:
    """Until every group has read `records` records in `phase`."""
    deadline = time.monotonic() + timeout_s
    while any(sum(1 for *_, ph in ledger.consumed.get(g, []) if ph == phase) < records for g in GROUPS):
        assert time.monotonic() < deadline, f"the groups are not reading on {phase}"
        time.sleep(0.2)


def visit_group(bootstrap: str, group: str, topics: list[str]) -> None:
    """A second member joins `group` until it is given partitions, then leaves without reading: the members
    already there lose partitions and get them back, from the offsets the group has committed."""
    visitor = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    given = threading.Event()
    visitor.subscribe(topics, on_assign=lambda _c, parts: parts and given.set())
    deadline = time.monotonic() + 60
    try:
        while not given.is_set():
            assert time.monotonic() < deadline, f"{group}: the visitor was never given a partition"
            visitor.poll(0.1)
    finally:
        visitor.close()


def read_values(bootstrap: str, topic: str, partition: int) -> list[str]:
    conf = {"bootstrap.servers": bootstrap}
    return [v.decode() for _p, _o, _k, v, _ts in read_to_end("x", conf, topic, partitions=[partition]) if v]


def test_failover_and_failback_with_running_clients(
    tmp_path: Path, own_clusters: LocalClusters, stoppers: list[Callable[[], None]]
) -> None:
    t0 = time.monotonic()
    timeline: list[str] = []

    def mark(what: str) -> None:
        timeline.append(f"{what} {time.monotonic() - t0:.0f}s")

    boot = {alias: own_clusters.bootstrap(alias) for alias in ("P", "D")}
    root = tmp_path / "failover"
    config_path = tmp_path / "mm2.properties"
    flows = "".join(
        f"{f}.enabled = true\n{f}.topics = {TOPIC}\n{f}.groups = e2e-.*\n{f}.emit.heartbeats.enabled = false\n"
        for f in ("P->D", "D->P")
    )
    config_path.write_text(mm2_config_text(boot, "admin.timeout.ms = 20000\n") + flows)
    config = load_config(config_path)
    for alias in ("P", "D"):
        admin = admin_client({"bootstrap.servers": boot[alias]})  # kept alive until the result is in
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result()
    forward = Replicator(config.flow("P->D"), root)
    backward = Replicator(config.flow("D->P"), root)
    for replicator in (forward, backward):
        replicator.start()
        stoppers.append(replicator.halt.set)
    ledger = Ledger()
    common: dict[str, Any] = {
        "config": str(config_path),
        "primary": "P",
        "dr": "D",
        "groups": "e2e-.*",
        "fence": "command",
        "fence_verify_seconds": 2.0,
        "redirect": "topic",
        "max_lag_records": 100_000,
    }

    # Phase 1: everything runs on P.
    home = Apps(ledger, "P", tmp_path / "stop-1")
    stoppers.append(home.stop_file.touch)
    home.start(boot["P"], origin="P", topics=[TOPIC, f"D.{TOPIC}"], groups=GROUPS)
    wait_reading(ledger, "P")  # the flows replicate meanwhile; the drain copies whatever they have not
    mark("phase 1 running")

    # Failover while the applications run; the fence command stops them.
    started = time.monotonic()
    report = run_failover(
        FailoverOptions(**common, fence_command=fence_command(home.stop_file), state_dir=str(root / "failover-P-D"))
    )
    assert report["completed"] and report["fence"]["status"] == "fenced" and report["data_loss_bound_records"] == 0
    stopped_at = home.stop_file.stat().st_mtime - time.time() + time.monotonic()
    away = Apps(ledger, "D", tmp_path / "stop-2")
    stoppers.append(away.stop_file.touch)
    assert redirected_bootstrap(boot["P"], "e2e-fast") == boot["D"]  # the old primary carries it too
    away.start(redirected_bootstrap(boot["D"], "e2e-fast"), origin="D", topics=[f"P.{TOPIC}", TOPIC], groups=GROUPS)
    lagging = {g["partition"]: g["lag"] for g in report["groups"] if g["group"] == "e2e-slow"}
    assert all(r["status"] == "exact" for r in report["groups"]), report["groups"]
    wait_reading(ledger, "D")
    resumed = {g: ledger.first_read.get((g, "D"), float("nan")) - stopped_at for g in GROUPS}
    print(
        f"\nfailover: runbook {time.monotonic() - started:.1f} s wall, report rto_seconds {report['rto_seconds']}; "
        f"writes stopped -> groups reading on D: "
        + ", ".join(f"{g} {s:.1f} s" for g, s in resumed.items())
        + f"; e2e-slow lag at the cutover {lagging}; steps "
        + ", ".join(f"{s['name']} {s['duration_ms'] / 1000:.1f}" for s in report["steps"])
    )

    mark("failed over, reading on D")
    # Failback while the applications run on D.
    started = time.monotonic()
    back = run_failover(
        FailoverOptions(
            **common,
            direction="failback",
            fence_command=fence_command(away.stop_file),
            state_dir=str(root / "failback-P-D"),
        )
    )
    assert back["completed"] and back["fence"]["status"] == "fenced"
    rows = [
        (
            g["group"],
            g["topic"],
            g["remote_topic"],
            g["partition"],
            g["upstream_offset"],
            g["translated_offset"],
            g["status"],
        )
        for g in back["groups"]
    ]
    assert {(r[1], r[2]) for r in rows} == {(f"P.{TOPIC}", TOPIC), (TOPIC, f"D.{TOPIC}")}, rows
    assert all(r[6] == "exact" for r in rows), "\n".join(map(str, rows))
    stopped_at = away.stop_file.stat().st_mtime - time.time() + time.monotonic()
    mark("failed back")
    # Home again: consumers catch up at full speed; producers write a little more, then stop.
    bootstrap = redirected_bootstrap(boot["P"], "e2e-slow")
    readers = Apps(ledger, "P again", tmp_path / "stop-3-consumers")
    stoppers.append(readers.stop_file.touch)
    readers.start(bootstrap, origin=None, topics=[TOPIC, f"D.{TOPIC}"], groups=dict.fromkeys(GROUPS, 0.0))
    writers = Apps(ledger, "P again", tmp_path / "stop-3-producers")
    stoppers.append(writers.stop_file.touch)
    writers.start(bootstrap, origin="P", topics=[], groups={})
    wait_reading(ledger, "P again", records=10)
    visit_group(bootstrap, "e2e-fast", [TOPIC, f"D.{TOPIC}"])  # a rebalance: the group re-reads nothing
    time.sleep(1)
    writers.stop()
    wait_until_consumed(ledger)
    readers.stop()
    resumed = {g: ledger.first_read.get((g, "P again"), float("nan")) - stopped_at for g in GROUPS}
    print(
        f"failback: runbook {time.monotonic() - started:.1f} s wall, report rto_seconds {back['rto_seconds']}; "
        f"writes stopped -> groups reading on P: "
        + ", ".join(f"{g} {s:.1f} s" for g, s in resumed.items())
        + "; steps "
        + ", ".join(f"{s['name']} {s['duration_ms'] / 1000:.1f}" for s in back["steps"])
    )
    assert not ledger.failed, ledger.failed[:5]
    outcome = check_exactly_once(ledger)
    for group, streams in outcome.items():
        print(f"{group}: " + ", ".join(f"{o}-{p}: {r} re-read / {s} skipped" for (o, p), (r, s) in streams.items()))
    assert all(rs == (0, 0) for streams in outcome.values() for rs in streams.values()), outcome
    assert {stream for stream in ledger.produced} == {(o, p) for o in ("P", "D") for p in range(PARTITIONS)}

    mark("all consumed")
    # Unplanned: P's broker dies while producers write and the copy lags behind.
    (root / "failover-P-D" / "paused-flow.json").unlink()  # P->D runs again
    backward.halt.set()
    doomed = Apps(ledger, "P doomed", tmp_path / "stop-4")
    stoppers.append(doomed.stop_file.touch)
    doomed.start(boot["P"], origin="P", topics=[], groups={})
    forward.wait_cycles(1)
    forward.halt.set()
    forward.join(60)
    time.sleep(1.5)  # written on P, never copied
    own_clusters.stop("P", kill=True)
    doomed.stop_file.touch()
    killed_at = time.monotonic()
    unplanned = run_failover(
        FailoverOptions(
            config=str(config_path),
            primary="P",
            dr="D",
            groups="e2e-.*",
            mode="unplanned",
            state_dir=str(root / "unplanned-P-D"),
        )
    )
    assert unplanned["completed"] and unplanned["data_loss_bound_records"] == "unknown"
    print(
        f"unplanned: runbook done {time.monotonic() - killed_at:.1f} s after the kill, rto {unplanned['rto_seconds']}"
    )
    copied = {p["partition"]: p["copied_to"] for p in unplanned["partitions"]}
    mark("unplanned done")
    own_clusters.start("P")
    recheck = run_failover(
        FailoverOptions(
            config=str(config_path),
            primary="P",
            dr="D",
            groups="e2e-.*",
            mode="unplanned",
            state_dir=str(root / "recheck"),
            dry_run=True,
        )
    )
    ledger_now = {
        p["partition"]: p for s in recheck["steps"] if s["name"] == "drain" for p in s["detail"]["partitions"]
    }
    mark("P back, rechecked")
    truth = {}
    for p in range(PARTITIONS):
        on_p = read_values(boot["P"], TOPIC, p)
        on_d = set(read_values(boot["D"], f"P.{TOPIC}", p))
        truth[p] = sum(1 for v in on_p if v not in on_d)
    mark("truth read")
    print(f"unplanned: records at risk per partition {truth} (copied to {copied}); timeline: {', '.join(timeline)}")
    assert {p: ledger_now[p]["records_at_risk"] for p in truth} == truth
    assert {p: ledger_now[p]["copied_to"] for p in truth} == copied
    assert sum(truth.values()) > 0

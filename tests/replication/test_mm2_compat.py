"""Mirrorflow's checkpoints against real MirrorMaker 2 (the pinned connect-mirror jars) on the session clusters.

1. Java's `RemoteClusterUtils.translateOffsets` reads our `A.checkpoints.internal` and answers exactly what
   `mirrorflow translate --json` answers, for groups behind, in the middle, at the end, on an empty partition,
   on a compacted topic and inside the gaps of a transactional topic; a consumer seeking there on B reads
   exactly the records the group had not read on A.
2. Real MM2 (dedicated mode, separator `__` so its `A__<topic>` / `A__checkpoints__internal` never meet our
   `A.<topic>` / `A.checkpoints.internal`) mirrors the same topics for the same groups. For every group and
   partition we count what a consumer failing over would re-read: ours 0, MM2's up to `offset.lag.max` and
   more; neither may ever skip a record.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from tests.kafka_helpers import read_contents
from tests.replication.helpers import commit_offsets, compile_java_probe

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.core.checkpoint import Checkpoint
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.local.runtime import MIRROR_MAKER_MAIN, kafka_runtime
from mirrorflow.replication.checkpoints import emit_checkpoints
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane
from mirrorflow.replication.remote_cluster_utils import translate_group

pytestmark = pytest.mark.integration

PROBE = Path(__file__).parents[1] / "fixtures" / "java" / "RemoteClusterUtilsProbe.java"
MIRRORFLOW_CLI = Path(sys.executable).with_name("mirrorflow")
MM2_SEPARATOR = "__"
MM2_WAIT_S = 75.0
BIG = 3000  # records on big-0; big-1 stays empty
TXN_ROUNDS, TXN_KEPT, TXN_ABORTED = 10, 150, 50  # per round: committed txn + marker, aborted txn + marker
TXN_END = TXN_ROUNDS * (TXN_KEPT + 1 + TXN_ABORTED + 1)
COMPACT, COMPACT_KEYS = 1500, 100

Key = tuple[str, str, int]  # (group name without prefix, source topic, partition)


@dataclass
class Scenario:
    clusters: LocalClusters
    flow: Flow
    config_path: Path
    prefix: str
    topics: dict[str, str]  # role -> source topic
    positions: dict[str, dict[tuple[str, int], int]]  # group name -> {(role, partition): committed offset}
    mm2: subprocess.Popen[bytes]
    mm2_log: Path

    def group(self, name: str) -> str:
        return self.prefix + name

    def consumer(self, alias: str) -> Consumer:
        return Consumer(
            with_logger(
                {
                    "bootstrap.servers": self.clusters.bootstrap(alias),
                    "group.id": f"g-{uuid.uuid4().hex[:12]}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "isolation.level": "read_committed",
                    "fetch.wait.max.ms": 10,
                }
            )
        )


def produce(clusters: LocalClusters, topics: dict[str, str]) -> None:
    """big-0: BIG plain records, big-1: none. txn-0: TXN_ROUNDS of (TXN_KEPT committed, TXN_ABORTED aborted),
    every transaction followed by its marker. compact-0: COMPACT records overwriting COMPACT_KEYS keys."""
    bootstrap = clusters.bootstrap("A")
    plain = Producer(with_logger({"bootstrap.servers": bootstrap, "linger.ms": 5}))
    for i in range(BIG):
        plain.produce(topics["big"], key=b"k%d" % i, value=b"big-%d" % i, partition=0, headers=[("i", b"%d" % i)])
    for i in range(COMPACT):
        plain.produce(topics["compact"], key=b"key-%d" % (i % COMPACT_KEYS), value=b"v%d" % i, partition=0)
    assert plain.flush(30) == 0
    txn: Any = Producer(with_logger({"bootstrap.servers": bootstrap, "transactional.id": f"mm2c-{uuid.uuid4()}"}))
    txn.init_transactions(30)
    for r in range(TXN_ROUNDS):
        for count, keep in ((TXN_KEPT, True), (TXN_ABORTED, False)):
            txn.begin_transaction()
            for i in range(count):
                txn.produce(topics["txn"], key=b"t", value=b"txn-%d-%d-%d" % (r, keep, i), partition=0)
            txn.flush(30)  # aborted records must reach the log
            if keep:
                txn.commit_transaction(30)
            else:
                txn.abort_transaction(30)


def group_positions() -> dict[str, dict[tuple[str, int], int]]:
    round_len = TXN_KEPT + 1 + TXN_ABORTED + 1
    return {
        "behind": {("big", 0): 1, ("txn", 0): 1, ("compact", 0): 1, ("big", 1): 0},
        "middle": {("big", 0): 1537, ("txn", 0): 4 * round_len + 77, ("compact", 0): 733, ("big", 1): 0},
        "in-aborted": {("big", 0): 2222, ("txn", 0): 5 * round_len + TXN_KEPT + 1 + 20},
        "late": {("big", 0): BIG - 150, ("txn", 0): TXN_END - 60, ("compact", 0): COMPACT - 130},
        "end": {("big", 0): BIG, ("txn", 0): TXN_END, ("compact", 0): COMPACT, ("big", 1): 0},
        "empty-only": {("big", 1): 0},
    }


def mm2_properties(clusters: LocalClusters, topics: dict[str, str], prefix: str) -> str:
    """Real MM2, A->B only, on the session clusters: single-broker RFs, fast intervals, default offset.lag.max."""
    return "\n".join(
        [
            "clusters = A, B",
            f"A.bootstrap.servers = {clusters.bootstrap('A')}",
            f"B.bootstrap.servers = {clusters.bootstrap('B')}",
            "A->B.enabled = true",
            "B->A.enabled = false",
            f"A->B.topics = {', '.join(sorted(topics.values()))}",
            f"A->B.groups = {prefix}.*",
            f"replication.policy.separator = {MM2_SEPARATOR}",
            *(
                f"{key}.replication.factor = 1"
                for key in (
                    "checkpoints.topic",
                    "heartbeats.topic",
                    "offset-syncs.topic",
                    "offset.storage",
                    "status.storage",
                    "config.storage",
                )
            ),
            "replication.factor = 1",
            "tasks.max = 1",
            "emit.heartbeats.enabled = false",
            "sync.topic.acls.enabled = false",
            "sync.topic.configs.enabled = false",
            "sync.group.offsets.enabled = false",
            "refresh.topics.interval.seconds = 1",
            "refresh.groups.interval.seconds = 1",
            "emit.checkpoints.interval.seconds = 1",
            "A.offset.flush.interval.ms = 1000",
            "B.offset.flush.interval.ms = 1000",
            "A.consumer.isolation.level = read_committed",
            "",
        ]
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@pytest.fixture(scope="module")
def scenario(kafka_clusters: LocalClusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    """The source data and groups on A; real MM2 started on them at once (it works while Mirrorflow copies);
    Mirrorflow's copy and one checkpoint round."""
    work = tmp_path_factory.mktemp("mm2compat")
    tag = uuid.uuid4().hex[:6]
    topics = {role: f"mm2c-{role}-{tag}" for role in ("big", "txn", "compact")}
    prefix = f"mm2c-{tag}-"
    admin = admin_client({"bootstrap.servers": kafka_clusters.bootstrap("A")})
    new = [
        NewTopic(topics["big"], 2, 1),
        NewTopic(topics["txn"], 1, 1),
        NewTopic(topics["compact"], 1, 1, config={"cleanup.policy": "compact"}),
    ]
    for future in admin.create_topics(new).values():
        future.result(30)
    produce(kafka_clusters, topics)
    positions = group_positions()
    for name, offsets in positions.items():
        commit_offsets(admin, prefix + name, {(topics[role], p): o for (role, p), o in offsets.items()})

    mm2_config = work / "mm2-real.properties"
    mm2_config.write_text(mm2_properties(kafka_clusters, topics, prefix))
    mm2_log = work / "mm2.log"
    command = kafka_runtime().command(MIRROR_MAKER_MAIN, [str(mm2_config), "--clusters", "B"], log_file=mm2_log)
    setpriv = shutil.which("setpriv")  # the JVM dies with pytest even if pytest is killed before the finalizer
    command = [setpriv, "--pdeathsig", "TERM", "--", *command] if setpriv else command
    mm2 = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        config_path = work / "mirrorflow.properties"
        config_path.write_text(
            "\n".join(
                [
                    mm2_config_text({a: kafka_clusters.bootstrap(a) for a in ("A", "B")}),
                    "A->B.enabled = true",
                    f"A->B.topics = {', '.join(sorted(topics.values()))}",
                    f"A->B.groups = {prefix}.*",
                    "",
                ]
            )
        )
        flow = load_config(config_path).flow("A->B")
        run_control_plane(flow, steps={TOPICS})
        sources = [SourcePartitions(topics["big"], f"A.{topics['big']}", 2)]
        sources += [SourcePartitions(topics[r], f"A.{topics[r]}", 1) for r in ("txn", "compact")]
        copied = sum(copy_range(t).records for t in plan_copy(flow, sources, interval=True))
        assert copied == BIG + TXN_ROUNDS * TXN_KEPT + COMPACT
        emit_checkpoints(flow)
        yield Scenario(kafka_clusters, flow, config_path, prefix, topics, positions, mm2, mm2_log)
    finally:
        stop(mm2)


@pytest.fixture(scope="module")
def probe_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    return compile_java_probe(PROBE, tmp_path_factory.mktemp("rcu-probe"))


def java_translate(
    classpath: str, bootstrap: str, groups: list[str], **props: str
) -> dict[str, dict[tuple[str, int], int]]:
    """`RemoteClusterUtils.translateOffsets(props, "A", group, 20 s)` of each group, run by MM2's own jar."""
    args = [f"bootstrap.servers={bootstrap}", *(f"{k}={v}" for k, v in props.items())]
    command = ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath, "RemoteClusterUtilsProbe"]
    done = subprocess.run(
        [*command, "A", "20000", ",".join(groups), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.endswith("END\n"), done.stderr[-3000:]
    result: dict[str, dict[tuple[str, int], int]] = {g: {} for g in groups}
    for line in done.stdout.splitlines()[:-1]:
        group, topic, partition, offset, metadata_hex = line.split("\t")
        assert metadata_hex == ""
        result[group][(topic, int(partition))] = int(offset)
    return result


def test_java_remote_cluster_utils_reads_our_checkpoints_as_we_do_and_resuming_there_is_exact(
    scenario: Scenario, probe_classpath: str
) -> None:
    s = scenario
    groups = [s.group(n) for n in s.positions]
    java = java_translate(probe_classpath, s.clusters.bootstrap("B"), groups)
    python = {
        g: {(o.topic, o.partition): o.offset for o in translate_group(s.flow, g, "A", "B", timeout_s=30)}
        for g in groups
    }
    command = [str(MIRRORFLOW_CLI), "translate", str(s.config_path), "--groups", f"{s.prefix}.*"]
    cli = subprocess.run(
        [*command, "--source", "A", "--target", "B", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    from_cli = {
        g: {(o["topic"], o["partition"]): o["offset"] for o in found} for g, found in json.loads(cli.stdout).items()
    }
    print("\ngroup                 | Java RemoteClusterUtils.translateOffsets | mirrorflow translate --json")
    for g in groups:
        print(f"{g.removeprefix(s.prefix):<21} | {sorted(java[g].items())} | {sorted(from_cli.get(g, {}).items())}")
    assert java == python
    assert {g: o for g, o in java.items() if o} == from_cli

    # Every copied partition of every group is translated; the empty partition big-1 is not (nothing copied).
    for name, offsets in s.positions.items():
        expected = {(f"A.{s.topics[r]}", p) for (r, p) in offsets if (r, p) != ("big", 1)}
        assert set(java[s.group(name)]) == expected, name

    source, target = s.consumer("A"), s.consumer("B")
    try:
        for name, offsets in s.positions.items():
            for (role, p), committed in offsets.items():
                remote = f"A.{s.topics[role]}"
                if (remote, p) not in java[s.group(name)]:
                    continue
                unread = read_contents(source, s.topics[role], p, committed)
                resumed = read_contents(target, remote, p, java[s.group(name)][(remote, p)])
                assert resumed == unread, f"{name} {remote}-{p}: 0 duplicates and 0 gaps"
    finally:
        source.close()
        target.close()


def mm2_checkpoints(flow: Flow, prefix: str) -> dict[tuple[str, str, int], Checkpoint]:
    topic = f"A{MM2_SEPARATOR}checkpoints{MM2_SEPARATOR}internal"
    latest: dict[tuple[str, str, int], Checkpoint] = {}
    for _p, _o, k, v, _ts in read_to_end("B", flow.target_consumer.librdkafka(), topic, timeout_s=10):
        c = Checkpoint.from_record(k or b"", v or b"")
        if c.consumer_group_id.startswith(prefix):
            latest[(c.consumer_group_id, c.topic, c.partition)] = c
    return latest


def wait_for_mm2(s: Scenario, expected: set[tuple[str, str, int]]) -> dict[tuple[str, str, int], Checkpoint]:
    """MM2's checkpoints once it has mirrored everything, checkpointed what it can and stayed put for 3 s."""
    admin = admin_client({"bootstrap.servers": s.clusters.bootstrap("B")})
    ends = {("big", 0): BIG, ("txn", 0): TXN_ROUNDS * TXN_KEPT, ("compact", 0): COMPACT}
    probe = s.consumer("B")
    deadline = time.monotonic() + MM2_WAIT_S
    stable_since = time.monotonic()
    last: dict[tuple[str, str, int], Checkpoint] = {}
    try:
        while True:
            assert s.mm2.poll() is None, f"MM2 exited with {s.mm2.returncode}; see {s.mm2_log}"
            names = set(admin.list_topics(timeout=10).topics)
            mirrored = all(
                f"A{MM2_SEPARATOR}{s.topics[r]}" in names
                and probe.get_watermark_offsets(TopicPartition(f"A{MM2_SEPARATOR}{s.topics[r]}", p), timeout=10)[1] >= n
                for (r, p), n in ends.items()
            )
            found = mm2_checkpoints(s.flow, s.prefix) if mirrored else {}
            if found != last:
                stable_since, last = time.monotonic(), found
            if mirrored and expected <= set(found) and time.monotonic() - stable_since > 3:
                return found
            if time.monotonic() > deadline:
                tail = s.mm2_log.read_text(errors="replace")[-3000:] if s.mm2_log.exists() else "(no log)"
                pytest.fail(
                    f"MM2 did not mirror and checkpoint within {MM2_WAIT_S:.0f} s (mirrored={mirrored}, "
                    f"checkpoints for {sorted(found)}); log {s.mm2_log}:\n{tail}"
                )
            time.sleep(1)
    finally:
        probe.close()


def test_side_by_side_with_real_mm2_ours_rereads_nothing_and_neither_skips(
    scenario: Scenario, probe_classpath: str
) -> None:
    s = scenario
    role_of = {f"A.{topic}": role for role, topic in s.topics.items()}
    ours = {
        (s.group(name), role_of[o.topic], o.partition): o.offset
        for name in s.positions
        for o in translate_group(s.flow, s.group(name), "A", "B", timeout_s=30)
    }
    # MM2 checkpoints what has an offset sync at or below the group's offset: "end" and "late" for sure.
    expected = {(s.group(n), f"A{MM2_SEPARATOR}{s.topics[r]}", p) for n in ("late", "end") for (r, p) in s.positions[n]}
    expected -= {(s.group(n), f"A{MM2_SEPARATOR}{s.topics['big']}", 1) for n in ("late", "end")}
    try:
        theirs = wait_for_mm2(s, expected)
    finally:
        stop(s.mm2)
    # Java reads MM2's checkpoints (its own separator) exactly as our decoder does.
    java = java_translate(
        probe_classpath,
        s.clusters.bootstrap("B"),
        [s.group(n) for n in s.positions],
        **{"replication.policy.separator": MM2_SEPARATOR},
    )
    assert {(g, t, p): c.downstream_offset for (g, t, p), c in theirs.items()} == {
        (g, t, p): o for g, found in java.items() for (t, p), o in found.items()
    }

    source, target = s.consumer("A"), s.consumer("B")
    rows: list[tuple[str, str, int, int, str, int, str, int]] = []
    try:
        for name, offsets in s.positions.items():
            group = s.group(name)
            for (role, p), committed in sorted(offsets.items()):
                topic = s.topics[role]
                everything = read_contents(source, topic, p, 0)
                unread = read_contents(source, topic, p, committed)
                ours_at = ours.get((group, role, p))
                if ours_at is None:
                    assert (role, p) == ("big", 1), f"{name} {topic}-{p} not translated by Mirrorflow"
                    ours_rereads = 0
                else:
                    assert read_contents(target, f"A.{topic}", p, ours_at) == unread, f"ours {name} {topic}-{p}"
                    ours_rereads = 0
                checkpoint = theirs.get((group, f"A{MM2_SEPARATOR}{topic}", p))
                mm2_at, mm2_rereads = "-", "-"
                if checkpoint is not None:
                    assert checkpoint.upstream_offset == committed
                    resumed = read_contents(target, f"A{MM2_SEPARATOR}{topic}", p, checkpoint.downstream_offset)
                    assert len(resumed) >= len(unread), f"MM2 skips records: {name} {topic}-{p}"
                    assert resumed == everything[len(everything) - len(resumed) :], f"MM2 {name} {topic}-{p}"
                    mm2_at, mm2_rereads = str(checkpoint.downstream_offset), str(len(resumed) - len(unread))
                rows.append(
                    (name, role, p, committed, mm2_at, -1 if ours_at is None else ours_at, mm2_rereads, ours_rereads)
                )
    finally:
        source.close()
        target.close()

    header = ("group", "partition", "source committed", "MM2 downstream", "ours", "MM2 re-reads", "ours re-reads")
    print("\n| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, role, p, committed, mm2_at, ours_at, mm2_rereads, ours_rereads in rows:
        ours_cell = "-" if ours_at < 0 else str(ours_at)
        cells = (name, f"{role}-{p}", str(committed), mm2_at, ours_cell, mm2_rereads, str(ours_rereads))
        print("| " + " | ".join(cells) + " |")
    assert any(r[6] not in ("-", "0") for r in rows), "MM2's lag shows somewhere (else the comparison is moot)"

"""MM2 offset syncs lost in an outage are rewritten by the next run, on real brokers.

The outage is deterministic: the copy's offset-syncs producer points at a closed port, so the records and the
progress commit on B while every offset sync of the run is lost (as when the source cluster, which holds the
offset-syncs topic by default, goes away during the copy's final flush). The copy must say so, and the next run
(which has nothing left to copy) must rewrite what was lost: MM2's own OffsetSyncStore, reading the topic as
stored, then translates every upstream offset exactly as it does for a twin topic copied without the outage.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from tests.kafka_helpers import KafkaKit
from tests.replication.helpers import KEEP_FOREVER, a_to_b, compile_java_probe, copy_tasks, create_copy_topics

from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_sync import OffsetSync
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.replication import copy_range as copy_range_module
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyTask
from mirrorflow.replication.offset_sync_writer import newest_offset_sync

pytestmark = pytest.mark.integration

PROBE = Path(__file__).parents[1] / "fixtures" / "java" / "OffsetSyncStoreProbe.java"
SYNCS_TOPIC = "mm2-offset-syncs.B.internal"  # on A: offset-syncs.topic.location = source, the default
FIRST, SECOND = 300, 500


@pytest.fixture(scope="module")
def store_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    return compile_java_probe(PROBE, tmp_path_factory.mktemp("sync-store-probe"))


def closed_port() -> int:
    """A local port nothing listens on: connections to it are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def produce(kafka: KafkaKit, topics: tuple[str, ...], start: int, count: int) -> None:
    producer = kafka.producer("A")
    for i in range(start, start + count):
        for topic in topics:
            producer.produce(topic, key=b"k%d" % (i % 7), value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0


def newest_sync(kafka: KafkaKit, topic: str) -> tuple[int, int] | None:
    """The newest (upstream, downstream) sync of `topic`-0 stored in the offset-syncs topic."""
    newest = None
    for _p, _o, key, value, _ts in read_to_end("A", {"bootstrap.servers": kafka.bootstrap("A")}, SYNCS_TOPIC):
        sync = OffsetSync.from_record(key, value)
        if (sync.topic, sync.partition) == (topic, 0):
            newest = (sync.upstream_offset, sync.downstream_offset)
    return newest


def mm2_translations(classpath: str, kafka: KafkaKit, topic: str, last: int) -> list[str]:
    """MM2 OffsetSyncStore's translation of upstream offsets 0..last of `topic`-0 ("-": none)."""
    command = ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath]
    main = "org.apache.kafka.connect.mirror.OffsetSyncStoreProbe"
    done = subprocess.run(
        [*command, main, kafka.bootstrap("A"), SYNCS_TOPIC, topic, "0", str(last)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.endswith("END\n"), done.stderr[-3000:]
    return done.stdout.splitlines()[:-1]


def test_offset_syncs_lost_in_an_outage_are_rewritten_by_the_next_run(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, store_classpath: str
) -> None:
    lost, twin = kafka.topic("lost"), kafka.topic("twin")
    for topic in (lost, twin):
        create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config, **{"offset.lag.max": "50"})
    produce(kafka, (lost, twin), 0, FIRST)
    for topic in (lost, twin):
        [task] = copy_tasks(flow, topic)
        assert copy_range(task).records == FIRST
    produce(kafka, (lost, twin), FIRST, SECOND)
    [twin_task] = copy_tasks(flow, twin)
    assert copy_range(twin_task).records == SECOND

    [task] = copy_tasks(flow, lost)
    cut = {**task.offset_syncs_producer, "bootstrap.servers": f"127.0.0.1:{closed_port()}"}
    with pytest.raises(MirrorflowError, match="offset sync"):
        copy_range(replace(task, offset_syncs_producer=cut, timeout_s=3))
    assert newest_sync(kafka, lost) != newest_sync(kafka, twin), "the outage lost the run's syncs"

    [rerun] = copy_tasks(flow, lost)
    assert copy_range(rerun).records == 0
    twin_newest = newest_sync(kafka, twin)
    assert twin_newest is not None and newest_sync(kafka, lost) == twin_newest
    last = FIRST + SECOND
    healed = mm2_translations(store_classpath, kafka, lost, last)
    assert healed == mm2_translations(store_classpath, kafka, twin, last)
    assert healed[last] == f"{last}\t{twin_newest[1] + 1}", "a caught-up group translates to the end"


def test_the_syncs_tail_is_read_after_older_writers_are_fenced(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zombie (an older attempt, same transactional id) that commits after the run read the syncs topic's tail
    sends syncs newer than that tail, and the heal would rewrite older syncs behind them (upstream going
    backwards, which MM2's OffsetSyncStore reads as a reset). Read after fencing, the tail is final: a zombie
    holding an open transaction can no longer commit once the run reads it."""
    topic = kafka.topic("zombie")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    produce(kafka, (topic,), 0, 10)
    [task] = copy_tasks(a_to_b(write_config), topic)
    zombie = TargetWriter(task.target, task.target_producer, transactional_id=task.transactional_id, timeout_s=10)
    zombie.begin()
    zombie.produce(task.remote_topic, 0, b"zombie", b"zombie")
    zombie.flush()
    outcome: list[str] = []

    def zombie_commits_then_tail(t: CopyTask) -> tuple[int, int] | None:
        try:
            zombie.commit()
            outcome.append("zombie committed")
        except KafkaOperationError:
            outcome.append("zombie fenced")
        return newest_offset_sync(t)

    monkeypatch.setattr(copy_range_module, "newest_offset_sync", zombie_commits_then_tail)
    try:
        assert copy_range(task).records == 10
    finally:
        zombie.close()
    assert outcome == ["zombie fenced"]

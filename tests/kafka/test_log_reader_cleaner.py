"""A whole-topic read racing the log cleaner on a real broker (review of session 15's 5-minute compaction lag).

`min.compaction.lag.ms` must exceed the time from a read taking a partition's end to its fetch reaching the records
below it (`internal_topics.STATE_TOPIC_CONFIGS`). A read used to take every partition's end first, one watermark
request after the other, and only then fetch: at 4,096 slots that is 4,096 round trips before the first fetch (about
4 s on a local broker, 3.4 minutes at 50 ms), most of a 5-minute lag before the open-transaction wait. A key written
again beyond partition 0's end once the lag has passed is then cleaned out of the records below that end before the
fetch reaches them: the reader finds the key nowhere (a tail run missing: offsets translated past copies). Here
the round trip is stretched (`SLOW_S` per watermark request) and the lag shortened, with the same effect.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from tests.kafka_helpers import KafkaKit, create_topic

from mirrorflow.kafka.compacted_log import ENDS_SPAN_S, LogReader

pytestmark = pytest.mark.integration

SLOW_S = 2.0
"""One watermark request's round trip, stretched."""
LAG_S = ENDS_SPAN_S + 3 * SLOW_S + 3
"""The test topic's `min.compaction.lag.ms`: more than a span of ends plus a fetch, less than all ends."""
PARTITIONS = int((LAG_S + 4) / SLOW_S) + 2
KEY = b"tail-run"


class SlowAsker:
    """A read_uncommitted client whose watermark requests take `SLOW_S` (a distant cluster); right after it took
    partition 0's end, `after_first` runs (a copy's commit writing the key again)."""

    def __init__(self, real: Consumer, after_first: Any) -> None:
        self._real, self._after_first, self.asked = real, after_first, []

    def get_watermark_offsets(self, tp: TopicPartition, **kwargs: Any) -> tuple[int, int]:
        answer = self._real.get_watermark_offsets(tp, **kwargs)
        self.asked.append((tp.partition, time.monotonic()))
        if len(self.asked) == 1:
            self._after_first()
        time.sleep(SLOW_S)
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.fixture
def quick_cleaner(kafka: KafkaKit) -> Iterator[None]:
    """Broker B's cleaner looks for work every 200 ms instead of 15 s (a cluster-wide dynamic setting)."""
    admin = kafka.admin("B")
    brokers = [str(b) for b in admin.list_topics(timeout=30).brokers]

    def alter(op: AlterConfigOpType) -> None:
        entry = ConfigEntry("log.cleaner.backoff.ms", "200", incremental_operation=op)
        resources = [ConfigResource(ResourceType.BROKER, b, incremental_configs=[entry]) for b in brokers]
        for future in admin.incremental_alter_configs(resources).values():
            future.result(30)

    alter(AlterConfigOpType.SET)
    try:
        yield
    finally:
        alter(AlterConfigOpType.DELETE)


def live_offsets(kafka: KafkaKit, topic: str) -> list[int]:
    """Offsets of KEY's records in partition 0 as a fresh read finds them now."""
    consumer = kafka.consumer("B", {"enable.partition.eof": True, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found, deadline = [], time.monotonic() + 30
    while time.monotonic() < deadline:
        m = consumer.poll(1.0)
        if m is None:
            continue
        if m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF:
            break
        if m.error() is None and m.key() == KEY:
            found.append(m.offset())
    consumer.close()
    return found


def test_a_whole_topic_read_over_a_slow_network_finds_a_key_the_cleaner_moved_beyond_its_end(
    kafka: KafkaKit, quick_cleaner: None
) -> None:
    topic = kafka.topic("cleaner-race")
    configs = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.compaction.lag.ms": str(int(LAG_S * 1000)),
        "min.cleanable.dirty.ratio": "0.01",
    }
    create_topic(kafka.admin("B"), topic, PARTITIONS, configs)
    producer = kafka.producer("B")

    def write(key: bytes, value: bytes, partition: int = 0) -> None:
        producer.produce(topic, key=key, value=value, partition=partition)
        producer.flush(30)

    write(KEY, b"run [12, 22)")  # the key's only record below the reader's end
    time.sleep(0.3)
    for p in range(PARTITIONS):
        write(b"filler", b"x", p)  # every slot holds state; partition 0's first segment rolls

    def commit_again() -> None:  # beyond partition 0's end: the run grown by a commit, then a roll
        write(KEY, b"run [12, 27)")
        time.sleep(0.3)
        write(b"filler", b"y")

    reader = LogReader("B", {"bootstrap.servers": kafka.bootstrap("B")})
    try:
        reader._asker = SlowAsker(kafka.consumer("B", {"isolation.level": "read_uncommitted"}), commit_again)
        started = time.monotonic()
        keys = {key for p, _o, key, _v, _ts in reader.read(topic) if p == 0}
        took = time.monotonic() - started
    finally:
        reader.close()
    # The scenario happened: the cleaner did drop the older record (else the test proves nothing).
    deadline = time.monotonic() + 30
    while live_offsets(kafka, topic) != [2] and time.monotonic() < deadline:
        time.sleep(1)
    assert live_offsets(kafka, topic) == [2], "the cleaner never dropped the older record"
    assert KEY in keys, (
        f"partition 0 read without the key: its older record was cleaned before the fetch reached it "
        f"(read {took:.0f} s, lag {LAG_S:.0f} s)"
    )


SKEW_S = 60.0
"""How far the clock of every writer of the test's slot runs behind the broker's (a Spark cluster off by minutes)."""


def test_writers_clocks_behind_the_brokers_do_not_shorten_the_compaction_lag(
    kafka: KafkaKit, quick_cleaner: None
) -> None:
    """`min.compaction.lag.ms` is measured on the records' timestamps. With `CreateTime` those are the writers'
    clocks: a copy whose clock runs behind the broker's by more than the lag less a read's window writes records
    the cleaner may act on as soon as their segment rolls, so a key written again beyond a reader's end is cleaned
    out of the records below it before the fetch reaches them (session 15 cut the margin from 15 to 5 minutes:
    skews of 3.5 minutes and more, with the 90 s wait). The state topics' settings (`STATE_TOPIC_CONFIGS`) must
    have the broker stamp them. Here the read's window is a span of ends (`SlowAsker`), the lag 20 s."""
    from mirrorflow.replication.internal_topics import STATE_TOPIC_CONFIGS

    topic = kafka.topic("skewed-writer")
    configs = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.compaction.lag.ms": "20000",
        "min.cleanable.dirty.ratio": "0.01",
    }
    if "message.timestamp.type" in STATE_TOPIC_CONFIGS:
        configs["message.timestamp.type"] = STATE_TOPIC_CONFIGS["message.timestamp.type"]
    create_topic(kafka.admin("B"), topic, 2, configs)
    producer = kafka.producer("B")

    def write(key: bytes, value: bytes, partition: int = 0) -> None:
        stamp = int((time.time() - SKEW_S) * 1000)
        producer.produce(topic, key=key, value=value, partition=partition, timestamp=stamp)
        producer.flush(30)
        time.sleep(0.3)  # the next write rolls the segment (segment.ms 100 on the writer's clock)

    write(KEY, b"run [12, 22)")
    write(b"filler", b"x")
    write(b"filler", b"x", 1)

    def commit_again() -> None:
        write(KEY, b"run [12, 27)")
        write(b"filler", b"y")

    reader = LogReader("B", {"bootstrap.servers": kafka.bootstrap("B")})
    try:
        reader._asker = SlowAsker(kafka.consumer("B", {"isolation.level": "read_uncommitted"}), commit_again)
        keys = {key for p, _o, key, _v, _ts in reader.read(topic) if p == 0}
    finally:
        reader.close()
    deadline = time.monotonic() + 60
    while live_offsets(kafka, topic) != [2] and time.monotonic() < deadline:
        time.sleep(1)
    assert live_offsets(kafka, topic) == [2], "the cleaner never dropped the older record"
    assert KEY in keys, "partition 0 read without the key: the skewed writer's newer record let the cleaner drop it"

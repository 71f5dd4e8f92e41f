"""Tailing and reading the replication state on real brokers when its topics disappear or are re-created, and
best-effort readers under an open transaction. The state records are written by hand (the copy's codecs) to a
flow alias of the test's own, so deleting its state topics touches no other test."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import pytest
from confluent_kafka import Producer
from tests.kafka_helpers import KafkaKit, create_topic, delete_topic, recreate_topic
from tests.replication.helpers import KEEP_FOREVER, PROGRESS_TOPIC, a_to_b, copy_all, create_copy_topics
from tests.replication.test_state_reads import open_transaction, produce_values

from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import Segment, encode_segment, offset_map_topic
from mirrorflow.core.progress import Progress, encode_progress, progress_topic
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.compacted_log import LogReader, OpenTransactionError
from mirrorflow.kafka.compacted_tail import CompactedTail
from mirrorflow.replication.metrics import flow_views
from mirrorflow.replication.offset_translation import read_offset_maps
from mirrorflow.replication.state_tail import OffsetMapTail

pytestmark = pytest.mark.integration

Record = tuple[bytes | None, bytes | None]


def produce(kafka: KafkaKit, topic: str, records: Sequence[Record]) -> None:
    producer = Producer(with_logger({"bootstrap.servers": kafka.bootstrap("B")}))
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0


def values(n: int, prefix: str) -> list[Record]:
    return [(f"{prefix}{i}".encode(), f"{prefix}{i}".encode()) for i in range(n)]


@pytest.fixture
def tail(kafka: KafkaKit) -> Iterator[CompactedTail]:
    reader = CompactedTail("B", {"bootstrap.servers": kafka.bootstrap("B")}, timeout_s=30.0, wait_s=10.0)
    yield reader
    reader.close()


def test_one_log_reader_reads_slot_after_slot_each_to_its_end_then(kafka: KafkaKit) -> None:
    """A copy start reads its state slots one after the other through one `LogReader`: each read ends at the true
    end taken when it starts (records added between reads are in the next one), a read blocked by an open
    transaction fails clearly, and the same reader then reads on once the transaction is over."""
    topic = kafka.topic("logreader")
    create_topic(kafka.admin("B"), topic, 4)
    producer = Producer(with_logger({"bootstrap.servers": kafka.bootstrap("B")}))
    for p in range(4):
        producer.produce(topic, key=b"k", value=f"first-{p}".encode(), partition=p)
    assert producer.flush(30) == 0
    counts: list[int] = []
    with LogReader("B", {"bootstrap.servers": kafka.bootstrap("B")}, timeout_s=30.0, wait_s=3.0) as reader:

        def read(slots: list[int]) -> list[tuple[int, bytes | None]]:
            return [(p, v) for p, _o, _k, v, _ts in reader.read(topic, partitions=slots, on_count=counts.append)]

        assert read([3]) == [(3, b"first-3")]
        producer.produce(topic, key=b"k", value=b"second-3", partition=3)
        assert producer.flush(30) == 0
        # Each partition in log order; partitions interleave as their fetches come back (3 first, seen under load).
        assert sorted(read([0, 3]), key=lambda r: r[0]) == [(0, b"first-0"), (3, b"first-3"), (3, b"second-3")]
        held = open_transaction(kafka, topic, 1)
        producer.produce(topic, key=b"k", value=b"after-the-open-one", partition=1)
        assert producer.flush(30) == 0
        with pytest.raises(OpenTransactionError, match=f"{topic}-1"):
            read([1])
        held.commit_transaction(30)
        assert read([1]) == [(1, b"first-1"), (1, None), (1, b"after-the-open-one")]
    assert counts == [4, 4, 4, 4]


def test_a_tail_reads_a_recreated_topic_from_its_start(kafka: KafkaKit, tail: CompactedTail) -> None:
    """Re-created with more records than were read: the end did not go backwards, and the tail used to read on
    from its old position (3 of the 8 new records)."""
    topic = kafka.topic("tailre")
    create_topic(kafka.admin("B"), topic, 1)
    produce(kafka, topic, values(5, "old"))
    assert tail.read_new(topic, 0) == (False, values(5, "old"))
    recreate_topic(kafka.admin("B"), topic)
    produce(kafka, topic, values(8, "new"))
    assert tail.read_new(topic, 0) == (True, values(8, "new"))
    assert tail.read_new(topic, 0) == (False, [])


def test_a_tail_reads_from_the_start_again_after_a_gap_longer_than_tombstones_are_kept(kafka: KafkaKit) -> None:
    """Once the log cleaner has passed a tombstone the broker drops it after `delete.retention.ms`: a reader that
    went on from its old position after that would keep the deleted key for good. After more than `max_gap_s`
    without a read (a clock set by hand) the tail reads the topic from its start and says so."""
    topic = kafka.topic("tailgap")
    create_topic(kafka.admin("B"), topic, 2)
    now = [0.0]
    reader = CompactedTail(
        "B",
        {"bootstrap.servers": kafka.bootstrap("B")},
        timeout_s=30.0,
        wait_s=10.0,
        max_gap_s=100.0,
        clock=lambda: now[0],
    )
    try:
        produce(kafka, topic, values(2, "a"))
        assert reader.read_new_all(topic) == (False, [(0, k, v) for k, v in values(2, "a")])
        produce(kafka, topic, [(b"b", b"b")])
        now[0] = 100.0  # exactly the gap: still read on
        assert reader.read_new_all(topic) == (False, [(0, b"b", b"b")])
        assert reader.read_new(topic, 0) == (False, [])
        produce(kafka, topic, [(b"c", b"c")])
        now[0] = 250.1
        assert reader.read_new_all(topic) == (
            True,
            [(0, k, v) for k, v in [*values(2, "a"), (b"b", b"b"), (b"c", b"c")]],
        )
        now[0] = 400.0
        assert reader.read_new(topic, 0) == (True, [*values(2, "a"), (b"b", b"b"), (b"c", b"c")])
        assert reader.read_new(topic, 0) == (False, [])
    finally:
        reader.close()


def test_a_tail_fails_on_a_topic_that_vanished_and_reads_it_whole_once_back(
    kafka: KafkaKit, tail: CompactedTail
) -> None:
    """A topic read before and absent now used to be a silent "restarted, nothing": the caller dropped its view
    while the tail kept its position, and missed the re-created topic's first records."""
    topic = kafka.topic("tailgone")
    create_topic(kafka.admin("B"), topic, 1)
    produce(kafka, topic, values(5, "old"))
    tail.read_new(topic, 0)
    delete_topic(kafka.admin("B"), topic)
    with pytest.raises(MirrorflowError, match=f"topic '{topic}' does not exist on cluster 'B'"):
        tail.read_new(topic, 0)
    create_topic(kafka.admin("B"), topic, 1)
    produce(kafka, topic, values(8, "new"))
    assert tail.read_new(topic, 0) == (True, values(8, "new"))


def test_a_tail_holds_no_partition_between_reads_and_ignores_what_it_no_longer_reads(
    kafka: KafkaKit, tail: CompactedTail
) -> None:
    """Between reads nothing stays assigned (no prefetching), so a topic read earlier and deleted since cannot
    fail the read of another one with an error queued for it while idle."""
    first, second = kafka.topic("tailidle1"), kafka.topic("tailidle2")
    for topic in (first, second):
        create_topic(kafka.admin("B"), topic, 1)
        produce(kafka, topic, values(3, topic))
    assert tail.read_new(first, 0) == (False, values(3, first))
    assert tail._reader.assignment() == []
    delete_topic(kafka.admin("B"), first)
    time.sleep(2.0)  # a negative check: time for the client to notice the deletion of a partition it held
    assert tail.read_new(second, 0) == (False, values(3, second))


class StateTopics:
    """The progress and offset-map topics of flow alias `alias`->B, written by hand."""

    def __init__(self, kafka: KafkaKit, alias: str) -> None:
        self.kafka, self.alias = kafka, alias
        self.progress, self.map = progress_topic(alias), offset_map_topic(alias)

    def create(self, *, with_map: bool = True) -> None:
        for name in (self.progress, self.map) if with_map else (self.progress,):
            create_topic(self.kafka.admin("B"), name, 1, {"cleanup.policy": "compact"})

    def write(self, topic: str, partition_history: Sequence[tuple[int, int, int]], next_upstream: int) -> None:
        """Segments (upstream, downstream, length) of `topic`-0, then its progress after them."""
        if partition_history:
            produce(self.kafka, self.map, [encode_segment(topic, 0, Segment(*s)) for s in partition_history])
        down_end = max((d + n for _u, d, n in partition_history), default=0)
        copied = sum(n for _u, _d, n in partition_history)
        produce(self.kafka, self.progress, [encode_progress(Progress(topic, 0, next_upstream, down_end, copied, 0, 0))])

    def read_whole(self) -> Callable[[str, int], int | None]:
        maps = read_offset_maps("B", {"bootstrap.servers": self.kafka.bootstrap("B")}, self.alias, ".", timeout_s=30)
        return lambda topic, u: maps.translate(topic, 0, u).offset


def test_a_tailing_reader_drops_everything_when_the_state_topics_are_recreated(kafka: KafkaKit) -> None:
    """Both state topics re-created with as many records as before: the old tail saw no change (its end check
    only caught topics that shrank) and kept translating with the old map."""
    state = StateTopics(kafka, kafka.topic("S"))
    state.create()
    state.write("t", [(0, 0, 10)], 10)
    reader = OffsetMapTail("B", {"bootstrap.servers": kafka.bootstrap("B")}, state.alias, ".", timeout_s=30.0)
    try:
        assert reader.load().translate("t", 0, 5).offset == 5
        for name in (state.progress, state.map):
            recreate_topic(kafka.admin("B"), name, 1, {"cleanup.policy": "compact"})
        state.write("t", [(0, 10, 10)], 10)  # copied again after remote offsets 0..9
        tailed = reader.load()
        assert [tailed.translate("t", 0, u).offset for u in (0, 5, 10)] == [10, 15, 20]
        whole = state.read_whole()
        assert [whole("t", u) for u in (0, 5, 10)] == [10, 15, 20]
    finally:
        reader.close()


def test_readers_fail_when_the_offset_map_topic_is_missing_under_copied_progress(kafka: KafkaKit) -> None:
    """Progress says 10 records were copied but the map topic is gone: the readers used to read it as empty and
    translate every offset to the replicated end (or skip), never saying the map was missing."""
    state = StateTopics(kafka, kafka.topic("S"))
    state.create(with_map=False)
    produce(kafka, state.progress, [encode_progress(Progress("t", 0, 10, 10, 10, 0, 0))])
    with pytest.raises(MirrorflowError, match=f"offset-map topic '{state.map}' does not exist"):
        state.read_whole()
    reader = OffsetMapTail("B", {"bootstrap.servers": kafka.bootstrap("B")}, state.alias, ".", timeout_s=30.0)
    try:
        with pytest.raises(MirrorflowError, match=f"offset-map topic '{state.map}' does not exist"):
            reader.load()
    finally:
        reader.close()


def test_metrics_views_give_up_within_their_timeout_on_an_open_transaction(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """A best-effort reader (metrics, dashboard, preflight) used to wait the copy's 90 s for an open transaction
    on the progress partition, whatever its timeout: a Prometheus scrape hung for 90 s."""
    topic = kafka.topic("mwait")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config)
    produce_values(kafka, topic, 0, 5)
    assert copy_all(flow, topic) == 5
    held = open_transaction(kafka, PROGRESS_TOPIC)
    try:
        started = time.monotonic()
        with pytest.raises(MirrorflowError, match="made no progress for 5 s: a transaction that is still open"):
            flow_views(flow, timeout_s=5.0)
        waited = time.monotonic() - started
        with pytest.raises(MirrorflowError, match="made no progress for 3 s"):  # the exporter's shorter wait
            flow_views(flow, wait_s=3.0)
    finally:
        held.abort_transaction(30)
    assert waited < 45.0, f"flow_views(timeout_s=5) waited {waited:.0f} s"

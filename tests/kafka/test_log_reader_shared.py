"""Readers sharing one `LogCache` (`kafka/log_cache.py`: the copy ranges of one Spark task), interleaved by hand on
real brokers: a read served from what another read fetched still ends at the true end taken by THIS read, an
open transaction is waited out per read and a read that fails on it leaves nothing wrong for the next, and a
read waiting behind another takes its end once it holds the partition."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.kafka_helpers import KafkaKit, create_topic

import mirrorflow.kafka.compacted_log as compacted_log
from mirrorflow.kafka.compacted_log import LogReader, OpenTransactionError, StalledReadError, latest_values
from mirrorflow.kafka.log_cache import Kept, LogCache

pytestmark = pytest.mark.integration


def committed(producer: Producer, topic: str, records: dict[bytes, bytes | None]) -> None:
    producer.begin_transaction()
    for key, value in records.items():
        producer.produce(topic, key=key, value=value, partition=0)
    producer.commit_transaction(30)


def setup(kafka: KafkaKit) -> tuple[str, dict[str, str], Producer]:
    topic = kafka.topic("shared-read")
    create_topic(kafka.admin("B"), topic, 2)
    producer = kafka.producer("B", {"transactional.id": f"shared-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    committed(producer, topic, {b"k%d" % i: b"v%d" % i for i in range(10)})
    return topic, {"bootstrap.servers": kafka.bootstrap("B")}, producer


def fresh(conf: dict[str, str], topic: str) -> dict[bytes, bytes]:
    with LogReader("B", conf, timeout_s=30) as reader:
        return latest_values(reader.read(topic, partitions=[0]))


_OPEN: list[LogCache] = []


def new_cache(**options: float) -> LogCache:
    """A cache whose clients (`LogCache.asker`, `borrow`) are closed after the test (`close_caches`)."""
    _OPEN.append(LogCache(**options))
    return _OPEN[-1]


@pytest.fixture(autouse=True)
def close_caches() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def reader(conf: dict[str, str], cache: LogCache, wait_s: float = 30.0) -> LogReader:
    return LogReader("B", conf, timeout_s=30, wait_s=wait_s, shared=cache)


def test_a_read_served_from_the_cache_ends_at_its_own_end_and_the_next_read_sees_a_commit_made_meanwhile(
    kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, conf, producer = setup(kafka)
    cache = new_cache()
    with reader(conf, cache) as first, reader(conf, cache) as a, reader(conf, cache) as b:
        before = latest_values(first.read(topic, partitions=[0]))
        assert before == {b"k%d" % i: b"v%d" % i for i in range(10)} and cache.records == 10
        real = compacted_log.true_ends

        def then_commit(*args: Any) -> Iterator[dict[int, int]]:
            for ends in real(*args):
                # Range A has taken its end; another range of the slot commits now, before A is served.
                committed(producer, topic, {b"k0": b"new", b"k99": b"v99"})
                yield ends

        monkeypatch.setattr(compacted_log, "true_ends", then_commit)
        seen_by_a = latest_values(a.read(topic, partitions=[0]))
        monkeypatch.setattr(compacted_log, "true_ends", real)
        assert seen_by_a == before, "A's read ends at A's end: the commit after it is not A's"
        assert (cache.fetches, cache.records) == (1, 10), "A was served from the cache, nothing fetched"
        seen_by_b = latest_values(b.read(topic, partitions=[0]))
        assert seen_by_b == fresh(conf, topic) == {**before, b"k0": b"new", b"k99": b"v99"}, "B sees the commit"
        assert (cache.fetches, cache.records) == (2, 12), "B fetched the tail alone"


def test_a_read_that_fails_on_an_open_transaction_leaves_the_cache_sound_for_the_next(kafka: KafkaKit) -> None:
    topic, conf, producer = setup(kafka)
    cache = new_cache()
    other = kafka.producer("B")
    with reader(conf, cache) as first, reader(conf, cache, wait_s=1.0) as short, reader(conf, cache) as later:
        assert len(latest_values(first.read(topic, partitions=[0]))) == 10
        producer.begin_transaction()
        producer.produce(topic, key=b"k5", value=b"open", partition=0)
        producer.flush(30)
        other.produce(topic, key=b"k6", value=b"after the open one", partition=0)
        assert other.flush(30) == 0
        with pytest.raises(OpenTransactionError, match=f"{topic}-0"):
            list(short.read(topic, partitions=[0]))  # the read ahead of a fence: a short wait, then it gives up
        producer.commit_transaction(30)
        seen = latest_values(later.read(topic, partitions=[0]))
        assert seen == fresh(conf, topic)
        assert seen[b"k5"] == b"open" and seen[b"k6"] == b"after the open one"


def test_a_read_waiting_behind_another_takes_its_end_once_it_holds_the_partition(
    kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, conf, producer = setup(kafka)
    cache = new_cache()
    entry = cache.entry("B", True, topic, 0)
    waiting = threading.Event()
    real_hold = Kept.hold

    def hold(self: Kept, since: float, wait_s: float) -> bool | None:
        if self.lock.locked():
            waiting.set()
        return real_hold(self, since, wait_s)

    monkeypatch.setattr(Kept, "hold", hold)
    outcome: dict[str, Any] = {}

    def run(name: str, wait_s: float) -> Callable[[], None]:
        def go() -> None:
            try:
                with reader(conf, cache, wait_s=wait_s) as r:
                    outcome[name] = latest_values(r.read(topic, partitions=[0]))
            except Exception as err:
                outcome[name] = err

        return go

    entry.lock.acquire()  # another range's read holds the partition and makes no progress
    impatient = threading.Thread(target=run("impatient", 1.0))
    impatient.start()
    impatient.join(30)
    assert isinstance(outcome["impatient"], StalledReadError) and "another read" in str(outcome["impatient"])

    waiting.clear()
    patient = threading.Thread(target=run("patient", 30.0))
    patient.start()
    assert waiting.wait(30), "the patient read waits for the partition"
    committed(producer, topic, {b"k1": b"while it waited"})
    entry.lock.release()
    patient.join(60)
    assert outcome["patient"] == fresh(conf, topic) and outcome["patient"][b"k1"] == b"while it waited"


def test_a_partition_last_read_longer_ago_than_tombstones_are_kept_is_read_from_its_start(kafka: KafkaKit) -> None:
    """The cleaner drops a tombstone `delete.retention.ms` after it cleaned the record: a cache continuing from an
    older read would keep the deleted key (`log_cache.MAX_GAP_S`, the rule `CompactedTail` follows too)."""
    topic, conf, producer = setup(kafka)
    cache = new_cache(max_gap_s=0.0)
    with reader(conf, cache) as first, reader(conf, cache) as later:
        assert len(latest_values(first.read(topic, partitions=[0]))) == 10
        committed(producer, topic, {b"k3": None})
        assert latest_values(later.read(topic, partitions=[0])) == fresh(conf, topic)
        assert cache.records == 10 + 11, "read again from the start: the ten records and the tombstone"


def test_reads_ahead_of_the_fence_give_up_on_an_open_transaction_together_not_one_after_another(
    kafka: KafkaKit,
) -> None:
    """A killed run leaves a transaction open on a slot that six ranges of the next run's task read ahead of their
    fences with a 2 s bound (`copy_slots.PRE_READ_WAIT_S`). Alone, each would give up after 2 s, all at once; behind
    one another on the slot's lock they must not add up to 12 s: a read waiting behind another counts the time
    since it began, and the first one's stall is every waiter's stall."""
    topic, conf, producer = setup(kafka)
    producer.begin_transaction()
    producer.produce(topic, key=b"k5", value=b"left open", partition=0)
    producer.flush(30)
    cache = new_cache()
    readers = [reader(conf, cache, wait_s=2.0) for _ in range(6)]
    outcomes: list[BaseException | None] = [None] * len(readers)
    start = threading.Barrier(len(readers))

    def ahead(i: int) -> None:
        start.wait(30)
        try:
            list(readers[i].read(topic, partitions=[0]))
        except StalledReadError as err:
            outcomes[i] = err

    threads = [threading.Thread(target=ahead, args=(i,)) for i in range(len(readers))]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    took = time.monotonic() - began
    for r in readers:
        r.close()
    producer.abort_transaction(30)
    assert all(isinstance(o, StalledReadError) for o in outcomes), outcomes
    assert any(isinstance(o, OpenTransactionError) for o in outcomes), "the reader that met it names it"
    assert took < 6.0, f"six reads ahead took {took:.1f} s: they waited one after another"


def test_a_read_of_one_partition_is_not_held_by_a_read_blocked_on_another_partition_it_does_not_read(
    kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by review (session 16): range X reads its chain (partitions 0 and 1) and stalls on 1, where a killed
    run of another Spark task left a transaction open; range W of the same slot reads the same chain and waits
    behind X; range Y reads partition 0 alone, which no transaction holds. A read held every partition's lock
    until all of them were read, and took them one by one, holding those it had while waiting for the next: Y
    waited behind X (or W) for the whole stall and failed when its own wait ran out, though alone it would have
    read 0 at once. One open transaction failed the siblings (the group fails, Spark retries the task). A
    partition read to its end is released at once, and a read waiting for one partition holds none meanwhile."""
    topic, conf, _producer = setup(kafka)
    zombie = kafka.producer("B", {"transactional.id": f"zombie-{uuid.uuid4().hex[:8]}"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, key=b"z", value=b"left open", partition=1)
    zombie.flush(30)
    plain = kafka.producer("B")
    plain.produce(topic, key=b"after", value=b"the open one", partition=1)
    assert plain.flush(30) == 0
    cache = new_cache()
    first, second = cache.entry("B", True, topic, 0), cache.entry("B", True, topic, 1)
    outcome: dict[str, Any] = {}
    waiting = threading.Event()
    real_hold = Kept.hold

    def hold(self: Kept, since: float, wait_s: float) -> bool | None:
        if self is second and self.lock.locked():
            waiting.set()  # W, waiting for partition 1 behind X
        return real_hold(self, since, wait_s)

    monkeypatch.setattr(Kept, "hold", hold)

    def chain(name: str) -> None:
        try:
            with reader(conf, cache, wait_s=30.0) as r:
                outcome[name] = list(r.read(topic, partitions=[0, 1]))
        except Exception as err:
            outcome[name] = err

    blocked = [threading.Thread(target=chain, args=("x",))]
    blocked[0].start()
    try:
        deadline = time.monotonic() + 30
        while not (first.position >= 10 and second.lock.locked()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert first.position >= 10 and second.lock.locked(), "X read partition 0 and stalls on partition 1"
        blocked.append(threading.Thread(target=chain, args=("w",)))
        blocked[1].start()
        assert waiting.wait(30), "W waits for partition 1 behind X"
        began = time.monotonic()
        with reader(conf, cache, wait_s=3.0) as y:
            seen = latest_values(y.read(topic, partitions=[0]))
        took = time.monotonic() - began
        assert seen == fresh(conf, topic) and len(seen) == 10
        assert took < 2.0, f"Y waited {took:.1f} s behind a stall on a partition Y does not read"
        assert all(t.is_alive() for t in blocked), "X and W still wait on the open transaction"
    finally:
        zombie.abort_transaction(30)
        for thread in blocked:
            thread.join(60)
    expected = [(0, o) for o in range(10)] + [(1, 1)]
    for name in ("x", "w"):
        assert not isinstance(outcome[name], Exception), outcome[name]
        assert sorted({(p, o) for p, o, *_ in outcome[name]}) == expected

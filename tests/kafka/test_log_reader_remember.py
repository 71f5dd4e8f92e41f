"""A remembering `LogReader` (issue 19): a copy reads its state before its fence and again after it, and the read
after the fence, which a run boundary waits for, must see what a fresh read from the start sees (committed
records only, the latest per key, tombstones applied) while fetching only what was written since the first."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.kafka_helpers import KafkaKit, create_topic

import mirrorflow.kafka.compacted_log as compacted_log
from mirrorflow.kafka.compacted_log import LogReader, latest_values, read_to_end

pytestmark = pytest.mark.integration


def write(producer: Producer, topic: str, records: dict[bytes, bytes | None], *, commit: bool = True) -> None:
    """One transaction of `records` (key -> value, None a tombstone), committed or aborted; a key's partition is
    its number's parity (`kx`: 0), so each key lives in one partition as in a compacted topic."""
    producer.begin_transaction()
    for key, value in records.items():
        producer.produce(topic, value=value, key=key, partition=int(key[1:]) % 2 if key[1:].isdigit() else 0)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def test_a_remembering_reader_fetches_only_the_tail_and_sees_what_a_fresh_read_sees(
    kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = kafka.topic("remember")
    create_topic(kafka.admin("B"), topic, 2)
    producer = kafka.producer("B", {"transactional.id": f"remember-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    write(producer, topic, {b"k%d" % i: b"v%d" % i for i in range(10)})
    write(producer, topic, {b"k0": b"aborted", b"kx": b"aborted"}, commit=False)
    conf = {"bootstrap.servers": kafka.bootstrap("B")}
    fetched: list[Any] = []
    real = compacted_log.consume_to

    def counted(*args: Any) -> Iterator[Any]:
        for record in real(*args):
            fetched.append(record)
            yield record

    monkeypatch.setattr(compacted_log, "consume_to", counted)
    with LogReader("B", conf, timeout_s=30, remember=True) as reader:
        reader.connect(topic)
        first = latest_values(reader.read(topic))
        assert first == {b"k%d" % i: b"v%d" % i for i in range(10)}
        assert len(fetched) == 10
        write(producer, topic, {b"k1": b"v1'", b"k2": None, b"k10": b"v10"})
        write(producer, topic, {b"k3": b"aborted"}, commit=False)
        fetched.clear()
        second = list(reader.read(topic))
        assert len(fetched) == 3, "the second read fetches only what was committed since the first"
        fresh = latest_values(read_to_end("B", conf, topic, timeout_s=30))
        assert latest_values(second) == fresh
        assert fresh == {**{b"k%d" % i: b"v%d" % i for i in range(10) if i != 2}, b"k1": b"v1'", b"k10": b"v10"}
        for p in (0, 1):
            offsets = [o for q, o, *_ in second if q == p]
            assert offsets == sorted(offsets), "each partition's records in offset order"
        fetched.clear()
        assert latest_values(reader.read(topic)) == fresh
        assert fetched == [], "nothing new: nothing fetched"

"""The subject-name check of schema-ID translation and its process-wide cache, on the real Kafka clusters and two
real Apicurio registries.

An ID is translated only when it is registered under a subject the flow's `schema.registry.subject.name.strategy`
gives for the record's topic and side; anything else that starts with byte 0 is copied byte for byte and counted
in `schema_ids_not_ours`. The registries' answers are kept per process, so a second copy range asks nothing.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import NewTopic
from tests.kafka_helpers import KafkaKit
from tests.replication.helpers import a_to_b, copy_tasks

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.registry_client import RegistryClient, Schema
from mirrorflow.core.schema_wire import frame, schema_id
from mirrorflow.kafka.sample_data import read_topic
from mirrorflow.local.registry import RegistryServer
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyResult
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane

pytestmark = pytest.mark.integration

Registries = tuple[RegistryServer, RegistryServer]
Record = tuple[bytes | None, bytes | None]


def _flow(write_config: Callable[..., MirrorConfig], topics: str, registries: Registries, body: str = "") -> Flow:
    keys = (
        f"A->B.schema.registry.source.url = {registries[0].url}\n"
        f"A->B.schema.registry.target.url = {registries[1].url}\n"
    )
    flow = a_to_b(write_config, keys + body, topics=topics, groups=f"none-{uuid.uuid4().hex[:6]}")
    run_control_plane(flow, steps={TOPICS})
    return flow


def _produce(kafka: KafkaKit, topic: str, records: list[Record], partitions: int = 1) -> None:
    kafka.admin("A").create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})])[topic].result()
    producer = kafka.producer("A")
    for i, (key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, partition=i % partitions)
    assert producer.flush(30) == 0


def _copy(flow: Flow, topic: str, partitions: int = 1) -> list[CopyResult]:
    return [copy_range(task) for task in copy_tasks(flow, topic, partitions)]


def _record_schema(name: str) -> Schema:
    return Schema(
        json.dumps({"type": "record", "name": name, "namespace": "mf.t", "fields": [{"name": "f", "type": "int"}]})
    )


def _moved_ahead(target: RegistryClient, run: str) -> None:
    """Schemas in the target first, so that the same schemas get other IDs there than in the source."""
    for i in range(2):
        target.register(f"ahead-{run}-{i}", _record_schema(f"Ahead{run}{i}"))


def test_topic_name_strategy_leaves_bytes_of_a_topic_without_subjects_as_they_are_even_for_unknown_ids(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, schema_registries: Registries
) -> None:
    """A Kafka Streams count topic replicated next to registry topics: its values read as IDs the source registry
    does not know. The topic has no `<topic>-value` subject, so none of its values can be the registry's: they are
    copied (not an error, not a dead letter) and counted."""
    source = RegistryClient(schema_registries[0].url)
    topic = kafka.topic("sr-counts")
    unknown = 4_000_000_000  # far above any ID the session's registries have given
    counts = [struct.pack(">q", (unknown << 24) + i) for i in range(3)]
    assert all(source.has_subject(f"{topic}-{part}") is False for part in ("key", "value"))
    _produce(kafka, topic, [(b"page-%d" % i, count) for i, count in enumerate(counts)])

    (result,) = _copy(_flow(write_config, topic, schema_registries), topic)

    assert (result.records, result.dead_lettered, result.schema_ids_not_ours) == (3, 0, 3)
    assert [v for _k, v, *_ in read_topic(kafka.bootstrap("B"), f"A.{topic}")[0]] == counts


def test_topic_record_name_strategy_translates_the_topics_record_subjects_only(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, schema_registries: Registries
) -> None:
    source, target = (RegistryClient(r.url) for r in schema_registries)
    run = uuid.uuid4().hex[:8]
    _moved_ahead(target, run)
    topic = kafka.topic("sr-topicrecord")
    value_id = source.register(f"{topic}-mf.t.Order{run}", _record_schema(f"Order{run}"))
    elsewhere = source.register(f"other-topic-{run}-mf.t.Else{run}", _record_schema(f"Else{run}"))
    long_key = struct.pack(">q", (elsewhere << 24) + 99)  # reads as an ID of another topic's subject
    _produce(kafka, topic, [(long_key, frame(value_id, b"v"))])
    body = (
        "A->B.schema.registry.subject.name.strategy = io.confluent.kafka.serializers.subject.TopicRecordNameStrategy\n"
    )

    (result,) = _copy(_flow(write_config, topic, schema_registries, body), topic)

    ((key, value, *_),) = read_topic(kafka.bootstrap("B"), f"A.{topic}")[0]
    assert key == long_key and result.schema_ids_not_ours == 1
    assert value is not None and schema_id(value) != value_id
    assert target.schema_by_id(schema_id(value) or 0).text == _record_schema(f"Order{run}").text


def test_record_name_strategy_translates_an_id_under_any_subject(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, schema_registries: Registries
) -> None:
    """RecordNameStrategy names subjects after the record, not the topic: any subject of the ID qualifies (the
    documented limit: a long that reads as a known ID cannot be told apart under this strategy)."""
    source, target = (RegistryClient(r.url) for r in schema_registries)
    run = uuid.uuid4().hex[:8]
    _moved_ahead(target, run)
    topic = kafka.topic("sr-recordname")
    value_id = source.register(f"mf.t.Payment{run}", _record_schema(f"Payment{run}"))
    _produce(kafka, topic, [(b"k", frame(value_id, b"v"))])

    (result,) = _copy(
        _flow(
            write_config, topic, schema_registries, "A->B.schema.registry.subject.name.strategy = RecordNameStrategy\n"
        ),
        topic,
    )

    ((_key, value, *_),) = read_topic(kafka.bootstrap("B"), f"A.{topic}")[0]
    assert result.schema_ids_not_ours == 0 and value is not None
    assert target.schema_by_id(schema_id(value) or 0).text == _record_schema(f"Payment{run}").text
    assert schema_id(value) != value_id


@pytest.fixture
def http_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every HTTP call the registry clients make (they still reach the real registries)."""
    calls: list[str] = []
    real = RegistryClient._call

    def counted(self: RegistryClient, method: str, path: str, body: dict[str, object] | None = None) -> object:
        calls.append(f"{method} {self.role}{path}")
        return real(self, method, path, body)

    monkeypatch.setattr(RegistryClient, "_call", counted)
    yield calls


def test_the_second_copy_range_of_a_process_asks_the_registries_nothing(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, schema_registries: Registries, http_calls: list[str]
) -> None:
    """Two partitions of one topic: two copy ranges, which used to ask both registries again each."""
    source, target = (RegistryClient(r.url) for r in schema_registries)
    run = uuid.uuid4().hex[:8]
    _moved_ahead(target, run)
    topic = kafka.topic("sr-cache")
    value_id = source.register(f"{topic}-value", _record_schema(f"Cached{run}"))
    _produce(kafka, topic, [(b"k%d" % i, frame(value_id, b"v%d" % i)) for i in range(4)], partitions=2)
    first, second = copy_tasks(_flow(write_config, topic, schema_registries), topic, 2)
    del http_calls[:]

    assert copy_range(first).records == 2
    asked = list(http_calls)
    assert copy_range(second).records == 2

    assert sorted(c.split("/")[0] + "/" + c.split("/")[1] for c in asked) == [
        "GET source schema registry/schemas",  # the schema
        "GET source schema registry/schemas",  # its subjects
        "GET source schema registry/subjects",  # the topic has a <topic>-value subject
        "POST target schema registry/subjects",  # registered in the target
    ], asked
    assert http_calls == asked, f"the second range asked again: {http_calls[len(asked) :]}"
    values = [v for part in read_topic(kafka.bootstrap("B"), f"A.{topic}").values() for _k, v, *_ in part]
    assert len(values) == 4 and value_id not in {schema_id(v) for v in values}


def test_an_id_registered_later_under_another_topics_subject_is_translated_there(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, schema_registries: Registries
) -> None:
    """The same schema registered under one more subject keeps its ID: the cached subjects of that ID are then
    out of date, and must be asked again before a record of the new topic is judged not the registry's."""
    source, target = (RegistryClient(r.url) for r in schema_registries)
    run = uuid.uuid4().hex[:8]
    _moved_ahead(target, run)
    first, later = kafka.topic("sr-first"), kafka.topic("sr-later")
    schema = _record_schema(f"Shared{run}")
    shared = source.register(f"{first}-value", schema)
    _produce(kafka, first, [(b"k", frame(shared, b"v"))])
    flow = _flow(write_config, f"{first}, {later}", schema_registries)
    _copy(flow, first)  # caches: the ID's only subject is <first>-value
    assert source.register(f"{later}-value", schema) == shared
    _produce(kafka, later, [(b"k", frame(shared, b"v"))])

    (result,) = _copy(flow, later)

    ((_key, value, *_),) = read_topic(kafka.bootstrap("B"), f"A.{later}")[0]
    assert result.schema_ids_not_ours == 0 and value is not None and schema_id(value) != shared
    assert f"{later}-value" in {s for s, _v in target.subject_versions_of(schema_id(value) or 0)}

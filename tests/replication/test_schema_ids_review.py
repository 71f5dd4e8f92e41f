"""Review of schema-ID translation (issue 20): records that start with byte 0 without being the registry's, and a
registry URL that does not serve the API. Real Kafka clusters, two real Apicurio registries.

* A key written by Kafka's LongSerializer is 8 big-endian bytes, so every long below 2^56 starts with byte 0 and
  its bytes 1-4 read as a "schema ID": (value >> 24). Under the default `translate = key, value`:
  - a long in [2^24, 2^25) reads as ID 1, which every registry has: the key is silently rewritten (data
    corruption on the target, no error, no dead letter);
  - a long below 2^24 reads as ID 0, which no registry ever assigns: the copy stops (or the record is
    dead-lettered) although nothing is wrong with it.
* A URL that misses the API's base path (Apicurio's `/apis/ccompat/v6`) answers 404 to everything: that is
  classified as "this schema ID is unknown", so with `errors.tolerance = all` every record of the flow goes to
  the dead-letter topic instead of the copy stopping on a misconfigured registry.

Fixed by the subject-name check (core/subject_strategy.py): an ID is translated only when it is registered under
a subject the flow's strategy gives for the record's topic and side; other records are copied as they are and
counted in `schema_ids_not_ours`.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import NewTopic
from tests.kafka_helpers import KafkaKit
from tests.replication.helpers import a_to_b, copy_tasks

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.registry_client import RegistryClient, Schema
from mirrorflow.core.schema_wire import frame
from mirrorflow.core.transforms import FatalTransformError
from mirrorflow.kafka.sample_data import read_topic
from mirrorflow.local.registry import CCOMPAT_PATH, RegistryServer
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyResult
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane

pytestmark = pytest.mark.integration

Registries = tuple[RegistryServer, RegistryServer]


def _flow(write_config: Callable[..., MirrorConfig], topic: str, source_url: str, target_url: str, body: str) -> Flow:
    keys = f"A->B.schema.registry.source.url = {source_url}\nA->B.schema.registry.target.url = {target_url}\n"
    return a_to_b(write_config, keys + body, topics=topic, groups=f"none-{uuid.uuid4().hex[:6]}")


def _copy(flow: Flow, topic: str) -> CopyResult:
    run_control_plane(flow, steps={TOPICS})
    (task,) = copy_tasks(flow, topic, 1)
    return copy_range(task)


def _string_schema(run: str, i: int) -> Schema:
    return Schema(json.dumps({"type": "record", "name": f"S{run}{i}", "fields": [{"name": "f", "type": "string"}]}))


def _produce(kafka: KafkaKit, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    kafka.admin("A").create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "-1"})])[topic].result()
    producer = kafka.producer("A")
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0


def test_a_long_key_whose_bytes_read_as_a_known_id_is_copied_unchanged(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, schema_registries: Registries
) -> None:
    source, target = (RegistryClient(r.url) for r in schema_registries)
    run = uuid.uuid4().hex[:8]
    for i in range(2):  # the target's IDs move ahead of the source's
        target.register(f"other-{run}-{i}", _string_schema(run, 100 + i))
    topic = kafka.topic("sr-longkey")
    value_id = source.register(f"{topic}-value", _string_schema(run, 0))
    # LongSerializer's bytes of (value_id << 24) + 7: byte 0 is 0 and bytes 1-4 are value_id.
    long_key = struct.pack(">q", (value_id << 24) + 7)
    assert long_key[1:5] == value_id.to_bytes(4, "big")
    _produce(kafka, topic, [(long_key, frame(value_id, b"payload"))])

    result = _copy(_flow(write_config, topic, schema_registries[0].url, schema_registries[1].url, ""), topic)

    assert (result.records, result.schema_ids_not_ours) == (1, 1)
    ((key, value, _headers, _ts),) = read_topic(kafka.bootstrap("B"), f"A.{topic}")[0]
    assert value is not None and value[1:5] != value_id.to_bytes(4, "big"), "the value's ID is translated"
    assert key == long_key, (
        "a LongSerializer key was rewritten as if it were a schema ID: the record's key on the target is another "
        f"number ({struct.unpack('>q', key)[0] if key and len(key) == 8 else key!r} instead of "
        f"{struct.unpack('>q', long_key)[0]})"
    )


def test_a_long_key_below_2_pow_24_does_not_stop_the_copy(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, schema_registries: Registries
) -> None:
    source = RegistryClient(schema_registries[0].url)
    run = uuid.uuid4().hex[:8]
    topic = kafka.topic("sr-smallkey")
    value_id = source.register(f"{topic}-value", _string_schema(run, 1))
    keys = [struct.pack(">q", n) for n in (1, 42, 123456)]  # bytes 1-4 read as "schema ID 0"
    _produce(kafka, topic, [(k, frame(value_id, b"v")) for k in keys])

    result = _copy(_flow(write_config, topic, schema_registries[0].url, schema_registries[1].url, ""), topic)

    assert (result.records, result.schema_ids_not_ours) == (3, 3)
    assert [k for k, *_ in read_topic(kafka.bootstrap("B"), f"A.{topic}")[0]] == keys


def test_a_registry_url_without_the_api_path_stops_the_copy_instead_of_dead_lettering_every_record(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, schema_registries: Registries
) -> None:
    source = RegistryClient(schema_registries[0].url)
    run = uuid.uuid4().hex[:8]
    topic = kafka.topic("sr-badpath")
    value_id = source.register(f"{topic}-value", _string_schema(run, 2))
    _produce(kafka, topic, [(b"k%d" % i, frame(value_id, b"v%d" % i)) for i in range(3)])
    root = schema_registries[0].url[: -len(CCOMPAT_PATH)]  # the server's root: not the Confluent API
    dead_letter = f"dlq-{topic}"
    body = f"A->B.errors.tolerance = all\nA->B.errors.deadletterqueue.topic.name = {dead_letter}\n"
    flow = _flow(write_config, topic, root, schema_registries[1].url, body)

    try:
        result = _copy(flow, topic)
    except FatalTransformError:
        return  # the wanted outcome: a registry that does not serve the API is everybody's problem
    pytest.fail(
        f"the copy went on: {result.records} record(s) copied, {result.dead_lettered} dead-lettered to "
        f"{dead_letter} because a wrong registry base path was read as '404: unknown schema ID'"
    )


def test_a_long_value_of_a_topic_without_schemas_is_copied_unchanged_even_with_translate_value(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, schema_registries: Registries
) -> None:
    """A flow replicates many topics; a Kafka Streams `count()` output carries LongSerializer values. A count in
    [id << 24, (id + 1) << 24) reads as a registered ID, and `translate = value` does not protect it."""
    source, target = (RegistryClient(r.url) for r in schema_registries)
    run = uuid.uuid4().hex[:8]
    for i in range(2):
        target.register(f"other-{run}-v{i}", _string_schema(run, 200 + i))
    framed = kafka.topic("sr-framed")
    counts = kafka.topic("sr-counts")
    value_id = source.register(f"{framed}-value", _string_schema(run, 3))
    count = (value_id << 24) + 12345  # a count of ~16.7 million times the ID: ordinary for a busy key
    _produce(kafka, framed, [(b"k", frame(value_id, b"v"))])
    _produce(kafka, counts, [(b"page-1", struct.pack(">q", count))])
    flow = _flow(
        write_config,
        f"{framed}, {counts}",
        schema_registries[0].url,
        schema_registries[1].url,
        "A->B.schema.registry.translate = value\n",
    )
    run_control_plane(flow, steps={TOPICS})
    not_ours = {}
    for topic in (framed, counts):
        (task,) = copy_tasks(flow, topic, 1)
        not_ours[topic] = copy_range(task).schema_ids_not_ours
    assert not_ours == {framed: 0, counts: 1}
    ((_key, value, _h, _ts),) = read_topic(kafka.bootstrap("B"), f"A.{counts}")[0]
    assert value == struct.pack(">q", count), (
        f"the count {count} arrived as {struct.unpack('>q', value)[0] if value else value}: a value of a topic "
        "that holds no registry data was rewritten"
    )

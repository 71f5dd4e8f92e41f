"""Schema-ID translation between two real registries (Apicurio Registry) and two real Kafka clusters.

Records are written in Confluent's wire format with the source registry's IDs; the target registry has other
schemas registered first, so the same schemas get other IDs there. After the copy, every record on the target
is read back the way a consumer does it: the ID it carries is looked up in the target registry, and the schema
found must be the one the producer used (same text, same references).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import NewTopic
from tests.kafka_helpers import KafkaKit
from tests.replication.helpers import a_to_b, copy_tasks

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.registry_client import Reference, RegistryClient, Schema, SchemaRefused
from mirrorflow.core.schema_translation import SchemaIdTranslator
from mirrorflow.core.schema_wire import frame, schema_id
from mirrorflow.core.transforms import TransformError
from mirrorflow.kafka.sample_data import read_topic
from mirrorflow.local.registry import RegistryServer
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyResult
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane

pytestmark = pytest.mark.integration

Registries = tuple[RegistryServer, RegistryServer]


def avro_record(name: str, fields: list[dict[str, object]]) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "mf.test", "fields": fields})


def registry_flow(write_config: Callable[..., MirrorConfig], topic: str, registries: Registries, body: str) -> Flow:
    source, target = registries
    keys = f"A->B.schema.registry.source.url = {source.url}\nA->B.schema.registry.target.url = {target.url}\n"
    return a_to_b(write_config, keys + body, topics=topic, groups=f"none-{uuid.uuid4().hex[:6]}")


def copy(flow: Flow, topic: str) -> CopyResult:
    run_control_plane(flow, steps={TOPICS})
    (task,) = copy_tasks(flow, topic, 1)
    return copy_range(task)


def test_records_read_with_the_target_registry_find_the_producers_schemas(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, schema_registries: Registries
) -> None:
    source = RegistryClient(schema_registries[0].url)
    target = RegistryClient(schema_registries[1].url)
    run = uuid.uuid4().hex[:8]
    for i in range(3):  # the target registry's IDs move ahead of the source's
        target.register(f"unrelated-{run}-{i}", Schema(avro_record(f"Other{run}{i}", [{"name": "x", "type": "int"}])))
    topic = kafka.topic("sr")
    address = Schema(avro_record(f"Address{run}", [{"name": "street", "type": "string"}]))
    address_subject = f"address-{run}"
    address_id = source.register(address_subject, address)
    ref = (Reference(f"mf.test.Address{run}", address_subject, 1),)
    user_v1 = Schema(avro_record(f"User{run}", [{"name": "home", "type": f"mf.test.Address{run}"}]), "AVRO", ref)
    user_v2_fields = [
        {"name": "home", "type": f"mf.test.Address{run}"},
        {"name": "age", "type": "int", "default": 0},
    ]
    user_v2 = Schema(avro_record(f"User{run}", user_v2_fields), "AVRO", ref)
    key_schema = Schema(json.dumps({"type": "object", "properties": {"id": {"type": "string"}}}), "JSON")
    ids = {
        "v1": source.register(f"{topic}-value", user_v1),
        "v2": source.register(f"{topic}-value", user_v2),
        "key": source.register(f"{topic}-key", key_schema),
    }
    used = {ids["v1"]: user_v1, ids["v2"]: user_v2, ids["key"]: key_schema}
    kafka.admin("A").create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "-1"})])[topic].result()
    producer = kafka.producer("A")
    sent = []
    for i in range(40):
        key = frame(ids["key"], json.dumps({"id": f"u{i}"}).encode()) if i % 4 else b"plain-key-%d" % i
        value = None if i == 7 else frame(ids["v1" if i < 20 else "v2"], b"avro-payload-%d" % i)
        producer.produce(topic, key=key, value=value, partition=0, headers=[("n", b"%d" % i)])
        sent.append((key, value))
    assert producer.flush(30) == 0

    result = copy(registry_flow(write_config, topic, schema_registries, ""), topic)

    assert (result.records, result.dropped) == (40, 0)
    copied = read_topic(kafka.bootstrap("B"), f"A.{topic}")[0]
    assert len(copied) == 40
    translated: dict[int, int] = {}
    for i, ((key, value, headers, _ts), (sent_key, sent_value)) in enumerate(zip(copied, sent, strict=True)):
        assert headers == (("n", b"%d" % i),)
        for got, before in ((key, sent_key), (value, sent_value)):
            if before is None or schema_id(before) is None:
                assert got == before, "a null or a record not in the wire format is copied as it was"
                continue
            assert got is not None and got[5:] == before[5:], "the payload is left byte for byte"
            old_id, new_id = schema_id(before), schema_id(got)
            assert old_id is not None and new_id is not None
            translated[old_id] = new_id
            found = target.schema_by_id(new_id)  # what a consumer of the target cluster does
            assert (found.text, found.type) == (used[old_id].text, used[old_id].type)
    assert set(translated) == set(used), "keys and values of every schema were translated"
    assert all(new != old for old, new in translated.items()), f"the registries' IDs differ: {translated}"
    assert len(set(translated.values())) == 3
    (target_ref,) = target.schema_by_id(translated[ids["v2"]]).references
    assert (target_ref.name, target_ref.subject) == (ref[0].name, address_subject)
    assert target.subject_version(address_subject, target_ref.version).text == address.text
    assert target.version_of(address_subject, address) == target_ref.version
    assert source.schema_by_id(address_id).text == address.text


def test_an_unknown_schema_id_stops_the_copy_or_goes_to_the_dead_letter_topic(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, schema_registries: Registries
) -> None:
    source = RegistryClient(schema_registries[0].url)
    topic = kafka.topic("sr-unknown")
    known = source.register(f"{topic}-value", Schema(json.dumps({"type": "string"})))
    unknown = 987654
    kafka.admin("A").create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "-1"})])[topic].result()
    producer = kafka.producer("A")
    for i, value in enumerate([frame(known, b"a"), frame(unknown, b"b"), frame(known, b"c")]):
        producer.produce(topic, key=b"k%d" % i, value=value, partition=0)
    assert producer.flush(30) == 0

    with pytest.raises(TransformError) as err:
        copy(registry_flow(write_config, topic, schema_registries, ""), topic)
    message = str(err.value)
    assert f"{topic}-0 offset 1" in message and f"schema ID {unknown}" in message and "errors.tolerance" in message
    assert read_topic(kafka.bootstrap("B"), f"A.{topic}").get(0, []) == [], "the failed transaction is aborted"

    dead_letter = f"dlq-{topic}"
    body = f"A->B.errors.tolerance = all\nA->B.errors.deadletterqueue.topic.name = {dead_letter}\n"
    result = copy(registry_flow(write_config, topic, schema_registries, body), topic)
    assert (result.records, result.dead_lettered) == (2, 1)
    copied = read_topic(kafka.bootstrap("B"), f"A.{topic}")[0]
    assert [k for k, *_ in copied] == [b"k0", b"k2"]
    (dead,) = read_topic(kafka.bootstrap("B"), dead_letter)[0]
    assert dead[:2] == (b"k1", frame(unknown, b"b")), "the record as it was read"
    assert dict(dead[2])["mirrorflow.errors.transform"] == b"schema-registry"


class Counting(RegistryClient):
    """A real client that counts its HTTP calls (to show the hot path makes none)."""

    calls: list[str]

    def _call(self, method: str, path: str, body: dict[str, object] | None = None) -> object:
        self.calls.append(f"{method} {path}")
        return super()._call(method, path, body)


def test_nested_references_and_shared_ids_are_registered_once_then_served_from_the_cache(
    schema_registries: Registries,
) -> None:
    source = RegistryClient(schema_registries[0].url)
    run = uuid.uuid4().hex[:8]
    inner = Schema(avro_record(f"Inner{run}", [{"name": "v", "type": "long"}]))
    source.register(f"inner-{run}", inner)
    middle = Schema(
        avro_record(f"Middle{run}", [{"name": "i", "type": f"mf.test.Inner{run}"}]),
        "AVRO",
        (Reference(f"mf.test.Inner{run}", f"inner-{run}", 1),),
    )
    source.register(f"middle-{run}", middle)
    outer = Schema(
        avro_record(f"Outer{run}", [{"name": "m", "type": f"mf.test.Middle{run}"}]),
        "AVRO",
        (Reference(f"mf.test.Middle{run}", f"middle-{run}", 1),),
    )
    outer_id = source.register(f"outer-a-{run}", outer)
    assert source.register(f"outer-b-{run}", outer) == outer_id, "one schema under two subjects: one ID"
    # Other versions in the target first, so the references must be rewritten to the target's versions.
    target_plain = RegistryClient(schema_registries[1].url)
    target_plain.register(f"inner-{run}", Schema(avro_record(f"Inner{run}", [{"name": "w", "type": "int"}])))
    counting_source = Counting(schema_registries[0].url)
    counting_target = Counting(schema_registries[1].url)
    object.__setattr__(counting_source, "calls", [])
    object.__setattr__(counting_target, "calls", [])
    translator = SchemaIdTranslator(counting_source, counting_target)
    target_id = translator.translate(outer_id)
    calls = len(counting_source.calls) + len(counting_target.calls)
    assert translator.translate(outer_id) == target_id
    assert len(counting_source.calls) + len(counting_target.calls) == calls, "a cached ID costs no HTTP call"

    found = target_plain.schema_by_id(target_id)
    assert found.text == outer.text
    (middle_ref,) = found.references
    middle_found = target_plain.subject_version(middle_ref.subject, middle_ref.version)
    assert middle_found.text == middle.text
    (inner_ref,) = middle_found.references
    assert inner_ref.version == 2, "the target's own version of the inner subject, not the source's 1"
    assert target_plain.subject_version(f"inner-{run}", inner_ref.version).text == inner.text
    subjects = {s for s, _v in target_plain.subject_versions_of(target_id)}
    assert {f"outer-a-{run}", f"outer-b-{run}"} <= subjects, "registered under every subject the source uses"


def test_a_schema_the_target_refuses_fails_its_records_without_asking_again(schema_registries: Registries) -> None:
    """The target's compatibility rule refuses the source's schema (HTTP 409): the record's own failure (so a
    dead letter under `errors.tolerance = all`), remembered so the next records fail without a round trip."""
    run = uuid.uuid4().hex[:8]
    subject = f"refused-{run}"
    source = RegistryClient(schema_registries[0].url)
    source_id = source.register(subject, Schema(avro_record(f"R{run}", [{"name": "b", "type": "string"}])))
    target = RegistryClient(schema_registries[1].url)
    target.register(subject, Schema(avro_record(f"R{run}", [{"name": "a", "type": "int"}])))
    target._call("PUT", f"/config/{subject}", {"compatibility": "BACKWARD"})
    counting = Counting(schema_registries[1].url)
    object.__setattr__(counting, "calls", [])
    translator = SchemaIdTranslator(RegistryClient(schema_registries[0].url), counting)
    with pytest.raises(SchemaRefused, match="refused the schema"):
        translator.translate(source_id)
    calls = len(counting.calls)
    with pytest.raises(SchemaRefused, match="refused the schema"):
        translator.translate(source_id)
    assert len(counting.calls) == calls

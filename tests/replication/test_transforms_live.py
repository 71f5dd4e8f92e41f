"""Transforms on real brokers: seed 004's chain (InsertHeader unless tombstone, PII masking) plus a Filter drop,
the records that land on the target, exact checkpoints for groups on dropped offsets, and `errors.tolerance`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.kafka_helpers import KafkaKit
from tests.replication.helpers import a_to_b, commit_offsets, copy_tasks

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.transforms import TransformError
from mirrorflow.kafka.sample_data import read_topic
from mirrorflow.replication.checkpoints import emit_checkpoints
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyResult
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane

pytestmark = pytest.mark.integration

SEED_004_CHAIN = """A->B.transforms = dropTest, addHeaders, maskPII
A->B.transforms.dropTest.type = org.apache.kafka.connect.transforms.Filter
A->B.transforms.dropTest.predicate = hasDrop
A->B.transforms.addHeaders.type = org.apache.kafka.connect.transforms.InsertHeader
A->B.transforms.addHeaders.header = X-Replicated-From
A->B.transforms.addHeaders.value.literal = source-cluster
A->B.transforms.addHeaders.predicate = isProduction
A->B.transforms.addHeaders.negate = true
A->B.transforms.maskPII.type = com.example.transforms.MaskPIITransform
A->B.transforms.maskPII.fields = email,phone,ssn
A->B.transforms.maskPII.mask.char = *
A->B.predicates = isProduction, hasDrop
A->B.predicates.isProduction.type = org.apache.kafka.connect.transforms.predicates.RecordIsTombstone
A->B.predicates.hasDrop.type = org.apache.kafka.connect.transforms.predicates.HasHeaderKey
A->B.predicates.hasDrop.name = drop
"""


def flow_for(write_config: Callable[..., MirrorConfig], topic: str, groups: str, body: str) -> Flow:
    return a_to_b(write_config, body, topics=topic, groups=groups)


def copy(flow: Flow, topic: str, partitions: int) -> list[CopyResult]:
    run_control_plane(flow, steps={TOPICS})
    return [copy_range(t) for t in copy_tasks(flow, topic, partitions)]


def masked(text: str) -> str:
    """Seed 004's rule, written independently: up to 4 characters all masked, else 2 kept at each end."""
    return "*" * len(text) if len(text) <= 4 else text[:2] + "*" * (len(text) - 4) + text[-2:]


def create(admin: AdminClient, topic: str, partitions: int) -> None:
    admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})])[topic].result()


def commit(admin: AdminClient, group: str, topic: str, partition: int, offset: int) -> None:
    commit_offsets(admin, group, {(topic, partition): offset}, timeout_s=60)


def test_seed_004_chain_with_filter_copies_exactly_and_translates_across_drops(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    topic = kafka.topic("smt")
    create(kafka.admin("A"), topic, 2)
    base_ts = 1_600_000_000_000
    drop = {(0, 3), (0, 4), (0, 9)}  # (partition, offset) with a `drop` header: 9 is the tail
    tombstones = {(0, 6), (1, 1)}
    sizes = {0: 10, 1: 3}
    producer = kafka.producer("A")
    sent = {}
    for p, count in sizes.items():
        for i in range(count):
            value = None
            if (p, i) not in tombstones:
                value = json.dumps({"email": f"user{p}{i}@example.com", "phone": "555-0100", "ssn": "12", "n": i})
            headers = [("trace", f"{p}-{i}".encode())] + ([("drop", b"yes")] if (p, i) in drop else [])
            key = f"k{p}-{i}".encode()
            producer.produce(topic, key=key, value=value, partition=p, timestamp=base_ts + 10 * i + p, headers=headers)
            sent[(p, i)] = (key, value, headers, base_ts + 10 * i + p)
    assert producer.flush(30) == 0

    prefix = f"smt-{uuid.uuid4().hex[:8]}-"
    flow = flow_for(write_config, topic, f"{prefix}.*", SEED_004_CHAIN)
    results = copy(flow, topic, 2)

    assert sum(r.records for r in results) == 10
    assert sum(r.filtered for r in results) == 3 and sum(r.dropped for r in results) == 3
    copied = read_topic(kafka.bootstrap("B"), f"A.{topic}")
    for p, count in sizes.items():
        expected = []
        for i in range(count):
            if (p, i) in drop:
                continue
            key, value, headers, ts = sent[(p, i)]
            if value is not None:
                fields = json.loads(value)
                fields.update({k: masked(fields[k]) for k in ("email", "phone", "ssn")})
                value = json.dumps(fields, separators=(",", ":"))
                headers = [*headers, ("X-Replicated-From", b"source-cluster")]
            expected.append((key, None if value is None else value.encode(), tuple(headers), ts))
        assert copied[p] == expected, f"partition {p}: keys, values, headers, timestamps as transformed"

    # Source groups positioned on kept records, dropped records and the dropped tail.
    positions = {"before-drop": 3, "in-drop": 4, "after-drop": 5, "tombstone": 6, "on-tail": 9, "end": 10, "zero": 0}
    for name, offset in positions.items():
        commit(kafka.admin("A"), prefix + name, topic, 0, offset)
    report = emit_checkpoints(flow)
    emitted = {e.group[len(prefix) :]: e.downstream_offset for e in report.emitted if e.group.startswith(prefix)}
    # Kept upstream offsets 0,1,2,5,6,7,8 became downstream 0..6: a group on a dropped offset resumes at the next
    # kept record, a group on the dropped tail at the end.
    assert emitted == {
        "before-drop": 3,
        "in-drop": 3,
        "after-drop": 3,
        "tombstone": 4,
        "on-tail": 7,
        "end": 7,
        "zero": 0,
    }


TOLERANCE = """A->B.transforms = mask
A->B.transforms.mask.type = MaskFields
A->B.transforms.mask.fields = email
A->B.transforms.mask.keep.first = 1
"""


def test_errors_tolerance_none_fails_the_task_and_all_dead_letters_in_the_transaction(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    topic = kafka.topic("smt-err")
    create(kafka.admin("A"), topic, 1)
    producer = kafka.producer("A")
    values = [b'{"email": "ann@x.io"}', b"not json", b'{"email": "bob@x.io"}']
    for i, value in enumerate(values):
        producer.produce(
            topic, key=b"k%d" % i, value=value, partition=0, timestamp=1_600_000_000_000 + i, headers=[("h", b"%d" % i)]
        )
    assert producer.flush(30) == 0
    prefix = f"smt-err-{uuid.uuid4().hex[:8]}-"
    remote = f"A.{topic}"

    strict = flow_for(write_config, topic, f"{prefix}.*", TOLERANCE)
    with pytest.raises(TransformError) as err:
        copy(strict, topic, 1)
    assert f"{topic}-0 offset 1" in str(err.value) and "'mask'" in str(err.value)
    assert read_topic(kafka.bootstrap("B"), remote).get(0, []) == [], "the failed transaction is aborted"

    dead_letter = f"dlq-{topic}"
    tolerant = flow_for(
        write_config,
        topic,
        f"{prefix}.*",
        TOLERANCE + f"A->B.errors.tolerance = all\nA->B.errors.deadletterqueue.topic.name = {dead_letter}\n",
    )
    (result,) = copy(tolerant, topic, 1)
    assert (result.records, result.dead_lettered, result.dropped) == (2, 1, 1)
    copied = read_topic(kafka.bootstrap("B"), remote)[0]
    assert [(k, v, h) for k, v, h, _ts in copied] == [
        (b"k0", b'{"email":"a*******"}', (("h", b"0"),)),
        (b"k2", b'{"email":"b*******"}', (("h", b"2"),)),
    ]
    (dead,) = [r for part in read_topic(kafka.bootstrap("B"), dead_letter).values() for r in part]
    key, value, headers, ts = dead
    assert (key, value, ts) == (b"k1", b"not json", 1_600_000_000_001), "the record as it was read"
    named = dict(headers)
    assert headers[0] == ("h", b"1")
    assert (named["__connect.errors.topic"], named["__connect.errors.partition"], named["__connect.errors.offset"]) == (
        topic.encode(),
        b"0",
        b"1",
    )
    assert named["mirrorflow.errors.transform"] == b"mask"
    assert (
        b"JSON" in named["__connect.errors.exception.message"]
        or b"Expecting" in named["__connect.errors.exception.message"]
    )

    commit(kafka.admin("A"), prefix + "on-failed", topic, 0, 1)
    report = emit_checkpoints(tolerant)
    emitted = {e.group: e.downstream_offset for e in report.emitted if e.group.startswith(prefix)}
    assert emitted == {prefix + "on-failed": 1}, "the dead-lettered offset is a gap: the group resumes at k2"

"""Built-in predicates: what each one tests, and the settings it refuses."""

from __future__ import annotations

import pytest

from mirrorflow.core.predicates import (
    BUILTIN_PREDICATES,
    ConfigProblem,
    HasHeaderKey,
    Record,
    RecordIsTombstone,
    TopicNameMatches,
)


def record(
    value: bytes | None = b"v", headers: list[tuple[str, bytes | None]] | None = None, topic: str = "A.t"
) -> Record:
    return Record(topic, "t", 0, 7, 1000, b"k", value, headers or [])


def test_record_is_tombstone() -> None:
    predicate = RecordIsTombstone()
    predicate.configure({})
    assert predicate.test(record(None))
    assert not predicate.test(record(b""))


def test_has_header_key() -> None:
    predicate = HasHeaderKey()
    predicate.configure({"name": "trace"})
    assert predicate.test(record(headers=[("a", b"1"), ("trace", None)]))
    assert not predicate.test(record(headers=[("Trace", b"1")]))
    with pytest.raises(ConfigProblem) as err:
        HasHeaderKey().configure({})
    assert err.value.setting == "name"


def test_topic_name_matches_full_java_regex_on_the_remote_topic() -> None:
    predicate = TopicNameMatches()
    predicate.configure({"pattern": r"A\.orders-.*"})
    assert predicate.test(record(topic="A.orders-eu"))
    assert not predicate.test(record(topic="xA.orders-eu")), "the whole name must match, as Java's matches()"
    with pytest.raises(ConfigProblem) as err:
        TopicNameMatches().configure({"pattern": "orders["})
    assert err.value.setting == "pattern"
    with pytest.raises(ConfigProblem):
        TopicNameMatches().configure({"pattern": "  "})


def test_connect_class_names_map_to_built_ins() -> None:
    base = "org.apache.kafka.connect.transforms.predicates."
    assert BUILTIN_PREDICATES[base + "RecordIsTombstone"] is RecordIsTombstone
    assert BUILTIN_PREDICATES[base + "HasHeaderKey"] is HasHeaderKey
    assert BUILTIN_PREDICATES[base + "TopicNameMatches"] is TopicNameMatches

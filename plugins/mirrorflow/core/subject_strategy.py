"""Which registry subjects hold the schemas of a topic's keys or values: Confluent's subject-name strategies.

Nothing in a record says it was written by a registry-aware serialiser: a LongSerializer key or a Kafka Streams
count also starts with byte 0, and its next 4 bytes may read as an ID the registry knows. What tells them apart
is the subject: a serialiser registers (or finds) its schema under the subject its strategy names for the
record's topic and side, so an ID is the registry's for this record only when it is registered under such a
subject (`SchemaIdTranslation`, `A->B.schema.registry.subject.name.strategy`):

* `TopicNameStrategy` (Confluent's default): `<topic>-key` or `<topic>-value`. Exact.
* `TopicRecordNameStrategy`: `<topic>-<record's fully-qualified name>`, for keys and values alike: any subject
  that starts with `<topic>-` (the record's name is inside the payload, which is not parsed).
* `RecordNameStrategy`: the record's fully-qualified name, whatever the topic: any subject. The check cannot
  tell a long from an ID here; only an ID the registry does not know is told apart.

The topic is the source topic: the source registry's subjects are named after it.
"""

from __future__ import annotations

from mirrorflow.core.predicates import ConfigProblem

TOPIC = "TopicNameStrategy"
RECORD = "RecordNameStrategy"
TOPIC_RECORD = "TopicRecordNameStrategy"
STRATEGIES = (TOPIC, RECORD, TOPIC_RECORD)
JAVA_PACKAGE = "io.confluent.kafka.serializers.subject."
SETTING = "subject.name.strategy"


def parse_strategy(value: str) -> str:
    """The strategy's short name, from its short name or Confluent's Java class name; ConfigProblem if neither."""
    name = value.strip()
    short = name[len(JAVA_PACKAGE) :] if name.startswith(JAVA_PACKAGE) else name
    if short in STRATEGIES:
        return short
    raise ConfigProblem(
        SETTING,
        f"{name!r} is not a subject-name strategy this copy knows",
        f"use {', '.join(STRATEGIES)} (or {JAVA_PACKAGE}<name>); the default is {TOPIC}",
    )


def topic_subject(strategy: str, topic: str, part: str) -> str | None:
    """The one subject every registry-serialised `part` (key or value) of `topic` uses, when the strategy names
    one (TopicNameStrategy); None when it depends on the record."""
    return f"{topic}-{part}" if strategy == TOPIC else None


def matches(strategy: str, topic: str, part: str, subjects: frozenset[str]) -> bool:
    """Whether an ID registered under `subjects` can be the schema of `topic`'s `part` under `strategy`."""
    if strategy == TOPIC:
        return f"{topic}-{part}" in subjects
    if strategy == TOPIC_RECORD:
        prefix = f"{topic}-"
        return any(s.startswith(prefix) and len(s) > len(prefix) for s in subjects)
    return bool(subjects)

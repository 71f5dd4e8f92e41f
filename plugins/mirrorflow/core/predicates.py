"""Record predicates: the conditions under which a transform applies (Kafka Connect's predicates, in Python).

A transform names a predicate (`transforms.<t>.predicate = <p>`) and runs only on records for which the predicate
holds, or holds not with `transforms.<t>.negate = true`. Predicates are configured once per copy task and tested
once per record, so `test` must be cheap and must not keep per-record state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mirrorflow.core.patterns import PatternError, compile_patterns


class Record:
    """One record as transforms see it. `topic` is the remote (target) topic name, as Connect's SMTs see it in
    MM2; `source_topic`, `partition` and `offset` are the source coordinates. Transforms change `key`, `value`,
    `headers` (a list of (name, bytes-or-None)) and `timestamp`; the topic and partition cannot change."""

    __slots__ = ("headers", "key", "offset", "partition", "source_topic", "timestamp", "topic", "value")

    def __init__(
        self,
        topic: str,
        source_topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]],
    ) -> None:
        self.topic, self.source_topic, self.partition, self.offset = topic, source_topic, partition, offset
        self.timestamp, self.key, self.value, self.headers = timestamp, key, value, headers

    def __repr__(self) -> str:
        return f"Record({self.source_topic}-{self.partition}@{self.offset})"


class ConfigProblem(ValueError):
    """A transform or predicate setting is missing or wrong; `setting` names it (relative to the plug-in)."""

    def __init__(self, setting: str, problem: str, fix: str = "") -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting, self.problem, self.fix = setting, problem, fix


def required(settings: Mapping[str, str], name: str, fix: str = "") -> str:
    """The setting `name`, which must be present and not empty."""
    value = settings.get(name, "").strip()
    if not value:
        raise ConfigProblem(name, "is required", fix or f"set {name}")
    return value


class Predicate:
    """Base class of predicates; a plug-in may also be any class with `configure(settings)` and `test(record)`."""

    def configure(self, settings: Mapping[str, str]) -> None:
        """Read settings once per task; raise `ConfigProblem` for a missing or bad one."""

    def test(self, record: Record) -> bool:
        raise NotImplementedError


class RecordIsTombstone(Predicate):
    """True for records whose value is null (deletions in a compacted topic)."""

    def test(self, record: Record) -> bool:
        return record.value is None


class HasHeaderKey(Predicate):
    """True for records with at least one header named `name`."""

    name = ""

    def configure(self, settings: Mapping[str, str]) -> None:
        self.name = required(settings, "name", "set name = the header to look for")

    def test(self, record: Record) -> bool:
        name = self.name
        return any(k == name for k, _ in record.headers)


class TopicNameMatches(Predicate):
    """True when the record's topic (the remote topic name, as in MM2) fully matches the Java regex `pattern`."""

    _pattern: re.Pattern[str] | None = None

    def configure(self, settings: Mapping[str, str]) -> None:
        pattern = required(settings, "pattern", "set pattern = a Java regex of topic names")
        try:
            self._pattern = compile_patterns([pattern], key="pattern")
        except PatternError as err:
            raise ConfigProblem("pattern", str(err).removeprefix("pattern: "), "fix the regex") from err

    def test(self, record: Record) -> bool:
        return self._pattern is not None and self._pattern.fullmatch(record.topic) is not None


BUILTIN_PREDICATES: dict[str, type[Any]] = {}
for _cls in (RecordIsTombstone, HasHeaderKey, TopicNameMatches):
    BUILTIN_PREDICATES[f"org.apache.kafka.connect.transforms.predicates.{_cls.__name__}"] = _cls
    BUILTIN_PREDICATES[_cls.__name__] = _cls

"""Schema-ID translation: the copy step that makes wire-format records readable with the target's registry.

A record serialised with a schema registry carries the source registry's schema ID (`schema_wire`). For each ID
seen, the subjects it is registered under are read from the source registry. The ID is the registry's for this
record only when one of them is a subject the flow's subject-name strategy gives for the record's topic and
side (`subject_strategy`); then the schema is registered under the same subjects in the target registry (the
subject versions it references first, recursively), and the target's ID replaces the source's in the key or the
value. Bytes that merely look like the wire format (a LongSerializer key, a Kafka Streams count: byte 0, then 4
bytes that read as a known ID) are copied as they are and counted in `schema_ids_not_ours`.

The registries' answers are cached for the life of the process (`schema_cache`), so only the first copy range
of a process that meets a schema pays the round trips. Within a range, a record costs a dict lookup on its 5
header bytes and, when the IDs differ, one bytes concatenation.

It runs as the last step of the flow's transform chain (config/schema_registry.py adds it when
`A->B.schema.registry.source.url` and `.target.url` are set), so records a transform drops cost no lookup and
`errors.tolerance = all` sends a record whose ID the source registry does not know to the dead-letter topic.
A registry that cannot be reached stops the copy instead (`RegistryUnavailable`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from mirrorflow.core import schema_cache
from mirrorflow.core.patterns import parse_list
from mirrorflow.core.predicates import ConfigProblem, Record, required
from mirrorflow.core.registry_client import (
    Reference,
    RegistryClient,
    RegistryUnavailable,
    Schema,
    SchemaNotFound,
    SchemaRefused,
)
from mirrorflow.core.schema_wire import HEADER_BYTES, frame
from mirrorflow.core.subject_strategy import SETTING, TOPIC, matches, parse_strategy, topic_subject
from mirrorflow.core.transforms import Transformation

STEP_NAME = "schema-registry"
STEP_TYPE = "mirrorflow.core.schema_translation.SchemaIdTranslation"
PARTS = ("key", "value")
DEFAULT_TIMEOUT_MS = 30000
# References nest; a cycle (which a registry should refuse) must not recurse forever.
MAX_REFERENCE_DEPTH = 32
# Registries number schemas from 1 (Confluent, Karapace, Apicurio), so bytes that read as ID 0 are not wire format
# but data that starts with five zero bytes (a LongSerializer key below 2^24): copied as they are.
NO_SCHEMA_ID = 0
# How long "this topic has no subject for its keys (values)" is believed before the registry is asked again: a
# producer may start registering at any time, so the answer is kept per copy range and briefly.
ABSENT_SUBJECT_TTL_S = 30.0
# The hot path's mark of a header that is not the registry's (compared by identity).
NOT_OURS = b"not the registry's"


class UnknownSchemaId(LookupError):
    """A record's schema ID that the source registry does not know (or that no subject uses)."""


class SchemaIdTranslator:
    """Source schema ID -> target schema ID, registering schemas in the target on first sight. The registries'
    answers are kept per process (`schema_cache`); failures of one ID only per instance (one copy range)."""

    def __init__(self, source: RegistryClient, target: RegistryClient) -> None:
        self.source, self.target = source, target
        # IDs that failed for a reason of their own (unknown, refused by the target): every record carrying one
        # fails again at once instead of asking the registries again (each goes to the dead-letter topic).
        self.failed: dict[int, LookupError | ValueError] = {}

    def subjects_of(self, source_id: int, *, fresh: bool = False) -> frozenset[str]:
        """The subjects `source_id` is registered under in the source registry (asked again when `fresh`)."""
        key = (self.source.url, source_id)
        found = None if fresh else schema_cache.ID_SUBJECTS.get(key)
        if found is not None:
            return found
        self._raise_if_failed(source_id)
        try:
            versions = self.source.subject_versions_of(source_id)
        except SchemaNotFound:
            self._schema(source_id)  # UnknownSchemaId, unless the registry knows the ID but not this endpoint
            raise RegistryUnavailable(
                f"the source registry knows schema ID {source_id} but not its subject versions; it needs to serve "
                "GET /schemas/ids/{id}/versions, which schema-ID translation relies on"
            ) from None
        subjects = frozenset(subject for subject, _version in versions)
        schema_cache.ID_SUBJECTS.put(key, subjects)
        return subjects

    def translate(self, source_id: int) -> int:
        """The target's ID of the schema `source_id` names, registered under all of its subjects."""
        self._raise_if_failed(source_id)
        key = (self.source.url, self.target.url, source_id)
        try:
            subjects = self.subjects_of(source_id)
            cached = schema_cache.TARGET_IDS.get(key)
            if cached is not None and subjects <= cached[1]:
                return cached[0]
            if not subjects:
                raise UnknownSchemaId(
                    f"schema ID {source_id} is under no subject in the source registry {self.source.url}, so there "
                    "is no subject to register it under in the target registry"
                )
            target_id = self._register(source_id, subjects)
        except (UnknownSchemaId, SchemaRefused) as err:
            self.failed[source_id] = err
            raise
        schema_cache.TARGET_IDS.put(key, (target_id, subjects))
        return target_id

    def _raise_if_failed(self, source_id: int) -> None:
        failed = self.failed.get(source_id)
        if failed is not None:
            raise type(failed)(str(failed))

    def _schema(self, source_id: int) -> Schema:
        try:
            return self.source.schema_by_id(source_id)
        except SchemaNotFound as err:
            unknown = UnknownSchemaId(
                f"schema ID {source_id}: {err}. The record was written with another registry than "
                "schema.registry.source.url names, or its schema was deleted"
            )
            self.failed[source_id] = unknown
            raise unknown from None

    def _register(self, source_id: int, subjects: frozenset[str]) -> int:
        schema = self._schema(source_id)
        schema = Schema(schema.text, schema.type, tuple(self._reference(r, 1) for r in schema.references))
        target_id = 0
        for subject in sorted(subjects):
            target_id = self.target.register(subject, schema)
        return target_id

    def _reference(self, ref: Reference, depth: int) -> Reference:
        """The reference with the version its subject has in the target, registering it there first."""
        if depth > MAX_REFERENCE_DEPTH:
            raise UnknownSchemaId(f"schema references nest deeper than {MAX_REFERENCE_DEPTH} (a cycle?) at {ref}")
        key = (self.source.url, self.target.url, ref.subject, ref.version)
        version = schema_cache.TARGET_VERSIONS.get(key)
        if version is None:
            try:
                schema = self.source.subject_version(ref.subject, ref.version)
            except SchemaNotFound as err:
                raise UnknownSchemaId(
                    f"the referenced subject {ref.subject!r} version {ref.version} is not in the source registry "
                    f"{self.source.url} ({err})"
                ) from None
            refs = tuple(self._reference(r, depth + 1) for r in schema.references)
            schema = Schema(schema.text, schema.type, refs)
            self.target.register(ref.subject, schema)
            version = self.target.version_of(ref.subject, schema)
            schema_cache.TARGET_VERSIONS.put(key, version)
        return Reference(ref.name, ref.subject, version)


def _client(settings: Mapping[str, str], side: str, timeout_s: float) -> RegistryClient:
    url = required(settings, f"{side}.url", f"set schema.registry.{side}.url = http://host:port")
    user_info = settings.get(f"{side}.basic.auth.user.info", "")
    token = settings.get(f"{side}.bearer.auth.token", "")
    if user_info and token:
        raise ConfigProblem(
            f"{side}.bearer.auth.token", "is set together with basic.auth.user.info", "keep one of the two"
        )
    if user_info and ":" not in user_info:
        raise ConfigProblem(f"{side}.basic.auth.user.info", "is not user:password", "write it as user:password")
    return RegistryClient(url, f"{side} schema registry", user_info, token, timeout_s)


class SchemaIdTranslation(Transformation):
    """The built-in chain step; its settings are the flow's `schema.registry.*` keys without that prefix. One
    instance serves one copy range; `schema_ids_not_ours` counts the records it left as they were because a key
    or value that looked like the wire format named no schema of the topic's subjects."""

    translator: SchemaIdTranslator
    strategy = TOPIC
    keys = values = True
    schema_ids_not_ours = 0
    # The hot path's caches, per side: a source 5-byte header -> the target's, or NOT_OURS (a dict lookup on the
    # bytes as they are). Valid for one source topic (`_topic`): subjects are named after it.
    _key_heads: dict[bytes, bytes]
    _value_heads: dict[bytes, bytes]
    _topic: str | None = None
    _absent: dict[str, float]  # a subject the source registry lacks -> until when that is believed

    def configure(self, settings: Mapping[str, str]) -> None:
        timeout = settings.get("request.timeout.ms", str(DEFAULT_TIMEOUT_MS)).strip()
        if not timeout.isdigit() or int(timeout) == 0:
            raise ConfigProblem("request.timeout.ms", f"{timeout!r} is not a positive number", "set it to 30000")
        parts = parse_list(settings.get("translate", ",".join(PARTS)))
        wrong = [p for p in parts if p not in PARTS]
        if wrong or not parts:
            raise ConfigProblem("translate", f"{', '.join(wrong) or 'nothing'} is not key or value", "key, value")
        self.keys, self.values = "key" in parts, "value" in parts
        self.strategy = parse_strategy(settings.get(SETTING, TOPIC))
        seconds = int(timeout) / 1000
        self.translator = SchemaIdTranslator(_client(settings, "source", seconds), _client(settings, "target", seconds))
        self._key_heads, self._value_heads, self._absent = {}, {}, {}

    def apply(self, record: Record) -> Record | None:
        if record.source_topic != self._topic:
            self._key_heads, self._value_heads, self._topic = {}, {}, record.source_topic
        skipped = False
        value = record.value
        if self.values and value is not None and len(value) >= HEADER_BYTES and value[0] == 0:
            source = value[:HEADER_BYTES]
            target = self._value_heads.get(source) or self._head(source, "value")
            if target is NOT_OURS:
                skipped = True
            elif target != source:
                record.value = target + value[HEADER_BYTES:]
        key = record.key
        if self.keys and key is not None and len(key) >= HEADER_BYTES and key[0] == 0:
            source = key[:HEADER_BYTES]
            target = self._key_heads.get(source) or self._head(source, "key")
            if target is NOT_OURS:
                skipped = True
            elif target != source:
                record.key = target + key[HEADER_BYTES:]
        if skipped:
            self.schema_ids_not_ours += 1
        return record

    def _head(self, head: bytes, part: str) -> bytes:
        """The target's 5-byte header for a source header not yet cached (registers the schema if needed), or
        NOT_OURS when the bytes name no schema of this topic's `part`."""
        heads = self._key_heads if part == "key" else self._value_heads
        source_id = int.from_bytes(head[1:], "big")
        if source_id == NO_SCHEMA_ID:  # not the registry's: e.g. a LongSerializer key below 2^24
            heads[head] = NOT_OURS
            return NOT_OURS
        try:
            ours = self._is_ours(source_id, part)
            if ours is None:  # the topic has no subject for this part (now): asked again later, not cached
                return NOT_OURS
            if not ours:
                heads[head] = NOT_OURS
                return NOT_OURS
            target_id = self.translator.translate(source_id)
        except (UnknownSchemaId, ValueError) as err:
            raise type(err)(f"the {part}'s {err}") from None
        translated = heads[head] = frame(target_id, b"")
        return translated

    def _is_ours(self, source_id: int, part: str) -> bool | None:
        """True when `source_id` is registered under a subject the strategy gives for this topic's `part`; False
        when it is not; None when the topic has no such subject at all (so no ID is ours, whatever it is)."""
        topic = self._topic or ""
        translator = self.translator
        cached = schema_cache.ID_SUBJECTS.get((translator.source.url, source_id))
        if cached is not None and matches(self.strategy, topic, part, cached):
            return True
        subject = topic_subject(self.strategy, topic, part)
        if subject is not None and not self._subject_exists(subject):
            return None
        # Asked afresh when cached: the ID may have been registered under this topic's subject since.
        subjects = translator.subjects_of(source_id, fresh=cached is not None)
        return matches(self.strategy, topic, part, subjects)

    def _subject_exists(self, subject: str) -> bool:
        source = self.translator.source
        if schema_cache.SUBJECTS_SEEN.get((source.url, subject)):
            return True
        until = self._absent.get(subject)
        if until is not None and time.monotonic() < until:
            return False
        if source.has_subject(subject):
            schema_cache.SUBJECTS_SEEN.put((source.url, subject), True)
            return True
        self._absent[subject] = time.monotonic() + ABSENT_SUBJECT_TTL_S
        return False

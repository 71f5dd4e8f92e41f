"""Schema-ID translation: the copy step that makes wire-format records readable with the target's registry.

A record serialised with a schema registry carries the source registry's schema ID (`schema_wire`). For each ID
seen, the schema is read from the source registry with its subject versions, registered under the same
subjects in the target registry (the subject versions it references first, recursively), and the target's ID
replaces the source's in the key and the value. Both answers are cached: after the first record of a schema the
step is a dict lookup and, when the IDs differ, one bytes concatenation.

It runs as the last step of the flow's transform chain (config/schema_registry.py adds it when
`A->B.schema.registry.source.url` and `.target.url` are set), so records a transform drops cost no lookup and
`errors.tolerance = all` sends a record whose ID the source registry does not know to the dead-letter topic.
A registry that cannot be reached stops the copy instead (`RegistryUnavailable`).
"""

from __future__ import annotations

from collections.abc import Mapping

from mirrorflow.core.patterns import parse_list
from mirrorflow.core.predicates import ConfigProblem, Record, required
from mirrorflow.core.schema_registry import (
    Reference,
    RegistryClient,
    RegistryUnavailable,
    Schema,
    SchemaNotFound,
    SchemaRefused,
)
from mirrorflow.core.schema_wire import HEADER_BYTES, frame
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


class UnknownSchemaId(LookupError):
    """A record's schema ID that the source registry does not know (or that no subject uses)."""


class SchemaIdTranslator:
    """Source schema ID -> target schema ID, registering schemas in the target on first sight; cached."""

    def __init__(self, source: RegistryClient, target: RegistryClient) -> None:
        self.source, self.target = source, target
        self.ids: dict[int, int] = {}
        # IDs that failed for a reason of their own (unknown, refused by the target): every record carrying one
        # fails again at once instead of asking the registries again (each goes to the dead-letter topic).
        self.failed: dict[int, LookupError | ValueError] = {}
        self._versions: dict[tuple[str, int], int] = {}  # source (subject, version) -> target version

    def translate(self, source_id: int) -> int:
        found = self.ids.get(source_id)
        if found is not None:
            return found
        failed = self.failed.get(source_id)
        if failed is not None:
            raise type(failed)(str(failed))
        try:
            target_id = self._register(source_id)
        except (UnknownSchemaId, SchemaRefused) as err:
            self.failed[source_id] = err
            raise
        self.ids[source_id] = target_id
        return target_id

    def _register(self, source_id: int) -> int:
        try:
            schema = self.source.schema_by_id(source_id)
        except SchemaNotFound as err:
            raise UnknownSchemaId(
                f"schema ID {source_id}: {err}. The record was written with another registry than "
                "schema.registry.source.url names, or its schema was deleted"
            ) from None
        try:
            versions = self.source.subject_versions_of(source_id)
        except SchemaNotFound as err:
            raise RegistryUnavailable(
                f"the source registry knows schema ID {source_id} but not its subject versions ({err}); it needs "
                "to serve GET /schemas/ids/{id}/versions, which schema-ID translation relies on"
            ) from None
        if not versions:
            raise UnknownSchemaId(
                f"schema ID {source_id} is under no subject in the source registry {self.source.url}, so there is "
                "no subject to register it under in the target registry"
            )
        schema = Schema(schema.text, schema.type, tuple(self._reference(r, 1) for r in schema.references))
        target_id = 0
        for subject, _version in versions:
            target_id = self.target.register(subject, schema)
        return target_id

    def _reference(self, ref: Reference, depth: int) -> Reference:
        """The reference with the version its subject has in the target, registering it there first."""
        if depth > MAX_REFERENCE_DEPTH:
            raise UnknownSchemaId(f"schema references nest deeper than {MAX_REFERENCE_DEPTH} (a cycle?) at {ref}")
        key = (ref.subject, ref.version)
        version = self._versions.get(key)
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
            version = self._versions[key] = self.target.version_of(ref.subject, schema)
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
    """The built-in chain step; its settings are the flow's `schema.registry.*` keys without that prefix."""

    translator: SchemaIdTranslator
    keys = values = True
    # The hot path's cache: a source 5-byte header -> the target's (a dict lookup on the bytes as they are).
    _heads: dict[bytes, bytes]

    def configure(self, settings: Mapping[str, str]) -> None:
        timeout = settings.get("request.timeout.ms", str(DEFAULT_TIMEOUT_MS)).strip()
        if not timeout.isdigit() or int(timeout) == 0:
            raise ConfigProblem("request.timeout.ms", f"{timeout!r} is not a positive number", "set it to 30000")
        parts = parse_list(settings.get("translate", ",".join(PARTS)))
        wrong = [p for p in parts if p not in PARTS]
        if wrong or not parts:
            raise ConfigProblem("translate", f"{', '.join(wrong) or 'nothing'} is not key or value", "key, value")
        self.keys, self.values = "key" in parts, "value" in parts
        seconds = int(timeout) / 1000
        self.translator = SchemaIdTranslator(_client(settings, "source", seconds), _client(settings, "target", seconds))
        self._heads = {}

    def apply(self, record: Record) -> Record | None:
        heads = self._heads
        value = record.value
        if self.values and value is not None and len(value) >= HEADER_BYTES and value[0] == 0:
            source = value[:HEADER_BYTES]
            target = heads.get(source) or self._head(source, "value")
            if target != source:
                record.value = target + value[HEADER_BYTES:]
        key = record.key
        if self.keys and key is not None and len(key) >= HEADER_BYTES and key[0] == 0:
            source = key[:HEADER_BYTES]
            target = heads.get(source) or self._head(source, "key")
            if target != source:
                record.key = target + key[HEADER_BYTES:]
        return record

    def _head(self, head: bytes, part: str) -> bytes:
        """The target's 5-byte header for a source header not yet cached (registers the schema if needed)."""
        source_id = int.from_bytes(head[1:], "big")
        if source_id == NO_SCHEMA_ID:  # not the registry's: e.g. a LongSerializer key below 2^24
            self._heads[head] = head
            return head
        try:
            target_id = self.translator.translate(source_id)
        except (UnknownSchemaId, ValueError) as err:
            raise type(err)(f"the {part}'s {err}") from None
        translated = self._heads[head] = frame(target_id, b"")
        return translated

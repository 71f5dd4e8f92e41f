"""Record transforms applied while copying: the role Kafka Connect's single message transforms play in MM2.

The chain is described by plain data (`ChainSpec`, built from mm2.properties and shipped in each copy task) and
instantiated once per task (`TransformChain`). Types are built-ins (Connect's class names map to them) or Python
dotted paths `package.module.Class` importable where the copy runs. A transform returns the record (changed or
not) or None to drop it; a dropped record still counts as consumed, so its source offset becomes a gap of the
offset map, exactly like a provenance drop.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.patterns import parse_list
from mirrorflow.core.predicates import BUILTIN_PREDICATES, ConfigProblem, Predicate, Record, required

Header = tuple[str, bytes | None]


class Transformation:
    """Base class of transforms; a plug-in may also be any class with `configure(settings)` and `apply(record)`.

    `configure` gets the transform's own settings (`transforms.<name>.*` without `type`, `predicate`, `negate`)
    once per copy task, and once at config load to validate them: raise `ConfigProblem` for a bad one.
    """

    def configure(self, settings: Mapping[str, str]) -> None:
        """Read settings once per task."""

    def apply(self, record: Record) -> Record | None:
        raise NotImplementedError


class InsertHeader(Transformation):
    """Appends header `header` with the UTF-8 bytes of `value.literal` (Connect's InsertHeader)."""

    header = ""
    value = b""

    def configure(self, settings: Mapping[str, str]) -> None:
        self.header = required(settings, "header", "set header = the header name to add")
        if "value.literal" not in settings:
            raise ConfigProblem("value.literal", "is required", "set value.literal = the header value")
        self.value = settings["value.literal"].encode("utf-8")

    def apply(self, record: Record) -> Record | None:
        record.headers.append((self.header, self.value))
        return record


class DropHeaders(Transformation):
    """Removes every header whose name is in the list `headers` (Connect's DropHeaders)."""

    names: frozenset[str] = frozenset()

    def configure(self, settings: Mapping[str, str]) -> None:
        self.names = frozenset(parse_list(required(settings, "headers", "set headers = name1,name2")))

    def apply(self, record: Record) -> Record | None:
        names = self.names
        record.headers = [h for h in record.headers if h[0] not in names]
        return record


class Filter(Transformation):
    """Drops the record (Connect's Filter); give it a predicate to drop only some."""

    def apply(self, record: Record) -> Record | None:
        return None


class MaskFields(Transformation):
    """Masks top-level fields of JSON-object values: `fields` (list), `mask.char` (default `*`), `keep.first` and
    `keep.last` (characters left visible, default 0). A value no longer than `keep.first + keep.last` is masked
    whole. Non-string fields are masked as their JSON text; null values and absent fields are left alone. A value
    that is not a JSON object is an error (see `errors.tolerance`)."""

    default_keep = 0
    fields: tuple[str, ...] = ()
    char = "*"
    first = last = 0

    def configure(self, settings: Mapping[str, str]) -> None:
        self.fields = parse_list(required(settings, "fields", "set fields = field1,field2"))
        self.char = settings.get("mask.char", "*")
        if len(self.char) != 1:
            raise ConfigProblem("mask.char", f"{self.char!r} is not one character", "set mask.char = *")
        self.first = _count(settings, "keep.first", self.default_keep)
        self.last = _count(settings, "keep.last", self.default_keep)

    def mask(self, text: str) -> str:
        keep = self.first + self.last
        if len(text) <= keep:
            return self.char * len(text)
        tail = text[len(text) - self.last :] if self.last else ""
        return text[: self.first] + self.char * (len(text) - keep) + tail

    def apply(self, record: Record) -> Record | None:
        if record.value is None:
            return record
        document = json.loads(record.value)
        if not isinstance(document, dict):
            raise ValueError(f"the value is JSON {type(document).__name__}, not an object")
        changed = False
        for name in self.fields:
            current = document.get(name)
            if current is None:
                continue
            text = current if isinstance(current, str) else json.dumps(current)
            document[name] = self.mask(text)
            changed = True
        if changed:
            record.value = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return record


class MaskPII(MaskFields):
    """Seed 004's `com.example.transforms.MaskPIITransform`: MaskFields keeping two characters at each end."""

    default_keep = 2


def _count(settings: Mapping[str, str], name: str, default: int) -> int:
    raw = settings.get(name, str(default)).strip()
    if not raw.isdigit():
        raise ConfigProblem(name, f"{raw!r} is not a whole number of characters", f"set {name} = 0 or more")
    return int(raw)


BUILTIN_TRANSFORMS: dict[str, type[Any]] = {
    "com.example.transforms.MaskPIITransform": MaskPII,
    "MaskFields": MaskFields,
    "MaskPII": MaskPII,
}
for _cls in (InsertHeader, DropHeaders, Filter):
    BUILTIN_TRANSFORMS[f"org.apache.kafka.connect.transforms.{_cls.__name__}"] = _cls
    BUILTIN_TRANSFORMS[_cls.__name__] = _cls


@dataclass(frozen=True)
class TransformSpec:
    """`transforms.<name>.*`: the type, the plug-in's own settings, and an optional (negated) predicate."""

    name: str
    type: str
    # Hidden from repr: a step's settings may hold credentials (the schema registries' do), and a CopyTask or a
    # Flow is printed in logs and tracebacks; `ChainSpec.describe` shows them with secrets masked.
    settings: dict[str, str] = field(default_factory=dict, repr=False)
    predicate: str | None = None
    negate: bool = False


@dataclass(frozen=True)
class PredicateSpec:
    name: str
    type: str
    settings: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ChainSpec:
    """A flow's transforms, in order, with what to do when one fails (`errors.tolerance`: none or all)."""

    transforms: tuple[TransformSpec, ...] = ()
    predicates: tuple[PredicateSpec, ...] = ()
    errors_tolerance: str = "none"
    dead_letter_topic: str = ""
    dead_letter_replication_factor: int = -1

    @property
    def empty(self) -> bool:
        return not self.transforms

    def describe(self, secret: Callable[[str], bool] = lambda _key: False) -> list[str]:
        """One line per transform, for `mirrorflow validate`; settings whose name `secret` flags show as `***`."""
        lines = []
        for t in self.transforms:
            when = ""
            if t.predicate is not None:
                when = f" unless {t.predicate}" if t.negate else f" if {t.predicate}"
            settings = ", ".join(f"{k}={'***' if secret(k) else v}" for k, v in sorted(t.settings.items()))
            builtin = BUILTIN_TRANSFORMS.get(t.type)
            mapped = f" [built-in {builtin.__name__}]" if builtin is not None and builtin.__name__ != t.type else ""
            lines.append(f"{t.name}: {t.type}{mapped}{' (' + settings + ')' if settings else ''}{when}")
        if self.transforms and self.errors_tolerance == "all":
            lines.append(f"on error: dead-letter to {self.dead_letter_topic}")
        return lines


def default_dead_letter_topic(source_alias: str) -> str:
    """Excluded from replication by MM2's default `topics.exclude` (`mm2.*\\.internal`)."""
    return f"mm2-dlq.{source_alias}.internal"


def load_class(type_name: str, builtins: Mapping[str, type[Any]], method: str) -> type[Any]:
    """The class a `type` names: a built-in, or `package.module.Class` with a `method`; ConfigProblem if not."""
    name = type_name.strip()
    if name in builtins:
        return builtins[name]
    module_name, _, class_name = name.rpartition(".")
    known = ", ".join(sorted(n for n in builtins if "." not in n))
    fix = f"use a built-in ({known}) or the dotted path of a Python class importable where the copy runs"
    if not module_name:
        raise ConfigProblem("type", f"{name!r} is not a built-in", fix)
    if name.startswith("org.apache.kafka."):
        raise ConfigProblem("type", f"{name!r} is a Kafka Connect class with no built-in here (Java cannot run)", fix)
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigProblem("type", f"{name!r} is not a built-in nor an importable Python class ({err})", fix) from err
    if not isinstance(cls, type) or not callable(getattr(cls, method, None)):
        raise ConfigProblem("type", f"{name!r} is not a class with a {method}() method", fix)
    return cls


def make_transform(spec: TransformSpec) -> Transformation:
    instance: Transformation = load_class(spec.type, BUILTIN_TRANSFORMS, "apply")()
    instance.configure(dict(spec.settings))
    return instance


def make_predicate(spec: PredicateSpec) -> Predicate:
    instance: Predicate = load_class(spec.type, BUILTIN_PREDICATES, "test")()
    instance.configure(dict(spec.settings))
    return instance


class FatalTransformError(MirrorflowError):
    """Raised by a transform for a failure that is not the record's (a service it needs is down or refuses it):
    the copy stops, even with `errors.tolerance = all`, rather than dead-letter every record of an outage."""


class TransformError(MirrorflowError):
    """A transform (or its predicate) raised on a record; says which, and where the record is."""

    def __init__(self, step: TransformSpec, record: Record, cause: BaseException) -> None:
        self.step, self.cause = step, cause
        self.coordinates = (record.source_topic, record.partition, record.offset)
        super().__init__(
            f"transform {step.name!r} ({step.type}) failed on {record.source_topic}-{record.partition} offset "
            f"{record.offset}: {type(cause).__name__}: {cause}. Fix the transform or the data, or set "
            "errors.tolerance = all to send failing records to the dead-letter topic"
        )


class TransformChain:
    """The configured transforms of one copy task; `dropped` and `dead_lettered` count what it kept out."""

    def __init__(self, spec: ChainSpec) -> None:
        self.spec = spec
        predicates = {p.name: make_predicate(p) for p in spec.predicates}
        self._steps = [
            (t, make_transform(t), predicates[t.predicate] if t.predicate is not None else None, t.negate)
            for t in spec.transforms
        ]
        self.dropped = 0
        self.dead_lettered = 0

    def apply(self, record: Record) -> Record | None:
        """The record after every transform, or None if one dropped it; TransformError if one raised."""
        topic, partition = record.topic, record.partition
        for step, transform, predicate, negate in self._steps:
            try:
                if predicate is not None and predicate.test(record) == negate:
                    continue
                out = transform.apply(record)
            except FatalTransformError:
                raise
            except Exception as err:
                raise TransformError(step, record, err) from err
            if out is None:
                self.dropped += 1
                return None
            if out.topic != topic or out.partition != partition:
                raise TransformError(step, record, ValueError("changed the topic or partition: routing is unsupported"))
            record = out
        return record

    @property
    def schema_ids_not_ours(self) -> int:
        """Records the schema-ID translation step copied as they were: they looked like the registry's wire
        format but named no schema of their topic's subjects (core/schema_translation.py)."""
        return sum(int(getattr(transform, "schema_ids_not_ours", 0)) for _s, transform, _p, _n in self._steps)


def dead_letter_headers(headers: list[Header] | None, flow: str, error: TransformError) -> list[Header]:
    """The original headers plus where the record came from and why it failed (Connect's DLQ header names)."""
    topic, partition, offset = error.coordinates
    cause = error.cause
    extra = {
        "__connect.errors.topic": topic,
        "__connect.errors.partition": str(partition),
        "__connect.errors.offset": str(offset),
        "__connect.errors.connector.name": flow,
        "__connect.errors.stage": "TRANSFORMATION",
        "__connect.errors.class.name": error.step.type,
        "__connect.errors.exception.class.name": f"{type(cause).__module__}.{type(cause).__qualname__}",
        "__connect.errors.exception.message": str(cause),
        "mirrorflow.errors.transform": error.step.name,
    }
    return [*(headers or ()), *((k, v.encode("utf-8")) for k, v in extra.items())]

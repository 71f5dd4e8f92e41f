"""A flow's transform chain from mm2.properties, in Kafka Connect's key shapes, checked at load time.

`transforms = t1,t2`, `transforms.<t>.type|predicate|negate|<setting>`, `predicates = p1`,
`predicates.<p>.type|<setting>`, `errors.tolerance`, `errors.deadletterqueue.topic.name`: per flow
(`A->B.transforms...`), or at the top level for every flow (a flow's own key wins). Every transform and predicate
is instantiated and configured here once, so a wrong type, a missing setting or a bad regex is reported with the
line that caused it before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from mirrorflow.config.keys import TRANSFORM_PREFIXES
from mirrorflow.config.precedence import Entries
from mirrorflow.config.reader import Reader
from mirrorflow.config.schema_registry import schema_registry_step
from mirrorflow.config.values import ValueProblem, parse_bool, parse_enum, parse_int
from mirrorflow.core.patterns import parse_list
from mirrorflow.core.predicates import ConfigProblem
from mirrorflow.core.transforms import (
    ChainSpec,
    PredicateSpec,
    TransformSpec,
    default_dead_letter_topic,
    make_predicate,
    make_transform,
)

_STEP_KEYS = ("type", "predicate", "negate")


def inherit_transform_keys(raw: Mapping[str, str], entries: Entries) -> None:
    """Top-level `transforms.*` and `predicates.*` keys reach every flow unless the flow sets the same key."""
    for key, value in raw.items():
        if key.startswith(TRANSFORM_PREFIXES) and "->" not in key:
            entries.setdefault(key, (value, key))


def build_chain(reader: Reader, source: str) -> ChainSpec:
    """The flow's `ChainSpec`; problems go to the reader's log on the key (and line) that caused them."""
    transforms = _names(reader, "transforms")
    predicates = _names(reader, "predicates")
    _warn_unlisted(reader, "transforms", transforms)
    _warn_unlisted(reader, "predicates", predicates)
    predicate_specs = tuple(s for p in predicates if (s := _predicate(reader, p)) is not None)
    defined = {p.name for p in predicate_specs}
    steps = tuple(x for t in transforms if (x := _transform(reader, t, predicates, defined)) is not None)
    translation = schema_registry_step(reader)
    if translation is not None:  # last: records a transform drops cost no registry lookup
        steps = (*steps, translation)
    tolerance = _parsed(reader, "errors.tolerance", lambda k, v: parse_enum(k, v, ("none", "all"), True)) or "none"
    factor = _parsed(reader, "errors.deadletterqueue.topic.replication.factor", lambda k, v: parse_int(k, v, "short"))
    topic = (reader.value("errors.deadletterqueue.topic.name") or "").strip() or default_dead_letter_topic(source)
    return ChainSpec(
        transforms=steps,
        predicates=predicate_specs,
        errors_tolerance=str(tolerance),
        dead_letter_topic=topic,
        dead_letter_replication_factor=int(factor) if isinstance(factor, int) else -1,
    )


def _parsed(reader: Reader, key: str, parse: Callable[[str, str], object]) -> object | None:
    value = reader.value(key)
    if value is None:
        return None
    try:
        return parse(key, value)
    except ValueProblem as problem:
        reader.log.error(reader.origin(key), problem.problem, problem.fix)
        return None


def _names(reader: Reader, key: str) -> list[str]:
    names = list(parse_list(reader.value(key) or ""))
    for name in sorted({n for n in names if names.count(n) > 1 or not n}):
        what = "an empty name (two commas in a row?)" if not name else f"{name!r} more than once"
        reader.log.error(reader.origin(key), f"lists {what}", "list each name once")
    return list(dict.fromkeys(n for n in names if n))


def _warn_unlisted(reader: Reader, kind: str, listed: list[str]) -> None:
    for key in reader.entries:
        if key.startswith(kind + "."):
            name = key[len(kind) + 1 :].split(".", 1)[0]
            if name not in listed:
                reader.log.warn(
                    reader.origin(key),
                    f"{kind[:-1]} {name!r} is not listed in {kind}, so this setting has no effect",
                    f"add {name} to {kind}, or delete the line",
                )


def _settings(reader: Reader, prefix: str, skip: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key in sorted(reader.entries):
        if key.startswith(prefix) and key[len(prefix) :] not in skip:
            value = reader.value(key)
            if value is not None:
                out[key[len(prefix) :]] = value
    return out


def _type(reader: Reader, kind: str, name: str) -> str | None:
    value = (reader.value(f"{kind}.{name}.type") or "").strip()
    if value:
        return value
    listed_at = reader.origin(kind)
    flow_prefix = listed_at[: len(listed_at) - len(kind)]
    reader.log.error(
        listed_at,
        f"{kind[:-1]} {name!r} has no type",
        f"add {flow_prefix}{kind}.{name}.type = a built-in, a Kafka Connect class name Mirrorflow maps, "
        "or a Python dotted path (docs/transforms.md)",
    )
    return None


def _report(reader: Reader, kind: str, name: str, problem: ConfigProblem | Exception) -> None:
    type_key = f"{kind}.{name}.type"
    if isinstance(problem, ConfigProblem):
        key = f"{kind}.{name}.{problem.setting}"
        where = reader.origin(key) if key in reader.entries else reader.origin(type_key)
        reader.log.error(where, f"{kind[:-1]} {name!r}: {problem.setting} {problem.problem}", problem.fix)
    else:
        reader.log.error(
            reader.origin(type_key),
            f"{kind[:-1]} {name!r} could not be configured: {type(problem).__name__}: {problem}",
            "check its settings",
        )


def _predicate(reader: Reader, name: str) -> PredicateSpec | None:
    type_name = _type(reader, "predicates", name)
    if type_name is None:
        return None
    spec = PredicateSpec(name, type_name, _settings(reader, f"predicates.{name}.", ("type",)))
    try:
        make_predicate(spec)
    except Exception as err:  # a plug-in's configure may raise anything
        _report(reader, "predicates", name, err)
        return None
    return spec


def _transform(reader: Reader, name: str, listed: list[str], defined: set[str]) -> TransformSpec | None:
    type_name = _type(reader, "transforms", name)
    prefix = f"transforms.{name}."
    predicate = (reader.value(prefix + "predicate") or "").strip() or None
    if predicate is not None and predicate not in listed:
        reader.log.error(
            reader.origin(prefix + "predicate"),
            f"predicate {predicate!r} is not listed in predicates",
            f"add {predicate} to predicates and define predicates.{predicate}.type, or fix the name",
        )
        return None
    negate = _parsed(reader, prefix + "negate", parse_bool) or False
    if negate and predicate is None:
        reader.log.warn(reader.origin(prefix + "negate"), "negate has no effect without a predicate", "")
    if type_name is None:
        return None
    spec = TransformSpec(name, type_name, _settings(reader, prefix, _STEP_KEYS), predicate, bool(negate))
    try:
        make_transform(spec)
    except Exception as err:  # a plug-in's configure may raise anything
        _report(reader, "transforms", name, err)
        return None
    return spec if predicate is None or predicate in defined else None  # a broken predicate is reported already

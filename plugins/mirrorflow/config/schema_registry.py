"""A flow's schema registries (`A->B.schema.registry.*`): the schema-ID translation step of its chain.

Set both `schema.registry.source.url` and `schema.registry.target.url` and the flow's transform chain ends with
the built-in `SchemaIdTranslation` step (core/schema_translation.py); leave both unset and nothing is added, so a
flow without registries pays nothing. Credentials (`…basic.auth.user.info`, `…bearer.auth.token`) are secrets:
masked wherever the flow is shown, revealed only to the copy tasks, like the Kafka clients' passwords.
"""

from __future__ import annotations

import urllib.parse

from mirrorflow.config.keys import SCHEMA_REGISTRY_PREFIX
from mirrorflow.config.reader import Reader
from mirrorflow.core.predicates import ConfigProblem
from mirrorflow.core.schema_translation import STEP_NAME, STEP_TYPE
from mirrorflow.core.transforms import TransformSpec, make_transform


def schema_registry_step(reader: Reader) -> TransformSpec | None:
    """The translation step, or None when the flow names no registry; problems go to the log on their line."""
    settings = {}
    for key in sorted(reader.entries):
        if key.startswith(SCHEMA_REGISTRY_PREFIX):
            value = reader.value(key)
            if value is not None and value.strip():
                settings[key[len(SCHEMA_REGISTRY_PREFIX) :]] = value.strip()
    urls = [side for side in ("source", "target") if f"{side}.url" in settings]
    if not urls:
        for key in settings:
            _error(reader, key, "has no effect without schema.registry.source.url and .target.url", "set both")
        return None
    ok = True
    for side in ("source", "target"):
        if side not in urls:
            other = f"{SCHEMA_REGISTRY_PREFIX}{urls[0]}.url"
            reader.log.error(
                reader.origin(other),
                f"schema.registry.{side}.url is not set: IDs cannot be translated with one registry",
                f"add {_flow_prefix(reader, other)}schema.registry.{side}.url = the {side} cluster's registry URL",
            )
            ok = False
        elif (problem := _url_problem(settings[f"{side}.url"])) is not None:
            _error(reader, f"{side}.url", problem, "write http(s)://host:port/path, credentials in their own keys")
            ok = False
    if not ok:
        return None
    spec = TransformSpec(STEP_NAME, STEP_TYPE, settings)
    try:
        make_transform(spec)
    except ConfigProblem as problem:
        _error(reader, problem.setting, problem.problem, problem.fix)
        return None
    return spec


def _url_problem(url: str) -> str | None:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return "is not an http:// or https:// URL"
    if parsed.username is not None or parsed.password is not None:
        return "holds credentials, which would show wherever the URL is shown"
    return None


def _flow_prefix(reader: Reader, origin_key: str) -> str:
    origin = reader.origin(origin_key)
    return origin[: len(origin) - len(origin_key)]


def _error(reader: Reader, setting: str, problem: str, fix: str) -> None:
    key = SCHEMA_REGISTRY_PREFIX + setting
    shown = f"schema.registry.{setting}"
    where = reader.origin(key) if key in reader.entries else reader.origin(f"{SCHEMA_REGISTRY_PREFIX}source.url")
    reader.log.error(where, f"{shown} {problem}", fix)

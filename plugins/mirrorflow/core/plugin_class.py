"""MM2's pluggable classes (`replication.policy.class`, `topic.filter.class`, `group.filter.class`) in Python.

MM2 builds the class a key names and calls `configure(props)` with the connector's settings. Here MM2's own Java
class names map to the built-in implementations (so a file written for MM2 keeps its meaning), and anything else
is the Python path `package.module.ClassName` of the user's class, built with those settings: through its
`from_settings(settings)` classmethod if it has one, else `Class(settings)` when its `__init__` takes exactly one
parameter named `settings`, else `Class()`. The object must have the methods of the key's protocol; each problem
is a `UsageError` that starts with `key='value'` so the config loader can put it on the key's line.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import TypeVar

from mirrorflow.core.errors import UsageError

T = TypeVar("T")


def load_plugin(
    key: str,
    class_name: str,
    settings: Mapping[str, str],
    *,
    builtins: Mapping[str, Callable[[Mapping[str, str]], T]],
    protocol: type[T],
    example: str,
    lacks: str,
) -> T:
    """The object `class_name` names for `key`. `builtins`: MM2's Java class names and their Python factories;
    `protocol`: a runtime-checkable protocol the object must satisfy; `example`: a Python path shown when the name
    is not one; `lacks`: what to do when the class misses the protocol's methods."""
    name = class_name.strip()
    builtin = builtins.get(name)
    if builtin is not None:
        return builtin(settings)
    where = f"{key}={name!r}"
    module_name, _, attribute = name.rpartition(".")
    if not module_name:
        raise UsageError(f"{where}: expected a Python class path like {example!r}")
    try:
        cls = getattr(importlib.import_module(module_name), attribute)
    except ImportError as exc:
        java_hint = (
            f"; Java classes other than MM2's {' and '.join(_short(b) for b in builtins)} cannot run in Mirrorflow, "
            "port it to Python"
            if name.startswith(("org.", "com.", "io.", "net."))
            else ""
        )
        raise UsageError(f"{where}: cannot import module {module_name!r} ({exc}){java_hint}") from exc
    except AttributeError as exc:
        raise UsageError(f"{where}: module {module_name!r} has no attribute {attribute!r}") from exc
    if not inspect.isclass(cls):
        raise UsageError(f"{where}: {attribute!r} is not a class")
    try:
        made = _instantiate(cls, settings)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"{where}: constructing it failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(made, protocol):
        raise UsageError(f"{where}: {cls.__name__} lacks {protocol.__name__} methods; {lacks}")
    return made


def load_filter(
    key: str,
    class_name: str,
    settings: Mapping[str, str],
    protocol: type[T],
    java_default: tuple[str, Callable[[Mapping[str, str]], T]],
) -> T:
    """`load_plugin` for MM2's name filters (`topic.filter.class`, `group.filter.class`): `java_default` is MM2's
    default filter class and its Python factory; `protocol` has one method, `should_replicate_<kind>(name)`."""
    method = next(name for name in dir(protocol) if name.startswith("should_replicate_"))
    kind = method.removeprefix("should_replicate_")
    return load_plugin(
        key,
        class_name,
        settings,
        builtins=dict([java_default]),
        protocol=protocol,
        example=f"mypackage.filters.My{protocol.__name__}",
        lacks=f"give the class a method {method}(self, {kind}: str) -> bool",
    )


def _short(java_class: str) -> str:
    return java_class.rpartition(".")[2]


def _instantiate(cls: type, settings: Mapping[str, str]) -> object:
    factory = getattr(cls, "from_settings", None)
    if callable(factory):
        return factory(settings)
    parameters = [p for p in inspect.signature(cls).parameters.values() if p.kind is not p.VAR_KEYWORD]
    if len(parameters) == 1 and parameters[0].name == "settings":
        return cls(settings)
    return cls()

"""Config providers: `${env:VAR}`, `${file:path:key}` and `${directory:dir:file}`, resolved as Kafka does.

MM2 only resolves a reference when `config.providers` declares the provider; Mirrorflow resolves the three
built-in names even when undeclared (with a warning, because MM2 would keep the literal text). A reference
that cannot be resolved is an error here, where MM2 would silently pass the literal `${...}` on. Error
messages name the reference and why it failed, never the resolved value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from jproperties import Properties

from mirrorflow.config.issues import IssueLog

# Kafka's ConfigTransformer pattern: ${provider:[path:]key}
REFERENCE = re.compile(r"\$\{([^}]*?):(([^}]*?):)?([^}]*?)\}")

_PROVIDER_CLASSES = {
    "org.apache.kafka.common.config.provider.EnvVarConfigProvider": "env",
    "org.apache.kafka.common.config.provider.FileConfigProvider": "file",
    "org.apache.kafka.common.config.provider.DirectoryConfigProvider": "directory",
}
_BUILTIN_NAMES = {"env": "env", "file": "file", "directory": "directory"}


class ProviderError(Exception):
    """A reference that cannot be resolved; the message is safe to show (it holds no resolved value)."""


@dataclass(frozen=True)
class _Provider:
    kind: str
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class Providers:
    """Resolves references in values; built from the file's `config.providers*` keys and an environment."""

    environ: Mapping[str, str]
    declared: dict[str, _Provider] = field(default_factory=dict)
    undeclared_used: set[str] = field(default_factory=set)

    @classmethod
    def from_properties(cls, values: Mapping[str, str], environ: Mapping[str, str], log: IssueLog) -> Providers:
        providers = cls(environ)
        names = [n.strip() for n in values.get("config.providers", "").split(",") if n.strip()]
        for name in names:
            class_key = f"config.providers.{name}.class"
            class_name = values.get(class_key, "").strip()
            if not class_name:
                log.error(
                    "config.providers",
                    f"provider {name!r} is listed but {class_key} is not set",
                    f"set {class_key} = org.apache.kafka.common.config.provider.FileConfigProvider (or "
                    "EnvVarConfigProvider, DirectoryConfigProvider)",
                )
                continue
            kind = _PROVIDER_CLASSES.get(class_name)
            if kind is None:
                log.error(
                    class_key,
                    f"config provider class {class_name} is not supported",
                    "use one of the built-in providers: EnvVarConfigProvider, FileConfigProvider, "
                    "DirectoryConfigProvider",
                )
                continue
            prefix = f"config.providers.{name}.param."
            params = {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}
            providers.declared[name] = _Provider(kind, params)
        return providers

    def resolve(self, value: str) -> str:
        """Replace every reference in `value`; ProviderError for the first one that cannot be resolved."""
        if "${" not in value:
            return value
        return REFERENCE.sub(lambda m: self._lookup(m.group(0), m.group(1), m.group(3), m.group(4)), value)

    def _lookup(self, text: str, name: str, path: str | None, key: str) -> str:
        provider = self.declared.get(name)
        if provider is None:
            kind = _BUILTIN_NAMES.get(name)
            if kind is None:
                raise ProviderError(f"{text}: no config provider named {name!r}")
            provider = _Provider(kind)
            self.undeclared_used.add(name)
        if provider.kind == "env":
            return self._env(text, path, key, provider)
        if not path:
            raise ProviderError(f"{text}: the {provider.kind} provider needs a path (${{{name}:PATH:KEY}})")
        target = Path(path)
        self._check_allowed(text, target, provider)
        if provider.kind == "file":
            return _file_value(text, target, key)
        return _directory_value(text, target, key)

    def _env(self, text: str, path: str | None, key: str, provider: _Provider) -> str:
        if path:
            raise ProviderError(f"{text}: environment references take no path; write ${{env:{key}}}")
        allow = provider.params.get("allowlist.pattern")
        if allow is not None and not re.fullmatch(allow, key):
            raise ProviderError(f"{text}: {key} does not match the provider's allowlist.pattern")
        if key not in self.environ:
            raise ProviderError(f"{text}: environment variable {key} is not set")
        return self.environ[key]

    @staticmethod
    def _check_allowed(text: str, target: Path, provider: _Provider) -> None:
        allowed = provider.params.get("allowed.paths")
        if not allowed:
            return
        resolved = target.resolve()
        roots = [Path(p.strip()).resolve() for p in allowed.split(",") if p.strip()]
        if not any(resolved == root or root in resolved.parents for root in roots):
            raise ProviderError(f"{text}: the path is outside the provider's allowed.paths")


def has_reference(value: str) -> bool:
    return REFERENCE.search(value) is not None


def secrets_in_clear(path: str | Path) -> list[tuple[str, int | None]]:
    """(key, line) of each secret the file writes in clear: a key `is_secret_key` flags whose value holds no
    `${...}` reference. For a file that is about to be copied somewhere (Spark's cluster deploy mode ships it);
    never the values."""
    from mirrorflow.config.keys import is_secret_key
    from mirrorflow.config.properties_file import read_properties

    props = read_properties(path, IssueLog(str(path)))
    if props is None:
        return []
    return [
        (key, props.lines.get(key))
        for key, value in sorted(props.values.items(), key=lambda kv: props.lines.get(kv[0], 0))
        if is_secret_key(key) and value.strip() and not has_reference(value)
    ]


def _file_value(text: str, path: Path, key: str) -> str:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ProviderError(f"{text}: cannot read {path} ({err.strerror})") from None
    props = Properties()
    try:
        props.load(data, encoding="utf-8")
    except Exception as err:  # jproperties raises its own ParseError or UnicodeDecodeError
        raise ProviderError(f"{text}: cannot parse {path} as a properties file ({type(err).__name__})") from None
    if key not in props:
        raise ProviderError(f"{text}: {path} has no key {key!r}")
    return str(props[key].data)


def _directory_value(text: str, directory: Path, name: str) -> str:
    if os.sep in name or (os.altsep and os.altsep in name) or name in ("", ".", ".."):
        raise ProviderError(f"{text}: {name!r} is not a file name")
    file = directory / name
    if not file.is_file():
        raise ProviderError(f"{text}: {file} is not a readable file")
    try:
        return file.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ProviderError(f"{text}: cannot read {file} ({type(err).__name__})") from None

"""MM2's `ConfigPropertyFilter` / `DefaultConfigPropertyFilter`: which topic configs are synced.

Rules:
* A property is synced unless it matches `config.properties.exclude` (full-match Java regex LIST).
* `use.defaults.from=target` (default): properties at their source default are not sent, the target keeps
  its own defaults. `source`: source defaults are copied too (`should_replicate_source_default` is True for
  every property). MM2 silently treats any other value as `target`; we reject it instead.
Defaults are those of the MM2 release Mirrorflow pins (Kafka 4.3.1, KAFKA-20163 added the two
`log.message.timestamp.*` names); MM2 4.0 listed the same properties with escaped dots and without those two.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from mirrorflow.core.errors import UsageError
from mirrorflow.core.patterns import compile_patterns, matches, parse_list

CONFIG_PROPERTIES_EXCLUDE_KEY = "config.properties.exclude"
USE_DEFAULTS_FROM_KEY = "use.defaults.from"
DEFAULT_CONFIG_PROPERTIES_EXCLUDE = (
    "follower.replication.throttled.replicas, leader.replication.throttled.replicas, "
    "message.timestamp.difference.max.ms, log.message.timestamp.before.max.ms, "
    "log.message.timestamp.after.max.ms, message.timestamp.type, unclean.leader.election.enable, "
    "min.insync.replicas"
)
DEFAULT_USE_DEFAULTS_FROM = "target"


@runtime_checkable
class ConfigPropertyFilter(Protocol):
    def should_replicate_config_property(self, name: str) -> bool: ...

    def should_replicate_source_default(self, name: str) -> bool: ...


class DefaultConfigPropertyFilter:
    """An exclude regex LIST plus the `use.defaults.from` switch, given as raw MM2 setting strings."""

    def __init__(
        self,
        config_properties_exclude: str = DEFAULT_CONFIG_PROPERTIES_EXCLUDE,
        use_defaults_from: str = DEFAULT_USE_DEFAULTS_FROM,
    ) -> None:
        where = use_defaults_from.strip()  # Kafka's ConfigDef trims STRING values
        if where not in ("target", "source"):
            raise UsageError(f"{USE_DEFAULTS_FROM_KEY}={use_defaults_from!r}: expected 'target' or 'source'")
        self._exclude = compile_patterns(parse_list(config_properties_exclude), key=CONFIG_PROPERTIES_EXCLUDE_KEY)
        self._use_source_defaults = where == "source"

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> DefaultConfigPropertyFilter:
        return cls(
            settings.get(CONFIG_PROPERTIES_EXCLUDE_KEY, DEFAULT_CONFIG_PROPERTIES_EXCLUDE),
            settings.get(USE_DEFAULTS_FROM_KEY, DEFAULT_USE_DEFAULTS_FROM),
        )

    def should_replicate_config_property(self, name: str) -> bool:
        return not matches(self._exclude, name)

    def should_replicate_source_default(self, name: str) -> bool:
        return self._use_source_defaults

"""Topic config sync (MM2's `targetConfig` and incremental config sync, docs/mm2-reference.md §4.3).

`target_config(source, incremental)` keeps a source entry only if all hold:
  * incremental, or the entry is not at its default, or it is and `use.defaults.from=source`;
  * not read-only, not sensitive, not from the source broker's static config (`STATIC_BROKER_CONFIG`);
  * `config.properties.exclude` does not match its name.
"At its default" means the source is `DEFAULT_CONFIG`: values set dynamically on the source brokers are copied.
New remote topics are created with the non-incremental result. For existing ones each kept entry becomes
`DELETE` (at its default and `use.defaults.from=target`: the target falls back to its own default) or `SET`
(the source value). Excluded properties keep whatever the target has.

We only send operations that change something (a `SET` of the value the target already has as a topic
override, or a `DELETE` of an override the target does not have, is a no-op MM2 sends anyway), so the report
lists real drift and a second run changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mirrorflow.config.model import Flow
from mirrorflow.core.config_property_filter import ConfigPropertyFilter
from mirrorflow.kafka.topics import ConfigChange, ConfigValue, alter_topic_configs, describe_topic_configs
from mirrorflow.replication.discovery import FlowPlan
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_rules import FlowRules

DEFAULT_CONFIG = "DEFAULT_CONFIG"
STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"
DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"
SET = "SET"
DELETE = "DELETE"


@dataclass(frozen=True)
class ConfigDiff:
    """One key of one remote topic: `old` is the target's value, `new` the value after the change (None for a
    DELETE: the target's own default)."""

    key: str
    op: str
    old: str | None
    new: str | None


@dataclass(frozen=True)
class TopicConfigDrift:
    topic: str
    remote_topic: str
    changes: tuple[ConfigDiff, ...]


@dataclass(frozen=True)
class ConfigSyncReport:
    flow: str
    enabled: bool
    dry_run: bool
    topics: tuple[TopicConfigDrift, ...]
    """Only topics with drift; empty when in sync or disabled."""


def is_default(entry: ConfigValue) -> bool:
    return entry.source == DEFAULT_CONFIG


def target_config(
    source: Mapping[str, ConfigValue], prop_filter: ConfigPropertyFilter, *, incremental: bool
) -> dict[str, ConfigValue]:
    kept: dict[str, ConfigValue] = {}
    for name, entry in source.items():
        default = is_default(entry)
        wanted = incremental or not default or prop_filter.should_replicate_source_default(name)
        if (
            wanted
            and not entry.read_only
            and not entry.sensitive
            and entry.source != STATIC_BROKER_CONFIG
            and prop_filter.should_replicate_config_property(name)
        ):
            kept[name] = entry
    return kept


def new_topic_configs(source: Mapping[str, ConfigValue], prop_filter: ConfigPropertyFilter) -> dict[str, str]:
    """The configs a new remote topic is created with."""
    kept = target_config(source, prop_filter, incremental=False)
    return {name: e.value for name, e in sorted(kept.items()) if e.value is not None}


def config_changes(
    source: Mapping[str, ConfigValue], target: Mapping[str, ConfigValue], prop_filter: ConfigPropertyFilter
) -> tuple[ConfigDiff, ...]:
    """The incremental operations that bring one remote topic in line with its source topic."""
    diffs: list[ConfigDiff] = []
    for name, entry in sorted(target_config(source, prop_filter, incremental=True).items()):
        current = target.get(name)
        is_override = current is not None and current.source == DYNAMIC_TOPIC_CONFIG
        old = current.value if current is not None else None
        if is_default(entry) and not prop_filter.should_replicate_source_default(name):
            if is_override:
                diffs.append(ConfigDiff(name, DELETE, old, None))
        elif entry.value is not None and not (is_override and old == entry.value):
            diffs.append(ConfigDiff(name, SET, old, entry.value))
    return tuple(diffs)


def sync_configs(
    flow: Flow,
    clients: FlowClients,
    plan: FlowPlan,
    *,
    dry_run: bool = False,
    rules: FlowRules | None = None,
) -> ConfigSyncReport:
    """Bring the configs of every replicated topic in line (respects `sync.topic.configs.enabled`)."""
    if not flow.sync_topic_configs_enabled:
        return ConfigSyncReport(flow.name, False, dry_run, ())
    rules = rules or FlowRules.of(flow)
    replicated = plan.replicated()
    if not replicated:
        return ConfigSyncReport(flow.name, True, dry_run, ())
    timeout = clients.timeout_s
    sources = describe_topic_configs(clients.source_admin, flow.source, [t.topic for t in replicated], timeout)
    remotes = [t.remote_topic for t in replicated]
    targets = describe_topic_configs(clients.target_admin, flow.target, remotes, timeout)
    drift: list[TopicConfigDrift] = []
    for t in replicated:
        changes = config_changes(sources.get(t.topic, {}), targets.get(t.remote_topic, {}), rules.config_filter)
        if changes:
            drift.append(TopicConfigDrift(t.topic, t.remote_topic, changes))
    if not dry_run and drift:
        alter_topic_configs(
            clients.target_admin,
            flow.target,
            {d.remote_topic: [ConfigChange(c.key, c.op, c.new) for c in d.changes] for d in drift},
            timeout,
        )
    return ConfigSyncReport(flow.name, True, dry_run, tuple(drift))

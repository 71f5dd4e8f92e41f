"""Building one `Flow` from the raw file: MM2's composition, provider resolution, typed values, checks.

Every problem is reported on the raw key (and line) the value came from, so a top-level value shared by many
flows is reported once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr

from mirrorflow.config.client_config import MASK, ClientConfig
from mirrorflow.config.issues import IssueLog
from mirrorflow.config.keys import (
    LEGACY_ALIASES,
    REGEX_LIST_KEYS,
    SECURITY_PROTOCOLS,
    flow_key_spec,
    is_secret_key,
)
from mirrorflow.config.librdkafka import to_librdkafka, unreadable_stores
from mirrorflow.config.model import TYPED_FIELDS, Flow
from mirrorflow.config.precedence import Entries, Role, Side, connector_settings, flow_client
from mirrorflow.config.providers import ProviderError, Providers
from mirrorflow.config.spark_conf import MEMORY_KEYS, SPARK_CONF_PREFIX, TOTAL_CORES_KEY, parse_memory
from mirrorflow.config.transform_specs import build_chain, inherit_transform_keys
from mirrorflow.config.values import ValueProblem, parse_bool, parse_double, parse_enum, parse_int
from mirrorflow.core.errors import UsageError
from mirrorflow.core.group_filter import JAVA_DEFAULT_GROUP_FILTER
from mirrorflow.core.patterns import PatternError, compile_patterns, parse_list
from mirrorflow.core.state_slots import MIN_STATE_PARTITIONS
from mirrorflow.core.topic_filter import JAVA_DEFAULT_TOPIC_FILTER

_REPLICATION_FACTORS = [k for k in TYPED_FIELDS.values() if k.endswith("replication.factor")]
# handover 0: DAG runs never overlap; round 0: one plan per run; transaction.min.ms 0: a caught-up copy commits
# at once; .records 0: never early
_NON_NEGATIVE = [
    "mirrorflow.copy.handover.seconds",
    "mirrorflow.copy.round.seconds",
    "mirrorflow.copy.transaction.min.ms",
    "mirrorflow.copy.transaction.min.records",
]
_POSITIVE = [k for k in TYPED_FIELDS.values() if k.endswith((".seconds", ".ms")) and k not in _NON_NEGATIVE] + [
    "mirrorflow.copy.partitions.per.task",
    "mirrorflow.drill.history",
    TOTAL_CORES_KEY,
]
CLIENT_ROLES: list[tuple[str, Side, Role]] = [
    ("source_consumer", "source", "consumer"),
    ("source_producer", "source", "producer"),
    ("source_admin", "source", "admin"),
    ("target_consumer", "target", "consumer"),
    ("target_producer", "target", "producer"),
    ("target_admin", "target", "admin"),
]


class _Resolver:
    """Reads composed entries, resolving provider references and reporting problems on the raw key."""

    def __init__(self, entries: Entries, providers: Providers, log: IssueLog) -> None:
        self.entries = entries
        self.providers = providers
        self.log = log

    def origin(self, key: str) -> str:
        return self.entries[key][1] or key

    def value(self, key: str) -> str | None:
        if key not in self.entries:
            return None
        raw, _ = self.entries[key]
        try:
            return self.providers.resolve(raw)
        except ProviderError as err:
            self.log.error(self.origin(key), f"unresolvable reference {err}", _provider_fix(str(err)))
            return None

    def resolved(self, entries: Entries) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, (raw, origin) in entries.items():
            try:
                out[key] = self.providers.resolve(raw)
            except ProviderError as err:
                self.log.error(origin or key, f"unresolvable reference {err}", _provider_fix(str(err)))
        return out


def _provider_fix(message: str) -> str:
    if "environment variable" in message:
        return "export the variable before running mirrorflow, or write the value instead of the reference"
    return "check the provider name, the path and the key of the reference"


def build_flow(raw: Mapping[str, str], source: str, target: str, providers: Providers, log: IssueLog) -> Flow:
    """The flow `source->target`; problems go to `log` and the flow falls back to defaults for bad values."""
    entries = connector_settings(raw, source, target)
    _apply_legacy_aliases(entries, log)
    inherit_transform_keys(raw, entries)
    reader = _Resolver(entries, providers, log)
    fields: dict[str, Any] = {"source": source, "target": target, "name": f"{source}->{target}"}
    for field_name, key in TYPED_FIELDS.items():
        parsed = _typed(reader, key)
        if parsed is not None:
            fields[field_name] = parsed
    for side in ("source", "target"):
        fields[f"{side}_connection"] = reader.value(f"{side}.cluster.mirrorflow.connection")
    fields["spark_conf"] = _spark_conf(reader)
    fields["settings"] = {k: (MASK if is_secret_key(k) else v) for k, (v, _) in sorted(entries.items())}
    for field_name, side_name, role in CLIENT_ROLES:
        fields[field_name] = _client(reader, side_name, role, fields["name"])
    fields["transforms"] = build_chain(reader, source)
    flow = Flow(**fields)
    _check_regexes(reader, flow)
    _check_policy(reader, flow)
    _check_filters(reader, flow)
    return flow


def _apply_legacy_aliases(entries: Entries, log: IssueLog) -> None:
    """MM2 3.x's `*.blacklist` names: used when the new name is absent, ignored (with a warning) otherwise."""
    for alias, new in LEGACY_ALIASES.items():
        if alias not in entries:
            continue
        origin = entries[alias][1] or alias
        if new in entries:
            log.warn(origin, f"{alias} is ignored because {new} is also set", f"delete {origin}")
        else:
            entries[new] = entries[alias]  # the rename itself is reported once per line by classify_keys


def _typed(reader: _Resolver, key: str) -> object | None:
    spec = flow_key_spec(key)
    value = reader.value(key)
    if spec is None or value is None:
        return None
    try:
        if spec.type == "bool":
            return parse_bool(key, value)
        if spec.type in ("int", "long", "short"):
            number = parse_int(key, value, spec.type)
            _check_range(key, number)
            return number
        if spec.type == "double":
            target = parse_double(key, value)
            if target <= 0:
                raise ValueProblem(f"{target:g} must be greater than 0", "use a positive number of seconds")
            return target
        if spec.type == "enum":
            return parse_enum(key, value, spec.choices, spec.case_insensitive)
        if spec.type == "list":
            return parse_list(value)
        if spec.type == "class":
            return value.strip()
        if key in MEMORY_KEYS:
            return parse_memory(key, value)
        if key == "mirrorflow.airflow.copy.queue" and not value.strip():
            raise ValueProblem("an empty queue name", "name a queue the Airflow workers consume (default: default)")
        return value.strip() if key == "mirrorflow.airflow.copy.queue" else value
    except ValueProblem as problem:
        reader.log.error(reader.origin(key), problem.problem, problem.fix)
        return None


def _spark_conf(reader: _Resolver) -> dict[str, SecretStr]:
    """`mirrorflow.spark.conf.<key>` entries by Spark key (their names were checked by classify_keys)."""
    conf: dict[str, SecretStr] = {}
    for key in sorted(k for k in reader.entries if k.startswith(SPARK_CONF_PREFIX)):
        value = reader.value(key)
        if value is not None:
            conf[key[len(SPARK_CONF_PREFIX) :]] = SecretStr(value)
    return conf


def _check_range(key: str, number: int) -> None:
    if key == "mirrorflow.state.partitions.max" and (number < MIN_STATE_PARTITIONS or number & (number - 1)):
        raise ValueProblem(
            f"{number} is not a power of two of at least {MIN_STATE_PARTITIONS}",
            "use 4096 (the default), 8192, 16384, ...: the state topics grow only by doubling",
        )
    if key == "mirrorflow.lag.target.records" and number < 0:
        raise ValueProblem(f"{number} is not a number of records", "use 0 (always caught up) or more")
    if key in _NON_NEGATIVE and number < 0:
        raise ValueProblem(f"{number} is not a number of seconds", "use 0 (runs never overlap) or more")
    if key == "mirrorflow.airflow.retries" and number < 0:
        raise ValueProblem(f"{number} is not a number of retries", "use 0 (never retry) or more")
    if key in _REPLICATION_FACTORS and number != -1 and number < 1:
        raise ValueProblem(f"{number} is not a replication factor", "use 1 or more, or -1 for the broker default")
    if key in _POSITIVE and number <= 0:
        enabled = key.replace("interval.seconds", "enabled")
        fix = (
            f"use a positive number; to turn it off set {enabled} = false"
            if enabled != key
            else "use a positive number"
        )
        raise ValueProblem(f"{number} must be greater than 0", fix)


def _client(reader: _Resolver, side: Side, role: Role, flow_name: str) -> ClientConfig:
    entries = flow_client(reader.entries, side, role)
    values = reader.resolved(entries)
    if "security.protocol" in values:
        try:
            values["security.protocol"] = parse_enum(
                "security.protocol", values["security.protocol"], SECURITY_PROTOCOLS, case_insensitive=True
            )
        except ValueProblem as problem:
            reader.log.error(entries["security.protocol"][1] or "security.protocol", problem.problem, problem.fix)
            del values["security.protocol"]
    _, notes = to_librdkafka(values)
    errors = unreadable_stores(values)
    for key, what, fix in errors:
        reader.log.error(entries[key][1] if key in entries and entries[key][1] else key, what, fix)
    for key, what in notes:
        if any(key == error[0] for error in errors):
            continue
        origin = entries[key][1] if key in entries and entries[key][1] else key
        reader.log.warn(origin, f"{key} {what}", "")
    return ClientConfig.from_mapping(values)


def _check_regexes(reader: _Resolver, flow: Flow) -> None:
    lists = {
        "topics": flow.topics,
        "topics.exclude": flow.topics_exclude,
        "groups": flow.groups,
        "groups.exclude": flow.groups_exclude,
        "config.properties.exclude": flow.config_properties_exclude,
    }
    for key in REGEX_LIST_KEYS:
        try:
            compile_patterns(lists[key], key=key)
        except PatternError as err:
            message = str(err)
            message = message[len(key) + 2 :] if message.startswith(f"{key}: ") else message
            origin = reader.origin(key) if key in reader.entries else key
            reader.log.error(origin, message, "fix the regex (Java syntax, one regex per comma-separated item)")


def _check_policy(reader: _Resolver, flow: Flow) -> None:
    try:
        flow.policy()
    except UsageError as err:
        message = str(err)
        key = "replication.policy.class"
        if message.startswith("replication.policy.class="):
            message = message.split(": ", 1)[-1]
        elif "separator" in message:
            key = "replication.policy.separator"
        origin = reader.origin(key) if key in reader.entries else key
        reader.log.error(
            origin,
            f"replication policy {flow.replication_policy_class}: {message}",
            "use org.apache.kafka.connect.mirror.DefaultReplicationPolicy, IdentityReplicationPolicy, "
            "or the Python path of a ReplicationPolicy class",
        )


def _check_filters(reader: _Resolver, flow: Flow) -> None:
    """Build the flow's custom topic and group filters once here, so a bad class is reported on its line before
    anything runs (as MM2 fails when the connector starts). The built-in ones are their regex lists, which
    `_check_regexes` has checked."""
    checks = (
        ("topic.filter.class", flow.topic_filter_class, flow.topic_filter, JAVA_DEFAULT_TOPIC_FILTER),
        ("group.filter.class", flow.group_filter_class, flow.group_filter, JAVA_DEFAULT_GROUP_FILTER),
    )
    for key, class_name, build, builtin in checks:
        if class_name.strip() == builtin:
            continue
        try:
            build()
        except UsageError as err:
            message = str(err)
            if message.startswith(f"{key}="):
                message = message.split(": ", 1)[-1]
            origin = reader.origin(key) if key in reader.entries else key
            reader.log.error(
                origin,
                f"{key.split('.')[0]} filter {class_name}: {message}",
                f"use {builtin} or the Python path of a class on the PYTHONPATH",
            )

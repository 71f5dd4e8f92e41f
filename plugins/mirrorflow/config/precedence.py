"""MM2's precedence rules, as plain dictionary composition (docs/mm2-reference.md §1.7).

Every composed entry remembers the raw key it came from, so a bad value found after composition (a top-level
`sync.topic.acls.enabled = maybe` reaching six flows) is reported once, on the line that wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from mirrorflow.config.keys import (
    CLIENT_PREFIXES,
    CONNECTION_KEYS,
    CONNECTOR_KEYS,
    LEGACY_ALIASES,
    MIRRORFLOW_FLOW_KEYS,
)
from mirrorflow.config.spark_conf import SPARK_CONF_PREFIX
from mirrorflow.core.patterns import parse_list

Entries = dict[str, tuple[str, str]]
"""Effective key → (value, raw key it came from; "" when MM2 fills it in itself)."""

Side = Literal["source", "target"]
Role = Literal["consumer", "producer", "admin"]
_CONNECTION_KEY_ORDER = sorted(CONNECTION_KEYS)


def java_parse_boolean(value: str | None) -> bool:
    """Java's `Boolean.parseBoolean`: only `true` in any case counts, no trimming (used for herder pairs)."""
    return value is not None and value.lower() == "true"


def cluster_aliases(raw: Mapping[str, str]) -> list[str]:
    """`clusters`, de-duplicated in file order (MM2 keeps them in a set)."""
    return list(dict.fromkeys(parse_list(raw.get("clusters", ""))))


def herder_pairs(raw: Mapping[str, str], clusters: Sequence[str]) -> list[tuple[str, str]]:
    """Ordered pairs MM2 starts a herder for: the flow is enabled, or heartbeats are on for the pair."""
    global_heartbeats = True
    if "emit.heartbeats.enabled" in raw:
        global_heartbeats = java_parse_boolean(raw["emit.heartbeats.enabled"])
    pairs = []
    for source in clusters:
        for target in clusters:
            if source == target:
                continue
            prefix = f"{source}->{target}."
            heartbeats = global_heartbeats
            if prefix + "emit.heartbeats.enabled" in raw:
                heartbeats = java_parse_boolean(raw[prefix + "emit.heartbeats.enabled"])
            if java_parse_boolean(raw.get(prefix + "enabled")) or heartbeats:
                pairs.append((source, target))
    return pairs


def _stripped(raw: Mapping[str, str], prefix: str) -> Entries:
    return {k[len(prefix) :]: (v, k) for k, v in raw.items() if k.startswith(prefix)}


def cluster_props(raw: Mapping[str, str], alias: str) -> Entries:
    """MM2 `clusterProps(alias)`: `alias.*` stripped, connection keys copied to each client prefix, then
    top-level connection keys filling what is still missing."""
    props = _stripped(raw, alias + ".")
    for key in _CONNECTION_KEY_ORDER:
        if key in props:
            for prefix in CLIENT_PREFIXES:
                props.setdefault(prefix + key, props[key])
    for key in _CONNECTION_KEY_ORDER:
        if key in raw:
            for prefix in CLIENT_PREFIXES:
                props.setdefault(prefix + key, (raw[key], key))
            props.setdefault(key, (raw[key], key))
    return props


def connector_settings(raw: Mapping[str, str], source: str, target: str) -> Entries:
    """MM2 `connectorBaseConfig(source->target)` (steps 1-7), plus our top-level `mirrorflow.*` flow keys."""
    # 3.x connector ConfigDefs also defined the `*.blacklist` names, which we still accept.
    props: Entries = {k: (v, k) for k, v in raw.items() if k in CONNECTOR_KEYS or k in LEGACY_ALIASES}
    props.update({k: (v, k) for k, v in raw.items() if k.startswith(("config.providers", "replication.policy"))})
    props.update({k: (v, k) for k, v in raw.items() if k in MIRRORFLOW_FLOW_KEYS or k.startswith(SPARK_CONF_PREFIX)})
    for side, alias in (("source", source), ("target", target)):
        for key, entry in cluster_props(raw, alias).items():
            if key.startswith(("consumer", "producer", "admin")):
                props[f"{side}.{key}"] = entry
            else:
                props[f"{side}.cluster.{key}"] = entry
    props.setdefault("source.cluster.alias", (source, ""))
    props.setdefault("target.cluster.alias", (target, ""))
    props.update(_stripped(raw, f"{source}->{target}."))
    props.setdefault("enabled", ("false", ""))
    return props


def _client_prefixed(settings: Entries, prefix: str) -> Entries:
    """`prefix*` entries stripped, minus connector keys that merely share the prefix
    (`consumer.poll.timeout.ms`) and Connect's `*.override.*` keys, which a client would not understand."""
    return {
        k[len(prefix) :]: e
        for k, e in settings.items()
        if k.startswith(prefix)
        and k not in CONNECTOR_KEYS
        and not k[len(prefix) :].startswith("override.")
        and not k.startswith(("producer.override.", "consumer.override.", "admin.override."))
    }


def flow_client(settings: Entries, side: Side, role: Role) -> Entries:
    """A connector's client config: `side.cluster.*` connection keys < `role.*` < `side.role.*` (§1.7)."""
    cluster_prefix = f"{side}.cluster."
    props = {
        k[len(cluster_prefix) :]: e
        for k, e in settings.items()
        if k.startswith(cluster_prefix) and k[len(cluster_prefix) :] in CONNECTION_KEYS
    }
    props.update(_client_prefixed(settings, f"{role}."))
    props.update(_client_prefixed(settings, f"{side}.{role}."))
    if side == "target" and role == "producer":
        # The records' producer is the Connect worker's, so a connector's `producer.override.*` wins.
        override = "producer.override."
        props.update({k[len(override) :]: e for k, e in settings.items() if k.startswith(override)})
    if role == "consumer":
        props["enable.auto.commit"] = ("false", "")
        props.setdefault("auto.offset.reset", ("earliest", ""))
    return props


def mirror_client(raw: Mapping[str, str], alias: str, role: Role) -> Entries:
    """MM2 `clientConfig(alias)` sub-config for `role`: connection keys only, `role.k` overriding `k`."""
    props: Entries = {k: (v, k) for k, v in raw.items()}
    props.update(cluster_props(raw, alias))
    result: Entries = {}
    for key in _CONNECTION_KEY_ORDER:
        entry = props.get(f"{role}.{key}", props.get(key))
        if entry is not None:
            result[key] = entry
    return result


def mirror_client_policy(raw: Mapping[str, str], alias: str) -> Entries:
    """The `replication.policy.*` keys MM2's `clientConfig(alias)` sees (cluster-level ones win)."""
    props: Entries = {k: (v, k) for k, v in raw.items() if k.startswith("replication.policy.")}
    props.update({k: e for k, e in cluster_props(raw, alias).items() if k.startswith("replication.policy.")})
    return props

"""`load_config`: mm2.properties → a validated `MirrorConfig`, or one `ConfigError` listing every problem."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from mirrorflow.config.classify import classify_keys
from mirrorflow.config.client_config import ClientConfig
from mirrorflow.config.flows import build_flow
from mirrorflow.config.issues import IssueLog
from mirrorflow.config.keys import DEFAULT_POLICY, SECURITY_PROTOCOLS
from mirrorflow.config.model import ClusterConfig, Flow, MirrorConfig
from mirrorflow.config.precedence import (
    Role,
    cluster_aliases,
    cluster_props,
    herder_pairs,
    mirror_client,
    mirror_client_policy,
)
from mirrorflow.config.properties_file import read_properties
from mirrorflow.config.providers import ProviderError, Providers
from mirrorflow.config.topology import check_identity_cycles
from mirrorflow.config.values import ValueProblem, parse_bool, parse_enum
from mirrorflow.core.patterns import parse_list


def split_cluster_args(values: Sequence[str] | None) -> list[str]:
    """`--clusters a b` and `--clusters a,b` both name the clusters a and b."""
    out: list[str] = []
    if isinstance(values, str):
        values = [values]
    for value in values or ():
        out.extend(part.strip() for part in value.split(",") if part.strip())
    return list(dict.fromkeys(out))


def load_config(
    path: str | Path,
    clusters: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    require_flows: bool = True,
) -> MirrorConfig:
    """Load and validate `path` as MM2 would; keep the flows whose target is in `clusters` (MM2 `--clusters`).

    Raises ConfigError (exit code 2) listing every problem. `environ` (default `os.environ`) resolves
    `${env:...}`. `require_flows=False` accepts a file without enabled flows (MM2 refuses to start on one).
    """
    log = IssueLog(str(path))
    props = read_properties(path, log)
    if props is None:
        log.raise_if_errors()
        raise AssertionError("read_properties returned None without an error")
    raw = props.values
    aliases = cluster_aliases(raw)
    if not aliases:
        log.error("clusters", "no cluster aliases are defined", "add a line like `clusters = primary, backup`")
    _check_aliases(raw, log)
    subset = split_cluster_args(clusters)
    for alias in subset:
        if alias not in aliases:
            log.error("--clusters", f"{alias!r} is not in clusters ({', '.join(aliases)})", "fix the alias")
    providers = Providers.from_properties(raw, os.environ if environ is None else environ, log)
    ignored = classify_keys(props, aliases, log)

    pairs = [p for p in herder_pairs(raw, aliases) if not subset or p[1] in subset]
    herders = [build_flow(raw, source, target, providers, log) for source, target in pairs]
    used = {alias for pair in pairs for alias in pair}
    quiet = IssueLog(str(path))  # clusters no herder uses on this node are built, but not judged
    cluster_models = {
        alias: _build_cluster(raw, alias, providers, log if alias in used else quiet) for alias in aliases
    }
    for alias in aliases:
        if alias in used and not _has_bootstrap(raw, alias):
            log.error(
                f"{alias}.bootstrap.servers",
                f"cluster {alias} has no bootstrap.servers",
                f"add {alias}.bootstrap.servers = host1:9092,host2:9092",
                line=props.lines.get("clusters"),
            )
    check_identity_cycles(raw, aliases, log)
    flows = tuple(f for f in herders if f.enabled)
    _check_drill_schedules(flows, raw, log)
    if require_flows and aliases and not flows:
        where = f" targeting {', '.join(subset)}" if subset else ""
        log.error(
            "",
            f"No source->target replication flows{where}",
            "enable one with a line like `primary->backup.enabled = true`",
            line=None,
        )
    for name in sorted(providers.undeclared_used):
        log.warn(
            "config.providers",
            f"${{{name}:...}} references are resolved by Mirrorflow, but MM2 leaves them as text unless "
            f"config.providers declares {name!r}",
            f"add config.providers = {name} and config.providers.{name}.class = "
            f"org.apache.kafka.common.config.provider.{_PROVIDER_CLASS[name]}",
        )
    log.raise_if_errors()
    return MirrorConfig(
        path=str(path),
        clusters=cluster_models,
        flows=flows,
        heartbeat_pairs=tuple(pairs),
        heartbeat_flows=tuple(herders),
        ignored_keys=tuple(dict.fromkeys(ignored)),
        warnings=tuple(log.warnings),
    )


def _check_drill_schedules(flows: tuple[Flow, ...], raw: Mapping[str, str], log: IssueLog) -> None:
    """`mirrorflow_drill` is one DAG on one schedule (the first drilled flow's): another flow's own schedule would
    be replaced without a word, so it is reported on its line."""
    drilled = [f for f in flows if f.drill_schedule]
    for flow in drilled[1:]:
        if flow.drill_schedule != drilled[0].drill_schedule:
            key = f"{flow.name}.mirrorflow.drill.schedule"
            log.warn(
                key if key in raw else "mirrorflow.drill.schedule",
                f"{flow.name} asks for drills on {flow.drill_schedule!r}, but the one mirrorflow_drill DAG runs every "
                f"drill on {drilled[0].name}'s {drilled[0].drill_schedule!r}",
                "set mirrorflow.drill.schedule once, at the top level",
            )


_PROVIDER_CLASS = {
    "env": "EnvVarConfigProvider",
    "file": "FileConfigProvider",
    "directory": "DirectoryConfigProvider",
}


def _check_aliases(raw: Mapping[str, str], log: IssueLog) -> None:
    """Aliases name keys (`A.bootstrap.servers`, `A->B.enabled`) and remote topics (`A.orders`), so an empty,
    repeated or separator-bearing alias makes the file mean something else than it says."""
    listed = parse_list(raw.get("clusters", ""))
    separator = raw.get("replication.policy.separator", ".") or "."
    if "" in listed:
        log.error("clusters", "an alias is empty (two commas in a row?)", "remove the empty item")
    for alias in sorted({a for a in listed if listed.count(a) > 1}):
        log.error("clusters", f"alias {alias} is listed more than once", "list each cluster once")
    for alias in listed:
        if alias and (separator in alias or "->" in alias or any(c.isspace() for c in alias)):
            log.error(
                "clusters",
                f"alias {alias!r} contains {separator!r}, '->' or whitespace, which make its keys and remote "
                "topic names ambiguous",
                "rename the cluster (letters, digits, '-' and '_' are safe)",
            )


def _has_bootstrap(raw: Mapping[str, str], alias: str) -> bool:
    props = cluster_props(raw, alias)
    if props.get("bootstrap.servers", ("", ""))[0].strip():
        return True
    return all(
        props.get(f"{role}.bootstrap.servers", ("", ""))[0].strip() for role in ("consumer", "producer", "admin")
    )


def _build_cluster(raw: Mapping[str, str], alias: str, providers: Providers, log: IssueLog) -> ClusterConfig:
    clients: dict[str, ClientConfig] = {}
    roles: tuple[Role, ...] = ("consumer", "producer", "admin")
    for role in roles:
        values: dict[str, str] = {}
        for key, (value, origin) in mirror_client(raw, alias, role).items():
            try:
                values[key] = providers.resolve(value)
            except ProviderError as err:
                log.error(origin, f"unresolvable reference {err}", "set the variable or fix the reference")
        if "security.protocol" in values:
            try:
                values["security.protocol"] = parse_enum(
                    "security.protocol",
                    values["security.protocol"],
                    SECURITY_PROTOCOLS,
                    case_insensitive=True,
                )
            except ValueProblem:
                del values["security.protocol"]  # reported on its raw key
        clients[role] = ClientConfig.from_mapping(values)
    policy = {k: v for k, (v, _) in mirror_client_policy(raw, alias).items()}
    internal = policy.get("replication.policy.internal.topic.separator.enabled", "true")
    try:
        internal_enabled = parse_bool("replication.policy.internal.topic.separator.enabled", internal)
    except ValueProblem:
        internal_enabled = True  # reported on its raw key
    connection = raw.get(f"{alias}.mirrorflow.connection")
    return ClusterConfig(
        alias=alias,
        bootstrap_servers=clients["admin"].get("bootstrap.servers"),
        connection=connection.strip() if connection else None,
        replication_policy_class=policy.get("replication.policy.class", DEFAULT_POLICY).strip(),
        replication_policy_separator=policy.get("replication.policy.separator", "."),
        internal_topic_separator_enabled=internal_enabled,
        consumer=clients["consumer"],
        producer=clients["producer"],
        admin=clients["admin"],
    )

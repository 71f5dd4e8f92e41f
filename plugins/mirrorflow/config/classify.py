"""What each key written in the file means: used, accepted-but-ignored, misplaced, or unknown (with a hint).

This pass looks at the file as written, independently of `--clusters`, so a typo in any flow is reported on
every node. Values are checked here too when they hold no provider reference (those are checked per flow,
after resolution).
"""

from __future__ import annotations

from collections.abc import Sequence

from mirrorflow.config.issues import IssueLog
from mirrorflow.config.keys import (
    CLIENT_PREFIXES,
    CONNECTION_KEYS,
    CONNECTOR_KEYS,
    FLOW_ONLY_KEYS,
    FLOW_ONLY_PREFIXES,
    LEGACY_ALIASES,
    MIRRORFLOW_CLUSTER_KEYS,
    MIRRORFLOW_FLOW_KEYS,
    REGEX_LIST_KEYS,
    SECURITY_PROTOCOLS,
    TOP_LEVEL_KEYS,
    TRANSFORM_PREFIXES,
    WORKER_PREFIXES,
    KeySpec,
    flow_key_spec,
    is_worker_key,
    suggest,
)
from mirrorflow.config.librdkafka import classify_client_key
from mirrorflow.config.properties_file import PropertiesFile, lost_escapes
from mirrorflow.config.providers import has_reference
from mirrorflow.config.spark_conf import SPARK_CONF_PREFIX, conf_key_problem
from mirrorflow.config.values import ValueProblem, check, parse_enum

_FLOW_CANDIDATES = sorted({*CONNECTOR_KEYS, *FLOW_ONLY_KEYS, *MIRRORFLOW_FLOW_KEYS, *LEGACY_ALIASES})
_TOP_CANDIDATES = sorted({*_FLOW_CANDIDATES, *TOP_LEVEL_KEYS})
_CLUSTER_CANDIDATES = sorted(
    {*CONNECTION_KEYS, *MIRRORFLOW_CLUSTER_KEYS, *(p + k for p in CLIENT_PREFIXES for k in CONNECTION_KEYS)}
)
_DIRECT_CLIENT_PREFIXES = tuple(
    f"{side}.{part}." for side in ("source", "target") for part in ("cluster", "consumer", "producer", "admin")
)
_SIDE_CLIENT_PREFIXES = tuple(f"{side}.{role}" for side in ("source", "target") for role in CLIENT_PREFIXES)
UNKNOWN_CLIENT_FIX = (
    "use a Java client name (Kafka's producer, consumer and admin configs) or a librdkafka one "
    "(librdkafka's CONFIGURATION.md)"
)


def client_key_name(sub: str) -> str | None:
    """The client setting a key addresses (`consumer.x`, `source.producer.x`, `producer.override.x` → `x`)."""
    for prefix in _SIDE_CLIENT_PREFIXES + CLIENT_PREFIXES:
        if sub.startswith(prefix):
            name = sub[len(prefix) :]
            return name[len("override.") :] if prefix == "producer." and name.startswith("override.") else name
    return None


def split_flow_key(key: str, aliases: Sequence[str]) -> tuple[str, str, str]:
    """`A->B.rest` → (A, B, rest); B is the longest known alias that fits (aliases may contain dots)."""
    source, _, rest = key.partition("->")
    for alias in sorted(aliases, key=len, reverse=True):
        if rest.startswith(alias + "."):
            return source, alias, rest[len(alias) + 1 :]
    target, _, sub = rest.partition(".")
    return source, target, sub


def _cluster_of(key: str, aliases: Sequence[str]) -> str | None:
    for alias in sorted(aliases, key=len, reverse=True):
        if key.startswith(alias + "."):
            return alias
    return None


_PLUGIN_KEYS = ("topic.filter.class", "group.filter.class", "replication.policy.class")


class _Classifier:
    def __init__(self, props: PropertiesFile, aliases: Sequence[str], log: IssueLog) -> None:
        self.props = props
        self.aliases = aliases
        self.log = log
        self.ignored: list[str] = []

    def run(self) -> list[str]:
        for key in self.props.values:
            if "->" in key:
                self._flow_key(key)
            elif (alias := _cluster_of(key, self.aliases)) is not None:
                self._cluster_key(key, key[len(alias) + 1 :])
            else:
                self._top_key(key)
        return self.ignored

    def _unknown(self, key: str, sub: str, candidates: Sequence[str], prefix: str) -> None:
        hint = suggest(sub, candidates)
        fix = f"did you mean {prefix}{hint}?" if hint else "check the spelling against the MM2 documentation"
        if self._custom_class():
            fix = f"if your class does not read it, {fix}"
            self.log.warn(key, "unknown key: Mirrorflow passes it only to your Python filter or policy class", fix)
        else:
            self.log.warn(key, "unknown key: MM2 ignores it and so does Mirrorflow", fix)

    def _custom_class(self) -> bool:
        """The file names a Python class (`topic.filter.class`, `group.filter.class`, `replication.policy.class`):
        such a class gets the flow's settings, so an unknown key may be one of its own."""
        return any(
            key.endswith(_PLUGIN_KEYS) and not value.strip().startswith("org.apache.kafka.")
            for key, value in self.props.values.items()
        )

    def _spec(self, key: str, spec: KeySpec, shown: str) -> None:
        if spec.status == "ignored":
            self.ignored.append(key)
        value = self.props.values[key]
        if not has_reference(value):
            try:
                check(spec, shown, value)
            except ValueProblem as problem:
                self.log.error(key, problem.problem, problem.fix)

    def _security_protocol(self, key: str) -> None:
        value = self.props.values[key]
        if key.endswith("security.protocol") and not has_reference(value):
            try:
                parse_enum(key, value, SECURITY_PROTOCOLS, case_insensitive=True)
            except ValueProblem as problem:
                self.log.error(key, problem.problem, problem.fix)

    def _regex(self, key: str, sub: str) -> None:
        if sub not in REGEX_LIST_KEYS and sub not in LEGACY_ALIASES:
            return
        lost = lost_escapes(self.props.raw_values.get(key, ""))
        if lost:
            shown = ", ".join(lost)
            self.log.warn(
                key,
                f"the properties format drops the backslash of {shown}, so the regex used is "
                f"{self.props.values[key]!r}",
                "write each regex backslash twice (\\\\.) to keep it",
            )

    def _legacy(self, key: str, sub: str) -> None:
        new = LEGACY_ALIASES[sub]
        self.log.warn(
            key,
            f"{sub} is the MM2 3.x name of {new}: MM2 4.x ignores it; Mirrorflow reads it as {new} "
            f"unless {new} is also set",
            f"rename it to {key[: len(key) - len(sub)]}{new}",
        )

    def _flow_key(self, key: str) -> None:
        source, target, sub = split_flow_key(key, self.aliases)
        for alias in (source, target):
            if alias not in self.aliases:
                hint = suggest(alias, self.aliases)
                fix = f"did you mean {hint}?" if hint else f"add {alias} to clusters, or fix the flow name"
                self.log.error(key, f"flow {source}->{target} names {alias!r}, which is not in clusters", fix)
                return
        if source == target:
            self.log.error(key, f"flow {source}->{target} replicates a cluster into itself", "remove the line")
            return
        self._regex(key, sub)
        self._security_protocol(key)
        if sub == "enabled" and self.props.values[key] != self.props.values[key].strip():
            self.log.warn(
                key,
                "the value has trailing whitespace: MM2 compares it strictly when deciding to start the flow",
                "remove the spaces after the value",
            )
        spec = flow_key_spec(sub)
        if spec is not None:
            self._spec(key, spec, key)
        elif sub in LEGACY_ALIASES:
            self._legacy(key, sub)
        elif sub.startswith(TRANSFORM_PREFIXES):
            return  # checked per flow by config/transform_specs.py
        elif sub.startswith(tuple(FLOW_ONLY_PREFIXES)):
            self.ignored.append(key)
        elif sub.startswith((*CLIENT_PREFIXES, *_DIRECT_CLIENT_PREFIXES, "config.providers", "replication.policy.")):
            self._client_key(key, client_key_name(sub))
        elif sub.startswith(SPARK_CONF_PREFIX):
            self._spark_conf(key, sub)
        elif sub.startswith("mirrorflow."):
            self._mirrorflow(key, sub, f"{source}->{target}.")
        else:
            self._unknown(key, sub, _FLOW_CANDIDATES, f"{source}->{target}.")

    def _client_key(self, key: str, name: str | None) -> None:
        """A typo in a client setting is an error: librdkafka would refuse the client when the flow starts.
        Java-only settings are reported (as warnings) where the flow's clients are built (config/flows.py)."""
        if not name:
            return
        kind, hint = classify_client_key(name)
        if kind == "unknown":
            shown = key[: len(key) - len(name)]
            self.log.error(
                key,
                f"unknown client setting {name}: neither the Java Kafka client nor librdkafka has it, so the "
                "client would refuse it when the flow starts",
                f"did you mean {shown}{hint}?" if hint else UNKNOWN_CLIENT_FIX,
            )

    def _spark_conf(self, key: str, sub: str) -> None:
        problem = conf_key_problem(sub[len(SPARK_CONF_PREFIX) :])
        if problem is not None:
            self.log.error(key, problem.problem, problem.fix)

    def _mirrorflow(self, key: str, sub: str, prefix: str) -> None:
        if sub in MIRRORFLOW_CLUSTER_KEYS:
            self.log.error(key, f"{sub} is set per cluster", f"write <alias>.{sub} for each cluster instead")
            return
        hint = suggest(sub, MIRRORFLOW_FLOW_KEYS)
        fix = f"did you mean {prefix}{hint}?" if hint else "see the mirrorflow.* keys in the documentation"
        self.log.error(key, "unknown Mirrorflow key", fix)

    def _cluster_key(self, key: str, sub: str) -> None:
        self._security_protocol(key)
        alias = key[: len(key) - len(sub) - 1]
        if sub in CONNECTOR_KEYS and sub.startswith(CLIENT_PREFIXES):  # admin.timeout.ms, consumer.poll.timeout.ms
            role, _, name = sub.partition(".")
            self.log.error(
                key,
                f"{sub} is a connector setting: written per cluster it reaches the {role} clients as {name}, "
                "which no client has, and they would refuse it",
                f"write {sub} (all flows) or <source>->{alias}.{sub} instead",
            )
            return
        if sub.startswith(CLIENT_PREFIXES):
            self._client_key(key, client_key_name(sub))
            return
        if sub in CONNECTION_KEYS or sub.startswith("replication.policy."):
            return
        if sub.startswith(("ssl.", "sasl.")) and classify_client_key(sub)[0] == "unknown":
            self._client_key(key, sub)  # a misspelt connection key, meant for every client of the cluster
            return
        if sub in MIRRORFLOW_CLUSTER_KEYS:
            return
        if sub.startswith("mirrorflow."):
            hint = suggest(sub, MIRRORFLOW_CLUSTER_KEYS)
            self.log.error(key, "unknown Mirrorflow cluster key", f"did you mean {alias}.{hint}?" if hint else "")
        elif is_worker_key(sub) or sub == "forwarding.admin.class":
            self.ignored.append(key)
        elif sub in CONNECTOR_KEYS or sub in FLOW_ONLY_KEYS:
            self.log.warn(
                key,
                f"{sub} has no effect per cluster: MM2 reads it at the top level or per flow",
                f"write {sub} (all flows) or <source>->{alias}.{sub} instead",
            )
        else:
            self._unknown(key, sub, [*_CLUSTER_CANDIDATES, *WORKER_PREFIXES], f"{alias}.")

    def _top_key(self, key: str) -> None:
        self._security_protocol(key)
        self._regex(key, key)
        spec = TOP_LEVEL_KEYS.get(key) or CONNECTOR_KEYS.get(key) or MIRRORFLOW_FLOW_KEYS.get(key)
        if spec is not None:
            self._spec(key, spec, key)
        elif key in LEGACY_ALIASES:
            self._legacy(key, key)
        elif key.startswith(("config.providers.", "replication.policy.", *TRANSFORM_PREFIXES)):
            return  # transforms.* and predicates.*: inherited by every flow, checked by config/transform_specs.py
        elif key in CONNECTION_KEYS:
            return
        elif key.startswith(SPARK_CONF_PREFIX):
            self._spark_conf(key, key)
        elif key.startswith("mirrorflow."):
            self._mirrorflow(key, key, "")
        elif is_worker_key(key):
            self.ignored.append(key)
        elif key in FLOW_ONLY_KEYS or key.startswith((*CLIENT_PREFIXES, *FLOW_ONLY_PREFIXES)):
            where = "<alias>.{k} for a cluster's clients or <source>-><target>.{k} for one flow"
            if key not in FLOW_ONLY_KEYS and key.startswith(CLIENT_PREFIXES):
                fix = "write " + where.format(k=key)
            else:
                fix = f"write <source>-><target>.{key} for each flow"
            self.log.warn(key, "MM2 does not pass this top-level key to any flow, so it has no effect", fix)
        else:
            self._unknown(key, key, _TOP_CANDIDATES, "")


def classify_keys(props: PropertiesFile, aliases: Sequence[str], log: IssueLog) -> list[str]:
    """Report misplaced, unknown and badly-valued keys; returns the keys that are accepted but ignored."""
    return _Classifier(props, aliases, log).run()

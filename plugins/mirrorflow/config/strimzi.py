"""A Strimzi `KafkaMirrorMaker2` resource as the mm2.properties MM2 itself would run (`mirrorflow convert strimzi`).

Strimzi turns the resource into Kafka Connect connectors; what those connectors are told is plain MM2
configuration, so the conversion is a renaming, not a reinterpretation:
* clusters: v1beta2 (and v1alpha1) list them in `spec.clusters` and pair them in `spec.mirrors[].sourceCluster/
  targetCluster`; v1 has one `spec.target` and a `source` per mirror. Each becomes `clusters`,
  `<alias>.bootstrap.servers` and its security keys.
* a mirror becomes flow `S->T`: `sourceConnector`/`checkpointConnector`/`heartbeatConnector` configs become
  `S->T.<key>` (one flow in mm2.properties holds all three connectors' keys); the patterns become
  `topics`, `topics.exclude`, `groups` and `groups.exclude` (the deprecated `*BlacklistPattern` names too).
  Strimzi deploys only the connectors a mirror lists, so a missing checkpoint or heartbeat connector turns
  that part off, and heartbeat-only pairs (which MM2 would add for pairs nobody enabled) are off.
* secrets are never read: the resource only names Kubernetes Secrets. A password becomes a reference,
  `${env:...}` by default or `${directory:<dir>/<secret>:<key>}` with `secrets_dir` (a Secret mounted as a
  directory, one file per key, as Kubernetes mounts it); certificates become paths under that directory.
* what has no meaning outside Kubernetes or Kafka Connect (replicas, resources, logging, metrics, template,
  tasksMax, ...) is listed in `# not converted:` comments, so nothing disappears without a word.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from mirrorflow.core.errors import UsageError

DEFAULT_SECRETS_DIR = "/etc/mirrorflow/secrets"
PATTERN_KEYS = (
    ("topicsPattern", "topics"),
    ("topicsExcludePattern", "topics.exclude"),
    ("topicsBlacklistPattern", "topics.exclude"),
    ("groupsPattern", "groups"),
    ("groupsExcludePattern", "groups.exclude"),
    ("groupsBlacklistPattern", "groups.exclude"),
)
CONNECTORS = ("sourceConnector", "checkpointConnector", "heartbeatConnector")
SPEC_HANDLED = {"clusters", "connectCluster", "target", "mirrors", "version"}
PROVIDER_CLASSES = {
    "env": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
    "directory": "org.apache.kafka.common.config.provider.DirectoryConfigProvider",
}
SASL_MODULES = {
    "scram-sha-256": ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    "scram-sha-512": ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    "plain": ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
}


@dataclass
class Output:
    """The properties being written, in order, with comments; `where` names the resource for messages."""

    where: str
    secrets_dir: str | None
    lines: list[str] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)
    providers: set[str] = field(default_factory=set)

    def set(self, key: str, value: object, path: str) -> None:
        text = _text(value)
        if key in self.keys and self.keys[key] != text:
            raise UsageError(
                f"{self.where}: {path} sets {key} = {text!r}, but an earlier part of the resource set it to "
                f"{self.keys[key]!r}; mm2.properties can hold one value: make them agree"
            )
        if key not in self.keys:
            self.keys[key] = text
            self.lines.append(f"{key} = {text}")

    def comment(self, text: str) -> None:
        self.lines.append(f"# {text}")

    def secret(self, secret: str, key: str) -> str:
        if self.secrets_dir is not None:
            self.providers.add("directory")
            return "${directory:" + f"{self.secrets_dir}/{secret}:{key}" + "}"
        self.providers.add("env")
        return "${env:" + env_name(secret, key) + "}"

    def secret_file(self, secret: str, name: str) -> str:
        return f"{self.secrets_dir or DEFAULT_SECRETS_DIR}/{secret}/{name}"


def env_name(secret: str, key: str) -> str:
    """The environment variable a `${env:}` reference to Secret `secret`, key `key` reads."""
    return "MIRRORFLOW_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", f"{secret}_{key}").upper()


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def _mapping(value: object, path: str, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(f"{where}: {path} must be a mapping, found {type(value).__name__}")
    return value


def _required(node: Mapping[str, Any], key: str, path: str, where: str) -> str:
    value = node.get(key)
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: {path}.{key} is missing (a non-empty string is required)")
    return value.strip()


def convert(text: str, *, where: str = "resource", secrets_dir: str | None = None) -> str:
    """The mm2.properties text for the KafkaMirrorMaker2 resource in YAML `text`; a UsageError names the field
    path of anything that cannot be converted."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise UsageError(f"{where}: not valid YAML: {err}") from None
    resources = [d for d in documents if isinstance(d, Mapping) and d.get("kind") == "KafkaMirrorMaker2"]
    if len(resources) != 1:
        kinds = [d.get("kind") if isinstance(d, Mapping) else type(d).__name__ for d in documents]
        raise UsageError(
            f"{where}: expected one KafkaMirrorMaker2 resource, found kinds {kinds}; give a file holding one"
        )
    resource = resources[0]
    api = str(resource.get("apiVersion", ""))
    if not api.startswith("kafka.strimzi.io/"):
        raise UsageError(f"{where}: apiVersion {api!r} is not a Strimzi API (kafka.strimzi.io/...)")
    name = _mapping(resource.get("metadata"), "metadata", where).get("name", "?")
    spec = _mapping(resource.get("spec"), "spec", where)
    out = Output(where, secrets_dir)
    out.comment(f"Converted by `mirrorflow convert strimzi` from KafkaMirrorMaker2 {name} ({api}).")
    clusters, mirrors = _clusters_and_mirrors(spec, out)
    out.set("clusters", ", ".join(clusters), "spec")
    for alias, (cluster, path) in clusters.items():
        _cluster(out, alias, cluster, path)
    # Strimzi runs heartbeats only where a mirror lists the heartbeat connector: no heartbeat-only pairs.
    out.set("emit.heartbeats.enabled", False, "spec")
    for source, target, mirror, path in mirrors:
        _mirror(out, source, target, mirror, path)
    if out.providers:  # MM2 resolves only declared providers: the same file must work in both
        names = sorted(out.providers)
        declared = [f"config.providers = {', '.join(names)}"]
        declared += [f"config.providers.{n}.class = {PROVIDER_CLASSES[n]}" for n in names]
        out.lines[1:1] = declared
    ignored = sorted(set(spec) - SPEC_HANDLED)
    if ignored:
        out.comment(f"not converted (Kubernetes/Kafka Connect deployment settings): spec.{', spec.'.join(ignored)}")
    return "\n".join(out.lines) + "\n"


Cluster = tuple[Mapping[str, Any], str]
Mirror = tuple[str, str, Mapping[str, Any], str]


def _clusters_and_mirrors(spec: Mapping[str, Any], out: Output) -> tuple[dict[str, Cluster], list[Mirror]]:
    """Both API shapes as ({alias: (cluster spec, its path)}, [(source, target, mirror, path)])."""
    where = out.where
    raw_mirrors = spec.get("mirrors")
    if not isinstance(raw_mirrors, list) or not raw_mirrors:
        raise UsageError(f"{where}: spec.mirrors is missing or empty: nothing to replicate")
    clusters: dict[str, Cluster] = {}
    mirrors: list[Mirror] = []
    if "target" in spec:  # v1: one target, a source per mirror
        target_spec = _mapping(spec["target"], "spec.target", where)
        target = _required(target_spec, "alias", "spec.target", where)
        clusters[target] = (target_spec, "spec.target")
        for i, raw in enumerate(raw_mirrors):
            path = f"spec.mirrors[{i}]"
            mirror = _mapping(raw, path, where)
            source_spec = _mapping(mirror.get("source"), f"{path}.source", where)
            source = _required(source_spec, "alias", f"{path}.source", where)
            if source in clusters and clusters[source][0] != source_spec:
                raise UsageError(f"{where}: {path}.source alias {source!r} is used with different settings")
            clusters[source] = (source_spec, f"{path}.source")
            mirrors.append((source, target, mirror, path))
        return clusters, mirrors
    raw_clusters = spec.get("clusters")
    if not isinstance(raw_clusters, list) or not raw_clusters:
        raise UsageError(f"{where}: spec.clusters is missing (v1beta2) and spec.target too (v1): no clusters")
    for i, raw in enumerate(raw_clusters):
        cluster = _mapping(raw, f"spec.clusters[{i}]", where)
        alias = _required(cluster, "alias", f"spec.clusters[{i}]", where)
        if alias in clusters:
            raise UsageError(f"{where}: spec.clusters[{i}].alias {alias!r} appears twice")
        clusters[alias] = (cluster, f"spec.clusters[{i}]")
    for i, raw in enumerate(raw_mirrors):
        path = f"spec.mirrors[{i}]"
        mirror = _mapping(raw, path, where)
        source = _required(mirror, "sourceCluster", path, where)
        target = _required(mirror, "targetCluster", path, where)
        for role, alias in (("sourceCluster", source), ("targetCluster", target)):
            if alias not in clusters:
                raise UsageError(f"{where}: {path}.{role} {alias!r} is not an alias in spec.clusters")
        mirrors.append((source, target, mirror, path))
    connect = spec.get("connectCluster")
    if connect is not None and connect not in clusters:
        raise UsageError(f"{where}: spec.connectCluster {connect!r} is not an alias in spec.clusters")
    return clusters, mirrors


def _cluster(out: Output, alias: str, cluster: Mapping[str, Any], path: str) -> None:
    out.comment(f"cluster {alias} ({path})")
    out.set(f"{alias}.bootstrap.servers", _required(cluster, "bootstrapServers", path, out.where), path)
    tls = _mapping(cluster.get("tls"), f"{path}.tls", out.where)
    # Strimzi turns TLS on when the field is set at all: `tls: {}` means TLS with the JVM's public CAs.
    tls_on = cluster.get("tls") is not None
    auth = _mapping(cluster.get("authentication"), f"{path}.authentication", out.where)
    kind = str(auth.get("type", "")).lower()
    sasl = kind in SASL_MODULES or kind == "oauth"
    if sasl:
        out.set(f"{alias}.security.protocol", "SASL_SSL" if tls_on else "SASL_PLAINTEXT", path)
    elif tls_on or kind == "tls":
        out.set(f"{alias}.security.protocol", "SSL", path)
    _trusted(out, alias, tls, f"{path}.tls")
    if kind:
        _authentication(out, alias, auth, kind, f"{path}.authentication")
    for key, value in _mapping(cluster.get("config"), f"{path}.config", out.where).items():
        out.set(f"{alias}.{key}", value, f"{path}.config")
    for key in sorted(set(cluster) - {"alias", "bootstrapServers", "tls", "authentication", "config"}):
        out.comment(f"not converted: {path}.{key} (Kafka Connect's own settings)")


def _trusted(out: Output, alias: str, tls: Mapping[str, Any], path: str) -> None:
    certificates = tls.get("trustedCertificates") or []
    if not isinstance(certificates, list):
        raise UsageError(f"{out.where}: {path}.trustedCertificates must be a list")
    if not certificates:
        return
    first = _mapping(certificates[0], f"{path}.trustedCertificates[0]", out.where)
    secret = _required(first, "secretName", f"{path}.trustedCertificates[0]", out.where)
    name = first.get("certificate") or "ca.crt"
    if "pattern" in first or len(certificates) > 1:
        out.comment(
            f"{path}.trustedCertificates names several certificates: put them all in one PEM file at the path below"
        )
    out.set(f"{alias}.ssl.truststore.type", "PEM", path)
    out.set(f"{alias}.ssl.truststore.location", out.secret_file(secret, str(name)), path)


def _authentication(out: Output, alias: str, auth: Mapping[str, Any], kind: str, path: str) -> None:
    if kind == "tls":
        pair = _mapping(auth.get("certificateAndKey"), f"{path}.certificateAndKey", out.where)
        secret = _required(pair, "secretName", f"{path}.certificateAndKey", out.where)
        certificate = _required(pair, "certificate", f"{path}.certificateAndKey", out.where)
        key = _required(pair, "key", f"{path}.certificateAndKey", out.where)
        out.set(f"{alias}.ssl.certificate.location", out.secret_file(secret, certificate), path)
        out.set(f"{alias}.ssl.key.location", out.secret_file(secret, key), path)
        return
    if kind in SASL_MODULES:
        mechanism, module = SASL_MODULES[kind]
        user = _required(auth, "username", path, out.where)
        password = _mapping(auth.get("passwordSecret"), f"{path}.passwordSecret", out.where)
        secret = _required(password, "secretName", f"{path}.passwordSecret", out.where)
        key = _required(password, "password", f"{path}.passwordSecret", out.where)
        out.set(f"{alias}.sasl.mechanism", mechanism, path)
        reference = out.secret(secret, key)
        out.set(f"{alias}.sasl.jaas.config", f'{module} required username="{user}" password="{reference}";', path)
        return
    if kind == "oauth":
        out.set(f"{alias}.sasl.mechanism", "OAUTHBEARER", path)
        out.comment(f"not converted: {path} (oauth): set {alias}.sasl.oauthbearer.* by hand (docs/security.md)")
        return
    raise UsageError(f"{out.where}: {path}.type {kind!r} is not one of tls, scram-sha-256, scram-sha-512, plain, oauth")


def _mirror(out: Output, source: str, target: str, mirror: Mapping[str, Any], path: str) -> None:
    flow = f"{source}->{target}"
    if flow + ".enabled" in out.keys:
        raise UsageError(f"{out.where}: {path} mirrors {flow} again; merge the two mirrors into one")
    out.comment(f"flow {flow} ({path})")
    present = {name for name in CONNECTORS if name in mirror}
    _refuse_stopped(out, mirror, path)
    if "sourceConnector" not in present:
        # A flow always copies: converting would start copying what the resource never copied.
        raise UsageError(
            f"{out.where}: {path} has no sourceConnector, so Strimzi copies no records for it, and a converted flow "
            f"would. Add {path}.sourceConnector to copy, or remove the mirror (Mirrorflow emits heartbeats for every "
            "pair of clusters whose flow is not enabled, as MM2 does), then convert again"
        )
    out.set(f"{flow}.enabled", True, path)
    for field_name, key in PATTERN_KEYS:
        if mirror.get(field_name) is not None:
            out.set(f"{flow}.{key}", mirror[field_name], f"{path}.{field_name}")
    if "checkpointConnector" not in present:
        out.set(f"{flow}.emit.checkpoints.enabled", False, path)
        out.set(f"{flow}.sync.group.offsets.enabled", False, path)
    out.set(f"{flow}.emit.heartbeats.enabled", "heartbeatConnector" in present, path)
    for name in CONNECTORS:
        connector = _mapping(mirror.get(name), f"{path}.{name}", out.where)
        for key, value in _mapping(connector.get("config"), f"{path}.{name}.config", out.where).items():
            out.set(f"{flow}.{key}", value, f"{path}.{name}.config")
        for extra in sorted(set(connector) - {"config"}):
            out.comment(f"not converted: {path}.{name}.{extra} (Kafka Connect task settings; Spark sizes the copy)")
    handled = {"source", "sourceCluster", "targetCluster", *CONNECTORS, *(f for f, _ in PATTERN_KEYS)}
    for key in sorted(set(mirror) - handled):
        out.comment(f"not converted: {path}.{key}")


def _refuse_stopped(out: Output, mirror: Mapping[str, Any], path: str) -> None:
    """A stopped or paused connector runs nothing under Strimzi; a Mirrorflow flow cannot be half-on, so an
    enabled flow would copy (or checkpoint) what the resource does not: refuse, naming the field."""
    for name in CONNECTORS:
        connector = _mapping(mirror.get(name), f"{path}.{name}", out.where)
        state = str(connector.get("state", "running")).lower()
        if state in ("stopped", "paused") or connector.get("pause") is True:
            field_name, shown = ("state", state) if state != "running" else ("pause", "paused")
            raise UsageError(
                f"{out.where}: {path}.{name}.{field_name} says the connector is {shown}: "
                "Strimzi runs nothing for it, and a converted flow would. Remove the mirror (or the connector) from "
                "the resource, or set it running, then convert again"
            )

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

from collections.abc import Mapping
from typing import Any

import yaml

from mirrorflow.config.strimzi_auth import (
    DEFAULT_SECRETS_DIR,
    SASL_MODULES,
    Output,
    authentication,
    env_name,
    mapping,
    required,
)
from mirrorflow.core.errors import UsageError

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
    name = mapping(resource.get("metadata"), "metadata", where).get("name", "?")
    spec = mapping(resource.get("spec"), "spec", where)
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


__all__ = ["DEFAULT_SECRETS_DIR", "convert", "env_name"]
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
        target_spec = mapping(spec["target"], "spec.target", where)
        target = required(target_spec, "alias", "spec.target", where)
        clusters[target] = (target_spec, "spec.target")
        for i, raw in enumerate(raw_mirrors):
            path = f"spec.mirrors[{i}]"
            mirror = mapping(raw, path, where)
            source_spec = mapping(mirror.get("source"), f"{path}.source", where)
            source = required(source_spec, "alias", f"{path}.source", where)
            if source in clusters and clusters[source][0] != source_spec:
                raise UsageError(f"{where}: {path}.source alias {source!r} is used with different settings")
            clusters[source] = (source_spec, f"{path}.source")
            mirrors.append((source, target, mirror, path))
        return clusters, mirrors
    raw_clusters = spec.get("clusters")
    if not isinstance(raw_clusters, list) or not raw_clusters:
        raise UsageError(f"{where}: spec.clusters is missing (v1beta2) and spec.target too (v1): no clusters")
    for i, raw in enumerate(raw_clusters):
        cluster = mapping(raw, f"spec.clusters[{i}]", where)
        alias = required(cluster, "alias", f"spec.clusters[{i}]", where)
        if alias in clusters:
            raise UsageError(f"{where}: spec.clusters[{i}].alias {alias!r} appears twice")
        clusters[alias] = (cluster, f"spec.clusters[{i}]")
    for i, raw in enumerate(raw_mirrors):
        path = f"spec.mirrors[{i}]"
        mirror = mapping(raw, path, where)
        source = required(mirror, "sourceCluster", path, where)
        target = required(mirror, "targetCluster", path, where)
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
    out.set(f"{alias}.bootstrap.servers", required(cluster, "bootstrapServers", path, out.where), path)
    tls = mapping(cluster.get("tls"), f"{path}.tls", out.where)
    # Strimzi turns TLS on when the field is set at all: `tls: {}` means TLS with the JVM's public CAs.
    tls_on = cluster.get("tls") is not None
    auth = mapping(cluster.get("authentication"), f"{path}.authentication", out.where)
    kind = str(auth.get("type", "")).lower()
    sasl = kind in SASL_MODULES or kind == "oauth"
    if sasl:
        out.set(f"{alias}.security.protocol", "SASL_SSL" if tls_on else "SASL_PLAINTEXT", path)
    elif tls_on or kind == "tls":
        out.set(f"{alias}.security.protocol", "SSL", path)
    _trusted(out, alias, tls, f"{path}.tls")
    if kind:
        authentication(out, alias, auth, kind, f"{path}.authentication")
    for key, value in mapping(cluster.get("config"), f"{path}.config", out.where).items():
        out.set(f"{alias}.{key}", value, f"{path}.config")
    for key in sorted(set(cluster) - {"alias", "bootstrapServers", "tls", "authentication", "config"}):
        out.comment(f"not converted: {path}.{key} (Kafka Connect's own settings)")


def _trusted(out: Output, alias: str, tls: Mapping[str, Any], path: str) -> None:
    certificates = tls.get("trustedCertificates") or []
    if not isinstance(certificates, list):
        raise UsageError(f"{out.where}: {path}.trustedCertificates must be a list")
    if not certificates:
        return
    first = mapping(certificates[0], f"{path}.trustedCertificates[0]", out.where)
    secret = required(first, "secretName", f"{path}.trustedCertificates[0]", out.where)
    name = first.get("certificate") or "ca.crt"
    if "pattern" in first or len(certificates) > 1:
        out.comment(
            f"{path}.trustedCertificates names several certificates: put them all in one PEM file at the path below"
        )
    out.set(f"{alias}.ssl.truststore.type", "PEM", path)
    out.set(f"{alias}.ssl.truststore.location", out.secret_file(secret, str(name)), path)


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
        connector = mapping(mirror.get(name), f"{path}.{name}", out.where)
        for key, value in mapping(connector.get("config"), f"{path}.{name}.config", out.where).items():
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
        connector = mapping(mirror.get(name), f"{path}.{name}", out.where)
        state = str(connector.get("state", "running")).lower()
        if state in ("stopped", "paused") or connector.get("pause") is True:
            field_name, shown = ("state", state) if state != "running" else ("pause", "paused")
            raise UsageError(
                f"{out.where}: {path}.{name}.{field_name} says the connector is {shown}: "
                "Strimzi runs nothing for it, and a converted flow would. Remove the mirror (or the connector) from "
                "the resource, or set it running, then convert again"
            )

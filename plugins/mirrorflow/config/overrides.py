"""Client settings laid over a flow after loading: from Airflow connections (`<alias>.mirrorflow.connection`),
handed to the Spark copy job as `MIRRORFLOW_CLUSTER_SETTINGS`.

A `ClientConfig` holds Java-style keys and translates them to librdkafka's on use, so librdkafka keys from the
connection must not be shadowed by a Java key that translates onto them (`sasl.jaas.config` would overwrite
`sasl.username`): those Java keys are dropped when the connection supplies their librdkafka equivalent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal

from mirrorflow.config.client_config import ClientConfig
from mirrorflow.config.model import Flow
from mirrorflow.core.errors import UsageError

CLUSTER_SETTINGS_ENV = "MIRRORFLOW_CLUSTER_SETTINGS"
"""`{alias: librdkafka settings}` for a process that loads the config itself (an env var: never an argument)."""

Side = Literal["source", "target"]
SIDE_CLIENTS: dict[Side, tuple[str, ...]] = {
    "source": ("source_consumer", "source_producer", "source_admin"),
    "target": ("target_consumer", "target_producer", "target_admin"),
}
IGNORED_KEYS = {
    "group.id": "Mirrorflow names its own consumer groups",
}
_SASL_KEYS = ("sasl.username", "sasl.password", "sasl.oauthbearer.", "sasl.kerberos.", "oauth_cb")
_PEM_KEY_KEYS = ("ssl.key.location", "ssl.key.pem", "ssl.certificate.location", "ssl.certificate.pem")


def merged_client(client: ClientConfig, extra: Mapping[str, str]) -> ClientConfig:
    """`client` with the connection's librdkafka settings on top (see the module docstring for the rules)."""
    java = dict(client.settings)
    java.update({key: secret.get_secret_value() for key, secret in client.secrets.items()})
    if any(key.startswith(_SASL_KEYS) for key in extra):
        java.pop("sasl.jaas.config", None)
    if "ssl.ca.location" in extra or "ssl.ca.pem" in extra:
        for key in [k for k in java if k.startswith("ssl.truststore.")]:
            del java[key]
    if any(key in extra for key in (*_PEM_KEY_KEYS, "ssl.key.password", "ssl.keystore.location")):
        for key in [k for k in java if k.startswith("ssl.keystore.")]:
            del java[key]
        java["ssl.keystore.type"] = "PKCS12" if "ssl.keystore.location" in extra else "PEM"
    java.update({key: value for key, value in extra.items() if usable_key(key)})
    return ClientConfig.from_mapping(java)


CALLBACK_KEYS = ("oauth_cb", "error_cb", "stats_cb", "throttle_cb", "on_commit")
"""Callbacks a connection may name (the clients resolve the names: `mirrorflow.kafka.callbacks`); `log_cb` is
Mirrorflow's own logger."""


def usable_key(key: str) -> bool:
    """Every librdkafka setting and the named callbacks, but not the keys Mirrorflow owns nor `log_cb`."""
    return key not in IGNORED_KEYS and (not key.endswith("_cb") or key in CALLBACK_KEYS)


def merge_connection(flow: Flow, side: Side, extra: Mapping[str, str]) -> Flow:
    """A new `Flow` whose `side` clients (consumer, producer, admin) carry the connection's settings."""
    update = {name: merged_client(getattr(flow, name), extra) for name in SIDE_CLIENTS[side]}
    return flow.model_copy(update=update)


def with_cluster_settings(flow: Flow, settings: Mapping[str, Mapping[str, str]]) -> Flow:
    """`flow` with `{alias: librdkafka settings}` merged into the clients of the sides those aliases are."""
    sides: tuple[tuple[Side, str], ...] = (("source", flow.source), ("target", flow.target))
    for side, alias in sides:
        if alias in settings:
            flow = merge_connection(flow, side, settings[alias])
    return flow


def cluster_settings_from_env(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The settings the Airflow copy task put in `MIRRORFLOW_CLUSTER_SETTINGS` (empty when unset)."""
    raw = environ.get(CLUSTER_SETTINGS_ENV)
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        # Never echo the value: it holds credentials.
        raise UsageError(f"{CLUSTER_SETTINGS_ENV} must be a JSON object of objects ({{alias: {{key: value}}}})")
    return {str(alias): {str(k): str(v) for k, v in conf.items()} for alias, conf in parsed.items()}

"""Cluster credentials kept in Airflow connections (`<alias>.mirrorflow.connection = <conn_id>`).

The Kafka provider stores a connection's whole librdkafka config as its `extra` JSON (a flat dict). At task run
time that dict is merged into every client of the cluster's side of the flow, winning over the file's values
for the same setting: the connection is where the operator keeps the credentials of record. Nothing here runs
while Airflow parses DAG files, and only key names are ever logged.

A `ClientConfig` holds Java-style keys and translates them to librdkafka's on use, so librdkafka keys from the
connection must not be shadowed by a Java key that translates onto them (`sasl.jaas.config` would overwrite
`sasl.username`): those Java keys are dropped when the connection supplies their librdkafka equivalent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Literal

from mirrorflow.config.clients import ClientConfig
from mirrorflow.config.model import Flow
from mirrorflow.core.errors import UsageError

log = logging.getLogger(__name__)

Side = Literal["source", "target"]
SIDE_CLIENTS: dict[Side, tuple[str, ...]] = {
    "source": ("source_consumer", "source_producer", "source_admin"),
    "target": ("target_consumer", "target_producer", "target_admin"),
}
IGNORED_KEYS = {
    "group.id": "Mirrorflow names its own consumer groups",
}
_SASL_KEYS = ("sasl.username", "sasl.password", "sasl.oauthbearer.", "sasl.kerberos.")
_PEM_KEY_KEYS = ("ssl.key.location", "ssl.key.pem", "ssl.certificate.location", "ssl.certificate.pem")


def connection_extra(conn_id: str) -> dict[str, str]:
    """The librdkafka settings of Airflow connection `conn_id` (its `extra` JSON), values as strings."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise UsageError(
            f"Airflow connection {conn_id!r} (named by a `<alias>.mirrorflow.connection` key) is not defined; "
            f"create it (Admin > Connections, or AIRFLOW_CONN_{conn_id.upper()}) with conn_type kafka and the "
            "librdkafka settings as its extra JSON"
        ) from None
    extra = conn.extra_dejson
    if not isinstance(extra, dict) or not extra:
        raise UsageError(
            f"Airflow connection {conn_id!r} has no extra JSON; put the cluster's librdkafka settings there "
            'as a flat object, e.g. {"bootstrap.servers": "host:9092", "security.protocol": "SASL_SSL"}'
        )
    if isinstance(extra.get("config"), dict) and "bootstrap.servers" not in extra:
        raise UsageError(
            f"Airflow connection {conn_id!r} nests its settings under 'config'; the Kafka provider expects "
            "the librdkafka settings directly in the extra JSON (a flat object)"
        )
    return {key: _text(value) for key, value in extra.items()}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


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


def usable_key(key: str) -> bool:
    """Callback names (`error_cb`...) cannot be called from a string, and some keys Mirrorflow owns."""
    return key not in IGNORED_KEYS and not key.endswith("_cb")


def merge_connection(flow: Flow, side: Side, extra: Mapping[str, str]) -> Flow:
    """A new `Flow` whose `side` clients (consumer, producer, admin) carry the connection's settings."""
    update = {name: merged_client(getattr(flow, name), extra) for name in SIDE_CLIENTS[side]}
    return flow.model_copy(update=update)


def connection_ids(flow: Flow) -> dict[Side, str]:
    """The Airflow connection of each side of `flow` that names one."""
    ids: dict[Side, str] = {}
    if flow.source_connection:
        ids["source"] = flow.source_connection
    if flow.target_connection:
        ids["target"] = flow.target_connection
    return ids


def with_connections(flow: Flow) -> Flow:
    """`flow` with the credentials of its Airflow connections merged in (unchanged when it names none)."""
    for side, conn_id in connection_ids(flow).items():
        extra = connection_extra(conn_id)
        skipped = sorted(key for key in extra if not usable_key(key))
        alias = flow.source if side == "source" else flow.target
        log.info(
            "flow %s: cluster %s takes %s from Airflow connection %r%s",
            flow.name,
            alias,
            ", ".join(sorted(key for key in extra if usable_key(key))),
            conn_id,
            f" (ignored: {', '.join(skipped)})" if skipped else "",
        )
        flow = merge_connection(flow, side, extra)
    return flow


def cluster_settings(flow: Flow) -> dict[str, dict[str, str]]:
    """`{alias: librdkafka settings}` from the flow's connections, for a process that loads the config itself
    (the Spark copy job). Contains secrets: hand it over in an environment variable, never an argument."""
    settings: dict[str, dict[str, str]] = {}
    for side, conn_id in connection_ids(flow).items():
        alias = flow.source if side == "source" else flow.target
        settings[alias] = {k: v for k, v in connection_extra(conn_id).items() if usable_key(k)}
    return settings

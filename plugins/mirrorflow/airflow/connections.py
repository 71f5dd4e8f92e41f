"""Cluster credentials kept in Airflow connections (`<alias>.mirrorflow.connection = <conn_id>`).

The Kafka provider stores a connection's whole librdkafka config as its `extra` JSON (a flat dict). At task run
time that dict is merged into every client of the cluster's side of the flow, winning over the file's values
for the same setting: the connection is where the operator keeps the credentials of record. Nothing here runs
while Airflow parses DAG files, and only key names are ever logged.

The merge rules themselves live in `mirrorflow.config.overrides`, shared with the Spark copy job, which receives
the same settings in an environment variable.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.config.overrides import Side, merge_connection, merged_client, usable_key
from mirrorflow.core.errors import UsageError

log = logging.getLogger(__name__)


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


__all__ = ["cluster_settings", "connection_extra", "merge_connection", "merged_client", "with_connections"]

"""Cluster credentials kept in Airflow connections (`<alias>.mirrorflow.connection = <conn_id>`).

The Kafka provider stores a connection's whole librdkafka config as its `extra` JSON (a flat dict). At task run
time that dict is merged into every client of the cluster's side of the flow, winning over the file's values
for the same setting: the connection is where the operator keeps the credentials of record. Nothing here runs
while Airflow parses DAG files, and only key names are ever logged.

The config is built by the Kafka provider's own hook (`KafkaBaseHook`), as any Kafka operator would get it: it
checks the connection's callback names (`oauth_cb`, `error_cb`...) against `[apache_kafka] callback_allowlist`
and adds the Amazon MSK IAM token for an MSK address with `sasl.mechanism=OAUTHBEARER`. The provider (2.1.0,
pinned) has no public method that returns the config, so `_build_config` is called; `tests/airflow/
test_connections_hook.py` fails if it goes. Callables cannot travel to Spark, so each callback is kept by name
(`mirrorflow.kafka.callbacks` resolves it where a client is built).

The merge rules themselves live in `mirrorflow.config.overrides`, shared with the Spark copy job, which receives
the same settings in an environment variable.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.config.overrides import CALLBACK_KEYS, Side, merge_connection, merged_client, usable_key
from mirrorflow.core.errors import UsageError
from mirrorflow.kafka.callbacks import MSK_IAM

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
    built = _through_hook(conn_id, extra)
    settings = {key: _text(value) for key, value in extra.items() if key not in CALLBACK_KEYS}
    settings.update(_callback_names(conn_id, extra, built))
    return settings


def _through_hook(conn_id: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The provider hook's config for `conn_id` (callbacks vetted and resolved, managed OAuth added)."""
    from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
    from airflow.providers.common.compat.sdk import AirflowOptionalProviderFeatureException

    try:
        built: dict[str, Any] = KafkaBaseHook(kafka_config_id=conn_id)._build_config()  # type: ignore[no-untyped-call]
    except ValueError as err:  # a callback outside the allowlist, or no bootstrap.servers
        raise UsageError(
            f"Airflow connection {conn_id!r}: the Kafka provider refuses it: {err} "
            "(list trusted callbacks in [apache_kafka] callback_allowlist, "
            "AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST)"
        ) from None
    except AirflowOptionalProviderFeatureException as err:  # MSK IAM without the signer installed
        raise UsageError(f"Airflow connection {conn_id!r}: {err}") from None
    except ImportError as err:  # an allowlisted name that does not import here: a retry imports no better
        keys = [key for key in (*CALLBACK_KEYS, "log_cb") if isinstance(extra.get(key), str)]
        named = ", ".join(f"{key} = {extra[key]}" for key in keys)
        raise UsageError(
            f"Airflow connection {conn_id!r} names a callback that cannot be imported here ({named}): {err}; "
            "fix the name, or install its module wherever Mirrorflow's clients run (Airflow workers, the Spark "
            "driver and executors)"
        ) from None
    return built


def _callback_names(conn_id: str, extra: dict[str, Any], built: dict[str, Any]) -> dict[str, str]:
    """Each callback of the hook's config by name: the allowlisted dotted path the connection gave, or
    `msk-iam:<region>` for the MSK IAM token the hook added."""
    from airflow.providers.apache.kafka.hooks.base import MSK_BOOTSTRAP_SERVERS_REGEX

    names: dict[str, str] = {}
    for key in CALLBACK_KEYS:
        if key not in built:
            continue
        if isinstance(extra.get(key), str):
            names[key] = str(extra[key])
            continue
        match = MSK_BOOTSTRAP_SERVERS_REGEX.search(str(extra.get("bootstrap.servers", "")))
        if key == "oauth_cb" and match is not None:
            names[key] = f"{MSK_IAM}{match.group('region').lower()}"
            continue
        raise UsageError(
            f"Airflow connection {conn_id!r}: the Kafka provider adds a {key} Mirrorflow cannot hand to its "
            "clients (Google Managed Kafka's token); name a function of your own that returns the token as "
            f"{key} in the connection's extra, and list it in [apache_kafka] callback_allowlist"
        )
    return names


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

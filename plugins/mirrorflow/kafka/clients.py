"""Client factories: the one place a librdkafka config dict becomes a confluent-kafka client.

Configs arrive fully resolved (secrets revealed) from `mirrorflow.config`; nothing here logs them. Every client
gets Mirrorflow's librdkafka logger (`mirrorflow.kafka.client_logs`) so that none prints raw lines on stderr.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from mirrorflow.kafka.callbacks import resolve_callbacks
from mirrorflow.kafka.client_logs import LoggedAdminClient, with_logger
from mirrorflow.kafka.group_coordinator import remember_settings
from mirrorflow.kafka.operation_error import AUTH_FAILURES_ATTR, client_error_cb, record_auth_failure

# librdkafka warns about consumer-only keys on producers and admins and vice versa; MM2 role configs are
# composed per role already, so only the keys librdkafka refuses outright are dropped here.
_CONSUMER_ONLY = (
    "on_commit",  # a consumer callback (an Airflow connection may name one): producers and admins refuse it
    "group.id",
    "auto.offset.reset",
    "enable.auto.commit",
    "isolation.level",
    "fetch.",
    "max.poll",
)
_PRODUCER_ONLY = ("acks", "linger.ms", "batch.", "compression.", "enable.idempotence", "transactional.id")


def _without(conf: Mapping[str, Any], prefixes: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in conf.items() if not k.startswith(prefixes)}


def _beside(theirs: Any, ours: Callable[[KafkaError], None]) -> Callable[[KafkaError], None]:
    """`ours` (Mirrorflow's error_cb: the authentication diagnosis, the log line), after the config's own
    error_cb (an Airflow connection may name one) when there is one: neither replaces the other."""
    if theirs is None:
        return ours
    named: Callable[[KafkaError], None] = resolve_callbacks({"error_cb": theirs})["error_cb"]

    def both(error: KafkaError) -> None:
        try:
            named(error)
        finally:
            ours(error)

    return both


def admin_client(conf: Mapping[str, Any], *, logger: logging.Logger | None = None) -> AdminClient:
    """librdkafka's own log lines (e.g. every refused connection) go to `logger` (default: Mirrorflow's
    librdkafka logger); the failing call still raises with Kafka's error, which is what an operator needs."""
    settings: dict[str, Any] = dict(_without(conf, _CONSUMER_ONLY + _PRODUCER_ONLY))
    ours, failures = client_error_cb()
    settings["error_cb"] = _beside(settings.get("error_cb"), ours)
    if logger is not None:
        settings["logger"] = logger
    admin = LoggedAdminClient(with_logger(settings))
    setattr(admin, AUTH_FAILURES_ATTR, failures)
    return remember_settings(admin, settings)


def producer(conf: Mapping[str, Any], **overrides: Any) -> Producer:
    settings: dict[str, Any] = {**_without(conf, _CONSUMER_ONLY), **overrides}
    settings["error_cb"] = _beside(settings.get("error_cb"), record_auth_failure)
    return Producer(with_logger(settings))


def consumer(conf: Mapping[str, Any], **overrides: Any) -> Consumer:
    settings: dict[str, Any] = {**_without(conf, _PRODUCER_ONLY), **overrides}
    # assign()-based readers still need a group id for librdkafka; it is never used to commit.
    settings.setdefault("group.id", "mirrorflow-reader")
    settings.setdefault("enable.auto.commit", False)
    return Consumer(with_logger(settings))

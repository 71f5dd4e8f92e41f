"""Client factories: the one place a librdkafka config dict becomes a confluent-kafka client.

Configs arrive fully resolved (secrets revealed) from `mirrorflow.config`; nothing here logs them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from mirrorflow.kafka.errors import record_auth_failure
from mirrorflow.kafka.groups import remember_settings

# librdkafka warns about consumer-only keys on producers and admins and vice versa; MM2 role configs are
# composed per role already, so only the keys librdkafka refuses outright are dropped here.
_CONSUMER_ONLY = (
    "group.id",
    "auto.offset.reset",
    "enable.auto.commit",
    "isolation.level",
    "fetch.",
    "max.poll",
)
_PRODUCER_ONLY = ("acks", "linger.ms", "batch.", "compression.", "enable.idempotence", "transactional.id")


def _without(conf: Mapping[str, str], prefixes: tuple[str, ...]) -> dict[str, str]:
    return {k: v for k, v in conf.items() if not k.startswith(prefixes)}


def admin_client(conf: Mapping[str, str], *, logger: logging.Logger | None = None) -> AdminClient:
    """`logger` takes librdkafka's own log lines (e.g. every refused connection) off stderr; the failing
    call still raises with Kafka's error, which is what an operator needs."""
    settings: dict[str, object] = dict(_without(conf, _CONSUMER_ONLY + _PRODUCER_ONLY))
    settings.setdefault("error_cb", record_auth_failure)
    if logger is not None:
        settings["logger"] = logger
    return remember_settings(AdminClient(settings), settings)


def producer(conf: Mapping[str, str], **overrides: str | int | bool) -> Producer:
    return Producer({"error_cb": record_auth_failure, **_without(conf, _CONSUMER_ONLY), **overrides})


def consumer(conf: Mapping[str, str], **overrides: str | int | bool) -> Consumer:
    settings: dict[str, str | int | bool] = {**_without(conf, _PRODUCER_ONLY), **overrides}
    # assign()-based readers still need a group id for librdkafka; it is never used to commit.
    settings.setdefault("group.id", "mirrorflow-reader")
    settings.setdefault("enable.auto.commit", False)
    return Consumer(settings)

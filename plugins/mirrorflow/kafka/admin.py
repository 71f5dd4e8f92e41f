"""Admin operations on a cluster. So far: waiting until a freshly started broker serves metadata."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from mirrorflow.core.errors import MirrorflowError

# librdkafka reports every refused connection while a broker boots; during a readiness probe that is expected.
_probe_log = logging.getLogger("mirrorflow.kafka.readiness_probe")
_probe_log.addHandler(logging.NullHandler())
_probe_log.propagate = False


def wait_until_ready(bootstrap_servers: str, timeout_s: float, config: Mapping[str, str] | None = None) -> None:
    """Return once the cluster answers a metadata request listing at least one live broker.

    A broker accepts TCP connections before it has registered with the controller; only a metadata response
    that names a broker means topics can be created and produced to.
    """
    deadline = time.monotonic() + timeout_s
    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap_servers,
            "logger": _probe_log,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            **(config or {}),  # security settings of a secured listener
        }
    )
    last_problem = "no answer yet"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise MirrorflowError(
                f"Kafka at {bootstrap_servers} did not answer a metadata request within {timeout_s:.0f}s "
                f"({last_problem}). Check that the brokers run and that the address is reachable."
            )
        try:
            metadata = admin.list_topics(timeout=max(0.1, min(remaining, 2.0)))
        except KafkaException as err:
            last_problem = f"last error: {err.args[0] if err.args else err}"
        else:
            if metadata.brokers:
                return
            last_problem = "the metadata response listed no live broker"
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

"""Fencing a transactional id's previous owner without librdkafka's half-second pause (issue 19).

When the previous owner of a transactional id has a transaction open, the coordinator answers the new owner's
InitProducerId with CONCURRENT_TRANSACTIONS while it aborts that transaction, and librdkafka asks again only after
a fixed 500 ms (its idempotence PID timer, not `retry.backoff.ms`). A continuous copy's run boundary is such a
fence, with the old run nearly always inside a transaction, so those 500 ms were most of what a partition waited
at a boundary with nothing copied. `AbortAhead` sends that first InitProducerId from a short-lived producer with
the same id, which makes the coordinator fence the old owner and abort its transaction, waits `ABORT_AHEAD_S` for
the abort to finish, and closes it; the writer's own `init_transactions` then finds the id idle: one round trip.

Safe by construction: an InitProducerId only ever bumps the id's epoch and aborts what the id has open, and the
short-lived producer is closed before the writer sends its own, so the writer's epoch is the newest. The worst
cases cost what the fence cost before: an abort slower than the wait (the writer's request meets it and waits
500 ms), or no transaction open (the short-lived producer gets an epoch at once and closes unused).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping

from confluent_kafka import KafkaException, Producer

from mirrorflow.kafka.clients import producer as make_producer

ABORT_AHEAD_S = 0.15
"""How long the short-lived producer waits on its InitProducerId (it is connected beforehand): a round trip to the
coordinator and the abort of one transaction (a few markers), tens of milliseconds on a healthy cluster."""


# `Producer.close` tries an abort, which librdkafka refuses while the InitProducerId `fire` sent is pending, and warns.
# A filter set once here and not `warnings.catch_warnings` around the close: that swaps the process's filters and is
# not thread-safe, so with several copy ranges in one process the warning still reached stderr (session 17).
warnings.filterwarnings("ignore", message="Producer abort_transaction failed during close", category=RuntimeWarning)


class AbortAhead:
    """The short-lived producer of `transactional_id` (see the module), created and connected ahead of the fence so
    that `fire` costs the InitProducerId alone. Best-effort throughout: any failure is left to the writer's own
    `init_transactions`, which reports it."""

    def __init__(self, conf: Mapping[str, str], transactional_id: str, topic: str | None, timeout_s: float) -> None:
        settings = {"transactional.id": transactional_id, "enable.idempotence": True, "acks": "all"}
        self._producer: Producer | None = None
        with contextlib.suppress(KafkaException):
            self._producer = make_producer(conf, **settings, **{"transaction.timeout.ms": 60000})
            _ = topic is None or self._producer.list_topics(topic, timeout=timeout_s)

    def fire(self, wait_s: float | None = None) -> None:
        """Send the InitProducerId, give the coordinator `wait_s` (default `ABORT_AHEAD_S`), close the producer."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            producer.init_transactions(ABORT_AHEAD_S if wait_s is None else wait_s)
        except KafkaException:
            pass  # the coordinator is aborting the old owner's transaction, or is slow: the writer's init settles it
        finally:
            producer.close()  # its abort, refused while an init is pending, warns: filtered at import (above)


class _NoAbortAhead(AbortAhead):
    def __init__(self) -> None:
        self._producer = None


NONE: AbortAhead = _NoAbortAhead()
"""A writer that needs no abort ahead: `fire` does nothing."""

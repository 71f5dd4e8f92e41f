"""Kafka failures as operator errors: which cluster, which operation, what Kafka said, what to try."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException

from mirrorflow.core.errors import MirrorflowError

_HINTS = {
    KafkaError._TRANSPORT: (
        "check that the cluster is up, `<alias>.bootstrap.servers` is right and `<alias>.security.protocol` "
        "matches the listener"
    ),
    KafkaError._TIMED_OUT: "the cluster did not answer in time; check it is up, or raise admin.timeout.ms",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "grant the Mirrorflow principal access to the topic",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "grant the Mirrorflow principal the needed cluster permission",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "grant the Mirrorflow principal access to the consumer group",
    KafkaError.SASL_AUTHENTICATION_FAILED: "check the cluster's sasl.* settings",
    KafkaError.INVALID_REPLICATION_FACTOR: (
        "the cluster has fewer brokers than the replication factor asked for: lower replication.factor or "
        "the *.topic.replication.factor keys, or use -1 for the broker default"
    ),
}


# librdkafka reports a refused login only as an error event (served by poll()); the failing call itself says
# "transport failure" or "timed out". The clients of `mirrorflow.kafka.clients` record those events here.
_AUTH_CODES = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL}
_CONNECT_CODES = {KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN}
_AUTH_HINT = (
    "check the cluster's security.protocol, sasl.mechanism and sasl.jaas.config (user and password), or its "
    "ssl.* certificates and key password"
)
# Setting an error_cb stops librdkafka from logging error events itself; they go to its logger's name instead.
_librdkafka_log = logging.getLogger("mirrorflow.kafka.librdkafka")  # client_logs.LIBRDKAFKA_LOGGER
_auth_lock = threading.Lock()
_last_auth_failure: list[str] = []


def record_auth_failure(error: KafkaError) -> None:
    """`error_cb` of our clients: keeps librdkafka's last authentication or TLS failure (it names the broker and
    mechanism, never a credential)."""
    _librdkafka_log.info("librdkafka error event: %s", error.str())
    if error.code() in _AUTH_CODES:
        with _auth_lock:
            _last_auth_failure[:] = [error.str()]


AUTH_FAILURES_ATTR = "_mirrorflow_auth_failures"


def client_error_cb() -> tuple[Callable[[KafkaError], None], list[str]]:
    """An `error_cb` for one client and the list it keeps that client's authentication failures in: an admin
    client serves its events before every call (`mirrorflow.kafka.client_logs`), so a failure may be served
    before `auth_failure_of` asks; kept per client, it is still never blamed on another one."""
    failures: list[str] = []

    def on_error(error: KafkaError) -> None:
        record_auth_failure(error)
        if error.code() in _AUTH_CODES:
            failures[:] = [error.str()]

    return on_error, failures


def auth_failure_of(client: object | None) -> str | None:
    """The authentication failure pending in `client`'s events, if any (admin clients and producers only: a
    consumer's poll would take a record). Only events served by this call, or kept for this very client by
    `client_error_cb`, count, so another client's failure is never blamed on this one."""
    poll = getattr(client, "poll", None)
    if client is None or hasattr(client, "subscribe") or not callable(poll):
        return None
    with _auth_lock:
        _last_auth_failure.clear()
    try:
        poll(0)
    except Exception:  # diagnosing must never hide the original failure
        return None
    with _auth_lock:
        if _last_auth_failure:
            return _last_auth_failure[0]
    own = getattr(client, AUTH_FAILURES_ATTR, None)
    return own[-1] if own else None


class KafkaOperationError(MirrorflowError):
    """A Kafka call failed; carries the Kafka error code so callers can tolerate specific ones.

    `client`, when given, is asked for a pending authentication failure, so that a wrong password is reported
    as such instead of as a transport failure.
    """

    def __init__(
        self, cluster: str, operation: str, error: KafkaError | BaseException, *, client: object | None = None
    ) -> None:
        kafka_error = _kafka_error(error)
        self.code: int | None = kafka_error.code() if kafka_error is not None else None
        detail = kafka_error.str() if kafka_error is not None else f"{type(error).__name__}: {error}"
        hint = _HINTS.get(self.code) if self.code is not None else None
        auth = auth_failure_of(client) if self.code in _CONNECT_CODES else None
        if auth is not None:
            hint = f"authentication failed ({auth}): {_AUTH_HINT}"
        message = f"{operation} on cluster '{cluster}' failed: {detail}"
        super().__init__(f"{message}; {hint}" if hint else message)
        self.cluster = cluster
        self.operation = operation


def _kafka_error(error: KafkaError | BaseException) -> KafkaError | None:
    if isinstance(error, KafkaError):
        return error
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0]
    return None


MOVING_LEADER = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})
"""Answers about a partition whose leader is changing (a topic just created or grown, a broker restarting): asked
again until the caller's timeout, as librdkafka's own fetcher would."""

FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
"""A newer producer with the same transactional id took over: this one can never write again."""


def may_hide_fence(error: BaseException) -> bool:
    """Whether `error` is a transaction commit that failed in a way that may hide a fence: EndTxn racing a newer
    writer's InitProducerId has failed with "Unknown broker error" even for the abort that probes for the fence
    (Kafka 4.3, transaction version 2, a loaded host). Only a newer writer's claim can tell then."""
    return (
        isinstance(error, KafkaOperationError)
        and error.operation == "committing a transaction"
        and error.code == KafkaError.UNKNOWN
    )


def is_fenced(error: BaseException) -> bool:
    """`error`, or an error it was raised from, says a newer producer with the same transactional id fenced ours."""
    seen: BaseException | None = error
    while seen is not None:
        code = seen.code if isinstance(seen, KafkaOperationError) else error_code(seen)
        if code in FENCED_CODES:
            return True
        seen = seen.__cause__
    return False


def error_code(error: BaseException) -> int | None:
    """The Kafka error code inside an exception raised by a confluent-kafka future, if any."""
    kafka_error = _kafka_error(error)
    return kafka_error.code() if kafka_error is not None else None


def kafka_cause(err: BaseException) -> KafkaException:
    """The KafkaException behind `err`: itself, or the one a SystemError was raised from; anything else is raised
    again. confluent-kafka 2.16 can raise `SystemError(<built-in function isinstance> returned a result with an
    exception set)` from a fatal KafkaException (a producer fenced while it flushes): its log callback runs Python
    with that exception still pending. Seen at a continuous handover under load (session 16): the fenced run then
    failed instead of handing over, and Spark would have retried it against the new owner."""
    if isinstance(err, KafkaException):
        return err
    if isinstance(err, SystemError) and isinstance(err.__cause__, KafkaException):
        return err.__cause__
    raise err

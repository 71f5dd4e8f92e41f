"""A refused login reaches the operator as an authentication failure, not as the transport failure librdkafka's
failing call reports; and only the failing client's own events are blamed."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirrorflow.kafka.operation_error import KafkaOperationError, is_fenced, kafka_cause, record_auth_failure

TRANSPORT = KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure"))
REFUSED = "sasl_ssl://b:9093/bootstrap: SASL authentication error: invalid credentials with SASL mechanism SCRAM"


class FakeAdmin:
    """Serves one pending error event on poll(), as librdkafka does for its error callback."""

    def __init__(self, pending: KafkaError | None) -> None:
        self.pending = pending

    def poll(self, timeout: float) -> int:
        if self.pending is not None:
            record_auth_failure(self.pending)
            self.pending = None
        return 0


def test_a_pending_authentication_failure_explains_the_transport_failure() -> None:
    error = KafkaOperationError("B", "listing topics", TRANSPORT, client=FakeAdmin(KafkaError(-169, REFUSED)))
    assert str(error).startswith("listing topics on cluster 'B' failed: Failed to get metadata")
    assert f"authentication failed ({REFUSED}): check the cluster's security.protocol" in str(error)


def test_without_an_authentication_event_the_transport_hint_stays() -> None:
    record_auth_failure(KafkaError(-169, REFUSED))  # another client's failure, earlier
    for client in (FakeAdmin(None), FakeAdmin(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")), None):
        message = str(KafkaOperationError("B", "listing topics", TRANSPORT, client=client))
        assert "authentication" not in message
        assert "security.protocol` matches the listener" in message


def test_a_system_error_raised_from_a_fenced_flush_reads_as_the_fence() -> None:
    """confluent-kafka 2.16 raised SystemError from the fatal _FENCED during a handover's flush (seen under load):
    the copy must see the fence in it, or a handed-over run fails and Spark retries it against the new owner."""
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))
    try:
        try:
            raise fenced
        except KafkaException as err:
            raise SystemError("<built-in function isinstance> returned a result with an exception set") from err
    except SystemError as raised:
        assert kafka_cause(raised) is fenced
        assert is_fenced(KafkaOperationError("B", "flushing records", kafka_cause(raised)))
    assert kafka_cause(fenced) is fenced
    other = SystemError("unrelated")
    with pytest.raises(SystemError, match="unrelated"):
        kafka_cause(other)

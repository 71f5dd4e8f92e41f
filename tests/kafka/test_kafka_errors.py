"""A refused login reaches the operator as an authentication failure, not as the transport failure librdkafka's
failing call reports; and only the failing client's own events are blamed."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from mirrorflow.kafka.operation_error import KafkaOperationError, record_auth_failure

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

"""`offsets.newest_timestamps` asks again for partitions whose leader is moving: a topic that the cycle's topic
step has just created answers NOT_LEADER for a moment (the quiet-partition lookup of a continuous run then gave
every partition a Spark slot of its own: tests/replication/test_copy_quiet.py failed so once under load). The
admin client here is a stand-in answering as a broker would while a leader is being elected."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, NamedTuple

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from mirrorflow.kafka.offsets import newest_timestamps
from mirrorflow.kafka.operation_error import KafkaOperationError


class Info(NamedTuple):
    offset: int
    timestamp: int


class ElectingAdmin:
    """Answers `list_offsets` with `errors[i]` for the i-th request of a partition while there are any left."""

    def __init__(self, errors: dict[int, list[int]]) -> None:
        self.errors = errors
        self.requests: list[list[int]] = []

    def list_offsets(self, request: dict[TopicPartition, Any], request_timeout: float) -> dict[TopicPartition, Any]:
        self.requests.append(sorted(tp.partition for tp in request))
        answers: dict[TopicPartition, Future[Info]] = {}
        for tp in request:
            future: Future[Info] = Future()
            pending = self.errors.get(tp.partition, [])
            if pending:
                future.set_exception(KafkaException(KafkaError(pending.pop(0))))
            else:
                future.set_result(Info(5, 1000 + tp.partition) if tp.partition else Info(-1, -1))
            answers[tp] = future
        return answers


def test_partitions_whose_leader_is_moving_are_asked_again() -> None:
    admin = ElectingAdmin({1: [KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE]})
    found = newest_timestamps(admin, "A", [("t", 0), ("t", 1), ("t", 2)], timeout_s=5)  # type: ignore[arg-type]
    assert found == {("t", 0): -1, ("t", 1): 1001, ("t", 2): 1002}
    assert admin.requests == [[0, 1, 2], [1], [1]], "only the partition without a leader is asked again"


def test_another_error_or_a_leader_that_never_settles_fails_naming_the_partition() -> None:
    admin = ElectingAdmin({2: [KafkaError.TOPIC_AUTHORIZATION_FAILED]})
    with pytest.raises(KafkaOperationError, match="t-2"):
        newest_timestamps(admin, "A", [("t", 2)], timeout_s=5)  # type: ignore[arg-type]
    admin = ElectingAdmin({3: [KafkaError.NOT_LEADER_FOR_PARTITION] * 100})
    with pytest.raises(KafkaOperationError, match="t-3"):
        newest_timestamps(admin, "A", [("t", 3)], timeout_s=0.5)  # type: ignore[arg-type]

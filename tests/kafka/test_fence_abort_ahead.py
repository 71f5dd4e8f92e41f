"""A new owner of a transactional id fences the old one without librdkafka's 500 ms pause (issue 19, run boundaries).

When the old owner has a transaction open, the coordinator answers the new owner's InitProducerId with
CONCURRENT_TRANSACTIONS while it aborts that transaction, and librdkafka retries after a fixed 500 ms, logging the
refusal. With `abort_ahead`, a short-lived producer takes that answer and the writer's own request meets an idle
id. Real brokers; deterministic: the abort is given a whole second, and the writer's librdkafka logs are counted
(they reach Python at its flush and commit; the short-lived producer's may be dropped at its close, so the count
taken when it closes is subtracted, not checked).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from tests.kafka_helpers import create_topic, read_partition

from mirrorflow.kafka import fence
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.local.cluster import LocalClusters

pytestmark = pytest.mark.integration

CONCURRENT = "concurrent"  # in librdkafka's log of a CONCURRENT_TRANSACTIONS answer to InitProducerId


def test_the_writer_fences_an_open_transaction_without_a_refused_init(
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., Any],
    kafka_consumer: Callable[..., Consumer],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Failed first without `abort_ahead` (the writer's InitProducerId refused once, then 500 ms)."""
    conf = {"bootstrap.servers": kafka_clusters.bootstrap("B")}
    topic = f"abort-ahead-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_admin("B"), topic, 1)
    txn_id = f"{topic}-id"
    old = Producer({**conf, "transactional.id": txn_id})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, value=b"open", partition=0)
    assert old.flush(30) == 0  # the transaction is open on the partition
    monkeypatch.setattr(fence, "ABORT_AHEAD_S", 1.0)  # the abort surely ends within the wait
    refused_before: list[int] = []
    real = fence.AbortAhead.fire

    def counted(self: fence.AbortAhead, wait_s: float | None = None) -> None:
        real(self, wait_s)
        refused_before.append(refusals(caplog))

    monkeypatch.setattr(fence.AbortAhead, "fire", counted)
    with caplog.at_level(logging.DEBUG):
        writer = TargetWriter("B", conf, transactional_id=txn_id, timeout_s=30, abort_ahead=True)
    try:
        with pytest.raises(KafkaException):
            old.commit_transaction(10)  # fenced: its transaction was aborted
        writer.begin()
        writer.produce(topic, 0, None, b"new")
        writer.flush()
        writer.commit()
        values = [m.value() for m in read_partition(kafka_consumer("B", {"isolation.level": "read_committed"}), topic)]
        assert values == [b"new"], "the old owner's open transaction is aborted, the writer's committed"
        writer_refusals = refusals(caplog) - (refused_before[0] if refused_before else 0)
        assert writer_refusals == 0, (
            f"the writer's own InitProducerId was refused {writer_refusals} time(s) while the old transaction "
            "aborted (librdkafka then waits 500 ms)"
        )
    finally:
        writer.close()


def refusals(caplog: pytest.LogCaptureFixture) -> int:
    return sum(CONCURRENT in r.getMessage().lower() for r in caplog.records)

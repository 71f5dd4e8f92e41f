"""A runbook writer fenced by a newer process closes quietly: `close()` runs in `KafkaStateStore.locked`'s clean-up,
where librdkafka's flush on a fenced producer raised a raw fatal error over the clear `RunbookFenced` (found by a
CI run of test_runbook_state)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException

from mirrorflow.kafka.runbook_store import TransactionalLog
from mirrorflow.local.cluster import LocalClusters

pytestmark = pytest.mark.integration


def test_a_fenced_runbook_writer_reports_the_fencing_and_closes_quietly(kafka_clusters: LocalClusters) -> None:
    conf = {"bootstrap.servers": kafka_clusters.bootstrap("B")}
    topic = f"fenced-runbook-{uuid.uuid4().hex[:8]}"
    txn_id = f"{topic}-txn"
    older = TransactionalLog("B", conf, topic, txn_id, timeout_s=30)
    older.write([(b"k", b"older")])
    # The older process is mid-write when the newer one starts: its record is queued in an open transaction.
    older._producer.begin_transaction()
    older._producer.produce(topic, key=b"k", value=b"zombie", partition=0)
    newer = TransactionalLog("B", conf, topic, txn_id, timeout_s=30)
    try:
        with pytest.raises(KafkaException, match="fenced"):
            older._producer.commit_transaction(30)
        older.close()  # the producer is in librdkafka's fatal state: flush raises, close must not
    finally:
        newer.close()

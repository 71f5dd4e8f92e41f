"""A fenced or failed transactional writer closes quietly: its `close()` runs in the copy's clean-up, where a raw
librdkafka error would replace the clear one that ended the copy (found by the broker-restart fault test)."""

from __future__ import annotations

import uuid

import pytest

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.local.cluster import LocalClusters

pytestmark = pytest.mark.integration


def test_a_fenced_writer_reports_the_fencing_and_closes_quietly(kafka_clusters: LocalClusters) -> None:
    conf = {"bootstrap.servers": kafka_clusters.bootstrap("B")}
    txn_id = f"fenced-close-{uuid.uuid4().hex[:8]}"
    zombie = TargetWriter("B", conf, transactional_id=txn_id, timeout_s=30)
    zombie.begin()
    zombie.produce(f"fenced-close-{txn_id}", 0, b"k", b"v")
    newer = TargetWriter("B", conf, transactional_id=txn_id, timeout_s=30)
    try:
        with pytest.raises(MirrorflowError, match=r"cluster 'B'.*fenced"):
            zombie.commit()
        zombie.abort()
        zombie.close()  # librdkafka's flush raises on a fenced producer; close must not
    finally:
        newer.close()

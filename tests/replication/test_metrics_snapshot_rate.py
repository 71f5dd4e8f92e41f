"""How often a continuous copy writes its metrics snapshot, on real brokers (issue 17, "bounded is not small").

Every copy start reads its state slots to their ends, the uncleaned tail included: with a snapshot a second per busy
partition, the snapshots were about 40% of those bytes (`make scale-sim`, docs/scaling.md item 1). Readers need
far less: rates go stale only after a minute without a snapshot (`metrics.WINDOW_S`), and a copy start continues
the byte count from the last snapshot, which the run's end still writes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from confluent_kafka import Producer
from tests.replication.conftest import WriteConfig
from tests.replication.helpers import continuous_tasks

from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.kafka.metrics_store import read_snapshots
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.metrics import Snapshot, snapshot_key

pytestmark = pytest.mark.integration

COPY_S = 8.0
"""A run shorter than the snapshot interval: it publishes at its first commit and at its end, nothing between."""


def _copy_while_producing(task: CopyTask, producer: Producer, topic: str, first: int, count: int) -> CopyResult:
    """A continuous run of `COPY_S` while one record goes out every 50 ms (a commit each, the copy being caught up)."""
    outcome: list[CopyResult] = []
    copier = threading.Thread(target=lambda: outcome.append(copy_range(task)))
    copier.start()
    for i in range(first, first + count):
        producer.produce(topic, key=b"k%d" % i, value=b"v" * (i % 7 + 1), partition=0)
        producer.flush(10)
        time.sleep(0.05)
    copier.join(120)
    (result,) = outcome
    return result


@pytest.mark.timeout(300)
def test_a_busy_continuous_copy_writes_few_snapshots_and_the_next_run_continues_the_byte_count(
    kafka_producer: Callable[..., Producer],
    source_topic: str,
    write_config: WriteConfig,
) -> None:
    topic = source_topic
    # `transaction.min.ms` 0: a commit as soon as the copy has caught up, so that commits far outnumber snapshots.
    keys = {"mirrorflow.delivery": "at-least-once", "mirrorflow.copy.transaction.min.ms": "0"}
    (task,) = continuous_tasks(write_config, topic, 1, **keys)
    task = replace(task, run_seconds=COPY_S)
    assert task.metrics_topic is not None
    producer = kafka_producer("A")
    first = _copy_while_producing(task, producer, topic, 0, 60)
    assert first.records == 60 and first.transactions >= 20, first
    key = snapshot_key(task.remote_topic, 0)
    written = [
        Snapshot.decode(value)
        for _p, _o, k, value, _ts in read_to_end(
            "B", task.target_consumer, task.metrics_topic, read_committed=False, timeout_s=30, wait_s=30
        )
        if k == key and value is not None
    ]
    # Before: one snapshot a second, 8-9 in this run. Now: the first commit's (the partition shows at once) and the
    # run's last (every record counted).
    assert len(written) <= 2, [s.values["record-count"] for s in written]
    assert written[-1].values["record-count"] == 60
    assert written[-1].values["byte-count"] == sum(i % 7 + 1 for i in range(60))

    second = _copy_while_producing(task, producer, topic, 60, 20)
    assert second.records == 20
    stored = read_snapshots("B", task.target_consumer, task.metrics_topic, timeout_s=30)
    last = Snapshot.decode(stored[key])
    assert last.values["record-count"] == 80
    assert last.values["byte-count"] == sum(i % 7 + 1 for i in range(80)), "the next run continues the byte count"

"""An exactly-once copy of many small transactions keeps its stored offset map bounded (issue 17): every commit
marker starts a new run, the newest W runs stay exact and older ones are thinned, so the offset-map topic holds at
most W + 2 log2(transactions / W) + 2 live keys for the partition, across a restart that restores the thinned runs.
Translation stays exact for the newest transactions and never skips for older ones."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from tests.kafka_helpers import KafkaKit
from tests.replication.helpers import (
    KEEP_FOREVER,
    a_to_b,
    copied_pairs,
    copy_tasks,
    create_copy_topics,
    live_segments,
    stored_map,
    translate_by_hand,
)

from mirrorflow.config.model import MirrorConfig
from mirrorflow.core import offset_runs
from mirrorflow.replication.copy_range import copy_range

pytestmark = pytest.mark.integration

WINDOW = 4  # exact runs kept; small so that a short copy thins


def produce(kafka: KafkaKit, topic: str, first: int, count: int) -> None:
    producer = kafka.producer("A")
    for i in range(first, first + count):
        producer.produce(topic, value=f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def test_many_small_transactions_keep_the_stored_map_bounded(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(offset_runs, "DEFAULT_EXACT_RUNS", WINDOW)
    topic = kafka.topic("mapbounded")
    flow = a_to_b(write_config, **{"mirrorflow.delivery": "exactly-once"})
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    transactions = 0
    for first, count in ((0, 100), (100, 60)):  # the second run restores the thinned runs and goes on
        produce(kafka, topic, first, count)
        [task] = copy_tasks(flow, topic, batch_records=1)  # one record per transaction
        result = copy_range(task)
        assert (result.records, result.transactions) == (count, count)
        transactions += count
        live = live_segments(flow, topic)
        assert len(live) <= WINDOW + 2 * math.log2(transactions / WINDOW) + 2, (transactions, live)
        assert any(not s.exact for s in live) and all(s.exact for s in live[-WINDOW:]), live

    pairs = copied_pairs(kafka.consumer, topic)
    offset_map = stored_map(flow, topic)
    end = offset_map.downstream_end
    assert end is not None and len(pairs) == transactions
    newest = pairs[-WINDOW][0]
    for upstream in range(pairs[-1][0] + 2):
        true = translate_by_hand(pairs, upstream, end)
        found = offset_map.translate_bounded(upstream)
        assert found is not None and found[0] <= true, (upstream, found, true)
        rereads = sum(1 for _, d in pairs if found[0] <= d < true)
        assert rereads <= found[1], (upstream, found, rereads)
        if upstream >= newest:
            assert found == (true, 0), upstream

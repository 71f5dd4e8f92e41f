"""The map folded ahead of the fence is continued after it (issue 19): the read a run boundary waits for applies
only the map records committed since the read ahead, and ends where a fresh read from the start ends.

On the deployed path the read after the fence folded every remembered run again (5,300 runs, 0.9 s on two busy
cores). Real brokers: copies write map runs, a continuous task reads ahead, more copies commit, then the read
after the fence is compared with a fresh one, record counts included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.replication.conftest import WriteConfig
from tests.replication.helpers import continuous_tasks

from mirrorflow.replication import copy_slots
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyTask
from mirrorflow.replication.state_records import SlottedState

pytestmark = pytest.mark.integration


def copy_more(producer: Producer, task: CopyTask, topic: str, first: int, records: int) -> None:
    """Produce `records` more and copy them in an interval run (its own map runs in the partition's slot)."""
    for i in range(first, first + records):
        producer.produce(topic, value=b"r%d" % i, partition=0)
    assert producer.flush(30) == 0
    result = copy_range(replace(task, end=first + records, run_seconds=None))
    assert result.next_upstream == first + records


@pytest.mark.timeout(300)
def test_the_read_after_the_fence_applies_only_what_was_committed_since_the_read_ahead(
    kafka_producer: Callable[..., Producer],
    source_topic: str,
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (task,) = continuous_tasks(write_config, source_topic, 1)
    producer = kafka_producer("A")
    for n in range(3):
        copy_more(producer, task, source_topic, 20 * n, 20)
    applied: list[int] = []
    real = SlottedState.apply_segments

    def counted(self: SlottedState, records: Iterable[Any], **kwargs: Any) -> Any:
        seen = list(records)
        applied.append(len(seen))
        return real(self, seen, **kwargs)

    monkeypatch.setattr(SlottedState, "apply_segments", counted)
    ahead = copy_slots.state_reader(task)
    assert ahead.read and ahead.progress is not None and ahead.progress.next_upstream == 60
    reader = copy_slots.read_map_ahead(task, ahead)
    ahead_applied = sum(applied)
    assert ahead_applied >= 3, "the read ahead folded the three copies' runs"
    for n in range(3, 5):
        copy_more(producer, task, source_topic, 20 * n, 20)
    applied.clear()
    continued = copy_slots.load_state(task, reader, ahead.fold)
    after_applied = sum(applied)
    applied.clear()
    fresh = copy_slots.load_state(task)
    assert continued.progress == fresh.progress and continued.progress is not None
    assert continued.progress.next_upstream == 100
    assert continued.segments == fresh.segments
    assert continued.map_placement == fresh.map_placement
    assert 0 < after_applied < sum(applied), (
        f"the read after the fence applied {after_applied} map records, a fresh read {sum(applied)}: "
        "the runs folded ahead were folded again"
    )

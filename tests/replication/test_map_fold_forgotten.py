"""The map folded ahead of the fence is continued after it only while the reader still remembers what the fold
read (found by review, session 16).

The read after the fence skips every record below where the fold stopped in each slot (`MapFold.seen`), taking them
as applied already. The reader forgets a partition and reads it again from its start when the partition now ends
below where its reads stopped (a re-created topic) or was last read too long ago (`log_cache`). What it then serves
is a different log: its records below the old position were never applied, and what the fold applied is gone. The
fold continued regardless: it kept the runs of a topic that no longer exists and skipped the new topic's records.
Real brokers; the topic is re-created by hand between the read ahead and the read after the fence.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from tests.kafka_helpers import recreate_topic
from tests.replication.conftest import WriteConfig
from tests.replication.test_map_fold_ahead import copy_more
from tests.replication.test_state_slots import own_flow

from mirrorflow.core.offset_map import Segment
from mirrorflow.core.record_codec import encode_segment
from mirrorflow.core.state_slots import head_slot
from mirrorflow.replication import copy_slots
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
@pytest.mark.parametrize("written", [0, 1], ids=["left-empty", "written-again"])
def test_a_fold_is_not_continued_over_a_partition_the_reader_read_again_from_its_start(
    written: int,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    source_topic: str,
    write_config: WriteConfig,
) -> None:
    flow, sep = own_flow(write_config, topics=source_topic)
    run_control_plane(flow)
    (task,) = plan_copy(
        flow, [SourcePartitions(source_topic, f"A{sep}{source_topic}", 1)], interval=False, run_seconds=300
    )
    producer = kafka_producer("A")
    for n in range(3):
        copy_more(producer, task, source_topic, 20 * n, 20)
    ahead = copy_slots.state_reader(task)
    assert ahead.read
    reader = copy_slots.read_map_ahead(task, ahead)
    assert ahead.fold.seen, "the read ahead folded the map"

    admin = kafka_admin("B")
    count = len(admin.list_topics(task.offset_map_topic, timeout=30).topics[task.offset_map_topic].partitions)
    recreate_topic(admin, task.offset_map_topic, count, {"cleanup.policy": "compact"})
    new_runs = [Segment(60, 500, 20)][:written]
    writer = kafka_producer("B")
    for run in new_runs:
        key, value = encode_segment(task.topic, task.partition, run)
        writer.produce(
            task.offset_map_topic, key=key, value=value, partition=head_slot(task.topic, task.partition, count)
        )
    assert writer.flush(30) == 0

    fresh = copy_slots.load_state(task)  # first: the brokers know the new topic by now
    assert fresh.segments.runs == new_runs
    continued = copy_slots.load_state(task, reader, ahead.fold)
    assert continued.segments == fresh.segments, (
        "the read after the fence kept the folded runs of the deleted topic and skipped the new one's record"
    )

"""Several ranges in one Spark task on real brokers: a failing range stops the ranges copied beside it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from tests.kafka_helpers import create_topic
from tests.replication.conftest import WriteConfig
from tests.replication.helpers import continuous_tasks

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.replication.copy_group import copy_ranges

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_failing_range_stops_its_siblings_and_fails_the_group(
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
    write_config: WriteConfig,
) -> None:
    topic = unique_topic("group")
    create_topic(kafka_admin("A"), topic, 2)
    producer = kafka_producer("A")
    for i in range(100):
        producer.produce(topic, key=b"k%d" % i, value=b"v", partition=i % 2)
    assert producer.flush(30) == 0
    good = continuous_tasks(write_config, topic, 2)
    # A range whose source partition does not exist fails at once; the two good ones would run for 300 s.
    bad = replace(good[0], partition=7, transactional_id=good[0].transactional_id + "-missing")
    started = time.monotonic()
    with pytest.raises((KafkaOperationError, MirrorflowError)) as failure:
        copy_ranges([*good, bad])
    assert "7" in str(failure.value)
    assert time.monotonic() - started < 200, "the sibling ranges kept running after one failed"

"""Review of session 14 (issue 19: reading state ahead of the fence, the claim in the first data transaction,
handing over on any error once a successor's claim is visible), on real brokers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from tests.kafka_helpers import create_topic
from tests.replication.conftest import WriteConfig
from tests.replication.helpers import continuous_tasks

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_setup import load_progress

pytestmark = pytest.mark.integration


@pytest.fixture
def source_topic(kafka_admin: Callable[..., AdminClient], unique_topic: Callable[..., str]) -> str:
    topic = unique_topic("review14")
    create_topic(kafka_admin("A"), topic, 1)
    return topic


@pytest.mark.timeout(300)
def test_a_run_whose_own_first_commit_landed_before_an_error_is_not_taken_for_handed_over(
    kafka_producer: Callable[..., Producer],
    source_topic: str,
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A continuous exactly-once copy's first commit (its claim, now riding with records) reaches the broker, but
    the client reports an error (commit_transaction timing out while EndTxn goes on: librdkafka leaves it to the
    caller). Nobody fenced this run and no successor exists. `_successor_claimed(0)`, asked before any fence
    probe, reads the run's OWN progress: its epoch equals the run's and the run counted no commit, so it takes it
    for "a successor that started from the same progress" and ends the run as handed over: the partition is not
    copied for the rest of the run (nobody else copies it) and the committed batch is missing from the counts.
    Before the change a non-fence error raised (Spark retries from the committed progress)."""
    topic = source_topic
    (task,) = continuous_tasks(write_config, topic, 1)
    producer = kafka_producer("A")
    for i in range(50):
        producer.produce(topic, value=f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    real_commit = TargetWriter.commit
    landed: list[bool] = []

    def commit_then_time_out(writer: TargetWriter) -> None:
        real_commit(writer)
        if writer.transactional and not landed:
            landed.append(True)
            raise KafkaOperationError("B", "committing a transaction", KafkaError(KafkaError._TIMED_OUT))

    monkeypatch.setattr(TargetWriter, "commit", commit_then_time_out)
    outcome: Any
    try:
        outcome = copy_range(task)
    except MirrorflowError as err:
        outcome = err
    assert landed
    stored, _ = load_progress(task)
    assert stored is not None and stored.epoch == 0, stored  # the run's own claim, nobody else's
    assert isinstance(outcome, MirrorflowError), (
        f"no successor exists, yet the run ended as handed over after its own commit: {outcome!r}"
    )

"""At-least-once copies and source transactions, on real brokers: a transaction held open on the source by a
producer the test controls is the deterministic reproduction.

* A restart while a source transaction is open must resume, not claim the source topic was recreated (the
  source bounds once reported the last stable offset as the log end, below what a read_uncommitted copy had
  already copied).
* Records of a source transaction that later aborts never reach the target: at-least-once reads read_committed
  by default, and honours `A.consumer.isolation.level` (read_committed explicitly: only committed records, as
  MM2 copies them).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.kafka_helpers import KafkaKit, read_partition
from tests.replication.helpers import (
    KEEP_FOREVER,
    a_to_b,
    commit_offsets,
    copy_all,
    copy_tasks,
    create_copy_topics,
    failover_config,
)

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.replication.copy_range import CopyStalled, copy_range
from mirrorflow.replication.failover.options import FailoverOptions
from mirrorflow.replication.failover.runbook import run_failover
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane

pytestmark = pytest.mark.integration

AT_LEAST_ONCE = {"mirrorflow.delivery": "at-least-once"}


def open_transaction(kafka: KafkaKit, topic: str, values: list[bytes]) -> Any:
    """A source transactional producer with `values` written in a transaction left open (the caller ends it)."""
    txn: Any = kafka.producer("A", {"transactional.id": f"src-{uuid.uuid4()}", "linger.ms": 0})
    txn.init_transactions(30)
    txn.begin_transaction()
    for value in values:
        txn.produce(topic, value=value, partition=0)
    assert txn.flush(30) == 0
    return txn


def copied_values(kafka: KafkaKit, topic: str) -> list[bytes | None]:
    """Every record value of the remote topic, read_uncommitted: what any consumer of the target can see."""
    consumer = kafka.consumer("B", {"isolation.level": "read_uncommitted"})
    return [m.value() for m in read_partition(consumer, f"A.{topic}", 0)]


def setup(write_config: Callable[..., MirrorConfig], kafka: KafkaKit, isolation: str | None) -> tuple[str, Flow]:
    """A source topic holding one committed record, and the at-least-once flow copying it (with
    `A.consumer.isolation.level = <isolation>` unless None)."""
    topic = kafka.topic("iso")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    producer = kafka.producer("A")
    producer.produce(topic, value=b"committed-0", partition=0)
    assert producer.flush(30) == 0
    body = "" if isolation is None else f"A.consumer.isolation.level = {isolation}\n"
    return topic, a_to_b(write_config, body, **AT_LEAST_ONCE)


@pytest.mark.parametrize("isolation", [None, "read_committed"])
def test_restart_during_an_open_source_transaction_resumes_and_never_copies_aborted_records(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, isolation: str | None
) -> None:
    topic, flow = setup(write_config, kafka, isolation)
    txn = open_transaction(kafka, topic, [f"open-{i}".encode() for i in range(5)])

    copy_all(flow, topic)
    copy_all(flow, topic)  # the restart while the transaction is still open
    txn.abort_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, value=b"committed-1", partition=0)
    txn.commit_transaction(30)
    copy_all(flow, topic)

    assert copied_values(kafka, topic) == [b"committed-0", b"committed-1"]


def test_switching_to_read_committed_during_an_open_transaction_is_not_a_recreated_topic(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """A flow that copied past the last stable offset (read_uncommitted, which the operator may still ask for,
    and every at-least-once copy before read_committed became its default) restarts with the default while the
    source transaction is open: the restart must compare with the true log end, the high watermark."""
    topic, uncommitted = setup(write_config, kafka, "read_uncommitted")
    txn = open_transaction(kafka, topic, [f"open-{i}".encode() for i in range(5)])
    assert copy_all(uncommitted, topic) == 6, "read_uncommitted copies the open transaction's records"

    default = a_to_b(write_config, **AT_LEAST_ONCE)
    assert copy_all(default, topic) == 0
    txn.commit_transaction(30)
    assert copy_all(default, topic) == 0
    assert copied_values(kafka, topic) == [b"committed-0"] + [f"open-{i}".encode() for i in range(5)]


def test_a_planned_failover_at_least_once_is_not_held_by_an_open_source_transaction(
    tmp_path: Path, write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """The drain copies to the end its reader can reach: an at-least-once copy reads read_committed, so its end
    is the last stable offset, and the open transaction's records are counted at risk (not waited for)."""
    topic, group = kafka.topic("iso-fo"), f"iso-fo-{uuid.uuid4().hex[:8]}"
    config = failover_config(
        write_config, kafka.admin("A"), topic, 1, group, "A->B.mirrorflow.delivery = at-least-once\n"
    )
    producer = kafka.producer("A")
    producer.produce(topic, value=b"committed-0", partition=0)
    assert producer.flush(30) == 0
    run_control_plane(config.flow("A->B"), steps={TOPICS})
    assert copy_all(config.flow("A->B"), topic) == 1
    commit_offsets(kafka.admin("A"), group, {(topic, 0): 1})
    txn = open_transaction(kafka, topic, [f"open-{i}".encode() for i in range(5)])
    options = FailoverOptions(
        config=config.path,
        primary="A",
        dr="B",
        groups=group,
        state_dir=str(tmp_path / "state"),
        fence="command",
        fence_command="true",
        fence_verify_seconds=0.5,
        open_transaction_wait_seconds=1.0,
    )
    box: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: box.update(report=run_failover(options)), daemon=True)
    runner.start()
    runner.join(60)
    held = runner.is_alive()
    txn.abort_transaction(30)  # frees a held drain either way
    runner.join(60)

    assert not held, "the drain waited for the open source transaction"
    report = box["report"]
    assert report["completed"], report
    assert [p["records_at_risk"] for p in report["partitions"]] == [5]
    assert copied_values(kafka, topic) == [b"committed-0"]


def test_an_interval_copy_held_short_of_its_end_fails_after_its_idle_limit(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """An end a read_committed reader cannot reach (the high watermark, above an open transaction) is a clear
    error after `idle_limit_s` (the drain's bound), not a wait for the transaction's outcome."""
    topic, flow = setup(write_config, kafka, None)
    txn = open_transaction(kafka, topic, [f"open-{i}".encode() for i in range(5)])
    [task] = copy_tasks(flow, topic, end=6)
    try:
        started = time.monotonic()
        with pytest.raises(CopyStalled, match=r"read nothing for 2 s at offset 1, short of its end 6"):
            copy_range(task, idle_limit_s=2.0)
        assert time.monotonic() - started < 20
    finally:
        txn.abort_transaction(30)
    assert copied_values(kafka, topic) == [b"committed-0"]

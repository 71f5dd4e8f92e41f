"""`topics.await_leaders`: the topic step returns only once the topics it created or grew have a leader for each
partition in this broker's metadata (a heartbeat produced right after 768 state-topic partitions were created
once failed with "Unknown topic or partition" after librdkafka's 30 s, bench-flow-scale). A broker slower than
that cannot be reproduced on one local node, so the metadata answers are scripted here; the live topic step
runs it in tests/replication/test_topic_sync_live.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.topics import await_leaders


def metadata(partitions: dict[str, list[int]]) -> Any:
    """A metadata answer: each topic's partitions by their leader (-1: none yet)."""
    return SimpleNamespace(
        topics={
            name: SimpleNamespace(
                error=None,
                partitions={i: SimpleNamespace(leader=leader, error=None) for i, leader in enumerate(leaders)},
            )
            for name, leaders in partitions.items()
        }
    )


class Admin:
    def __init__(self, answers: list[Any]) -> None:
        self.answers, self.calls = answers, 0

    def list_topics(self, timeout: float) -> Any:
        self.calls += 1
        return self.answers[min(self.calls, len(self.answers)) - 1]


def test_it_waits_until_every_partition_of_every_topic_has_a_leader() -> None:
    admin = Admin(
        [
            metadata({}),  # not in this broker's metadata yet
            metadata({"heartbeats": [1], "state": [1, -1]}),  # one partition without a leader
            metadata({"heartbeats": [1], "state": [1]}),  # a growth not shown yet
            metadata({"heartbeats": [1], "state": [1, 1]}),
        ]
    )
    await_leaders(admin, "B", {"heartbeats": 1, "state": 2}, timeout_s=10)
    assert admin.calls == 4


def test_no_leader_in_time_is_a_clear_error_naming_the_topics() -> None:
    admin = Admin([metadata({"heartbeats": [-1]})])
    with pytest.raises(MirrorflowError, match=r"on 'B' have no leader after 0 s: heartbeats\. Check"):
        await_leaders(admin, "B", {"heartbeats": 1}, timeout_s=0)


def test_nothing_created_asks_nothing() -> None:
    admin = Admin([])
    await_leaders(admin, "B", {}, timeout_s=1)
    assert admin.calls == 0


def test_of_a_grown_topic_only_the_new_partitions_must_have_a_leader() -> None:
    """An old partition whose broker is away is not the topic step's to wait for: copies of the other slots run."""
    admin = Admin([metadata({"state": [-1, 1, -1, 1]}), metadata({"state": [-1, 1, 1, 1]})])
    await_leaders(admin, "B", {"state": 4}, timeout_s=10, first_new={"state": 2})
    assert admin.calls == 2

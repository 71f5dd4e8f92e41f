"""The state topics' segment settings where the cluster refuses them (no broker; review 13).

Before the settings, a principal that may create and write the state topics (or a managed cluster whose policy
fixes segment settings: MSK Serverless does not let a topic set `segment.bytes`) ran the flow. The settings are
an optimisation of start-up reads: a refusal must not stop replication, as MM2 counts a refused creation of its
internal topics as "present".
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.replication.internal_topics import InternalTopic, configure_state_topics


def failed(code: int) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(KafkaException(KafkaError(code)))
    return future


class RefusingAdmin:
    def __init__(self, code: int) -> None:
        self.code = code

    def describe_configs(self, resources: list[Any], **_kw: Any) -> dict[Any, Future[Any]]:
        return {r: failed(self.code) for r in resources}

    def incremental_alter_configs(self, resources: list[Any], **_kw: Any) -> dict[Any, Future[Any]]:
        return {r: failed(self.code) for r in resources}

    def create_topics(self, topics: list[Any], **_kw: Any) -> dict[str, Future[Any]]:
        """A policy that fixes segment settings: a topic asking for one is refused, others are created."""
        self.created = [dict(t.config) for t in topics]
        done: Future[Any] = Future()
        done.set_result(None)
        return {t.topic: failed(self.code) if "segment.bytes" in t.config else done for t in topics}


def state_topic() -> InternalTopic:
    return InternalTopic("mirrorflow.A.progress.internal", "B", "target", "progress", 3, 4)


def test_a_principal_without_describe_configs_still_runs_the_flow() -> None:
    # Before the fix: KafkaOperationError (describing configs ... Topic authorization failed) failed the cycle.
    configured = configure_state_topics(
        RefusingAdmin(KafkaError.TOPIC_AUTHORIZATION_FAILED), "B", [state_topic()], dry_run=False, timeout_s=1.0
    )
    assert configured == []


def test_a_cluster_whose_policy_refuses_segment_settings_still_gets_its_state_topics() -> None:
    # Before the fix: KafkaOperationError (creating topic ... POLICY_VIOLATION): the state topics were never created.
    admin = RefusingAdmin(KafkaError.POLICY_VIOLATION)
    settings = {"segment.bytes": "16777216"}
    assert create_compacted_topic(admin, "B", "mirrorflow.A.progress.internal", 3, 1.0, 4, settings)  # type: ignore[arg-type]
    assert admin.created == [{"cleanup.policy": "compact"}], "created again without the refused settings"

"""A custom `topic.filter.class` written in Python is what discovery uses, on the session's real clusters (issue 21).

The filter keeps the topics whose name ends with a suffix it reads from the flow's settings (as MM2's
`configure(props)` hands a filter the connector's settings). Two topics on A: one only the custom filter accepts
(the flow's `topics` list names the other), and one only the `topics` list accepts. With the class, discovery
plans the first and not the second; without it (same file otherwise), the reverse.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from tests.kafka_helpers import KafkaKit, create_topic

from mirrorflow.config.model import Flow
from mirrorflow.replication.discovery import discover
from mirrorflow.replication.flow_clients import FlowClients

pytestmark = pytest.mark.integration

FILTER = """
class SuffixTopicFilter:
    def __init__(self, settings):
        self.suffix = settings["test.filter.suffix"]

    def should_replicate_topic(self, topic):
        return topic.endswith(self.suffix)
"""


def discovered(flow: Flow) -> list[str]:
    """The source topics discovery plans for the flow (heartbeats aside: MM2 replicates them whatever the filter,
    and another test of the session may have made some)."""
    with FlowClients(flow) as clients:
        plan = discover(flow, clients)
    return sorted(t.topic for t in plan.topics if "heartbeats" not in t.topic)


def test_custom_topic_filter_class_decides_what_discovery_plans(
    kafka: KafkaKit, write_config: Any, eventually: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "issue21_filters.py").write_text(textwrap.dedent(FILTER))
    monkeypatch.syspath_prepend(str(tmp_path))
    chosen, listed = kafka.topic("chosen"), kafka.topic("listed")
    for name in (chosen, listed):
        create_topic(kafka.admin("A"), name)
    body = f"A->B.enabled = true\nA->B.topics = {listed}\nA->B.test.filter.suffix = {chosen[-12:]}\n"
    custom = write_config(body + "A->B.topic.filter.class = issue21_filters.SuffixTopicFilter\n").flow("A->B")
    default = write_config(body).flow("A->B")

    assert eventually(lambda: _expect(discovered(custom), [chosen])) == [chosen]
    assert discovered(default) == [listed]


def _expect(found: list[str], wanted: list[str]) -> list[str]:
    assert found == wanted, found  # a single KRaft node lists a new topic a moment late
    return found

"""The copy job's totals through the flow's metrics topic (replication/job_summary.py), for drivers the Airflow
task cannot reach by file (Spark's cluster deploy mode), against the session's real clusters."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.job_summary import collect_summary, publish_summary
from mirrorflow.replication.metrics import metrics_topic

pytestmark = pytest.mark.integration


def fresh_flow(tmp_path: Path, clusters: LocalClusters) -> Flow:
    """A flow from cluster A under an alias of its own: its metrics topic on B does not exist yet, as for a new
    flow whose topics match nothing yet (the copy runs no range, so nothing created the topic)."""
    alias = f"S{uuid.uuid4().hex[:8]}"
    path = tmp_path / "mm2.properties"
    bootstraps = {alias: clusters.bootstrap("A"), "B": clusters.bootstrap("B")}
    path.write_text(mm2_config_text(bootstraps, f"{alias}->B.enabled = true\n{alias}->B.topics = none-{alias}\n"))
    return load_config(path).flow(f"{alias}->B")


def test_a_summary_written_before_any_metrics_leaves_the_metrics_topic_compacted(
    tmp_path: Path, kafka_clusters: LocalClusters, kafka_admin: Callable[..., AdminClient]
) -> None:
    """Review (issue 22): the summary was produced to a metrics topic that did not exist yet, so the broker
    created it with its defaults (`cleanup.policy=delete`), and every later copy found it present: the snapshots
    and SLO state expired with the retention, tombstones removed nothing, and each read of the topic grew."""
    flow = fresh_flow(tmp_path, kafka_clusters)
    topic = metrics_topic(flow.source)
    assert topic not in kafka_admin("B").list_topics(timeout=10).topics

    publish_summary(flow, "k1", {"records": 0, "ranges": []})

    resource = ConfigResource(ResourceType.TOPIC, topic)
    described = kafka_admin("B").describe_configs([resource])[resource].result(timeout=30)
    assert described["cleanup.policy"].value == "compact"
    assert collect_summary(flow, "k1", 0) == {"records": 0, "partitions": 0}

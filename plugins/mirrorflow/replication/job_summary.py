"""The copy job's totals handed back to the Airflow task through Kafka, in any Spark deploy mode.

A driver in the task's process tree (local and `spark://` masters, client mode) writes a file the task reads.
A driver elsewhere (YARN or Kubernetes, `spark.submit.deployMode=cluster`) cannot, so the task passes a fresh
key and the job writes its totals (never the per-partition list, nor anything secret) under `summary/<key>` to
the flow's metrics topic on the target, which the metrics readers skip (their keys start with `[`). The task
reads it back from the end of that topic (`kafka/tail_record.py`) and tombstones it, so a year of runs leaves
nothing behind once the topic compacts.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.metrics_store import ensure_metrics_topic
from mirrorflow.kafka.tail_record import find_near_end, write_record
from mirrorflow.replication.metrics import flow_metrics_topic

log = logging.getLogger(__name__)

PREFIX = b"summary/"
READ_S = 15.0
COUNTS = (
    "records",
    "bytes",
    "dropped",
    "filtered",
    "dead_lettered",
    "schema_ids_not_ours",
    "transactions",
    "offset_syncs",
    "handed_over",
    "max_latency_ms",
    "avg_latency_ms",
)
"""The copy's totals the Airflow task returns to XCom."""
TOTALS = (*COUNTS, "spark_tasks", "idle_spark_tasks", "idle_partitions", "quiet_partitions", "mode", "flow")


def _topic(flow: Flow) -> str:
    return flow_metrics_topic(flow)


def totals(summary: dict[str, Any]) -> dict[str, Any]:
    """What travels: the totals and the partition count, not the per-partition ranges."""
    out = {key: summary[key] for key in TOTALS if key in summary}
    out["partitions"] = len(summary.get("ranges", []))
    return out


def publish_summary(flow: Flow, key: str, summary: dict[str, Any]) -> None:
    """Write the job's totals under `summary/<key>` (the job's last write). The metrics topic is made first, as
    the copy's ranges make it: a job that copied no range would otherwise have the broker create it with its own
    defaults (`cleanup.policy=delete`), which the ranges would then find present and keep."""
    conf, topic = flow.target_producer.librdkafka(), _topic(flow)
    if not ensure_metrics_topic(flow.target, conf, topic, flow.checkpoints_topic_replication_factor, READ_S):
        raise MirrorflowError(f"the metrics topic '{topic}' on '{flow.target}' could not be created (logged above)")
    value = json.dumps(totals(summary), sort_keys=True).encode()
    write_record(flow.target, conf, topic, PREFIX + key.encode(), value, 30.0)


def collect_summary(flow: Flow, key: str, since_ms: int) -> dict[str, Any] | None:
    """The totals the job wrote under `key` (None, logged, when they cannot be found), then tombstoned."""
    topic, record_key = _topic(flow), PREFIX + key.encode()
    try:  # the copy itself succeeded: missing totals are a warning, never a failed task
        raw = find_near_end(flow.target, flow.target_consumer.librdkafka(), topic, record_key, since_ms, READ_S)
        if raw is not None:
            write_record(flow.target, flow.target_producer.librdkafka(), topic, record_key, None, READ_S)
    except MirrorflowError as err:
        log.warning("flow %s: the copy job's totals could not be read back: %s", flow.name, err)
        return None
    if raw is None:
        log.warning("flow %s: the copy job's totals (%r) are not in '%s' on '%s'", flow.name, key, topic, flow.target)
        return None
    found: dict[str, Any] = json.loads(raw)
    return found

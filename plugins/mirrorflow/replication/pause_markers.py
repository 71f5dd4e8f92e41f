"""Pause markers: how a failover tells every runner of a flow (`mirrorflow run`, the Airflow flow DAGs) to stop
copying, in one place.

A failover writes a marker for the flow it moved clients away from; each runner checks for it before a cycle and
drops the flow while it is there (`mirrorflow unpause` deletes it). By default the marker is a record in the
runbook topic on the flow's target (`checked_pause`, `unpause`; `kafka_state.KafkaStateStore.pause` writes it);
with the air-gapped override (`$MIRRORFLOW_STATE_DIR`, `--state-dir`) it is a file beside the runbook's state
(`write_pause_marker`, `paused_flows`). Either names the clusters' `cluster.id`s, so it applies to those clusters
only. Its own module, below both the flow cycle (which reads markers) and the failover package (which writes
them), so neither imports the other's package back.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from mirrorflow.config.model import Flow
from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.core.runbook_record import (
    RUNBOOK_TOPIC,
    decode_key,
    decode_value,
    pause_applies,
    same_clusters,
)
from mirrorflow.kafka.compacted_log import OpenTransactionError, StalledReadError
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.produce import OutgoingRecord
from mirrorflow.kafka.runbook_store import cluster_id, probe_cluster_id, read_latest, topic_exists
from mirrorflow.replication.flow_clients import FlowClients

PAUSE_MARKER = "paused-flow.json"
DEFAULT_ROOT = Path("var/failover")
"""Where the local override keeps runbook state and marker files when no root is given."""

Clusters = Mapping[str, str | None]
"""`cluster.id` by alias of the runbook's two clusters; None for one that did not answer."""


class PauseUnknown(MirrorflowError):
    """Whether the flow is paused cannot be told now (its target or the runbook topic did not answer)."""


SOURCE_PROBE_S = 10.0
"""How long to wait for the flow source's cluster.id (an unplanned run's source may be gone)."""


def flow_clusters(flow: Flow, clients: FlowClients, *, target_required: bool) -> dict[str, str | None]:
    """`cluster.id` by alias of the flow's clusters; the source's is None when it does not answer in 10 s, the
    target's too unless `target_required` (then its failure is the error)."""
    timeout = clients.timeout_s
    if target_required:
        target: str | None = cluster_id(clients.target_admin, flow.target, timeout)
    else:
        target = probe_cluster_id(clients.target_admin, flow.target, timeout)
    source = probe_cluster_id(clients.source_admin, flow.source, min(timeout, SOURCE_PROBE_S))
    return {flow.source: source, flow.target: target}


def markers(flow: Flow, clusters: Clusters, latest: dict[bytes, bytes]) -> list[bytes]:
    """The marker keys in `latest` that pause `flow` on these clusters (`pause_applies`)."""
    target_id, source_id = str(clusters[flow.target]), clusters.get(flow.source) or ""
    found = []
    for key in latest:
        parts = decode_key(key)
        if parts is not None and pause_applies(parts, flow.source, flow.target, target_id, source_id):
            found.append(key)
    return sorted(found)


PAUSE_CHECK_WAIT_S = 5.0
"""How long a pause check waits behind an open transaction on the runbook topic. A runbook write is one short
transaction, so a longer one is a writer killed inside it, which Kafka aborts only after its 30 s timeout."""
PAUSE_CACHE_S = 5.0
"""How long a loop may reuse a pause check's answer (`max_age_s`): the runbook topic is not read every cycle."""
_CHECKED: dict[tuple[str, str, str], tuple[float, str | None]] = {}


def checked_pause(flow: Flow, clients: FlowClients, max_age_s: float = 0.0) -> str | None:
    """Why a failover paused `flow` (its marker in the runbook topic on its target), or None; `PauseUnknown`
    when that cannot be told now (the target does not answer, or an open transaction holds the topic), so the
    caller skips what it would have run. An answer younger than `max_age_s` in this process is reused."""
    cache_key = (flow.name, _bootstrap(flow.source_admin.librdkafka()), _bootstrap(flow.target_admin.librdkafka()))
    cached = _CHECKED.get(cache_key)
    if cached is not None and time.monotonic() - cached[0] < max_age_s:
        return cached[1]
    clusters = flow_clusters(flow, clients, target_required=False)
    if clusters[flow.target] is None:
        raise PauseUnknown(
            f"flow {flow.name}: '{flow.target}' did not answer (its cluster.id), so whether a failover paused the "
            "flow cannot be told; nothing of it runs now and it is checked again next time"
        )
    reason = pause_reason(flow, clients, clusters)
    _CHECKED[cache_key] = (time.monotonic(), reason)
    return reason


def _bootstrap(conf: dict[str, str]) -> str:
    return conf.get("bootstrap.servers", "")


def pause_reason(flow: Flow, clients: FlowClients, clusters: Clusters) -> str | None:
    """Why a failover paused `flow` (its marker in the runbook topic on its target, for these clusters), or None.
    `clusters`: `flow_clusters(flow, clients, ...)` with the target's id known."""
    conf = flow.target_admin.librdkafka()
    try:
        if not topic_exists(clients.target_admin, flow.target, RUNBOOK_TOPIC, clients.timeout_s):
            return None
        latest = read_latest(flow.target, conf, RUNBOOK_TOPIC, clients.timeout_s, wait_s=PAUSE_CHECK_WAIT_S)
    except OpenTransactionError as err:
        raise PauseUnknown(
            f"flow {flow.name}: an open transaction on {RUNBOOK_TOPIC} on '{flow.target}' (a runbook writer killed "
            f"inside it; Kafka aborts it within about 40 s) hides whether the flow is paused; nothing of it runs "
            f"now and it is checked again next time ({err})"
        ) from None
    except (StalledReadError, KafkaOperationError) as err:  # no leader, a broker that stops answering mid-read
        raise PauseUnknown(
            f"flow {flow.name}: {RUNBOOK_TOPIC} on '{flow.target}' could not be read, so whether the flow is paused "
            f"is unknown; nothing of it runs now and it is checked again next time ({err})"
        ) from None
    for key in markers(flow, clusters, latest):
        value = decode_value(latest[key], f"topic {RUNBOOK_TOPIC} on '{flow.target}'")
        why = str(value.get("reason", "failover"))
        return (
            f"flow {flow.name} is paused by a {why} (marker in topic {RUNBOOK_TOPIC} on '{flow.target}'); "
            f"`mirrorflow unpause CONFIG --flow {flow.name}` resumes it"
        )
    return None


def unpause(flow: Flow, clients: FlowClients) -> bool:
    """Delete `flow`'s pause markers (tombstones); False when there was none. With the source down, the markers
    of the aliases on this target whatever the source's id, unless they name several sources (then say so)."""
    clusters = flow_clusters(flow, clients, target_required=True)
    if not topic_exists(clients.target_admin, flow.target, RUNBOOK_TOPIC, clients.timeout_s):
        return False
    latest = read_latest(flow.target, flow.target_admin.librdkafka(), RUNBOOK_TOPIC, clients.timeout_s)
    keys = markers(flow, clusters, latest)
    sources = {(decode_key(k) or [""] * 5)[4] for k in keys} - {""}
    if not clusters.get(flow.source) and len(sources) > 1:
        raise UsageError(
            f"'{flow.source}' does not answer and {len(sources)} clusters named '{flow.source}' paused {flow.name} "
            f"on '{flow.target}': which one is meant cannot be told; run unpause once '{flow.source}' answers"
        )
    if not keys:
        return False
    clients.target_writer.write([OutgoingRecord(RUNBOOK_TOPIC, 0, key, None) for key in keys])
    forget_checked()
    return True


def resume(flow: Flow, clients: FlowClients, root: Path | None) -> list[str]:
    """Delete every pause marker of `flow` on these clusters, wherever a runner would look (`flow_paused`): its
    marker files under `root` (the local override) and its markers in the runbook topic on its target. Returns
    what was deleted, for the log. What a runbook that completed does for the flow that must run now."""
    gone: list[str] = []
    if root is not None:
        ids = functools.cache(lambda: flow_clusters(flow, clients, target_required=False))
        for marker in sorted(root.glob(f"*/{PAUSE_MARKER}")):
            try:
                named = json.loads(marker.read_text()).get("flow")
            except (OSError, ValueError, AttributeError):
                continue
            if named == flow.name and marker_applies(marker, ids):
                marker.unlink(missing_ok=True)
                gone.append(str(marker))
    if unpause(flow, clients):
        gone.append(f"its marker in topic {RUNBOOK_TOPIC} on '{flow.target}'")
    forget_checked()
    return gone


def forget_checked() -> None:
    """Drop the cached answers of `checked_pause`: a marker was just written or deleted in this process."""
    _CHECKED.clear()


def write_pause_marker(directory: Path, flow: str, reason: str, clusters: Clusters | None = None) -> Path:
    """Record that `flow` must not copy any more: the DAG factory and `mirrorflow run` can honour it through
    `paused_flows`; the operator also disables the flow in the config (the report says so). `clusters` (the
    `cluster.id` by alias) makes the marker apply to those clusters only, not to others with the same aliases."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / PAUSE_MARKER
    body = {"flow": flow, "reason": reason, "since_ms": time.time_ns() // 1_000_000, "clusters": dict(clusters or {})}
    path.write_text(json.dumps(body) + "\n")
    return path


def marker_applies(path: Path, clusters: Callable[[], Clusters] | None) -> bool:
    """A marker file names the clusters it was written for; one of other clusters (same aliases) does not apply.
    A marker without ids (written before they were recorded) applies: pausing wrongly is the lesser harm."""
    try:
        stored = json.loads(path.read_text()).get("clusters") or {}
    except (OSError, ValueError, AttributeError):
        return True
    if clusters is None or not stored or not isinstance(stored, dict):
        return True
    return same_clusters(stored, clusters())


def paused_flows(root: Path = DEFAULT_ROOT) -> dict[str, Path]:
    """Flows paused by a failover under `root`: {flow name: marker file}. Delete the marker to resume the flow."""
    found: dict[str, Path] = {}
    for marker in sorted(root.glob(f"*/{PAUSE_MARKER}")):
        try:
            found[str(json.loads(marker.read_text())["flow"])] = marker
        except (ValueError, KeyError, TypeError):
            continue
    return found

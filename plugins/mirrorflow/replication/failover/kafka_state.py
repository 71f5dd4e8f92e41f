"""Runbook state, reports and pause markers in Kafka (the default; `state.StateStore` is the air-gapped override).

Everything lives in the runbook topic (`mirrorflow.core.runbook_record`) on the runbook flow's target: the DR
cluster of a failover, the primary of a failback, which is also where the paused flow writes. So any process
that can reach both clusters (an Airflow worker on any machine, `mirrorflow run`, the CLI) sees the same state,
and nothing depends on a working directory. Records name the clusters' `cluster.id`s: another pair of clusters
with the same aliases never sees them (its topic is elsewhere, or its ids differ).

Concurrency (`kafka.runbook_store`): the writer of a runbook is transactional, with an id derived from the
runbook; a second process driving the same runbook fences the first, which stops at its next write with a clear
error instead of overwriting newer state, and the second resumes from the last committed state as a re-run after
a kill does. Steps are idempotent, so the step the first process was in is simply run again.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.runbook_record import (
    KEPT_RUNS,
    REPORT,
    RUNBOOK,
    RUNBOOK_TOPIC,
    RunbookId,
    decode_key,
    decode_value,
    encode_value,
    pause_key,
    same_clusters,
)
from mirrorflow.kafka.produce import OutgoingRecord
from mirrorflow.kafka.runbook_store import (
    TransactionalLog,
    cluster_id,
    ensure_runbook_topic,
    probe_cluster_id,
    read_latest,
    topic_exists,
)
from mirrorflow.replication.failover.state import Clusters, RunState, open_state
from mirrorflow.replication.flow_clients import FlowClients

log = logging.getLogger(__name__)

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


class KafkaStateStore:
    """The state of one runbook (`RunbookId`) in the runbook topic on `flow.target`; `locked()` before writing."""

    artifacts: Path | None = None

    def __init__(self, flow: Flow, clients: FlowClients, runbook: RunbookId, clusters: Clusters) -> None:
        self.flow, self.clients, self.runbook = flow, clients, runbook
        self.clusters = dict(clusters)
        self.key = runbook.key()
        self._lease = RunbookId(runbook.direction, runbook.primary, runbook.dr, runbook.holder_id, "", runbook.run)
        self.where = f"topic {RUNBOOK_TOPIC} on '{flow.target}', key {self.key.decode()}"
        self._writer: TransactionalLog | None = None

    def _latest(self) -> dict[bytes, bytes]:
        if not topic_exists(self.clients.target_admin, self.flow.target, RUNBOOK_TOPIC, self.clients.timeout_s):
            return {}
        conf = self.flow.target_admin.librdkafka()
        return read_latest(self.flow.target, conf, RUNBOOK_TOPIC, self.clients.timeout_s)

    def load(self) -> RunState | None:
        return self._state(self._latest())

    def _state(self, latest: dict[bytes, bytes]) -> RunState | None:
        """The stored state; one begun while the source did not answer is adopted (written under our key)."""
        found = [(c.key(), latest[c.key()]) for c in self.runbook.candidates() if c.key() in latest]
        if not found:
            return None
        key, raw = found[0]
        if key != self.key:
            log.info("%s: resuming the runbook begun without the source's cluster.id (%s)", self.where, key.decode())
            self.key = key
        value = decode_value(raw, self.where)
        if not same_clusters(value.get("clusters") or {}, self.clusters):
            log.warning("%s holds a runbook of other clusters (%s): starting afresh", self.where, value["clusters"])
            return None
        try:
            return RunState.from_json(value["state"])
        except (KeyError, TypeError, ValueError) as err:
            raise MirrorflowError(f"{self.where}: unreadable runbook state ({err}); pass --restart") from err

    def open(self, key: dict[str, Any], step_names: list[str], *, restart: bool) -> RunState:
        latest = self._latest()  # after init_transactions: whatever a killed writer left open is aborted
        self._prune(latest)
        return open_state(None if restart else self._state(latest), key, step_names, restart=restart, where=self.where)

    def _write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        if self._writer is None:
            raise MirrorflowError("runbook state written outside locked(): a bug")
        self._writer.write(records)

    def save(self, state: RunState) -> None:
        body = {"state": state.to_json(), "updated_ms": _now_ms(), "completed": state.completed()}
        self._write([(self.key, encode_value(body, self.clusters))])

    def save_report(self, report: dict[str, Any]) -> None:
        """The latest report of this runbook (one record, overwritten): rebuilt from the state anyway."""
        self._write(
            [(self.runbook.key(REPORT), encode_value({"report": report, "updated_ms": _now_ms()}, self.clusters))]
        )

    def pause(self, flow: str, reason: str) -> str:
        """The pause marker of the runbook's flow, on its target: what every runner of the flow checks."""
        key = pause_key(self.flow.source, self.flow.target, self.runbook.holder_id, self.runbook.source_id)
        body = {"flow": flow, "reason": reason, "since_ms": _now_ms(), "runbook": self.runbook.describe()}
        self._write([(key, encode_value(body, self.clusters))])
        return f"topic {RUNBOOK_TOPIC} on '{self.flow.target}', key {key.decode()}"

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The transactional writer of this runbook (fencing any older process that drives it)."""
        rf = self.flow.checkpoints_topic_replication_factor
        ensure_runbook_topic(self.clients.target_admin, self.flow.target, RUNBOOK_TOPIC, rf, self.clients.timeout_s)
        conf = self.flow.target_producer.librdkafka()
        writer = TransactionalLog(
            self.flow.target, conf, RUNBOOK_TOPIC, self._transactional_id(), self.clients.timeout_s
        )
        self._writer = writer
        try:
            yield
        finally:
            self._writer = None
            writer.close()

    def _transactional_id(self) -> str:
        """The same for every process driving this runbook, whatever its working directory or host."""
        digest = hashlib.sha256(self._lease.key()).hexdigest()[:24]
        return f"mirrorflow-runbook-{digest}"

    def _prune(self, latest: dict[bytes, bytes]) -> None:
        """Keep the state bounded: of the finished runs of this direction and pair, the newest `KEPT_RUNS`."""
        mine = self.runbook
        finished: list[tuple[int, list[str]]] = []
        for key, raw in latest.items():
            parts = decode_key(key)
            if parts is None or parts[0] != RUNBOOK or len(parts) != 7 or key == self.key:
                continue
            if parts[1:5] != [mine.direction, mine.primary, mine.dr, mine.holder_id] or parts[6] == mine.run:
                continue
            try:
                value = decode_value(raw, self.where)
            except MirrorflowError:
                continue
            if value.get("completed"):
                finished.append((int(value.get("updated_ms", 0)), parts))
        finished.sort(reverse=True)
        stale = [parts for _, parts in finished[KEPT_RUNS - 1 :]]
        if stale:
            tombstones: list[tuple[bytes, bytes | None]] = []
            for parts in stale:
                run = RunbookId(parts[1], parts[2], parts[3], parts[4], parts[5], parts[6])
                tombstones += [(run.key(RUNBOOK), None), (run.key(REPORT), None)]
            self._write(tombstones)


def _pause_keys(flow: Flow, clusters: Clusters) -> list[bytes]:
    """The markers that pause `flow` on these clusters: written with its source's id, or without one."""
    target_id, source_id = str(clusters[flow.target]), clusters.get(flow.source) or ""
    ids = [source_id, ""] if source_id else [""]
    return [pause_key(flow.source, flow.target, target_id, i) for i in ids]


def pause_reason(flow: Flow, clients: FlowClients, clusters: Clusters) -> str | None:
    """Why a failover paused `flow` (its marker in the runbook topic on its target, for these clusters), or None.
    `clusters`: `flow_clusters(flow, clients, ...)` with the target's id known."""
    if not topic_exists(clients.target_admin, flow.target, RUNBOOK_TOPIC, clients.timeout_s):
        return None
    latest = read_latest(flow.target, flow.target_admin.librdkafka(), RUNBOOK_TOPIC, clients.timeout_s)
    for key in _pause_keys(flow, clusters):
        raw = latest.get(key)
        if raw is None:
            continue
        value = decode_value(raw, f"topic {RUNBOOK_TOPIC} on '{flow.target}'")
        why = str(value.get("reason", "failover"))
        return (
            f"flow {flow.name} is paused by a {why} (marker in topic {RUNBOOK_TOPIC} on '{flow.target}'); "
            f"`mirrorflow unpause CONFIG --flow {flow.name}` resumes it"
        )
    return None


def unpause(flow: Flow, clients: FlowClients) -> bool:
    """Delete `flow`'s pause markers (tombstones); False when there was none."""
    clusters = flow_clusters(flow, clients, target_required=True)
    if pause_reason(flow, clients, clusters) is None:
        return False
    records = [OutgoingRecord(RUNBOOK_TOPIC, 0, key, None) for key in _pause_keys(flow, clusters)]
    clients.target_writer.write(records)
    return True


def _now_ms() -> int:
    return time.time_ns() // 1_000_000

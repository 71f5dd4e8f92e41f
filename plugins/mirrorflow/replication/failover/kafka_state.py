"""Runbook state, reports and pause markers in Kafka (the default; `state.StateStore` is the air-gapped override).
Runners read the markers through `mirrorflow.replication.pause_markers`, which also deletes them (`unpause`).

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
from mirrorflow.kafka.runbook_store import (
    TransactionalLog,
    ensure_runbook_topic,
    read_latest,
    topic_exists,
)
from mirrorflow.replication.failover.state import RunState, open_state
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.pause_markers import SOURCE_PROBE_S, Clusters, forget_checked, markers

log = logging.getLogger(__name__)


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
        """The state a run would resume: None when there is none, or (the CLI) when the stored one is finished
        history (`_finished`)."""
        latest = self._latest()
        found = self._found(latest)
        state = None if found is None else self._state(found)
        return None if state is None or self._finished(state, found, latest) else state

    def _found(self, latest: dict[bytes, bytes]) -> tuple[bytes, dict[str, Any]] | None:
        """This runbook's record: under our key, else under another source id of the same aliases and holder
        (begun while the source did not answer, or we cannot read its id now), which is adopted."""
        mine = [(k, v) for k, v in latest.items() if (p := decode_key(k)) is not None and self.runbook.owns(p)]
        if not mine:
            return None
        exact = [(k, v) for k, v in mine if k == self.key]
        records = [(k, decode_value(v, self.where)) for k, v in exact or mine]
        records = [(k, v) for k, v in records if same_clusters(v.get("clusters") or {}, self.clusters)]
        unfinished = [(k, v) for k, v in records if not v.get("completed")]
        if len(unfinished) > 1:
            keys = ", ".join(k.decode() for k, _ in unfinished)
            raise MirrorflowError(
                f"{self.where}: several unfinished runbooks may be this one ({keys}); the source's cluster.id "
                "would tell which: run again once it answers, or pass --restart to start a new one"
            )
        pick = unfinished or sorted(records, key=lambda kv: int(kv[1].get("updated_ms", 0)))[-1:]
        if not pick:
            log.warning("%s holds runbooks of other clusters only: starting afresh", self.where)
            return None
        key, value = pick[0]
        if key != self.key:
            log.info("%s: resuming the runbook kept under %s", self.where, key.decode())
            self.key = key
        return key, value

    def _state(self, found: tuple[bytes, dict[str, Any]]) -> RunState:
        try:
            return RunState.from_json(found[1]["state"])
        except (KeyError, TypeError, ValueError) as err:
            raise MirrorflowError(f"{self.where}: unreadable runbook state ({err}); pass --restart") from err

    def _finished(
        self, state: RunState, found: tuple[bytes, dict[str, Any]] | None, latest: dict[bytes, bytes]
    ) -> bool:
        """A completed CLI runbook is finished history, not something to resume, once what it did no longer holds:
        its flow was resumed (no pause marker left), or the opposite direction of the pair ran after it (a
        failback after the failover, or the reverse). While it holds, running it again only shows its report.
        DAG runs are never finished here: each run id is its own runbook, and its tasks each see a completed
        prefix of the steps."""
        if self.runbook.run or found is None or not state.completed():
            return False
        if not markers(self.flow, self.clusters, latest):
            return True
        return _opposite_ran_after(self.flow, self.clients, self.runbook, int(found[1].get("updated_ms", 0)))

    def open(self, key: dict[str, Any], step_names: list[str], *, restart: bool) -> RunState:
        latest = self._latest()  # after init_transactions: whatever a killed writer left open is aborted
        self._prune(latest)
        found = None if restart else self._found(latest)
        stored = None if found is None else self._state(found)
        if stored is not None and found is not None:
            if self._finished(stored, found, latest):
                self._archive(found[0], latest)
                stored, self.key = None, self.runbook.key()  # the new runbook under its own key, not the adopted one
            elif stored.completed() and not self.runbook.run:
                self._say_completed(int(found[1].get("updated_ms", 0)))
        return open_state(stored, key, step_names, restart=restart, where=self.where)

    def _say_completed(self, updated_ms: int) -> None:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(updated_ms / 1000))
        log.warning(
            "%s: this %s completed at %s and still holds (its pause marker is in place): its report is shown "
            "again and nothing is redone; --restart runs it anew",
            self.where,
            self.runbook.direction,
            when,
        )

    def _archive(self, key: bytes, latest: dict[bytes, bytes]) -> None:
        """Keep a finished CLI runbook and its report under run `done-<ms>` (pruned with finished DAG runs) and
        free the key for the new one."""
        parts = decode_key(key) or []
        run = f"done-{_now_ms()}"
        moved = RunbookId(parts[1], parts[2], parts[3], parts[4], parts[5], run)
        report = _key_of(parts, REPORT)
        records: list[tuple[bytes, bytes | None]] = [(moved.key(RUNBOOK), latest[key]), (key, None)]
        if report in latest:
            records += [(moved.key(REPORT), latest[report]), (report, None)]
        self._write(records)
        log.info("%s: the finished runbook is kept as run %s; a new one starts", self.where, run)

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
        forget_checked()
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


def _key_of(parts: list[str], kind: str) -> bytes:
    return RunbookId(parts[1], parts[2], parts[3], parts[4], parts[5], parts[6]).key(kind)


def _opposite_ran_after(flow: Flow, clients: FlowClients, runbook: RunbookId, since_ms: int) -> bool:
    """The pair's runbook of the other direction (kept on this flow's source) was written after `since_ms`.
    False when the source does not answer: then only the marker tells."""
    source_id = runbook.source_id
    if not source_id:
        return False
    other = "failback" if runbook.direction == "failover" else "failover"
    theirs = RunbookId(other, runbook.primary, runbook.dr, source_id, runbook.holder_id)
    try:
        if not topic_exists(clients.source_admin, flow.source, RUNBOOK_TOPIC, min(clients.timeout_s, SOURCE_PROBE_S)):
            return False
        latest = read_latest(flow.source, flow.source_admin.librdkafka(), RUNBOOK_TOPIC, clients.timeout_s)
    except MirrorflowError as err:
        log.info("the %s runbook on '%s' could not be read (%s): the pause marker decides", other, flow.source, err)
        return False
    for key, raw in latest.items():
        parts = decode_key(key)
        if (
            parts is not None
            and theirs.owns(parts)
            and int(decode_value(raw, key.decode()).get("updated_ms", 0)) > since_ms
        ):
            return True
    return False


def _now_ms() -> int:
    return time.time_ns() // 1_000_000

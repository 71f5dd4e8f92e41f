"""One control-plane cycle of a flow, in MM2's order, as the one function the CLI and the Airflow tasks call:

  discover -> sync_topics -> create_internal_topics -> sync_configs -> sync_acls -> heartbeat -> copy
  -> checkpoints -> group sync

`dry_run=True` is `mirrorflow plan`: the same reads, the same report, no writes. `FlowSchedule` repeats the
steps at MM2's cadences (`refresh.topics.interval.seconds`, `sync.topic.configs.interval.seconds`,
`sync.topic.acls.interval.seconds`, `emit.heartbeats.interval.seconds`, `emit.checkpoints.interval.seconds`,
`sync.group.offsets.interval.seconds`); all are due at the start, as MM2 runs them when its connectors start.
A disabled feature (`*.enabled=false`) never runs; a disabled topic refresh runs once.

The record copy is not part of this module: callers pass it as `copy`, a `CopyStep` that receives the fresh
plan once remote topics, internal topics, configs and ACLs are in place, and only copies. Checkpoints and
group sync are steps of their own (MM2's checkpoint connector), so they run without a copy too
(`mirrorflow run --no-copy`); in a cycle that copies they come after it and translate what it copied.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.replication.acl_sync import AclSyncReport, sync_acls
from mirrorflow.replication.checkpoints import CheckpointReport, emit_checkpoints
from mirrorflow.replication.config_sync import ConfigSyncReport, sync_configs
from mirrorflow.replication.discovery import FlowPlan, discover
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_rules import FlowRules
from mirrorflow.replication.flow_steps import (
    ACLS,
    CHECKPOINTS,
    CONFIGS,
    COPY,
    GROUPS,
    HEARTBEAT,
    ORDER,
    TOPICS,
    flow_steps,
)
from mirrorflow.replication.group_sync import GroupSyncReport, sync_group_offsets
from mirrorflow.replication.heartbeats import HeartbeatReport, emit_heartbeat
from mirrorflow.replication.internal_topics import (
    InternalTopicsReport,
    create_internal_topics,
    ensure_internal_topics,
    heartbeats_topic,
)
from mirrorflow.replication.pause_markers import (
    Clusters,
    PauseUnknown,
    checked_pause,
    flow_clusters,
    marker_applies,
    paused_flows,
)
from mirrorflow.replication.topic_sync import TopicSyncReport, sync_topics

# The step names live with the flow's step graph (`flow_steps`); they are re-exported here for the callers of
# `run_control_plane(steps=...)`.
__all__ = [
    "ACLS",
    "ALL_STEPS",
    "CHECKPOINTS",
    "CONFIGS",
    "CONTROL_STEPS",
    "COPY",
    "GROUPS",
    "HEARTBEAT",
    "STATE_DIR_ENV",
    "TOPICS",
    "ControlPlaneReport",
    "CopyStep",
    "FlowSchedule",
    "flow_paused",
    "paused_reason",
    "run_control_plane",
    "run_heartbeat_pair",
    "run_loop",
    "state_root_override",
]
CONTROL_STEPS: frozenset[str] = frozenset({TOPICS, CONFIGS, ACLS, HEARTBEAT, COPY})
"""What `run_control_plane` runs unless told otherwise (`mirrorflow plan` previews these)."""
ALL_STEPS: frozenset[str] = CONTROL_STEPS | {CHECKPOINTS, GROUPS}
"""A whole cycle: the control plane, the copy, then the checkpoint connector's two steps."""

STATE_DIR_ENV = "MIRRORFLOW_STATE_DIR"
"""When set: the air-gapped override, a local root of the failover state directories and pause markers. Unset
(the default): runbook state and pause markers live in Kafka (`failover.kafka_state`)."""

CopyStep = Callable[[Flow, FlowPlan, FlowClients], Any]
"""Hook for the record copy: `copy(flow, plan, clients)` returns a JSON-friendly report (dataclass or dict)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControlPlaneReport:
    """What one cycle found and changed; `None` for a step that did not run in this cycle."""

    flow: str
    source: str
    target: str
    dry_run: bool
    started_ms: int
    duration_ms: int
    steps: tuple[str, ...]
    plan: FlowPlan | None = None
    topics: TopicSyncReport | None = None
    internal_topics: InternalTopicsReport | None = None
    configs: ConfigSyncReport | None = None
    acls: AclSyncReport | None = None
    heartbeat: HeartbeatReport | None = None
    copy: Any = None
    checkpoints: CheckpointReport | None = None
    groups: GroupSyncReport | None = None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if dataclasses.is_dataclass(self.copy) and not isinstance(self.copy, type):
            data["copy"] = dataclasses.asdict(self.copy)
        return data


def run_control_plane(
    flow: Flow,
    clients: FlowClients | None = None,
    *,
    steps: Collection[str] = CONTROL_STEPS,
    dry_run: bool = False,
    copy: CopyStep | None = None,
    now_ms: int | None = None,
) -> ControlPlaneReport:
    """Run the due `steps` of one cycle for an enabled flow; each step is idempotent."""
    unknown = set(steps) - ALL_STEPS
    if unknown:
        raise ValueError(f"unknown control-plane steps: {sorted(unknown)}")
    own = clients is None
    clients = clients or FlowClients(flow)
    started = time.monotonic()
    started_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    rules = FlowRules.of(flow)
    ran: list[str] = []
    parts: dict[str, Any] = {}
    try:
        needs_plan = bool({TOPICS, CONFIGS} & set(steps)) or (COPY in steps and copy is not None)
        plan = discover(flow, clients, rules=rules) if needs_plan else None
        enabled = {s.name: s.enabled for s in flow_steps(flow)}
        actions: dict[str, Callable[[], dict[str, Any]]] = {
            TOPICS: lambda: {
                "topics": sync_topics(flow, clients, plan, dry_run=dry_run, rules=rules),  # type: ignore[arg-type]
                "internal_topics": create_internal_topics(
                    flow, clients, dry_run=dry_run, rules=rules, source_partitions=_partitions(plan)
                ),
            },
            CONFIGS: lambda: {"configs": sync_configs(flow, clients, plan, dry_run=dry_run, rules=rules)},  # type: ignore[arg-type]
            ACLS: lambda: {"acls": sync_acls(flow, clients, dry_run=dry_run, rules=rules)},
            HEARTBEAT: lambda: {
                "heartbeat": emit_heartbeat(flow, clients, now_ms=now_ms, dry_run=dry_run, rules=rules)
            },
            COPY: lambda: {"copy": copy(flow, plan, clients)},  # type: ignore[misc,arg-type]
            CHECKPOINTS: lambda: {"checkpoints": emit_checkpoints(flow, clients, dry_run=dry_run)},
            GROUPS: lambda: {"groups": sync_group_offsets(flow, clients, dry_run=dry_run)},
        }
        runnable = {
            TOPICS: plan is not None,
            CONFIGS: plan is not None,  # config and ACL sync report their own switch
            ACLS: True,
            HEARTBEAT: enabled[HEARTBEAT],
            COPY: copy is not None and plan is not None and not dry_run,
            CHECKPOINTS: enabled[CHECKPOINTS],
            GROUPS: enabled[GROUPS],
        }
        for name in ORDER:
            if name in steps and runnable[name]:
                parts.update(actions[name]())
                ran.append(name)
    finally:
        if own:
            clients.close()
    return _report(flow, dry_run, started, started_ms, ran, parts, plan)


def _partitions(plan: FlowPlan | None) -> int:
    """The flow's source partitions, which size its state topics (0: unknown)."""
    return sum(t.partitions for t in plan.topics) if plan is not None else 0


def run_heartbeat_pair(
    flow: Flow,
    clients: FlowClients | None = None,
    *,
    steps: Collection[str] = (TOPICS, HEARTBEAT),
    dry_run: bool = False,
    now_ms: int | None = None,
) -> ControlPlaneReport:
    """A pair MM2 runs only a heartbeat herder for (flow not enabled): its `heartbeats` topic and heartbeats."""
    own = clients is None
    clients = clients or FlowClients(flow)
    started = time.monotonic()
    started_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    ran: list[str] = []
    parts: dict[str, Any] = {}
    try:
        if TOPICS in steps:
            topic = heartbeats_topic(flow)
            parts["internal_topics"] = ensure_internal_topics(flow, clients, (topic,), dry_run=dry_run)
            ran.append(TOPICS)
        if HEARTBEAT in steps and flow.emit_heartbeats_enabled:
            parts["heartbeat"] = emit_heartbeat(flow, clients, now_ms=now_ms, dry_run=dry_run)
            ran.append(HEARTBEAT)
    finally:
        if own:
            clients.close()
    return _report(flow, dry_run, started, started_ms, ran, parts)


def _report(
    flow: Flow,
    dry_run: bool,
    started: float,
    started_ms: int,
    ran: list[str],
    parts: dict[str, Any],
    plan: FlowPlan | None = None,
) -> ControlPlaneReport:
    """The report of either kind of cycle: the steps that ran, their parts, the time since `started`."""
    return ControlPlaneReport(
        flow=flow.name,
        source=flow.source,
        target=flow.target,
        dry_run=dry_run,
        started_ms=started_ms,
        duration_ms=int((time.monotonic() - started) * 1000),
        steps=tuple(ran),
        plan=plan,
        **parts,
    )


class FlowSchedule:
    """When each step of one flow is next due, on a monotonic clock (seconds)."""

    def __init__(self, flow: Flow, *, now: float, heartbeat_only: bool = False, copy: bool = False) -> None:
        intervals: dict[str, float | None] = {TOPICS: None}  # a heartbeat-only pair: its topic, once
        for step in flow_steps(flow):
            wanted = step.name == HEARTBEAT or not heartbeat_only
            if step.enabled and wanted and (copy or step.name != COPY):
                intervals[step.name] = step.every_s
        self.flow = flow
        self.heartbeat_only = heartbeat_only
        self._intervals = intervals
        self._next: dict[str, float] = {step: now for step in intervals}

    def due(self, now: float) -> frozenset[str]:
        return frozenset(step for step, at in self._next.items() if at <= now)

    def done(self, steps: Collection[str], now: float) -> None:
        for step in steps:
            interval = self._intervals.get(step)
            if interval is None:
                self._next.pop(step, None)
            elif step in self._next:
                self._next[step] = now + interval

    def next_due(self) -> float | None:
        return min(self._next.values(), default=None)


def run_loop(
    flows: Sequence[Flow],
    heartbeat_flows: Sequence[Flow] = (),
    *,
    seconds: float | None,
    on_report: Callable[[ControlPlaneReport], None],
    copy: CopyStep | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    paused: Callable[[Flow, FlowClients], str | None] | None = None,
    on_paused: Callable[[str], None] | None = None,
    on_skipped: Callable[[str], None] | None = None,
) -> None:
    """Run the flows (and the heartbeat-only pairs) on their schedules for `seconds` (None: until
    interrupted). Fails on the first error: a cycle that did not complete is never reported as done.

    `paused(flow, its clients)` gives a reason when a failover paused the flow meanwhile: it is dropped (not the
    heartbeat-only pairs) and `on_paused(reason)` says so once. When that cannot be told (`PauseUnknown`), the
    flow's due steps are skipped for this cycle and `on_skipped(line)` (else the log) says so."""
    start = clock()
    deadline = None if seconds is None else start + seconds
    clients: Mapping[str, FlowClients] = {f.name: FlowClients(f) for f in (*flows, *heartbeat_flows)}
    # Heartbeat-only pairs first: their `heartbeats` topics are what the flows' discovery then replicates.
    schedules = [FlowSchedule(f, now=start, heartbeat_only=True) for f in heartbeat_flows] + [
        FlowSchedule(f, now=start, copy=copy is not None) for f in flows
    ]
    try:
        while True:
            for schedule in list(schedules):
                now = clock()
                steps = schedule.due(now)
                if not steps:
                    continue
                flow = schedule.flow
                try:
                    reason = None if paused is None or schedule.heartbeat_only else paused(flow, clients[flow.name])
                except PauseUnknown as err:  # nothing could be written into a target that does not answer
                    (on_skipped or log.warning)(f"skipped this cycle: {err}")
                    schedule.done(steps, clock())
                    continue
                if reason is not None:
                    schedules.remove(schedule)
                    if on_paused is not None:
                        on_paused(reason)
                    continue
                if schedule.heartbeat_only:
                    report = run_heartbeat_pair(flow, clients[flow.name], steps=steps)
                else:
                    report = run_control_plane(flow, clients[flow.name], steps=steps, copy=copy)
                schedule.done(steps, clock())  # like MM2's tasks: the next run one interval after this one
                on_report(report)
            wake = min((t for s in schedules if (t := s.next_due()) is not None), default=None)
            now = clock()
            if deadline is not None and (wake is None or wake >= deadline or now >= deadline):
                if now < deadline:
                    sleep(deadline - now)
                return
            if wake is None:
                return
            if wake > now:
                sleep(wake - now)
    finally:
        for c in clients.values():
            c.close()


def state_root_override(base: Path | None = None) -> Path | None:
    """`$MIRRORFLOW_STATE_DIR` when set (a relative path is taken from `base`: the CLI's working directory, the
    Airflow checkout), else None: runbook state and pause markers are in Kafka, not on any local disk."""
    raw = os.environ.get(STATE_DIR_ENV, "").strip()
    if not raw:
        return None
    root = Path(raw).expanduser()
    return root if root.is_absolute() or base is None else base / root


def flow_paused(flow: Flow, clients: FlowClients, root: Path | None, max_age_s: float = 0.0) -> str | None:
    """Why `flow` must not run (a failover paused it), or None: with the local override (`root`), a marker file
    under `root`; else its marker in the runbook topic on its target. Either applies only to these clusters.
    `PauseUnknown` when it cannot be told now (the target does not answer, or an open transaction holds the
    runbook topic): the caller runs nothing of the flow this time. `max_age_s`: see `checked_pause`."""
    if root is not None:
        reason = paused_reason(flow.name, root, lambda: flow_clusters(flow, clients, target_required=False))
        if reason is not None:
            return reason
    return checked_pause(flow, clients, max_age_s)


def paused_reason(flow_name: str, root: Path, clusters: Callable[[], Clusters] | None = None) -> str | None:
    """Why `flow_name` must not run by a marker file under `root` (the local override), or None. A marker
    written for other clusters (`clusters()`: `cluster.id` by alias, asked only of a marker that names ids)
    does not apply. Deleting the file resumes the flow."""
    marker = paused_flows(root).get(flow_name)
    if marker is None or not marker_applies(marker, clusters):
        return None
    try:
        why = str(json.loads(marker.read_text()).get("reason", "failover"))
    except (OSError, ValueError, AttributeError):
        why = "failover"
    return f"flow {flow_name} is paused by a {why} (marker {marker}); delete the marker to resume it"

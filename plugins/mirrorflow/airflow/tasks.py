"""The callables behind the flow DAGs' tasks: thin shells over `mirrorflow.replication`.

Each one receives only the config path, the flow name and the `--clusters` subset (nothing secret crosses
Airflow's metadata database), loads the flow afresh on the worker, merges credentials from Airflow connections,
calls the same replication function the CLI calls, and returns a small JSON summary for XCom.

In continuous copy mode the copy runs for `mirrorflow.copy.run.seconds`; one `loops` task runs heartbeats,
checkpoints and group sync beside it for the same time, each at its MM2 cadence (`emit.heartbeats.interval.
seconds`, `emit.checkpoints.interval.seconds`, `sync.group.offsets.interval.seconds`): one worker slot, mostly
asleep, instead of three. A DAG run is bounded and the next `@continuous` run takes over. In interval mode each
of the three is a task of its own that runs once.

A flow a failover paused (its marker in the runbook topic on the flow's target, seen from any worker; with the
air-gapped override `$MIRRORFLOW_STATE_DIR`, also a `paused-flow.json` marker under it) skips every task with
the marker's reason, so the copy task downstream skips too; so does a check that cannot tell (the target does
not answer, or an open transaction holds the runbook topic). In continuous mode the heartbeat, checkpoint and
group sync tasks check again before each round and stop when paused, and fail (to be retried) when the check
cannot tell; the copy itself runs until its run ends (`mirrorflow.copy.run.seconds`).

Replication modules are imported inside the callables: the scheduler's DAG parser never loads Kafka clients.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from confluent_kafka import KafkaException

from mirrorflow.airflow.connections import with_connections
from mirrorflow.airflow.embedded import REPO
from mirrorflow.airflow.reports import compact, control_plane_summary, plan_summary, repeated_summary
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow, UnknownFlowError
from mirrorflow.core.errors import MirrorflowError, UsageError

log = logging.getLogger(__name__)

Clusters = Sequence[str] | None


def fail_fast(call: Callable[..., Any]) -> Callable[..., Any]:
    """`call`, with operator errors (a bad config, a missing Airflow connection: `UsageError`) failing the task
    at once: a retry could only fail the same way, and its backoff would hide the cause for many minutes.
    Every other error stays retryable (a broker restart, a network cut)."""

    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except UsageError as err:
            raise AirflowFailException(f"{err} (not retried: fix the cause, then clear the task)") from err

    return run


def find_flow(config_path: str, flow_name: str, clusters: Clusters = None) -> Flow:
    """The flow (or heartbeat-only pair) `flow_name` as the file defines it now."""
    config = load_config(config_path, list(clusters) if clusters else None)
    try:
        return config.flow(flow_name)
    except UnknownFlowError:
        pairs = {f.name: f for f in config.heartbeat_flows}
        if flow_name not in pairs:
            raise
        return pairs[flow_name]


def load_flow(config_path: str, flow_name: str, clusters: Clusters = None) -> Flow:
    """`find_flow` with the credentials of the flow's Airflow connections merged in."""
    return with_connections(find_flow(config_path, flow_name, clusters))


def skip_if_paused(flow: Flow) -> None:
    """AirflowSkipException when a failover paused the flow (nothing may be copied after clients moved). When that
    cannot be told now (`PauseUnknown`: its target does not answer, or an open transaction holds the runbook
    topic) the task fails, and is retried, with the reason: it must neither run unchecked nor pass as a green,
    skipped run while its target is down (an outage must alert)."""
    from mirrorflow.replication.flow_clients import FlowClients
    from mirrorflow.replication.flow_cycle import flow_paused, state_root_override
    from mirrorflow.replication.pause_markers import PauseUnknown

    try:
        with FlowClients(flow) as clients:
            reason = flow_paused(flow, clients, state_root_override(REPO))
    except PauseUnknown as err:
        raise MirrorflowError(
            f"the pause check on cluster '{flow.target}' failed, so the task did not run: {err}"
        ) from None
    if reason is not None:
        log.warning("%s", reason)
        raise AirflowSkipException(reason)


def pause_check(flow: Flow, max_age_s: float = 0.0) -> str | None:
    """Why a failover paused the flow (`flow_paused`), or None: what a loop asks before each round. When that
    cannot be told the task fails, to be retried, as `skip_if_paused` does at its start: ending the rounds would
    stop heartbeats, checkpoints and group sync for the rest of the run behind a green task."""
    from mirrorflow.replication.flow_clients import FlowClients
    from mirrorflow.replication.flow_cycle import flow_paused, state_root_override
    from mirrorflow.replication.pause_markers import PauseUnknown

    try:
        with FlowClients(flow) as clients:
            return flow_paused(flow, clients, state_root_override(REPO), max_age_s)
    except PauseUnknown as err:
        raise MirrorflowError(f"the pause check on cluster '{flow.target}' failed, so the rounds stop: {err}") from None


def repeat(
    step: Callable[[], Any],
    *,
    every: float,
    for_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    stop: Callable[[], str | None] | None = None,
) -> list[Any]:
    """Run `step` now and then every `every` seconds until `for_seconds` have passed; the first failure raises.
    `stop()` is asked before each later round: a reason ends the rounds early (a failover paused the flow)."""
    start = clock()
    deadline = start + for_seconds
    due = start
    reports = [step()]
    while True:
        due += every
        if due >= deadline:
            return reports
        now = clock()
        if due > now:
            sleep(due - now)
        why = stop() if stop is not None else None
        if why is not None:
            log.warning("stopped after %d round(s): %s", len(reports), why)
            return reports
        reports.append(step())


def repeat_each(
    steps: dict[str, tuple[float, Callable[[], Any]]],
    *,
    for_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    stop: Callable[[], str | None] | None = None,
) -> dict[str, list[Any]]:
    """`repeat` for several steps in one thread, each at its own cadence (name -> (every, step)): all run now,
    then each when due, until `for_seconds` have passed; the first failure raises. `stop()` is asked before
    each later round."""
    start = clock()
    deadline = start + for_seconds
    reports: dict[str, list[Any]] = {name: [step()] for name, (_, step) in steps.items()}
    due = {name: start + every for name, (every, _) in steps.items()}
    while due:
        name = min(due, key=lambda n: due[n])
        if due[name] >= deadline:
            return reports
        now = clock()
        if due[name] > now:
            sleep(due[name] - now)
        why = stop() if stop is not None else None
        if why is not None:
            log.warning("stopped after %s: %s", {n: len(r) for n, r in reports.items()}, why)
            return reports
        every, step = steps[name]
        reports[name].append(step())
        due[name] += every
    return reports


def _cadence(flow: Flow, every: float, step: Callable[[], Any]) -> dict[str, Any]:
    """Once in interval mode; at `every` for the copy's run time in continuous mode, checking the pause marker
    before each later round (a cached answer at most `PAUSE_CACHE_S` old)."""
    from mirrorflow.replication.pause_markers import PAUSE_CACHE_S

    started = time.monotonic()
    if flow.copy_mode == "continuous":
        stop = functools.partial(pause_check, flow, PAUSE_CACHE_S)
        reports = repeat(step, every=every, for_seconds=float(flow.copy_run_seconds), stop=stop)
    else:
        reports = [step()]
    summary = repeated_summary(reports, time.monotonic() - started)
    log.info("flow %s: %d run(s) in %.1f s", flow.name, summary["runs"], summary["seconds"])
    return {"flow": flow.name, **summary}


def discover(config_path: str, flow_name: str, clusters: Clusters = None) -> dict[str, Any]:
    """Both clusters are reachable and the flow's topics are known: the plan, as counts."""
    from mirrorflow.replication.discovery import discover as discover_plan
    from mirrorflow.replication.flow_clients import FlowClients

    flow = load_flow(config_path, flow_name, clusters)
    skip_if_paused(flow)
    with FlowClients(flow) as clients:
        summary = plan_summary(discover_plan(flow, clients))
    log.info("flow %s: %s", flow.name, summary)
    return summary


def _control_plane(config_path: str, flow_name: str, clusters: Clusters, step: str) -> dict[str, Any]:
    from mirrorflow.replication.flow_cycle import run_control_plane

    flow = load_flow(config_path, flow_name, clusters)
    skip_if_paused(flow)
    summary = control_plane_summary(run_control_plane(flow, steps={step}))
    log.info("flow %s: %s", flow.name, summary)
    return summary


def sync_topics(config_path: str, flow_name: str, clusters: Clusters = None) -> dict[str, Any]:
    """Create missing remote topics, grow partition counts, create the internal topics."""
    from mirrorflow.replication.flow_cycle import TOPICS

    return _control_plane(config_path, flow_name, clusters, TOPICS)


def sync_configs(config_path: str, flow_name: str, clusters: Clusters = None) -> dict[str, Any]:
    """Topic configs to the target (honours `sync.topic.configs.enabled`)."""
    from mirrorflow.replication.flow_cycle import CONFIGS

    return _control_plane(config_path, flow_name, clusters, CONFIGS)


def sync_acls(config_path: str, flow_name: str, clusters: Clusters = None) -> dict[str, Any]:
    """Topic ACLs to the target (honours `sync.topic.acls.enabled`)."""
    from mirrorflow.replication.flow_cycle import ACLS

    return _control_plane(config_path, flow_name, clusters, ACLS)


def heartbeats(config_path: str, flow_name: str, clusters: Clusters = None) -> dict[str, Any]:
    """`Heartbeat(source, target, now)` into the target's `heartbeats` topic at its cadence."""
    from mirrorflow.replication.flow_clients import FlowClients
    from mirrorflow.replication.flow_cycle import HEARTBEAT, run_control_plane

    flow = load_flow(config_path, flow_name, clusters)
    skip_if_paused(flow)
    if not flow.emit_heartbeats_enabled:
        return _skipped(flow, "emit.heartbeats.enabled = false")
    with FlowClients(flow) as clients:
        return _cadence(
            flow,
            float(flow.emit_heartbeats_interval_seconds),
            lambda: run_control_plane(flow, clients, steps={HEARTBEAT}).heartbeat,
        )


def heartbeat_pair(config_path: str, flow_name: str, clusters: Clusters = None) -> dict[str, Any]:
    """A pair MM2 runs only a heartbeat herder for: its `heartbeats` topic, then heartbeats at the cadence."""
    from mirrorflow.replication.flow_clients import FlowClients
    from mirrorflow.replication.flow_cycle import HEARTBEAT, TOPICS, run_heartbeat_pair

    flow = load_flow(config_path, flow_name, clusters)
    with FlowClients(flow) as clients:
        run_heartbeat_pair(flow, clients, steps={TOPICS})
        if not flow.emit_heartbeats_enabled:
            return _skipped(flow, "emit.heartbeats.enabled = false")
        return _cadence(
            flow,
            float(flow.emit_heartbeats_interval_seconds),
            lambda: run_heartbeat_pair(flow, clients, steps={HEARTBEAT}).heartbeat,
        )


def emit_checkpoints(config_path: str, flow_name: str, clusters: Clusters = None) -> dict[str, Any]:
    """MM2 checkpoints for the flow's groups, translated exactly, at `emit.checkpoints.interval.seconds`.

    One checkpoint store for all rounds of the task, as MM2 loads it once: its own writes keep it current; the
    offset maps are loaded once and then tailed."""
    from mirrorflow.replication.checkpoint_store import CheckpointStore
    from mirrorflow.replication.checkpoints import emit_checkpoints as emit
    from mirrorflow.replication.flow_clients import FlowClients
    from mirrorflow.replication.state_tail import OffsetMapTail

    flow = load_flow(config_path, flow_name, clusters)
    skip_if_paused(flow)
    if not flow.emit_checkpoints_enabled:
        return _skipped(flow, "emit.checkpoints.enabled = false")
    with FlowClients(flow) as clients:
        store = CheckpointStore.for_flow(flow, timeout_s=clients.timeout_s)
        state = OffsetMapTail.for_flow(flow, timeout_s=clients.timeout_s)
        try:
            interval = float(flow.emit_checkpoints_interval_seconds)
            summary = _cadence(flow, interval, lambda: emit(flow, clients, store=store, state=state))
        finally:
            state.close()
    _announce_checkpoints(flow, summary)
    return summary


def _announce_checkpoints(flow: Flow, summary: dict[str, Any]) -> None:
    """The checkpoints asset's event extra: the last round's counts and the lag now (best effort: a lag that
    cannot be read is named, never a reason to fail a task whose checkpoints were written)."""
    from mirrorflow.airflow.assets import annotate, checkpoints_asset
    from mirrorflow.replication.metrics import flow_views

    last = summary.get("last") or {}
    extra: dict[str, Any] = {
        "flow": flow.name,
        "runs": summary.get("runs"),
        "groups": len(last.get("groups") or ()),
        "checkpoints": len(last.get("emitted") or ()),
    }
    try:
        views = flow_views(flow, timeout_s=min(30.0, flow.admin_timeout_ms / 1000), wait_s=5.0)
        extra["lag_records"] = sum(v.lag_records for v in views)
        extra["lag_seconds"] = round(max((v.lag_seconds for v in views), default=0.0), 3)
    except (MirrorflowError, KafkaException) as err:
        extra["lag_error"] = str(err)[:300]
    annotate(checkpoints_asset(flow.name), extra)


def sync_group_offsets(config_path: str, flow_name: str, clusters: Clusters = None) -> dict[str, Any]:
    """Translated offsets into idle target groups, at `sync.group.offsets.interval.seconds`.

    Each round reads the checkpoints topic afresh: the checkpoints come from the `emit_checkpoints` task."""
    from mirrorflow.replication.flow_clients import FlowClients
    from mirrorflow.replication.group_sync import sync_group_offsets as sync

    flow = load_flow(config_path, flow_name, clusters)
    skip_if_paused(flow)
    if not flow.sync_group_offsets_enabled:
        return _skipped(flow, "sync.group.offsets.enabled = false")
    with FlowClients(flow) as clients:
        return _cadence(flow, float(flow.sync_group_offsets_interval_seconds), lambda: sync(flow, clients))


def loops(config_path: str, flow_name: str, clusters: Clusters = None) -> dict[str, Any]:
    """Continuous mode's one loop task: heartbeats, checkpoints and group sync for the copy's run time, each at
    its cadence, checking the pause marker before each round. One failure fails the task (Airflow retries it).
    Group sync reads the checkpoints topic afresh each round, so it sees this task's own checkpoints."""
    from mirrorflow.replication.checkpoint_store import CheckpointStore
    from mirrorflow.replication.checkpoints import emit_checkpoints as emit
    from mirrorflow.replication.flow_clients import FlowClients
    from mirrorflow.replication.flow_cycle import run_control_plane
    from mirrorflow.replication.flow_steps import CHECKPOINTS, GROUPS, HEARTBEAT, flow_steps
    from mirrorflow.replication.group_sync import sync_group_offsets as sync
    from mirrorflow.replication.pause_markers import PAUSE_CACHE_S
    from mirrorflow.replication.state_tail import OffsetMapTail

    flow = load_flow(config_path, flow_name, clusters)
    skip_if_paused(flow)
    started = time.monotonic()
    beside = [s for s in flow_steps(flow) if s.beside_copy]  # heartbeat, checkpoints, groups: in step order
    with FlowClients(flow) as clients, contextlib.ExitStack() as stack:
        calls: dict[str, Callable[[], Any]] = {
            HEARTBEAT: lambda: run_control_plane(flow, clients, steps={HEARTBEAT}).heartbeat,
            GROUPS: lambda: sync(flow, clients),
        }
        if flow.emit_checkpoints_enabled:
            store = CheckpointStore.for_flow(flow, timeout_s=clients.timeout_s)
            state = OffsetMapTail.for_flow(flow, timeout_s=clients.timeout_s)
            stack.callback(state.close)
            calls[CHECKPOINTS] = lambda: emit(flow, clients, store=store, state=state)
        steps = {s.tasks[0]: (s.every_s or 0.0, calls[s.name]) for s in beside if s.enabled}
        stop = functools.partial(pause_check, flow, PAUSE_CACHE_S)
        reports = repeat_each(steps, for_seconds=float(flow.copy_run_seconds), stop=stop)
    seconds = time.monotonic() - started
    summary: dict[str, Any] = {"flow": flow.name}
    for s in beside:
        name = s.tasks[0]
        summary[name] = (
            repeated_summary(reports[name], seconds) if name in reports else {"skipped": f"{s.switch} = false"}
        )
    log.info("flow %s: %s", flow.name, {n: len(r) for n, r in reports.items()})
    if "emit_checkpoints" in reports:
        _announce_checkpoints(flow, summary["emit_checkpoints"])
    return summary


def broken_flow(message: str) -> NoReturn:
    """The one task of a flow whose DAG could not be built: running it shows why."""
    raise MirrorflowError(message)


def _skipped(flow: Flow, reason: str) -> dict[str, Any]:
    log.info("flow %s: skipped, %s", flow.name, reason)
    return {"flow": flow.name, "skipped": compact(reason)}

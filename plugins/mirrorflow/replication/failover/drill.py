"""DR drills: the failover runbook rehearsed on a schedule, with the evidence kept.

A drill is a dry run of `mirrorflow failover --primary A --dr B` (reads only: nothing is fenced, moved or paused)
plus three checks an auditor asks for:
* groups: every consumer group would resume on B with an exact translation, so 0 records are read again (a group
  the runbook would skip for lack of one fails the drill);
* fence: the fence the drill is told to use (`mirrorflow.drill.fence`) could be applied now: `acl` needs an
  authorizer on A, `command` an executable `mirrorflow.drill.fence.command`; `none` fails (an unfenced failover
  has no data-loss bound);
* reverse: the flow B->A is enabled, so the way home (failback) is armed.
A dry run the runbook refuses (a gate fails: A unreachable, the groups already active on B, ...) adds a failed
"dry run" check, so the refusal is kept as a failed drill instead of leaving the previous drill as the newest.

Each drill's report (checks, counts, the dry run's RTO) is kept where the runbook state lives, the compacted
`mirrorflow-runbook.internal` topic on B, in `mirrorflow.drill.history` rotating keys per pair: bounded whatever
the schedule, and whatever the history was before (the slots beyond a lowered history are deleted).
"""

from __future__ import annotations

import json
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.runbook_record import RUNBOOK_TOPIC, decode_key, drill_key, is_drill_of
from mirrorflow.kafka.acls import SecurityDisabled, describe_topic_acls
from mirrorflow.kafka.produce import OutgoingRecord
from mirrorflow.kafka.runbook_store import cluster_id, ensure_runbook_topic, read_latest, topic_exists
from mirrorflow.replication.failover.options import options_from_values
from mirrorflow.replication.failover.runbook import FailoverFailed, run_failover
from mirrorflow.replication.flow_clients import FlowClients


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def groups_check(report: dict[str, Any]) -> Check:
    """Passes only when every group would resume with 0 records read again: a group the runbook would skip,
    or one whose translation re-reads ("re-read", or "conservative (<= N re-reads)" in a thinned run of the
    offset map), fails the drill and is named with its row's status."""
    skipped = [str(g.get("group", g)) if isinstance(g, dict) else str(g) for g in report.get("skipped_groups", [])]
    rows = report.get("groups", [])
    moved = sorted({str(g["group"]) for g in rows})
    rereading: dict[str, str] = {}
    for row in rows:
        status = str(row.get("status", ""))
        if status == "re-read" or status.startswith("conservative"):
            rereading.setdefault(str(row["group"]), f"{row.get('topic')}-{row.get('partition')} {status}")
    if skipped:
        return Check("groups", False, f"no exact translation (they would read again): {', '.join(sorted(skipped))}")
    if rereading:
        named = "; ".join(f"{group} ({where})" for group, where in sorted(rereading.items()))
        return Check("groups", False, f"would read records again: {named}")
    return Check("groups", True, f"{len(moved)} group(s) resume exactly: {', '.join(moved) or 'none committed'}")


def fence_check(flow: Flow, clients: FlowClients) -> Check:
    method = flow.drill_fence
    if method == "acl":
        try:
            describe_topic_acls(clients.source_admin, flow.source, clients.timeout_s)
        except SecurityDisabled:
            return Check("fence", False, f"'{flow.source}' has no authorizer: an ACL fence cannot stop its producers")
        return Check("fence", True, f"'{flow.source}' has an authorizer: the ACL fence can be applied")
    if method == "command":
        command = flow.drill_fence_command or ""
        program = shlex.split(command)[0] if command.strip() else ""
        if not program or shutil.which(program) is None:
            return Check("fence", False, f"fence command {program or '(unset)'!r} is not an executable on this worker")
        return Check("fence", True, f"fence command {program!r} is executable here")
    return Check("fence", False, "mirrorflow.drill.fence = none: a failover without a fence has no data-loss bound")


def reverse_check(config: MirrorConfig, flow: Flow) -> Check:
    reverse = f"{flow.target}->{flow.source}"
    if any(f.name == reverse for f in config.flows):
        return Check("reverse", True, f"{reverse} is enabled: failback is armed")
    return Check("reverse", False, f"{reverse} is not enabled: after a failover nothing replicates back")


def run_drill(
    config_path: str,
    flow_name: str,
    clusters: list[str] | None = None,
    prepare_flow: Callable[[Flow], Flow] | None = None,
) -> dict[str, Any]:
    """One drill of flow `flow_name` (A->B: clients would move from A to B): the dry run, the checks, and the
    report kept on B. The report says `passed`; the caller decides how loudly to fail. `prepare_flow` merges
    credentials the file does not hold (the Airflow connections the flow names), as for the runbook."""
    config = load_config(config_path, clusters=clusters or None)
    flow = (prepare_flow or (lambda f: f))(config.flow(flow_name))
    options = options_from_values(
        {"primary": flow.source, "dr": flow.target, "dry_run": True, "mode": "planned", "fence": "none"},
        config=config_path,
        direction="failover",
        state_dir=None,
    )
    started = time.time()
    refused: list[Check] = []
    try:
        dry_run = run_failover(options, prepare_flow=prepare_flow)
    except FailoverFailed as err:  # a refused dry run is a failed drill: its report is evidence too
        dry_run = err.report
        refused.append(Check("dry run", False, str(err)))
    with FlowClients(flow) as clients:
        checks = [*refused, groups_check(dry_run), fence_check(flow, clients), reverse_check(config, flow)]
        report = {
            "flow": flow.name,
            "at_ms": int(started * 1000),
            "passed": all(c.passed for c in checks),
            "checks": [asdict(c) for c in checks],
            "groups": len({g["group"] for g in dry_run.get("groups", [])}),
            "partitions": len(dry_run.get("partitions", [])),
            "rto_seconds": dry_run.get("rto_seconds"),
            "seconds": round(time.time() - started, 1),
        }
        keep(flow, clients, report)
    return report


def _slots(flow: Flow, clients: FlowClients, holder: str) -> dict[int, dict[str, Any]]:
    """The pair's kept drill reports by slot."""
    if not topic_exists(clients.target_admin, flow.target, RUNBOOK_TOPIC, clients.timeout_s):
        return {}
    latest = read_latest(flow.target, flow.target_admin.librdkafka(), RUNBOOK_TOPIC, clients.timeout_s)
    found = {}
    for key, value in latest.items():
        parts = decode_key(key)
        if parts is not None and is_drill_of(parts, flow.source, flow.target, holder) and parts[4].isdigit():
            try:
                report = json.loads(value)
            except ValueError:
                continue
            if isinstance(report, dict):
                found[int(parts[4])] = report
    return found


def _history(flow: Flow, clients: FlowClients, holder: str) -> list[dict[str, Any]]:
    return sorted(_slots(flow, clients, holder).values(), key=lambda r: int(r.get("seq", 0)))


def keep(flow: Flow, clients: FlowClients, report: dict[str, Any]) -> None:
    """Store `report` as the pair's newest drill, keeping the `drill_history` newest in slots `seq % history`
    (the oldest is overwritten). When the history was changed since the last drill, the reports still kept move
    to their slots under the new history and the slots beyond it are deleted (tombstones): lowered, the history
    would otherwise keep its old slots forever (and overwrite a newer report than the oldest)."""
    holder = cluster_id(clients.target_admin, flow.target, clients.timeout_s)
    slots = _slots(flow, clients, holder)
    seq = max((int(r.get("seq", 0)) for r in slots.values()), default=0) + 1
    report["seq"] = seq
    ensure_runbook_topic(
        clients.target_admin, flow.target, RUNBOOK_TOPIC, flow.checkpoints_topic_replication_factor, clients.timeout_s
    )
    size = flow.drill_history
    wanted = {seq % size: report}
    for kept in slots.values():
        if seq - size < int(kept.get("seq", 0)) < seq:
            wanted[int(kept["seq"]) % size] = kept
    records = [
        OutgoingRecord(RUNBOOK_TOPIC, 0, drill_key(flow.source, flow.target, holder, slot), json.dumps(kept).encode())
        for slot, kept in sorted(wanted.items())
        if kept is report or slots.get(slot) != kept
    ]
    records += [  # slots no kept report lives in any more: beyond a lowered history, or left by a move
        OutgoingRecord(RUNBOOK_TOPIC, 0, drill_key(flow.source, flow.target, holder, slot), None)
        for slot in sorted(set(slots) - set(wanted))
    ]
    clients.target_writer.write(records)


def history(config_path: str, flow_name: str, clusters: list[str] | None = None) -> list[dict[str, Any]]:
    """The kept drills of a flow, oldest first."""
    flow = load_config(config_path, clusters=clusters or None).flow(flow_name)
    with FlowClients(flow) as clients:
        return _history(flow, clients, cluster_id(clients.target_admin, flow.target, clients.timeout_s))


def last_drill(flow: Flow, timeout_s: float) -> dict[str, Any] | None:
    """The newest kept drill of `flow` in a few fields (the dashboard's card), or None when none was kept."""
    with FlowClients(flow) as clients:
        clients.timeout_s = min(clients.timeout_s, timeout_s)
        kept = _history(flow, clients, cluster_id(clients.target_admin, flow.target, clients.timeout_s))
    if not kept:
        return None
    newest = kept[-1]
    failed = [str(c["name"]) for c in newest.get("checks", []) if not c.get("passed")]
    return {"at_ms": newest.get("at_ms"), "passed": bool(newest.get("passed")), "failed": failed}


def render(report: dict[str, Any]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(report["at_ms"]) / 1000))
    lines = [f"drill {report['flow']} at {when}: {'PASSED' if report['passed'] else 'FAILED'}"]
    lines += [f"  {'ok  ' if c['passed'] else 'FAIL'} {c['name']}: {c['detail']}" for c in report["checks"]]
    return "\n".join(lines)


class DrillFailed(MirrorflowError):
    """A drill whose checks did not all pass (its report is kept)."""

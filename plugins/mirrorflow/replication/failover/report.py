"""The evidence a failover leaves: JSON (the `failover --json` contract, docs/design.md §6) and Markdown, from the
state.

Per group and partition: the translated offset, the group's lag (records it had not read at the cutover) and
the records at risk (records it had not read that are not on the target). Per partition: the fenced source end,
what the copy reached, records at risk. Step statuses and timings; RTO = the time of the steps up to and
including the redirect (clients can resume once it is done), summed over resumed runs.
"""

from __future__ import annotations

import json
import time
from typing import Any

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.offsets import list_offsets
from mirrorflow.replication.copy_task import flow_reads_committed
from mirrorflow.replication.failover.state import DONE, PLANNED, SKIPPED
from mirrorflow.replication.failover.step import STEP_NAMES, Context

CONSUMER_CONTRACT = (
    "consumers on the target must read with isolation.level=read_committed: exactly-once holds for them only "
    "(a read_uncommitted consumer also sees the records of aborted copy transactions)"
)
RTO_STEPS = STEP_NAMES[: STEP_NAMES.index("redirect") + 1]
"""The steps the RTO counts: up to and including the redirect (arming the reverse flow comes after clients moved)."""
REPORT_JSON = "report.json"
REPORT_MD = "report.md"


def build_report(ctx: Context) -> dict[str, Any]:
    state, opts = ctx.state, ctx.options
    steps = [
        {
            "name": s.name,
            "status": s.status,
            "started_ms": s.started_ms,
            "duration_ms": s.duration_ms,
            "attempts": s.attempts,
            "error": s.error,
            "detail": s.result,
        }
        for s in state.steps.values()
    ]
    fence_result = state.result("fence")
    verified = "verify_fence" in state.steps and state.step("verify_fence").status == DONE
    fenced = bool(fence_result.get("fenced")) and verified
    would_fence = opts.dry_run and opts.mode == "planned" and opts.fence != "none"
    drain = state.result("drain")
    partitions: list[dict[str, Any]] = list(drain.get("partitions", []))
    after_cutover = (
        _writes_after_cutover(ctx, partitions) if not fenced and opts.mode == "planned" and not opts.dry_run else {}
    )
    for p in partitions:
        extra = after_cutover.get((p["topic"], p["partition"]))
        if extra:
            p["written_after_cutover"] = extra
    at_risk = {(p["topic"], p["partition"]): p for p in partitions}
    commit = state.result("commit_offsets")
    groups = [
        _group_row(row, at_risk.get((row["topic"], row["partition"]), {}), opts.mode)
        for row in commit.get("offsets", [])
    ]
    rto_ms = sum(
        s.duration_ms for s in state.steps.values() if s.name in RTO_STEPS and s.status in (DONE, SKIPPED, PLANNED)
    )
    bound = _loss_bound(ctx, partitions, fenced=fenced, would_fence=would_fence)
    return {
        "kind": opts.direction,
        "primary": opts.primary,
        "dr": opts.dr,
        "from": ctx.flow.source,
        "to": ctx.flow.target,
        "flow": ctx.flow.name,
        "mode": opts.mode,
        "dry_run": opts.dry_run,
        "completed": state.completed() and not opts.dry_run,
        "fence": {"method": opts.fence, "status": "fenced" if fenced else "would fence" if would_fence else "unfenced"},
        "redirect": {"method": opts.redirect, **state.result("redirect")},
        "data_loss_bound_records": bound,
        "rto_seconds": round(rto_ms / 1000, 3),
        "steps": steps,
        "groups": groups,
        "skipped_groups": commit.get("skipped_groups", state.result("preflight").get("skipped_groups", [])),
        "partitions": partitions,
        "consumer_contract": CONSUMER_CONTRACT,
        "state_dir": ctx.store.where,
        "generated_ms": time.time_ns() // 1_000_000,
    }


def _group_row(row: dict[str, Any], part: dict[str, Any], mode: str) -> dict[str, Any]:
    """One committed group offset with its lag at the cutover and the records it may never see (`part`: the
    drained partition it reads, empty when the drain did not reach it)."""
    end, copied = part.get("source_end"), part.get("copied_to")
    lag = None if end is None else max(0, end - row["upstream_offset"])
    risk: int | str | None
    if isinstance(part.get("records_at_risk"), str) or (end is None and mode == "unplanned"):
        risk = "unknown"
    elif end is None or copied is None:
        risk = None
    else:
        # A transaction still open at the fence put records past the drained end that may yet commit.
        reach = max(end, copied + int(part.get("records_at_risk") or 0))
        risk = max(0, reach - max(copied, row["upstream_offset"]))
    return {**{k: v for k, v in row.items() if k != "metadata"}, "lag": lag, "records_at_risk": risk}


def _loss_bound(ctx: Context, partitions: list[dict[str, Any]], *, fenced: bool, would_fence: bool) -> int | str | None:
    """`data_loss_bound_records`: records the clients may never see on the target, or why it cannot be told."""
    opts = ctx.options
    totals = [p.get("records_at_risk") for p in partitions]
    bound: int | str | None
    if opts.mode == "planned":
        # Fenced: 0 unless a transaction was still open at the fence (its records are counted per partition).
        bound = (
            sum(int(p.get("records_at_risk") or 0) for p in partitions)
            if fenced
            else 0
            if would_fence
            else "unbounded: the primary was not fenced; writes after the cutover are not on the target"
        )
    else:
        bound = (
            "unknown" if any(isinstance(t, str) for t in totals) or not partitions else sum(int(t or 0) for t in totals)
        )
    if opts.mode == "unplanned" and opts.dry_run:
        lag = ctx.state.result("preflight").get("lag", {})
        bound = sum(v["records"] for v in lag.values()) if lag else bound
    return bound


def _writes_after_cutover(ctx: Context, partitions: list[dict[str, Any]]) -> dict[tuple[str, int], int]:
    """Unfenced planned failover: records the old primary accepted after the drain snapshot (not on the target)."""
    if not partitions:
        return {}
    wanted = [(p["topic"], p["partition"]) for p in partitions]
    try:
        now = list_offsets(
            ctx.clients.source_admin,
            ctx.flow.source,
            wanted,
            latest=True,
            read_committed=flow_reads_committed(ctx.flow),
            timeout_s=ctx.timeout_s,
        )
    except MirrorflowError:
        return {}
    return {
        (p["topic"], p["partition"]): now[(p["topic"], p["partition"])] - p["source_end"]
        for p in partitions
        if now.get((p["topic"], p["partition"]), 0) > p["source_end"]
    }


def write_report(ctx: Context, report: dict[str, Any]) -> None:
    if ctx.state_dir is None:  # state in Kafka: the report is kept there (runbook._keep_report)
        return
    ctx.state_dir.mkdir(parents=True, exist_ok=True)
    (ctx.state_dir / REPORT_JSON).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    (ctx.state_dir / REPORT_MD).write_text(render_markdown(report))


def render_markdown(report: dict[str, Any]) -> str:
    title = f"# {report['kind'].capitalize()} {report['from']} -> {report['to']} ({report['mode']}"
    title += ", dry run)" if report["dry_run"] else ")"
    lines = [
        title,
        "",
        f"- flow: `{report['flow']}`; completed: {'yes' if report['completed'] else 'no'}",
        f"- fence: {report['fence']['method']} — **{report['fence']['status']}**",
        f"- redirect: {report['redirect'].get('method', 'none')}",
        f"- data-loss bound (records): {report['data_loss_bound_records']}",
        f"- RTO: {report['rto_seconds']} s",
        f"- {report.get('consumer_contract', CONSUMER_CONTRACT)}",
        "",
        "## Steps",
        "",
        "| step | status | seconds | attempts | note |",
        "|---|---|---:|---:|---|",
    ]
    for s in report["steps"]:
        note = s["error"] or s["detail"].get("reason") or s["detail"].get("note") or ""
        lines.append(f"| {s['name']} | {s['status']} | {s['duration_ms'] / 1000:.3f} | {s['attempts']} | {note} |")
    lines += [
        "",
        "## Groups",
        "",
        "| group | remote topic | partition | upstream | translated | status | lag | at risk |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for g in report["groups"]:
        lines.append(
            f"| {g['group']} | {g['remote_topic']} | {g['partition']} | {g['upstream_offset']} "
            f"| {g['translated_offset']} | {g['status']} | {g['lag']} | {g['records_at_risk']} |"
        )
    skipped = report.get("skipped_groups") or []
    if skipped:
        lines += [
            "",
            "## Skipped groups (not moved: no exact translation; --strict-groups makes this fatal)",
            "",
            "| group | topic | partition | upstream | reason |",
            "|---|---|---:|---:|---|",
        ]
        lines += [
            f"| {g['group']} | {g['topic']} | {g['partition']} | {g['upstream_offset']} | {g['reason']} |"
            for g in skipped
        ]
    lines += [
        "",
        "## Partitions",
        "",
        "| topic | partition | source end | copied to | at risk | above last stable offset | lost to retention |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in report["partitions"]:
        lines.append(
            f"| {p['topic']} | {p['partition']} | {p['source_end']} | {p['copied_to']} | {p['records_at_risk']} "
            f"| {p.get('above_last_stable_offset', 0)} | {p.get('lost_to_retention', 0)} |"
        )
    return "\n".join(lines) + "\n"

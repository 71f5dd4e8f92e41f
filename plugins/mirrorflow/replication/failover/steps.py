"""The steps of the runbook, in order (docs/design.md §4). Each takes the `Context`, returns an `Outcome`, and is safe
to run again: a re-run recomputes from the clusters (the fenced primary does not move) and writes the same thing.

Here: the gates (preflight), pausing the flow and the last checkpoint round; the other steps live with their
concept: `fencing` (fence, verify_fence), `drain`, `group_offsets` (commit_offsets), `redirect` (redirect,
arm_reverse).
"""

from __future__ import annotations

from typing import Any

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.consumer_groups import describe_group_states
from mirrorflow.kafka.topics import list_topic_partitions
from mirrorflow.replication.checkpoints import emit_checkpoints
from mirrorflow.replication.failover.drain import drain
from mirrorflow.replication.failover.fencing import fence, verify_fence
from mirrorflow.replication.failover.group_offsets import commit_offsets, refuse_stale, split_stale, translate
from mirrorflow.replication.failover.redirect import arm_reverse, redirect
from mirrorflow.replication.failover.step import Context, Outcome, Refused, Step, done, skipped, tp_key
from mirrorflow.replication.group_sync import IDLE_STATES
from mirrorflow.replication.metrics import flow_views

UNREACHABLE_PROBE_S = 10.0


# ---- 1. preflight -------------------------------------------------------------------------------------------
def preflight(ctx: Context) -> Outcome:
    flow, opts = ctx.flow, ctx.options
    try:
        list_topic_partitions(ctx.clients.target_admin, flow.target, ctx.timeout_s)
    except MirrorflowError as err:
        raise Refused(f"cluster '{flow.target}' (where clients move) is not reachable: {err}") from None
    probe = ctx.timeout_s if opts.mode == "planned" else min(ctx.timeout_s, UNREACHABLE_PROBE_S)
    try:
        list_topic_partitions(ctx.clients.source_admin, flow.source, probe)
        reachable = True
    except MirrorflowError as err:
        if opts.mode == "planned":
            raise Refused(
                f"cluster '{flow.source}' is not reachable ({err}); a planned {opts.direction} needs it: "
                "use --mode unplanned"
            ) from None
        reachable = False
    ctx.state.step("preflight").result = {"source_reachable": reachable}  # translate() below reads it
    result: dict[str, Any] = {"source_reachable": reachable, "target_reachable": True}
    reasons: list[str] = []
    if reachable:
        plan = ctx.plan()
        # The progress topic is shared by every flow out of this source: keep this flow's topics only.
        mine = {t.topic for t in plan.topics}
        views = [v for v in flow_views(flow, timeout_s=ctx.timeout_s) if v.source_topic in mine]
        lag = {
            tp_key(v.source_topic, v.partition): {"records": v.lag_records, "seconds": round(v.lag_seconds, 3)}
            for v in views
        }
        result["lag"] = lag
        result["max_lag_records"] = max((v["records"] for v in lag.values()), default=0)
        result["max_lag_seconds"] = max((v["seconds"] for v in lag.values()), default=0.0)
        missing = [t.topic for t in plan.topics if t.remote_partitions is None]
        result["topics"] = [t.topic for t in plan.topics]
        if missing and opts.mode == "planned":
            result["remote_topics_to_create"] = missing
        if opts.mode == "planned":
            if opts.max_lag_records is not None and result["max_lag_records"] > opts.max_lag_records:
                reasons.append(
                    f"replication lag {result['max_lag_records']} records > --max-lag-records {opts.max_lag_records}"
                )
            if opts.max_lag_seconds is not None and result["max_lag_seconds"] > opts.max_lag_seconds:
                reasons.append(
                    f"replication lag {result['max_lag_seconds']:g} s > --max-lag-seconds {opts.max_lag_seconds:g}"
                )
    rows, skipped = split_stale(translate(ctx))
    groups = sorted({r["group"] for r in rows})
    result["groups"] = groups
    if skipped:
        if opts.strict_groups:
            reasons.append(str(refuse_stale(skipped)))
        result["skipped_groups"] = skipped
        result["note"] = "skipped (no exact translation): " + ", ".join(sorted({r["group"] for r in skipped}))
    states = describe_group_states(ctx.clients.target_admin, flow.target, groups, ctx.timeout_s)
    busy = {g: s.state for g, s in states.items() if s.state not in IDLE_STATES}
    result["target_group_states"] = {g: s.state for g, s in states.items()}
    if busy:
        reasons.append(
            f"groups active on {flow.target} (stop their consumers there): "
            + ", ".join(f"{g} ({s})" for g, s in sorted(busy.items()))
        )
    topic = flow.policy().checkpoints_topic(flow.source)
    result["checkpoints_topic_present"] = topic in list_topic_partitions(
        ctx.clients.target_admin, flow.target, ctx.timeout_s
    )
    if not reachable and not result["checkpoints_topic_present"]:
        reasons.append(f"'{flow.source}' is unreachable and '{flow.target}' has no '{topic}': no offsets to translate")
    if reasons:
        raise Refused("; ".join(reasons))
    return done(**result)


# ---- 5. pause the flow, 6. final checkpoint ---------------------------------------------------------------------
def pause_flow(ctx: Context) -> Outcome:
    note = (
        f"disable the flow in the config (`{ctx.flow.name}.enabled = false`) and stop its DAG or `mirrorflow run`, "
        f"so nothing is copied into {ctx.flow.target} after clients moved there"
    )
    if ctx.dry_run:
        return done(would_write=f"a pause marker of {ctx.flow.name} beside the state ({ctx.store.where})", note=note)
    marker = ctx.store.pause(ctx.flow.name, f"{ctx.options.direction} {ctx.flow.source}->{ctx.flow.target}")
    return done(marker=marker, flow=ctx.flow.name, note=note)


def final_checkpoint(ctx: Context) -> Outcome:
    if not ctx.flow.emit_checkpoints_enabled:
        return skipped("emit.checkpoints.enabled = false")
    if not ctx.source_reachable:
        return skipped(f"'{ctx.flow.source}' unreachable: the last emitted checkpoints stand")
    report = emit_checkpoints(ctx.flow, ctx.clients, dry_run=ctx.dry_run)
    return done(topic=report.topic, emitted=len(report.emitted), groups=len(report.groups))


STEPS: list[Step] = [
    ("preflight", preflight),
    ("fence", fence),
    ("verify_fence", verify_fence),
    ("drain", drain),
    ("pause_flow", pause_flow),
    ("final_checkpoint", final_checkpoint),
    ("commit_offsets", commit_offsets),
    ("redirect", redirect),
    ("arm_reverse", arm_reverse),
]

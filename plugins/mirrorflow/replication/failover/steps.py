"""The steps of the runbook, in order (DESIGN §4). Each takes the `Context`, returns an `Outcome`, and is safe to
run again: a re-run recomputes from the clusters (the fenced primary does not move) and writes the same thing.

Offsets are keyed "topic-partition" strings in results, since the state and the report are JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from functools import partial
from typing import Any

from mirrorflow.core.acl_rules import AclBinding
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.patterns import compile_patterns, matches
from mirrorflow.core.progress import decode_progress, progress_topic
from mirrorflow.core.topic_selection import rename_topic_partition
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.kafka.consumer_groups import describe_group_states, list_committed_offsets, write_group_offsets
from mirrorflow.kafka.groups import CommittedOffset, committed_offsets, list_group_ids
from mirrorflow.kafka.offsets import list_offsets
from mirrorflow.kafka.topics import list_topic_partitions
from mirrorflow.replication.checkpoints import emit_checkpoints, group_filter
from mirrorflow.replication.copy_plan import copyable, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.discovery import FlowPlan, discover
from mirrorflow.replication.failover import fencing
from mirrorflow.replication.failover.redirect import arm_reverse, redirect
from mirrorflow.replication.failover.runbook import Context, Outcome, Refused, Step, done, skipped
from mirrorflow.replication.failover.state import PENDING, write_pause_marker
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane
from mirrorflow.replication.flow_rules import FlowRules, internal_separator
from mirrorflow.replication.group_sync import IDLE_STATES
from mirrorflow.replication.metrics import flow_views
from mirrorflow.replication.offset_translation import CheckpointStore, learn_leading_gaps, load_offset_maps

TP = tuple[str, int]
UNREACHABLE_PROBE_S = 10.0


def tp_key(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def _plan(ctx: Context) -> FlowPlan:
    return discover(ctx.flow, ctx.clients)


def _partitions(plan: FlowPlan) -> list[TP]:
    return [(t.topic, p) for t in plan.topics for p in range(t.partitions)]


def _source_reachable(ctx: Context) -> bool:
    return bool(ctx.state.result("preflight").get("source_reachable", True))


def _copied_to(ctx: Context) -> dict[TP, int]:
    """The copy's committed progress per source partition: the next upstream offset it will read."""
    found: dict[TP, int] = {}
    topic = progress_topic(ctx.flow.source, internal_separator(ctx.flow))
    conf = ctx.flow.target_consumer.librdkafka()
    keep = FlowRules.of(ctx.flow).should_replicate_topic
    for _p, _o, key, value, _ts in read_to_end(ctx.flow.target, conf, topic, partitions=[0], timeout_s=ctx.timeout_s):
        if key is not None and value is not None:
            progress = decode_progress(key, value)
            if keep(progress.topic):  # the progress topic is shared by every flow out of this source
                found[(progress.topic, progress.partition)] = progress.next_upstream
    return found


def _source_ends(ctx: Context, partitions: list[TP]) -> dict[TP, int]:
    exactly_once = ctx.flow.delivery == "exactly-once"
    admin = ctx.clients.source_admin
    return list_offsets(
        admin, ctx.flow.source, partitions, latest=True, read_committed=exactly_once, timeout_s=ctx.timeout_s
    )


def selected_group_offsets(ctx: Context) -> dict[str, dict[TP, CommittedOffset]]:
    """The source's groups the runbook moves (`--groups`, else the flow's `groups` filter) with their offsets
    on replicated topics."""
    rules = FlowRules.of(ctx.flow)
    admin = ctx.clients.source_admin
    wanted: Callable[[str], bool] = group_filter(ctx.flow).should_replicate_group
    if ctx.options.groups is not None:
        regex = compile_patterns([ctx.options.groups], key="--groups")
        wanted = partial(matches, regex)
    ids = [g for g in list_group_ids(admin, ctx.flow.source, ctx.timeout_s) if wanted(g)]
    offsets = list_committed_offsets(admin, ctx.flow.source, ids, ctx.timeout_s)
    keep = rules.topic_filter.should_replicate_topic
    return {g: {tp: o for tp, o in found.items() if keep(tp[0])} for g, found in offsets.items() if found}


def translate(ctx: Context) -> list[dict[str, Any]]:
    """Per group and partition: where the group resumes on the target, and how that was decided."""
    flow, policy = ctx.flow, ctx.flow.policy()

    def remote(topic: str) -> str:
        return rename_topic_partition(topic, policy=policy, source_alias=flow.source, target_alias=flow.target)

    rows: list[dict[str, Any]] = []
    if not _source_reachable(ctx):
        store = CheckpointStore.for_flow(flow, timeout_s=ctx.timeout_s)
        for group in store.groups():
            if ctx.options.groups is not None and not matches(compile_patterns([ctx.options.groups]), group):
                continue
            for (topic, partition), c in sorted(store.group_checkpoints(group).items()):
                rows.append(
                    _row(
                        group,
                        policy.original_topic(topic),
                        topic,
                        partition,
                        c.upstream_offset,
                        c.downstream_offset,
                        "checkpoint",
                        c.metadata,
                    )
                )
        return rows
    offsets = selected_group_offsets(ctx)
    topics = {t for found in offsets.values() for t, _ in found}
    maps = load_offset_maps(flow, topics=topics, timeout_s=ctx.timeout_s)
    positions = [(t, p, o.offset) for found in offsets.values() for (t, p), o in found.items()]
    learn_leading_gaps(flow, maps, positions, ctx.clients.source_admin, ctx.timeout_s)
    for group, found in sorted(offsets.items()):
        for (topic, partition), committed in sorted(found.items()):
            t = maps.translate(topic, partition, committed.offset)
            rows.append(
                _row(group, topic, remote(topic), partition, committed.offset, t.offset, t.status, committed.metadata)
            )
    return rows


def _row(
    group: str, topic: str, remote: str, partition: int, upstream: int, offset: int | None, status: str, metadata: str
) -> dict[str, Any]:
    return {
        "group": group,
        "topic": topic,
        "remote_topic": remote,
        "partition": partition,
        "upstream_offset": upstream,
        "translated_offset": offset,
        "status": status,
        "metadata": metadata,
    }


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
        plan = _plan(ctx)
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
    rows = translate(ctx)
    groups = sorted({r["group"] for r in rows})
    result["groups"] = groups
    lost = [r for r in rows if r["status"] == "before-history"]
    if lost:
        reasons.append(
            "no exact translation for "
            + ", ".join(f"{r['group']} {tp_key(r['topic'], r['partition'])}" for r in lost[:5])
            + " (position older than the copied history)"
        )
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


# ---- 2. fence -----------------------------------------------------------------------------------------------
def fence(ctx: Context) -> Outcome:
    opts = ctx.options
    if opts.mode == "unplanned":
        return skipped("unplanned: the old primary is not fenced", method=opts.fence, fenced=False)
    if opts.fence == "none":
        return skipped("--fence none: the old primary was NOT fenced (unfenced)", method="none", fenced=False)
    topics = [t.topic for t in _plan(ctx).topics]
    if opts.fence == "acl":
        bindings = fencing.fence_bindings(topics, opts.fence_principals)
        if ctx.dry_run:
            return done(method="acl", would_create=[asdict(b) for b in bindings])
        created = fencing.apply_acl_fence(ctx.clients.source_admin, ctx.flow.source, bindings, ctx.timeout_s)
        return done(
            method="acl", fenced=True, bindings=[asdict(b) for b in bindings], created=[asdict(b) for b in created]
        )
    assert opts.fence_command is not None
    if ctx.dry_run:
        return done(method="command", would_run=opts.fence_command)
    output = fencing.run_command(opts.fence_command, _hook_env(ctx, topics), "fence")
    return done(method="command", fenced=True, output=output)


def _hook_env(ctx: Context, topics: list[str]) -> dict[str, str]:
    return {
        "MIRRORFLOW_DIRECTION": ctx.options.direction,
        "MIRRORFLOW_FROM": ctx.flow.source,
        "MIRRORFLOW_TO": ctx.flow.target,
        "MIRRORFLOW_TOPICS": ",".join(topics),
    }


# ---- 3. verify the fence (and roll it back when it does not hold) ----------------------------------------
def verify_fence(ctx: Context) -> Outcome:
    opts = ctx.options
    if opts.mode == "unplanned" or opts.fence == "none":
        return skipped("nothing fenced")
    partitions = _partitions(_plan(ctx))
    if ctx.dry_run:
        return done(would_check=len(partitions), window_seconds=opts.fence_verify_seconds)

    def sample() -> dict[TP, int]:
        return fencing.end_offsets(ctx.clients.source_admin, ctx.flow.source, partitions, ctx.timeout_s)

    ends, moved = fencing.verify_writes_stopped(sample, opts.fence_verify_seconds)
    if moved:
        rolled = roll_back_fence(ctx)
        writes = ", ".join(f"{k} (+{v})" for k, v in list(moved.items())[:5])
        raise Refused(
            f"writes did not stop on {ctx.flow.source} within {opts.fence_verify_seconds:g} s: {writes}; "
            f"the fence was rolled back ({rolled}); fence the remaining producers and run again"
        )
    return done(
        fenced_ends={tp_key(t, p): o for (t, p), o in sorted(ends.items())}, window_seconds=opts.fence_verify_seconds
    )


def roll_back_fence(ctx: Context) -> str:
    """Undo what the fence step did and mark it pending, so the next run fences again."""
    step = ctx.state.step("fence")
    created = [AclBinding(**b) for b in step.result.get("created", [])]
    step.status, step.result = PENDING, {"rolled_back": True}
    if ctx.options.fence == "acl":
        n = fencing.roll_back_acl_fence(ctx.clients.source_admin, ctx.flow.source, created, ctx.timeout_s)
        return f"{n} deny-WRITE ACLs deleted"
    return "the fence command has no automatic undo: lift it by hand"


# ---- 4. drain (planned) or the RPO ledger (unplanned) -----------------------------------------------------
def drain(ctx: Context) -> Outcome:
    if ctx.options.mode == "unplanned":
        return _ledger(ctx)
    flow = ctx.flow
    if ctx.dry_run:
        lag = ctx.state.result("preflight").get("lag", {})
        return done(would_copy={k: v["records"] for k, v in lag.items() if v["records"]}, records_at_risk=0)
    run_control_plane(flow, ctx.clients, steps={TOPICS})  # remote topics exist before the last copy
    plan = _plan(ctx)
    parts = copyable(plan)
    wanted = [(t.topic, p) for t in parts for p in range(t.partitions)]
    uncopyable = sorted(set(_partitions(plan)) - set(wanted))
    if uncopyable:
        raise MirrorflowError("no remote partition on the target for " + ", ".join(tp_key(*tp) for tp in uncopyable))
    ends = _source_ends(ctx, wanted)
    tasks = plan_copy(flow, parts, interval=True, end_offsets=ends)
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(tasks)))) as pool:
        results = list(pool.map(copy_range, tasks))
    copied = _copied_to(ctx)
    short = {tp: ends[tp] - copied.get(tp, 0) for tp in wanted if copied.get(tp, 0) < ends[tp]}
    if short:
        raise MirrorflowError(
            "the drain did not reach the fenced end on "
            + ", ".join(f"{tp_key(*tp)} ({n} left)" for tp, n in short.items())
        )
    partitions = [
        {
            "topic": t,
            "partition": p,
            "remote_topic": flow.policy().format_remote_topic(flow.source, t),
            "source_end": ends[(t, p)],
            "copied_to": copied.get((t, p), ends[(t, p)]),
            "records_at_risk": 0,
        }
        for t, p in sorted(wanted)
    ]
    return done(copied_records=sum(r.records for r in results), partitions=partitions, records_at_risk=0)


def _ledger(ctx: Context) -> Outcome:
    """Unplanned: per partition, what the copy had reached and, when the source answers, what it had not."""
    flow = ctx.flow
    copied = _copied_to(ctx)
    ends: dict[TP, int] | None = None
    if _source_reachable(ctx):
        try:
            ends = _source_ends(ctx, _partitions(_plan(ctx)))
        except MirrorflowError:
            ends = None
    keys = sorted(set(copied) | set(ends or {}))
    partitions = []
    for t, p in keys:
        end = None if ends is None else ends.get((t, p))
        at_risk: int | str = "unknown" if end is None else max(0, end - copied.get((t, p), 0))
        remote = flow.policy().format_remote_topic(flow.source, t)
        partitions.append(
            {
                "topic": t,
                "partition": p,
                "remote_topic": remote,
                "source_end": end,
                "copied_to": copied.get((t, p)),
                "records_at_risk": at_risk,
            }
        )
    known = [x["records_at_risk"] for x in partitions if isinstance(x["records_at_risk"], int)]
    total: int | str = sum(known) if ends is not None else "unknown"
    return done(partitions=partitions, records_at_risk=total, source_reachable=ends is not None)


# ---- 5. pause the flow, final checkpoint ---------------------------------------------------------------------
def pause_flow(ctx: Context) -> Outcome:
    note = (
        f"disable the flow in the config (`{ctx.flow.name}.enabled = false`) and stop its DAG or `mirrorflow run`, "
        f"so nothing is copied into {ctx.flow.target} after clients moved there"
    )
    if ctx.dry_run:
        return done(would_write=str(ctx.state_dir / "paused-flow.json"), note=note)
    marker = write_pause_marker(
        ctx.state_dir, ctx.flow.name, f"{ctx.options.direction} {ctx.flow.source}->{ctx.flow.target}"
    )
    return done(marker=str(marker), flow=ctx.flow.name, note=note)


def final_checkpoint(ctx: Context) -> Outcome:
    if not ctx.flow.emit_checkpoints_enabled:
        return skipped("emit.checkpoints.enabled = false")
    if not _source_reachable(ctx):
        return skipped(f"'{ctx.flow.source}' unreachable: the last emitted checkpoints stand")
    report = emit_checkpoints(ctx.flow, ctx.clients, dry_run=ctx.dry_run)
    return done(topic=report.topic, emitted=len(report.emitted), groups=len(report.groups))


# ---- 6. commit translated offsets on the target, read back, compare -----------------------------------------
def commit_offsets(ctx: Context) -> Outcome:
    flow, opts = ctx.flow, ctx.options
    if opts.mode == "planned":
        groups = sorted(selected_group_offsets(ctx))
        states = describe_group_states(ctx.clients.source_admin, flow.source, groups, ctx.timeout_s)
        active = {g: s.state for g, s in states.items() if s.state not in IDLE_STATES}
        if active:
            raise Refused(
                f"groups still consuming on {flow.source}: "
                + ", ".join(f"{g} ({s})" for g, s in sorted(active.items()))
                + "; stop those consumers so their last position is final, then run again"
            )
    rows = translate(ctx)
    per_group: dict[str, dict[TP, CommittedOffset]] = {}
    for r in rows:
        if r["translated_offset"] is not None:
            per_group.setdefault(r["group"], {})[(r["remote_topic"], r["partition"])] = CommittedOffset(
                r["translated_offset"], r["metadata"]
            )
    states = describe_group_states(ctx.clients.target_admin, flow.target, sorted(per_group), ctx.timeout_s)
    busy = {g: s.state for g, s in states.items() if s.state not in IDLE_STATES}
    if busy:
        raise Refused(
            f"groups active on {flow.target}: "
            + ", ".join(f"{g} ({s})" for g, s in sorted(busy.items()))
            + "; stop them there first"
        )
    if ctx.dry_run:
        return done(offsets=rows, would_commit=sum(len(v) for v in per_group.values()))
    mismatched: list[str] = []
    for group, offsets in sorted(per_group.items()):
        write_group_offsets(ctx.clients.target_admin, flow.target, group, offsets, ctx.timeout_s)
        back = committed_offsets(ctx.clients.target_admin, flow.target, group, ctx.timeout_s)
        for tp, want in offsets.items():
            got = back.get(tp)
            if got is None or got.offset != want.offset:
                mismatched.append(
                    f"{group} {tp_key(*tp)}: wrote {want.offset}, read {None if got is None else got.offset}"
                )
    if mismatched:
        raise MirrorflowError("offsets read back differ from those written: " + "; ".join(mismatched[:5]))
    return done(offsets=rows, committed=sum(len(v) for v in per_group.values()), verified=True)


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

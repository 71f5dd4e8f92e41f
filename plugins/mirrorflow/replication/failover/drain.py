"""Step 4: the drain (planned) and the RPO ledger (unplanned).

Planned: with the old primary fenced, every replicated partition is copied in-process up to the end offset seen
after the fence, and the copy's committed progress is read back: records at risk are 0 by construction, and
checked. Unplanned: per partition, what the copy had committed (`copied_to`) and, when the old primary answers,
its end offset; the difference is exactly the records that never reached the DR cluster.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.progress import progress_topic
from mirrorflow.kafka.offsets import list_offsets
from mirrorflow.replication.copy_plan import copyable, plan_copy
from mirrorflow.replication.copy_range import CopyStalled, copy_range
from mirrorflow.replication.copy_task import CopyResult, CopyTask, flow_reads_committed
from mirrorflow.replication.failover.step import TP, Context, Outcome, done, plan_partitions, tp_key
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane
from mirrorflow.replication.flow_rules import FlowRules, internal_separator
from mirrorflow.replication.state_records import read_progress

log = logging.getLogger(__name__)
COPY_ATTEMPTS = 5
DRAIN_IDLE_S = 60.0  # a drain copy that reads nothing this long short of its end fails (never hangs)


def copied_to(ctx: Context) -> dict[TP, int]:
    """The copy's committed progress per source partition: the next upstream offset it will read."""
    topic = progress_topic(ctx.flow.source, internal_separator(ctx.flow))
    conf = ctx.flow.target_consumer.librdkafka()
    keep = FlowRules.of(ctx.flow).should_replicate_topic
    stored = read_progress(ctx.flow.target, conf, topic, timeout_s=ctx.timeout_s)
    # the progress topic is shared by every flow out of this source
    return {tp: p.next_upstream for tp, p in stored.items() if keep(tp[0])}


def log_starts(ctx: Context, partitions: list[TP]) -> dict[TP, int]:
    """The source log starts: nothing below one can be copied, so a partition whose records all went to
    retention before the copy reached them (it never got a progress record) is copied up to its start."""
    return list_offsets(ctx.clients.source_admin, ctx.flow.source, partitions, latest=False, timeout_s=ctx.timeout_s)


def reached(copied: dict[TP, int], starts: dict[TP, int], tp: TP) -> int:
    """How far the copy got on `tp`, counting the records below the source log start as done (they are gone)."""
    return max(copied.get(tp, 0), starts.get(tp, 0))


def source_ends(ctx: Context, partitions: list[TP]) -> dict[TP, int]:
    committed = flow_reads_committed(ctx.flow)  # the end the copy's reader can reach
    admin = ctx.clients.source_admin
    return list_offsets(
        admin, ctx.flow.source, partitions, latest=True, read_committed=committed, timeout_s=ctx.timeout_s
    )


def high_watermarks(ctx: Context, partitions: list[TP]) -> dict[TP, int]:
    """The source high watermarks (read_uncommitted ends): above the last stable offset while a transaction is
    open."""
    admin = ctx.clients.source_admin
    return list_offsets(admin, ctx.flow.source, partitions, latest=True, timeout_s=ctx.timeout_s)


def _copy_until_fenced_end(task: CopyTask, idle_limit_s: float = DRAIN_IDLE_S) -> CopyResult:
    """One partition up to the fenced end. The flow's own copy may still be running (it is paused after the
    drain) and fences our transactional producer, or we fence it: both copy exactly once, so a fenced attempt
    is simply made again; each attempt resumes from the committed progress."""
    for attempt in range(1, COPY_ATTEMPTS + 1):
        try:
            return copy_range(task, idle_limit_s=idle_limit_s)
        except CopyStalled:
            raise
        except Exception as err:  # the client's fencing error is not always wrapped by the transfer layer
            if attempt == COPY_ATTEMPTS:
                if isinstance(err, MirrorflowError):
                    raise
                raise MirrorflowError(f"copying {task.topic}-{task.partition} failed {attempt} times: {err}") from err
            log.info("drain of %s-%d: attempt %d failed (%s); again", task.topic, task.partition, attempt, err)
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def drain(ctx: Context) -> Outcome:
    if ctx.options.mode == "unplanned":
        return ledger(ctx)
    flow = ctx.flow
    if ctx.dry_run:
        lag = ctx.state.result("preflight").get("lag", {})
        return done(would_copy={k: v["records"] for k, v in lag.items() if v["records"]}, records_at_risk=0)
    run_control_plane(flow, ctx.clients, steps={TOPICS})  # remote topics exist before the last copy
    plan = ctx.plan()
    parts = copyable(plan)
    wanted = [(t.topic, p) for t in parts for p in range(t.partitions)]
    uncopyable = sorted(set(plan_partitions(plan)) - set(wanted))
    if uncopyable:
        raise MirrorflowError("no remote partition on the target for " + ", ".join(tp_key(*tp) for tp in uncopyable))
    ends = source_ends(ctx, wanted)
    tasks = plan_copy(flow, parts, interval=True, end_offsets=ends)
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(tasks)))) as pool:
        results = list(pool.map(_copy_until_fenced_end, tasks))
    copied = copied_to(ctx)
    starts = log_starts(ctx, wanted)
    short = {tp: ends[tp] - reached(copied, starts, tp) for tp in wanted if reached(copied, starts, tp) < ends[tp]}
    if short:
        raise MirrorflowError(
            "the drain did not reach the fenced end on "
            + ", ".join(f"{tp_key(*tp)} ({n} left)" for tp, n in short.items())
        )
    # A transaction verify_fence saw still open: its records lie between the drained end (the LSO) and the fenced
    # high watermark and may commit after the cutover; they are counted at risk, never silently dropped.
    fenced = ctx.state.result("verify_fence").get("fenced_ends", {})
    partitions = []
    for t, p in sorted(wanted):
        at_risk = max(0, fenced.get(tp_key(t, p), 0) - reached(copied, starts, (t, p)))
        partitions.append(
            {
                "topic": t,
                "partition": p,
                "remote_topic": flow.policy().format_remote_topic(flow.source, t),
                "source_end": ends[(t, p)],
                "copied_to": copied.get((t, p), ends[(t, p)]),
                "records_at_risk": at_risk,
            }
        )
        if at_risk:
            partitions[-1]["open_transaction_at_fence"] = True
    total = sum(x["records_at_risk"] for x in partitions)
    return done(copied_records=sum(r.records for r in results), partitions=partitions, records_at_risk=total)


def ledger(ctx: Context) -> Outcome:
    """Unplanned: per partition, what the copy had reached and, when the source answers, what it had not."""
    flow = ctx.flow
    copied = copied_to(ctx)
    ends: dict[TP, int] | None = None
    tops: dict[TP, int] = {}
    starts: dict[TP, int] = {}
    if ctx.source_reachable:
        try:
            wanted = plan_partitions(ctx.plan())
            ends = source_ends(ctx, wanted)
            # Records above the last stable offset (an open transaction, and everything after it) were not copied
            # either, and may be committed: they count at risk, as in the planned drain.
            tops = high_watermarks(ctx, wanted)
            starts = log_starts(ctx, wanted)
        except MirrorflowError:
            ends = None
    partitions: list[dict[str, Any]] = []
    for t, p in sorted(set(copied) | set(ends or {})):
        end = None if ends is None else ends.get((t, p))
        top = None if end is None else max(end, tops.get((t, p), end))
        at_risk: int | str = "unknown" if top is None else max(0, top - reached(copied, starts, (t, p)))
        partitions.append(
            {
                "topic": t,
                "partition": p,
                "remote_topic": flow.policy().format_remote_topic(flow.source, t),
                "source_end": end,
                "copied_to": copied.get((t, p)),
                "records_at_risk": at_risk,
            }
        )
        if top is not None and end is not None and top > end:
            partitions[-1]["above_last_stable_offset"] = top - end
        if (t, p) in copied and starts.get((t, p), 0) > copied[(t, p)]:
            # Deleted by retention before the copy read them: neither on the source nor on the target.
            partitions[-1]["lost_to_retention"] = starts[(t, p)] - copied[(t, p)]
    known = [x["records_at_risk"] for x in partitions if isinstance(x["records_at_risk"], int)]
    total: int | str = sum(known) if ends is not None else "unknown"
    return done(partitions=partitions, records_at_risk=total, source_reachable=ends is not None)

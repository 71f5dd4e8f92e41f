"""Step 7 and its reads: where each moved group resumes on the target, committed there, read back, compared.

Three sources of truth, per topic the group read on the source cluster:
- a topic the flow replicates (`x` on A when failing over to B): the flow's exact offset map, forward;
- a copy of the target's own topic (`A.x` on B when failing back to A): the inverse of the forward flow's map,
  which the DR cluster holds (`OffsetMap.untranslate`), so those groups come home with 0 re-reads, 0 skips;
- the source cluster down (unplanned): the last checkpoints on the target.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.patterns import compile_patterns, matches
from mirrorflow.core.topic_selection import rename_topic_partition
from mirrorflow.kafka.consumer_groups import describe_group_states, list_committed_offsets, write_group_offsets
from mirrorflow.kafka.group_coordinator import CommittedOffset, committed_offsets, list_group_ids
from mirrorflow.replication.checkpoint_store import CheckpointStore
from mirrorflow.replication.checkpoints import group_filter
from mirrorflow.replication.failover.step import TP, Context, Outcome, Refused, done, tp_key
from mirrorflow.replication.flow_rules import FlowRules, internal_separator
from mirrorflow.replication.group_sync import IDLE_STATES
from mirrorflow.replication.offset_translation import (
    FlowOffsetMaps,
    learn_leading_gaps,
    load_offset_maps,
    read_offset_maps,
)


def returning_topic(ctx: Context, topic: str) -> str | None:
    """The target's own topic of which `topic` on the source is a copy (`A.x` on B -> `x` when moving B->A),
    or None. Names that do not reveal their origin (IdentityReplicationPolicy) are never taken as copies."""
    policy = ctx.flow.policy()
    if policy.is_heartbeats_topic(topic) or policy.topic_source(topic) != ctx.flow.target:
        return None
    upstream = policy.upstream_topic(topic)
    if not upstream or upstream == topic or policy.format_remote_topic(ctx.flow.target, upstream) != topic:
        return None
    return upstream


def selected_group_offsets(ctx: Context) -> dict[str, dict[TP, CommittedOffset]]:
    """The source's groups the runbook moves (`--groups`, else the flow's `groups` filter) with their offsets on
    replicated topics and on copies of the target's topics."""
    admin = ctx.clients.source_admin
    wanted: Callable[[str], bool] = group_filter(ctx.flow).should_replicate_group
    if ctx.options.groups is not None:
        wanted = partial(matches, compile_patterns([ctx.options.groups], key="--groups"))
    ids = [g for g in list_group_ids(admin, ctx.flow.source, ctx.timeout_s) if wanted(g)]
    keep_topic = FlowRules.of(ctx.flow).topic_filter.should_replicate_topic

    def keep(topic: str) -> bool:
        home = returning_topic(ctx, topic)
        return keep_topic(topic if home is None else home)

    offsets = list_committed_offsets(admin, ctx.flow.source, ids, ctx.timeout_s, keep)
    return {g: found for g, found in offsets.items() if found}


def translate(ctx: Context) -> list[dict[str, Any]]:
    """Per group and partition: where the group resumes on the target, and how that was decided."""
    if not ctx.source_reachable:
        return _from_checkpoints(ctx)
    flow, policy = ctx.flow, ctx.flow.policy()
    offsets = selected_group_offsets(ctx)
    homes = {t: returning_topic(ctx, t) for found in offsets.values() for t, _ in found}
    forward_topics = {t for t, home in homes.items() if home is None}
    maps = load_offset_maps(flow, topics=forward_topics, timeout_s=ctx.timeout_s)
    positions = [(t, p, o.offset) for found in offsets.values() for (t, p), o in found.items() if t in forward_topics]
    learn_leading_gaps(flow, maps, positions, ctx.clients.source_admin, ctx.timeout_s)
    # Same-named copies (IdentityReplicationPolicy): the source's `x` may hold copies of the target's `x`.
    same_name = {t for t in forward_topics if policy.format_remote_topic(flow.target, t) == t}
    # The forward flow target->source keeps its maps on the source cluster: read them with our source clients.
    inverse = read_offset_maps(
        flow.source,
        flow.source_consumer.librdkafka(),
        flow.target,
        internal_separator(flow),
        topics={home for home in homes.values() if home is not None} | same_name,
        timeout_s=ctx.timeout_s,
    )
    rows: list[dict[str, Any]] = []
    for group, found in sorted(offsets.items()):
        for (topic, partition), committed in sorted(found.items()):
            home = homes[topic]
            if home is None and topic in same_name:
                remote, (offset, status) = topic, both_origins(maps, inverse, topic, partition, committed.offset)
            elif home is None:
                remote = rename_topic_partition(
                    topic, policy=policy, source_alias=flow.source, target_alias=flow.target
                )
                t = maps.translate(topic, partition, committed.offset)
                offset, status = t.offset, t.label
            else:
                remote, t = home, inverse.untranslate(home, partition, committed.offset)
                offset, status = t.offset, t.label
            rows.append(_row(group, topic, remote, partition, committed.offset, offset, status, committed.metadata))
    return rows


def both_origins(
    forward: FlowOffsetMaps, reverse: FlowOffsetMaps, topic: str, partition: int, position: int
) -> tuple[int | None, str]:
    """(offset on the target, status) for a group at `position` of a same-named topic that holds records of
    both origins (IdentityReplicationPolicy): its own, which the forward map translates, and copies of the
    target's, which the reverse map brings home (`on_a_copy`). The two interleave in different orders on the
    two clusters (records the target wrote before a failover are copied to the source only after the source's
    own new records), so neither map alone is safe: the group resumes at the smaller of the two candidates,
    labelled "re-read" when some records below `position` are read again there, "exact" otherwise. Never a
    skip: every unread record of either origin is at or after its own candidate on the target."""
    ahead = forward.translate(topic, partition, position)
    back = reverse.untranslate(topic, partition, position)
    if ahead.offset is None:  # nothing of the source's own to translate (or a stale position)
        return (back.offset, back.label) if on_a_copy(reverse, topic, partition, position) else (None, ahead.label)
    if back.offset is None:
        return ahead.offset, ahead.label
    resume = min(ahead.offset, _past_own_copies(forward, reverse, topic, partition, back.offset))
    if not _rereads_nothing(forward, reverse, topic, partition, resume, position):
        return resume, "re-read"
    return resume, ahead.label if resume == ahead.offset else back.label


def _past_own_copies(forward: FlowOffsetMaps, reverse: FlowOffsetMaps, topic: str, partition: int, back: int) -> int:
    """`back` moved over the copies of the source's own records, when it lies past everything the reverse copy
    read: records there that the reverse copy never read are either copies the forward map knows (the group met
    their originals on the source) or the target's own, which the group never saw; the first offset that no
    exact forward run covers is thus still at or before the first of the latter."""
    theirs, own = reverse.get(topic, partition), forward.get(topic, partition)
    if own is None or theirs is None or theirs.upstream_end is None or back < theirs.upstream_end:
        return back
    for run in own.segments():
        if run.exact and run.downstream_start <= back < run.downstream_start + run.length:
            back = run.downstream_start + run.length
    return back


def _rereads_nothing(
    forward: FlowOffsetMaps, reverse: FlowOffsetMaps, topic: str, partition: int, resume: int, position: int
) -> bool:
    """Whether a group that had read the source's topic below `position` reads none of those records again
    from `resume` on the target: the first copy of a source record at or after `resume` (forward map, inverted)
    and the first target record at or after `resume` that was copied to the source (reverse map) both lie at or
    after `position` on the source (or do not exist)."""
    own, theirs = forward.get(topic, partition), reverse.get(topic, partition)
    own_runs = () if own is None else own.segments()
    if own is not None and own_runs and resume < own_runs[-1].downstream_start + own_runs[-1].downstream_length:
        first = own.untranslate(resume)
        if first is not None and first < position:
            return False
    their_runs = () if theirs is None else theirs.segments()
    if theirs is not None and their_runs and resume < their_runs[-1].upstream_start + their_runs[-1].upstream_length:
        first = theirs.translate(resume)
        if first is not None and first < position:
            return False
    return True


def on_a_copy(inverse: FlowOffsetMaps, topic: str, partition: int, offset: int) -> bool:
    """Whether `offset` of the source's `topic` holds a copy of a target record (IdentityReplicationPolicy, where
    one topic holds both origins). The target->source flow's map then brings the group home exactly
    (`OffsetMap.untranslate`); the forward map would skip to the next record of the source's own, because the
    forward copy dropped every copy of a target record (provenance), so positions on them have no copy."""
    offset_map = inverse.get(topic, partition)
    if offset_map is None or offset_map.downstream_end is None or offset >= offset_map.downstream_end:
        return False
    upstream = offset_map.untranslate(offset)
    return upstream is not None and offset_map.translate(upstream) == offset


def split_stale(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of the groups that can move, and the stale positions: a group with a position that has no
    exact translation (older than the copied history, as MM2 would not checkpoint it) is not moved at all, so
    that it never resumes half on the target; the others are not held up by it (unless --strict-groups). A
    position on a partition whose offset map is missing (`map-missing`) has no exact translation either."""
    stale = [r for r in rows if r["status"] in ("before-history", "map-missing")]
    skipped_groups = {r["group"] for r in stale}
    skipped = [
        {k: r[k] for k in ("group", "topic", "partition", "upstream_offset")} | {"reason": r["status"]} for r in stale
    ]
    return [r for r in rows if r["group"] not in skipped_groups], skipped


def refuse_stale(skipped: list[dict[str, Any]]) -> Refused:
    return Refused(
        "no exact translation for "
        + ", ".join(f"{r['group']} {tp_key(r['topic'], r['partition'])}" for r in skipped[:5])
        + " (position older than the copied history; --strict-groups is set, without it such groups are "
        "reported and skipped)"
    )


def _from_checkpoints(ctx: Context) -> list[dict[str, Any]]:
    """The source is down: what the last checkpoints on the target say."""
    policy = ctx.flow.policy()
    store = CheckpointStore.for_flow(ctx.flow, timeout_s=ctx.timeout_s)
    regex = None if ctx.options.groups is None else compile_patterns([ctx.options.groups])
    rows: list[dict[str, Any]] = []
    for group in store.groups():
        if regex is not None and not matches(regex, group):
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


def commit_offsets(ctx: Context) -> Outcome:
    flow, opts = ctx.flow, ctx.options
    rows, skipped = split_stale(translate(ctx))
    if skipped and opts.strict_groups:
        raise refuse_stale(skipped)
    if opts.mode == "planned":
        groups = sorted({r["group"] for r in rows})
        states = describe_group_states(ctx.clients.source_admin, flow.source, groups, ctx.timeout_s)
        active = {g: s.state for g, s in states.items() if s.state not in IDLE_STATES}
        if active:
            raise Refused(
                f"groups still consuming on {flow.source}: "
                + ", ".join(f"{g} ({s})" for g, s in sorted(active.items()))
                + "; stop those consumers so their last position is final, then run again"
            )
        # Read the positions again now that no group has members: a consumer that committed and left between
        # the first read and the state check would otherwise be moved with a stale position (re-reads).
        rows, skipped = split_stale(translate(ctx))
        if skipped and opts.strict_groups:
            raise refuse_stale(skipped)
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
        return done(offsets=rows, would_commit=sum(len(v) for v in per_group.values()), skipped_groups=skipped)
    mismatched: list[str] = []
    for group, offsets in sorted(per_group.items()):
        write_group_offsets(ctx.clients.target_admin, flow.target, group, offsets, ctx.timeout_s)
        written = {t for t, _p in offsets}
        back = committed_offsets(ctx.clients.target_admin, flow.target, group, ctx.timeout_s, written.__contains__)
        for tp, want in offsets.items():
            got = back.get(tp)
            if got is None or got.offset != want.offset:
                mismatched.append(
                    f"{group} {tp_key(*tp)}: wrote {want.offset}, read {None if got is None else got.offset}"
                )
    if mismatched:
        raise MirrorflowError("offsets read back differ from those written: " + "; ".join(mismatched[:5]))
    return done(offsets=rows, committed=sum(len(v) for v in per_group.values()), verified=True, skipped_groups=skipped)

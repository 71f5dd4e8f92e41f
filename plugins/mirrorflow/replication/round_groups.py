"""Which groups of copy ranges a round of `copy_rounds` may leave to the Spark task already running them, and
why it may not (for the log). Its own module so that the round loop reads as the decisions it makes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mirrorflow.replication.copy_task import CopyTask

Group = list[CopyTask]


class Owner(Protocol):
    """A running job as these comparisons see it: the group of ranges its Spark task copies."""

    group: Group


def partitions_of(group: Group) -> frozenset[tuple[str, int]]:
    return frozenset((t.topic, t.partition) for t in group)


def same_ranges(planned: Group, running: Group) -> bool:
    """Whether a planned group can be left to the Spark task running `running`: the same partitions, and nothing
    known about them changed. A topic ID or a `max.message.bytes` this round's lookup could not give ("" or
    None), or state topics seen with one partition (unknown), count as unchanged: one failed lookup must not
    hand every task over."""
    if partitions_of(planned) != partitions_of(running):
        return False
    ran = {(t.topic, t.partition): t for t in running}
    return all(_unchanged(t, ran[(t.topic, t.partition)]) for t in planned)


def _unchanged(new: CopyTask, old: CopyTask) -> bool:
    if new.remote_topic != old.remote_topic:
        return False
    known = ((new.source_topic_id, old.source_topic_id), (new.remote_topic_id, old.remote_topic_id))
    if any(a and b and a != b for a, b in known):
        return False
    sizes = (new.max_message_bytes, old.max_message_bytes)
    if None not in sizes and sizes[0] != sizes[1]:
        return False
    return new.state_partitions <= 1 or new.state_partitions == old.state_partitions


def why_changed(group: Group, owners: Sequence[Owner], ended: Sequence[Owner]) -> str:
    """What differs between a changed group and the tasks of this run that copy its partitions: for the log."""
    mine = partitions_of(group)
    if any(same_ranges(group, j.group) for j in ended):
        return "its task ended a round ago (another copy took its partitions, then stopped or left)"
    before = [j.group for j in owners if partitions_of(j.group) & mine]
    if not before:
        return "new partitions"
    ran = {(t.topic, t.partition): t for g in before for t in g}
    for t in group:
        old = ran.get((t.topic, t.partition))
        if old is not None and not _unchanged(t, old):
            fields = ("remote_topic", "source_topic_id", "remote_topic_id", "max_message_bytes", "state_partitions")
            diff = [f"{f} {getattr(old, f)!r}->{getattr(t, f)!r}" for f in fields if getattr(old, f) != getattr(t, f)]
            return f"{t.topic}-{t.partition}: " + ", ".join(diff)
    was = sorted(sorted(p for _, p in partitions_of(g) & mine) for g in before)
    return f"regrouped: partitions {sorted(p for _, p in mine)[:16]} were in tasks of {was[:8]}"

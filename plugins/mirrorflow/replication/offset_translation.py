"""Exact offset translation for one flow (MM2's checkpoint store is `checkpoint_store.py`).

The copy keeps, on the target, the complete upstream->downstream offset map of every partition it copied
(`offset_map_topic`) and its committed progress (`progress_topic`); `load_offset_maps` rebuilds one
`OffsetMap` per source partition from them. A committed upstream offset U then translates to the downstream
offset of the first copied record at or after U, or to the replicated end when U lies past every copied
record (docs/design.md §1.5): the consumer that resumes there on the target reads exactly what the source group had
not read yet. The answer is None when the partition was never copied or U is older than the copied history.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from mirrorflow.config.model import Flow
from mirrorflow.core.checkpoint import Checkpoint
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import OffsetMap, Segment, offset_map_topic
from mirrorflow.core.progress import Progress, progress_topic
from mirrorflow.kafka.compacted_log import MissingTopicError
from mirrorflow.kafka.offsets import list_offsets
from mirrorflow.replication.flow_clients import Admin
from mirrorflow.replication.flow_rules import internal_separator
from mirrorflow.replication.state_records import (
    RawRecord,
    SlottedState,
    TopicPartition,
    latest_progress,
    slot_records,
)

log = logging.getLogger(__name__)

Status = Literal["exact", "conservative", "ahead-of-copy", "not-copied", "before-history", "map-missing"]
"""map-missing: the progress says records were copied, but the offset map holds none of them (its records
were deleted): nothing can be translated exactly, so nothing is (see `assemble_offset_maps`)."""


@dataclass(frozen=True)
class Translation:
    """`offset` is None unless `status` is "exact", "conservative" or "ahead-of-copy".

    conservative: the offset lies in a thinned run of the map (core/offset_runs.py): a group resuming there
    re-reads at most `rereads` records it had read, and skips none.
    ahead-of-copy: the group is past what the copy has read; `offset` is the replicated end, so nothing on
    the target is re-read or skipped, and records copied later that the group already read will be re-read.
    """

    offset: int | None
    status: Status
    rereads: int = 0

    @property
    def label(self) -> str:
        """The status as reports show it: "conservative (<= N re-reads)" names the bound."""
        return f"conservative (<= {self.rereads} re-reads)" if self.status == "conservative" else self.status


@dataclass(frozen=True)
class TranslatedOffset:
    """A group's position on the target: `topic` is the downstream (remote) topic."""

    topic: str
    partition: int
    offset: int
    upstream_offset: int
    metadata: str = ""

    def to_json(self) -> dict[str, str | int]:
        """The `translate --json` shape (docs/design.md §6)."""
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}


class FlowOffsetMaps:
    """The offset maps of one flow, keyed by source topic-partition.

    The stored map begins at the first copied record, not where the copy began reading, so offsets in a
    leading gap (records compacted away or aborted before the first copied one) fall below it. When the copy
    began at the source log start (the default `auto.offset.reset=earliest`), every offset from the current
    log start up to the first copied record was read and not copied: `learn_log_starts` supplies those log
    starts, and such offsets then translate to the first copy, as any other gap does. That holds only where
    the first stored segment really is the copy's first: when the map holds every record the progress says
    was copied (`records_copied`). Otherwise (segments deleted, or pruned below the log start) the rule is not
    applied and such offsets stay "before-history": conservative, never past a record.
    """

    def __init__(
        self, maps: Mapping[TopicPartition, OffsetMap], *, progress: Mapping[TopicPartition, Progress] | None = None
    ) -> None:
        self._maps = dict(maps)
        self._log_starts: dict[TopicPartition, int] = {}
        self.progress = dict(progress or {})
        """The committed progress the maps were read with (the same cut), by source partition."""
        self._whole: dict[TopicPartition, bool] = {}

    @classmethod
    def assemble(
        cls,
        segment_records: Iterable[RawRecord],
        progress_records: Iterable[RawRecord],
        *,
        topics: Collection[str] | None = None,
    ) -> FlowOffsetMaps:
        """The maps and progress of the two topics' records (log order): `assemble_offset_maps`."""
        progress_records = list(progress_records)
        maps = assemble_offset_maps(segment_records, progress_records, topics=topics)
        return cls(maps, progress=latest_progress(progress_records, topics=topics))

    def __len__(self) -> int:
        return len(self._maps)

    def get(self, topic: str, partition: int) -> OffsetMap | None:
        return self._maps.get((topic, partition))

    def learn_log_starts(self, log_starts: Mapping[TopicPartition, int]) -> None:
        """Source log starts of partitions the copy read from their log start (see the class docstring)."""
        self._log_starts.update(log_starts)

    def translate(self, topic: str, partition: int, upstream_offset: int) -> Translation:
        offset_map = self._maps.get((topic, partition))
        if offset_map is None or offset_map.start is None or offset_map.upstream_end is None:
            stored = self.progress.get((topic, partition))
            missing = offset_map is None and stored is not None and stored.records_copied > 0
            return Translation(None, "map-missing" if missing else "not-copied")
        if upstream_offset < offset_map.start:
            log_start = self._log_starts.get((topic, partition))
            if log_start is None or upstream_offset < log_start or not self._whole_history(topic, partition):
                return Translation(None, "before-history")
            upstream_offset = offset_map.start
        ahead = upstream_offset > offset_map.upstream_end
        found = offset_map.translate_bounded(upstream_offset, clamp_ahead=True)
        if found is None:
            return Translation(None, "not-copied")
        return _bounded(found, "ahead-of-copy" if ahead else "exact")

    def _whole_history(self, topic: str, partition: int) -> bool:
        """The map holds every record the progress says was copied: its first segment is the copy's first."""
        tp = (topic, partition)
        if tp not in self._whole:
            stored, offset_map = self.progress.get(tp), self._maps.get(tp)
            copied = None if offset_map is None else sum(s.length for s in offset_map.segments())
            self._whole[tp] = stored is not None and copied == stored.records_copied
        return self._whole[tp]

    def untranslate(self, topic: str, partition: int, downstream_offset: int) -> Translation:
        """Where a group that read the remote copy of `topic`-`partition` up to `downstream_offset` resumes on
        the source topic (`OffsetMap.untranslate`). Exact even past the replicated end: a read_committed consumer
        steps over the copy's last commit marker, and past every copy it has read them all."""
        offset_map = self._maps.get((topic, partition))
        found = None if offset_map is None else offset_map.untranslate_bounded(downstream_offset)
        return Translation(None, "not-copied") if found is None else _bounded(found, "exact")


def _bounded(found: tuple[int, int], status: Status) -> Translation:
    """A translation with its re-read bound: above 0 it is conservative whatever `status` would have said."""
    offset, rereads = found
    return Translation(offset, "conservative", rereads) if rereads > 0 else Translation(offset, status)


def learn_leading_gaps(
    flow: Flow,
    maps: FlowOffsetMaps,
    positions: Iterable[tuple[str, int, int]],
    source_admin: Admin,
    timeout_s: float,
) -> None:
    """Give `maps` the source log starts it needs for `positions` (topic, partition, upstream offset) that
    lie below their copied history, when the flow copies from the log start (not `auto.offset.reset=latest`).
    """
    if flow.source_consumer.librdkafka().get("auto.offset.reset", "earliest") == "latest":
        return
    below = {
        (topic, partition)
        for topic, partition, offset in positions
        if maps.translate(topic, partition, offset).status == "before-history"
    }
    if below:
        maps.learn_log_starts(list_offsets(source_admin, flow.source, below, latest=False, timeout_s=timeout_s))


def assemble_offset_maps(
    segment_records: Iterable[RawRecord],
    progress_records: Iterable[RawRecord],
    *,
    topics: Collection[str] | None = None,
) -> dict[TopicPartition, OffsetMap]:
    """Rebuild the maps from the two topics' records (log order), only for `topics` if given.

    Later records win: a rewritten key replaces the segment, a tombstone deletes it, and a segment that starts
    inside an older one (an at-least-once copy that resumed from an older progress record and copied the
    tail again) cuts the older ones at its start, because the later copy is the one a consumer reads.
    The progress is the cut (see `read_offset_maps`): a partition without a progress record is not translated,
    and segments beyond its progress are cut off (`_cut`). A partition whose progress counts copied records
    but whose map holds none below its progress (the map records were deleted) is left out: without its map
    every offset would translate to the replicated end, past every copied record.
    """
    state = SlottedState()
    state.apply_progress(((0, key, value) for key, value in progress_records), topics=topics)
    state.apply_segments(((0, key, value) for key, value in segment_records), topics=topics)
    return maps_of(state)


def maps_of(state: SlottedState) -> dict[TopicPartition, OffsetMap]:
    """The maps of a slotted fold (`SlottedState`): each partition's map cut at its progress."""
    maps: dict[TopicPartition, OffsetMap] = {}
    for tp, p in sorted(state.progress().items()):
        runs = state.runs(tp)
        restored = restore_at_progress(tp, [] if runs is None else runs.runs(), p)
        if restored is not None:
            maps[tp] = restored
    return maps


def restore_at_progress(tp: TopicPartition, segments: Iterable[Segment], progress: Progress) -> OffsetMap | None:
    """The partition's map cut at its progress (`_cut`); None (logged) when the segments cannot form one or
    none is left of a history the progress says exists (see `assemble_offset_maps`)."""
    kept = _cut(segments, progress.next_upstream, progress.downstream_end)
    if not kept and progress.records_copied > 0:
        log.warning(
            "offset map of %s-%d is missing: the progress counts %d copied records below offset %d, the map has "
            "none; it is not translated",
            tp[0],
            tp[1],
            progress.records_copied,
            progress.next_upstream,
        )
        return None
    try:
        return OffsetMap.restore(
            kept,
            next_upstream=progress.next_upstream,
            downstream_end=progress.downstream_end,
        )
    except ValueError as err:
        log.warning("offset map of %s-%d cannot be rebuilt, it is not translated: %s", tp[0], tp[1], err)
        return None


def _cut(segments: Iterable[Segment], next_upstream: int, downstream_end: int | None = None) -> list[Segment]:
    """The segments below the progress' consumed end. The reader's cut is the progress: what lies beyond it
    belongs to batches committed after the progress was read (exactly-once), or to an at-least-once batch whose
    progress was never stored, which the next run copies again. Either way its gaps are not known yet, so
    offsets there translate as ahead of the copy, to the progress' replicated end: conservative, never past a
    record the group has not read."""
    kept: list[Segment] = []
    for segment in segments:
        if segment.upstream_start >= next_upstream:
            continue
        if segment.upstream_end > next_upstream:
            segment = segment.head(next_upstream)  # a thinned run's head stays conservative
            if downstream_end is not None and not segment.exact and segment.downstream_end > downstream_end:
                # every copy below the progress lies below its downstream end: the rest of the span is a later batch's
                span = max(downstream_end - segment.downstream_start, 1)
                copies = min(segment.length, span)
                segment = Segment(
                    segment.upstream_start,
                    segment.downstream_start,
                    copies,
                    segment.upstream_length - copies,
                    span - copies,
                    segment.weight,
                )
        kept.append(segment)
    return kept


def load_offset_maps(
    flow: Flow, *, topics: Collection[str] | None = None, timeout_s: float | None = None
) -> FlowOffsetMaps:
    """The flow's offset maps as committed on the target (read_committed: only finished copy batches)."""
    timeout = flow.admin_timeout_ms / 1000 if timeout_s is None else timeout_s
    conf = flow.target_consumer.librdkafka()
    return read_offset_maps(flow.target, conf, flow.source, internal_separator(flow), topics=topics, timeout_s=timeout)


def read_offset_maps(
    cluster: str,
    conf: Mapping[str, str],
    source_alias: str,
    separator: str,
    *,
    topics: Collection[str] | None = None,
    timeout_s: float,
) -> FlowOffsetMaps:
    """The offset maps the flow `source_alias`->`cluster` keeps on `cluster`, read with client settings `conf`
    (a failback reads the forward flow's maps from the DR cluster with the reverse flow's clients)."""
    if topics is not None and not topics:
        return FlowOffsetMaps({})

    # One cut (docs/offsets.md): the progress first, to its true end, and only then the map to its own. Every
    # transaction whose progress record was read had committed by then, and it wrote its map segments before
    # committing, so they lie below the map's end: no committed batch is missing from the map. Transactions that
    # commit in between add map segments beyond their (unread) progress, which `OffsetMap.restore` rewinds.
    # Every slot of both topics is read (`core.state_slots`).
    state_topic, map_topic = progress_topic(source_alias, separator), offset_map_topic(source_alias, separator)
    state = SlottedState()
    state.apply_progress(slot_records(cluster, conf, state_topic, timeout_s=timeout_s), topics=topics)
    progress = state.progress()
    copied = any(p.records_copied > 0 for p in progress.values())
    try:
        state.apply_segments(slot_records(cluster, conf, map_topic, timeout_s=timeout_s, require=copied), topics=topics)
    except MissingTopicError as err:
        raise map_topic_missing(cluster, map_topic, state_topic) from err
    maps = maps_of(state)
    return FlowOffsetMaps(maps, progress=progress)


def map_topic_missing(cluster: str, map_topic: str, state_topic: str) -> MirrorflowError:
    """The error when the offset map is gone while the progress says records were copied."""
    return MirrorflowError(
        f"the offset-map topic '{map_topic}' does not exist on cluster '{cluster}', but the progress in "
        f"'{state_topic}' says records were copied: their offsets cannot be translated, so none is. The topic "
        "holds Mirrorflow's state and must not be deleted. To start the copy of each affected topic afresh, "
        "pause the flow and run `mirrorflow reset CONFIG --flow <flow> --topic <topic>` (docs/copy.md)."
    )


def checkpoints_as_offsets(checkpoints: Mapping[TopicPartition, Checkpoint]) -> list[TranslatedOffset]:
    """What a group's checkpoints say (RemoteClusterUtils.translateOffsets), sorted by topic and partition."""
    return [
        TranslatedOffset(c.topic, c.partition, c.downstream_offset, c.upstream_offset, c.metadata)
        for _, c in sorted(checkpoints.items())
    ]

"""The flow's progress and offset map for a long-running reader: loaded once, then tailed.

`load_offset_maps` reads both topics from their beginning; a checkpoint emitter that runs for hours would pay
that every round (the whole history of every partition of the flow). `OffsetMapTail` keeps a consumer open and,
each round, reads only what the two topics gained since the last one, following the same rules as every other
reader (docs/copy.md, "Reading the replication state"): the progress to its true end first, then the map to its
own, with the progress as the cut. Only the partitions whose records changed are rebuilt.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from mirrorflow.config.model import Flow
from mirrorflow.core.offset_map import OffsetMap, offset_map_topic
from mirrorflow.core.progress import Progress, progress_topic
from mirrorflow.kafka.compacted_log import CompactedTail
from mirrorflow.replication.flow_rules import internal_separator
from mirrorflow.replication.offset_translation import (
    FlowOffsetMaps,
    SegmentStore,
    TopicPartition,
    apply_segment_records,
    latest_progress,
    restore_at_progress,
)


class OffsetMapTail:
    """The offset maps of the flow `source_alias` -> `cluster`, kept current by tailing (see the module)."""

    def __init__(self, cluster: str, conf: Mapping[str, str], source_alias: str, separator: str, *, timeout_s: float):
        self._tail = CompactedTail(cluster, conf, timeout_s=timeout_s)
        self._progress_topic = progress_topic(source_alias, separator)
        self._map_topic = offset_map_topic(source_alias, separator)
        self._progress: dict[TopicPartition, Progress] = {}
        self._segments: SegmentStore = {}
        self._built: dict[TopicPartition, OffsetMap | None] = {}

    @classmethod
    def for_flow(cls, flow: Flow, *, timeout_s: float) -> OffsetMapTail:
        conf = flow.target_consumer.librdkafka()
        return cls(flow.target, conf, flow.source, internal_separator(flow), timeout_s=timeout_s)

    @property
    def records_read(self) -> int:
        """State records read so far, every round together."""
        return self._tail.records_read

    def load(self, *, topics: Collection[str] | None = None) -> FlowOffsetMaps:
        """The maps as of now (for `topics` if given), after reading what the two topics gained."""
        restarted, progress_records = self._tail.read_new(self._progress_topic, 0)
        if restarted:
            self._progress.clear()
            self._built.clear()
        fresh = latest_progress(progress_records)
        self._progress.update(fresh)
        restarted, map_records = self._tail.read_new(self._map_topic, 0)
        if restarted:
            self._segments.clear()
            self._built.clear()
        for tp in apply_segment_records(self._segments, map_records) | set(fresh):
            self._built.pop(tp, None)
        wanted = None if topics is None else set(topics)
        maps: dict[TopicPartition, OffsetMap] = {}
        progress: dict[TopicPartition, Progress] = {}
        for tp, stored in self._progress.items():
            if wanted is not None and tp[0] not in wanted:
                continue
            if tp not in self._built:
                self._built[tp] = restore_at_progress(tp, self._segments.get(tp, {}).values(), stored)
            built = self._built[tp]
            progress[tp] = stored
            if built is not None:
                maps[tp] = built
        return FlowOffsetMaps(maps, progress=progress)

    def close(self) -> None:
        self._tail.close()

"""The flow's progress and offset map for a long-running reader: loaded once, then tailed.

`load_offset_maps` reads both topics from their beginning; a checkpoint emitter that runs for hours would pay
that every round (the whole history of every partition of the flow). `OffsetMapTail` keeps a consumer open and,
each round, reads only what the two topics gained since the last one, following the same rules as every other
reader (docs/copy.md, "Reading the replication state"): the progress to its true end first, then the map to its
own, with the progress as the cut. Every slot of both topics is tailed (`core.state_slots`), and a partition's
state is the one in the highest slot holding any. Only the partitions whose records changed are rebuilt.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from mirrorflow.config.model import Flow
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import OffsetMap, offset_map_topic
from mirrorflow.core.progress import Progress, progress_topic
from mirrorflow.kafka.compacted_tail import CompactedTail
from mirrorflow.replication.flow_rules import internal_separator
from mirrorflow.replication.internal_topics import STATE_TAIL_MAX_GAP_S
from mirrorflow.replication.offset_translation import FlowOffsetMaps, map_topic_missing, restore_at_progress
from mirrorflow.replication.state_records import SlottedState, TopicPartition

RELOADS = 3
"""Reads from the start in one `load` before giving up on state topics that keep being re-created."""


class OffsetMapTail:
    """The offset maps of the flow `source_alias` -> `cluster`, kept current by tailing (see the module).

    When either state topic was deleted and re-created (`CompactedTail.read_new` says so), everything built so
    far is dropped and both topics are read again from their start, the progress first: a map kept from the
    old topics, or progress kept while the map is re-read, would translate against a history that is gone.
    """

    def __init__(self, cluster: str, conf: Mapping[str, str], source_alias: str, separator: str, *, timeout_s: float):
        self._tail = CompactedTail(cluster, conf, timeout_s=timeout_s, max_gap_s=STATE_TAIL_MAX_GAP_S)
        self._cluster = cluster
        self._progress_topic = progress_topic(source_alias, separator)
        self._map_topic = offset_map_topic(source_alias, separator)
        self._state = SlottedState()
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
        for _ in range(RELOADS):
            if not self._read_new():
                break
            for topic in (self._progress_topic, self._map_topic):
                self._tail.forget(topic)
            self._state.clear()
            self._built.clear()
        else:
            raise MirrorflowError(
                f"the state topics '{self._progress_topic}' and '{self._map_topic}' on cluster '{self._cluster}' "
                f"were re-created {RELOADS} times while being read: pause whatever deletes them and run this again"
            )
        all_progress = self._state.progress()
        copied = any(p.records_copied > 0 for p in all_progress.values())
        if copied and not self._tail.has_read(self._map_topic, 0):
            raise map_topic_missing(self._cluster, self._map_topic, self._progress_topic)
        wanted = None if topics is None else set(topics)
        maps: dict[TopicPartition, OffsetMap] = {}
        progress: dict[TopicPartition, Progress] = {}
        for tp, stored in all_progress.items():
            if wanted is not None and tp[0] not in wanted:
                continue
            if tp not in self._built:
                runs = self._state.runs(tp)
                self._built[tp] = restore_at_progress(tp, [] if runs is None else runs.runs(), stored)
            built = self._built[tp]
            progress[tp] = stored
            if built is not None:
                maps[tp] = built
        return FlowOffsetMaps(maps, progress=progress)

    def _read_new(self) -> bool:
        """Apply what the two topics gained (the progress first: the cut); whether either was re-created."""
        progress_restarted, progress_records = self._tail.read_new_all(self._progress_topic)
        changed = self._state.apply_progress(progress_records)
        map_restarted, map_records = self._tail.read_new_all(self._map_topic)
        for tp in self._state.apply_segments(map_records) | changed:
            self._built.pop(tp, None)
        return progress_restarted or map_restarted

    def close(self) -> None:
        self._tail.close()

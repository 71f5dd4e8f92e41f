"""Readers of the state topics racing the log cleaner (no broker; review 13).

Every reader takes each partition's end (its high watermark) first and then reads up to it. A record below that
end whose key a copy writes again after the end was taken can be removed by the cleaner before the reader's fetch
reaches it: the cleaner keeps only the newer record, which lies beyond the reader's end. The reader then finds no
record of the key at all. Kafka's `min.compaction.lag.ms` is what keeps a record out of the cleaner's reach (both
as a record to drop and as the newer record that makes an older one droppable) until it is that old; the state
topics' settings must give readers at least the time a read takes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from mirrorflow.core.offset_map import OffsetMap, encode_segment
from mirrorflow.core.progress import Progress, encode_progress
from mirrorflow.kafka.compacted_log import ENDS_SPAN_S, OPEN_TRANSACTION_WAIT_S
from mirrorflow.kafka.compacted_tail import CompactedTail
from mirrorflow.replication.internal_topics import STATE_TAIL_MAX_GAP_S, STATE_TOPIC_CONFIGS
from mirrorflow.replication.offset_translation import FlowOffsetMaps, assemble_offset_maps

TP = ("t", 0)
READ_S = 5.0
"""How long the reader below takes from taking the map's end to fetching its records (a whole-flow read first
asks one watermark per slot, thousands of them at scale, then fetches)."""


@dataclass
class Rec:
    offset: int
    key: bytes
    value: bytes | None
    ts_s: float


def clean(log: list[Rec], now_s: float) -> list[Rec]:
    """One pass of Kafka's cleaner over a log whose segments all rolled (segment.ms / segment.bytes): records no
    newer than `min.compaction.lag.ms` are cleanable; a cleanable record goes when a later cleanable record has
    its key. Offsets stay."""
    lag_s = int(STATE_TOPIC_CONFIGS.get("min.compaction.lag.ms", "0")) / 1000
    cleanable = [r for r in log if r.ts_s <= now_s - lag_s]
    end = cleanable[-1].offset + 1 if cleanable else 0  # the cleanable range is a prefix
    last = {r.key: r.offset for r in log if r.offset < end}
    return [r for r in log if r.offset >= end or last[r.key] == r.offset]


def test_a_map_reader_racing_the_cleaner_never_skips_labelled_exact() -> None:
    """At-least-once: the tail run's key is written again at every commit. A reader takes the progress, then
    the map's end; the copy commits once more; the cleaner drops the older records of the tail run's key; the
    reader then finds no tail run, counts its span as read-and-not-copied, and translates into it to the
    replicated end: 7 copied records skipped, labelled exact (HEAD: no `min.compaction.lag.ms`)."""
    offsets = OffsetMap()
    map_log: list[Rec] = []
    progress_log: list[tuple[bytes, bytes | None]] = []
    now = [-600.0]
    downstream = 0
    upstream = 0

    def copy(n: int) -> None:
        nonlocal upstream, downstream
        for _ in range(n):
            offsets.record(upstream, downstream)
            upstream += 1
            downstream += 1

    def commit() -> Progress:
        offsets.mark_consumed(upstream)
        changes = offsets.unflushed()
        for segment in changes.upserts:
            key, value = encode_segment(*TP, segment)
            map_log.append(Rec(len(map_log), key, value, now[0]))
        offsets.mark_flushed(changes)
        progress = Progress(*TP, upstream, downstream, downstream, 0, 0)
        progress_log.append(encode_progress(progress))
        now[0] += 1.0
        return progress

    copy(10)
    commit()
    upstream += 2  # source offsets 10, 11 compacted away on the source: a second run starts at 12
    copy(5)
    commit()
    copy(5)
    now[0] = 0.0
    cut = commit()  # the tail run (key 12) covers upstream [12, 22) -> downstream [10, 20)
    truth = {u: u - 2 for u in range(12, cut.next_upstream)}

    # The reader: progress to its end, then the map's end (taken at t = 0).
    progress_read = list(progress_log)
    map_end = len(map_log)
    # The copy commits again at t = 1 s: the tail run's key is written again, beyond the reader's end.
    now[0] = 1.0
    copy(5)
    commit()
    # The cleaner passes at t = 2 s (the segment rolled at 16 MiB or 10 min); the reader fetches at READ_S.
    found = [(r.key, r.value) for r in clean(map_log, now_s=2.0) if r.offset < map_end]
    maps = FlowOffsetMaps(assemble_offset_maps(found, progress_read), progress={TP: cut})
    skipped = {}
    for u, d in truth.items():
        answer = maps.translate(*TP, u)
        if answer.offset is not None and answer.offset > d:
            skipped[u] = (answer.offset, answer.status, d)
    assert not skipped, f"translated past copies that were never read (offset, status, true offset): {skipped}"


def test_state_topics_keep_records_from_the_cleaner_longer_than_a_read_takes() -> None:
    """The bound itself: without `min.compaction.lag.ms` (0 by default) a record may be cleaned the moment its
    segment rolls and a newer record of its key rolled too. A read may wait `OPEN_TRANSACTION_WAIT_S` for open
    transactions below its ends before it fails; the lag keeps three times that (session 15 shortened it from 15
    to 5 minutes on that argument: `STATE_TOPIC_CONFIGS`). A tail going on after `STATE_TAIL_MAX_GAP_S` plus such
    a read must still find every tombstone written after its last read: the cleaner keeps one at least the lag and
    then `delete.retention.ms`."""
    lag_s = int(STATE_TOPIC_CONFIGS.get("min.compaction.lag.ms", "0")) / 1000
    assert lag_s >= 3 * (OPEN_TRANSACTION_WAIT_S + ENDS_SPAN_S), STATE_TOPIC_CONFIGS  # a span of ends, then the wait
    kept_s = lag_s + int(STATE_TOPIC_CONFIGS["delete.retention.ms"]) / 1000
    assert kept_s > STATE_TAIL_MAX_GAP_S + OPEN_TRANSACTION_WAIT_S, (STATE_TAIL_MAX_GAP_S, STATE_TOPIC_CONFIGS)


def test_a_tail_that_failed_to_read_does_not_count_the_failed_attempt_as_a_read() -> None:
    """`CompactedTail._lapsed` stamps the time at the start of every read, also of one that then fails: after a
    successful read at 0 and failed ones at 20 and 40 min, a read at 70 min goes on from the position of the read
    at 0 (70 min old, past `delete.retention.ms` = 1 h) instead of reading the topic from its start."""
    now = [0.0]
    tail = CompactedTail(
        "B", {"bootstrap.servers": "127.0.0.1:1"}, timeout_s=1.0, max_gap_s=STATE_TAIL_MAX_GAP_S, clock=lambda: now[0]
    )
    fail = [False]

    def read_partition(topic: str, partition: int) -> tuple[bool, list[tuple[bytes | None, bytes | None]]]:
        if fail[0]:
            raise RuntimeError("stalled (an open transaction, a broker away)")
        tail._positions[(topic, partition)] = 5
        return False, []

    tail._recreated = lambda _topic, _seen: False  # type: ignore[method-assign]
    tail._read_partition = read_partition  # type: ignore[method-assign]
    try:
        assert tail.read_new("p", 0) == (False, [])
        fail[0] = True
        for minutes in (20, 40):
            now[0] = minutes * 60.0
            with contextlib.suppress(RuntimeError):
                tail.read_new("p", 0)
        fail[0] = False
        now[0] = 70 * 60.0
        restarted, _records = tail.read_new("p", 0)
        assert restarted, "went on from a position read 70 minutes ago"
    finally:
        tail.close()


def test_a_reader_racing_a_slot_move_and_the_cleaner_keeps_the_moved_run() -> None:
    """The move's rule (`SlottedState`: the copy at the head is durable before the tombstone below, and readers
    take the lower slot's end first) assumes a reader that misses a record below saw its tombstone, hence the
    copy above. With the cleaner it can miss the record below because of a tombstone beyond its end: the reader
    takes slot 0's end (run B there), then slot 1's (empty); the copy writes B at its head (slot 1), then
    tombstones B in slot 0; the cleaner drops B from slot 0; the reader fetches: B in neither slot. Run A was
    moved by an earlier at-least-once commit cut short (A's copy delivered, B's not, no progress written: the
    progress is still slot 0's, read before the map). Offsets in B's span then translate to the replicated end,
    labelled exact."""
    from mirrorflow.core.offset_map import Segment, encode_segment_key
    from mirrorflow.core.state_slots import head_slot
    from mirrorflow.replication.offset_translation import maps_of
    from mirrorflow.replication.state_records import SlottedState

    tp = ("t", 4)
    assert head_slot(*tp, 2) == 1
    run_a, run_b = Segment(0, 0, 10), Segment(12, 10, 10)
    progress = Progress(*tp, 22, 20, 20, 0, 0)

    def rec(offset: int, record: tuple[bytes, bytes | None], ts_s: float) -> Rec:
        return Rec(offset, record[0], record[1], ts_s)

    slot0 = [rec(0, encode_segment(*tp, run_a), -900), rec(1, encode_segment(*tp, run_b), -900)]
    slot1 = [rec(0, encode_segment(*tp, run_a), -600)]  # the cut-short move: A is at the head already
    slot0.append(rec(2, (encode_segment_key(*tp, 0), None), -599))  # and tombstoned below
    ends = {0: len(slot0), 1: len(slot1)}  # the reader takes the ends at t = 0, lower slot first
    slot1.append(rec(1, encode_segment(*tp, run_b), 1.0))  # t = 1 s: step 1 of the move, B copied up
    slot0.append(rec(3, (encode_segment_key(*tp, 12), None), 2.0))  # t = 2 s: step 2, B tombstoned below
    found = {
        slot: [r for r in clean(log, now_s=3.0) if r.offset < ends[slot]] for slot, log in ((0, slot0), (1, slot1))
    }
    state = SlottedState()
    state.apply_progress([(0, *encode_progress(progress))])
    state.apply_segments([(slot, r.key, r.value) for slot in (0, 1) for r in found[slot]])
    maps = FlowOffsetMaps(maps_of(state), progress={tp: progress})
    skipped = {}
    for u in range(12, 22):
        answer = maps.translate(*tp, u)
        if answer.offset is not None and answer.offset > u - 2:
            skipped[u] = (answer.offset, answer.status, u - 2)
    assert not skipped, f"translated past copies that were never read (offset, status, true offset): {skipped}"

"""Moving a partition's state up its chain of slots (replication/copy_slots.py), against every reader, with the
reads interleaved by hand: a fake state-topic store drives the real load, commit and fold code, and readers take
each slot's end at a time of their choosing, in ascending slot order as `read_to_end` and `CompactedTail` do. The
copy itself is checked on real brokers in test_state_slots.py; here the point is the interleavings a broker run
would hit only by luck. Each scenario is one an adversarial review found to skip records, labelled exact,
before the move wrote the runs up first and tombstoned them below only once those copies were durable."""

from __future__ import annotations

import itertools
import random
import types
from typing import Any

import pytest

import mirrorflow.core.offset_runs as offset_runs
import mirrorflow.replication.copy_slots as copy_slots
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import OffsetMap
from mirrorflow.core.progress import Progress
from mirrorflow.core.state_slots import head_slot
from mirrorflow.replication.copy_commit import StateSlots, commit_batch
from mirrorflow.replication.copy_setup import restore_map
from mirrorflow.replication.offset_translation import maps_of
from mirrorflow.replication.state_records import SlottedState

PROGRESS, MAP, TOPIC = "progress", "map", "orders"
PARTITION = next(p for p in range(100) if head_slot(TOPIC, p, 4) != 0)  # a partition whose state must move


class Txn:
    def __init__(self) -> None:
        self.state = "open"
        self.committed_at = 0  # the sequence number of its last record


class Store:
    """Two state topics as partitioned logs; every append gets a global sequence number (its time)."""

    def __init__(self, count: int) -> None:
        self.logs: dict[str, list[list[tuple[int, Any, Any, Txn]]]] = {
            t: [[] for _ in range(count)] for t in (PROGRESS, MAP)
        }
        self.seq = 0
        self.reads: list[tuple[str, list[int]]] = []  # the copy's reads: (topic, slots)

    def grow(self, count: int) -> None:
        for parts in self.logs.values():
            parts.extend([] for _ in range(count - len(parts)))

    def append(self, topic: str, partition: int, key: bytes, value: bytes | None, txn: Txn) -> None:
        self.seq += 1
        self.logs[topic][partition].append((self.seq, key, value, txn))

    def read_to_end(self, _cluster: str, _conf: Any, topic: str, **kwargs: Any) -> Any:
        """The copy's read (after its fence: nothing of its partition is in flight)."""
        parts = self.logs[topic]
        kwargs["on_count"](len(parts)) if kwargs.get("on_count") else None
        wanted = kwargs["partitions"](len(parts))
        self.reads.append((topic, list(wanted)))
        for p in wanted:
            for offset, (_s, key, value, txn) in enumerate(parts[p]):
                if txn.state == "committed":
                    yield p, offset, key, value, 0

    def view(self, topic: str, times: list[int]) -> list[tuple[int, Any, Any]]:
        """A reader's records: slot p up to its end taken at `times[p]`, committed ones (it waits for the rest)."""
        return [(p, key, value) for p, _seq, key, value in self.seen(topic, times)]

    def seen(self, topic: str, times: list[int]) -> list[tuple[int, int, Any, Any]]:
        """`view` with the commit time of each record's transaction."""
        return [
            (p, txn.committed_at, key, value)
            for p, part in enumerate(self.logs[topic])
            for seq, key, value, txn in part
            if seq <= times[p] and txn.state == "committed"
        ]


class Writer:
    """`TargetWriter`'s surface over the store. A transaction's records reach their partitions at commit, each
    partition's in order but the partitions interleaved at random (Kafka gives no order across partitions);
    at-least-once deliveries can be refused by `refuse(topic, slot)`."""

    def __init__(
        self, store: Store, transactional: bool, refuse: Any = None, seed: int = 0, order: str = "random"
    ) -> None:
        self.store, self.transactional, self.refuse = store, transactional, refuse or (lambda topic, slot: False)
        self.pending: list[Any] = []
        self.rng, self.order = random.Random(seed), order

    def produce(self, topic: str, partition: int, key: bytes, value: bytes | None, on_delivery: Any = None) -> None:
        self.pending.append((topic, partition, key, value, on_delivery))

    def flush(self) -> None:
        if self.transactional:
            return
        for topic, partition, key, value, on_delivery in self.pending:
            if self.refuse(topic, partition):
                on_delivery(Refused(), Delivered(topic, partition))
                continue
            txn = Txn()
            txn.state = "committed"
            self.store.append(topic, partition, key, value, txn)
            txn.committed_at = self.store.seq
        self.pending = []

    def commit(self) -> None:
        if not self.transactional:
            self.flush()
            return
        queues: dict[tuple[str, int], list[Any]] = {}
        for record in self.pending:
            queues.setdefault(record[:2], []).append(record)
        txn = Txn()
        while queues:
            where = self.rng.choice(sorted(queues)) if self.order == "random" else sorted(queues, key=self._rank)[0]
            topic, partition, key, value, _ = queues[where].pop(0)
            self.store.append(topic, partition, key, value, txn)
            if not queues[where]:
                del queues[where]
        txn.state, txn.committed_at, self.pending = "committed", self.store.seq, []

    def _rank(self, where: tuple[str, int]) -> int:
        """`low-first`: the lower slots' records reach their brokers first; `high-first`: the head's."""
        return where[1] if self.order == "low-first" else -where[1]


class Refused:
    def str(self) -> str:
        return "refused"


class Delivered:
    def __init__(self, topic: str, partition: int) -> None:
        self._topic, self._partition = topic, partition

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition


def task() -> Any:
    return types.SimpleNamespace(
        flow="A->B",
        topic=TOPIC,
        partition=PARTITION,
        progress_topic=PROGRESS,
        offset_map_topic=MAP,
        target="B",
        target_consumer={},
        timeout_s=5.0,
        state_partitions=1,
    )


class Copy:
    """A copy of the partition: one in ten upstream offsets is a gap (as compaction leaves them), the others are
    copied to the next downstream offsets, one exact run per commit (a failed commit's records stay on the
    target: the copy after it lands further on); `pairs` are the committed copies, the readers' truth."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.store, self.pairs, self.next_down = store, [], 0  # type: list[tuple[int, int]], int
        monkeypatch.setattr(copy_slots, "read_to_end", store.read_to_end)
        self.start()

    def start(self) -> None:
        self.progress, pslots = copy_slots.load_progress(task())
        stored, mslots = copy_slots.load_segments(task(), copy_slots.settled_slots(self.progress))
        at = self.progress.next_upstream if self.progress else 0
        self.map = restore_map(stored, self.progress, at) if stored.runs else OffsetMap(start=at)
        self.slots = StateSlots(pslots, mslots)

    def batch(self, writer: Writer, count: int = 100) -> None:
        at = self.progress.next_upstream if self.progress else 0
        ups = [u for u in range(at, at + count) if u % 10 != 9]
        downs = list(range(self.next_down, self.next_down + len(ups)))
        self.next_down += len(ups)
        self.map.record_batch(ups, downs)
        self.map.mark_consumed(at + count, downstream_end=downs[-1] + 1)
        copied = (self.progress.records_copied if self.progress else 0) + len(ups)
        progress = Progress(TOPIC, PARTITION, at + count, downs[-1] + 1, copied, 1, 0)
        commit_batch(writer, task(), self.map, progress, self.slots)  # type: ignore[arg-type]
        self.progress = progress
        self.pairs += list(zip(ups, downs, strict=True))


def truth(pairs: list[tuple[int, int]], u: int, end: int) -> int:
    """Where a group at upstream `u` must resume: the copy of the first record at or after it."""
    return next((d for up, d in pairs if up >= u), end)


def assert_never_past(state: SlottedState, pairs: list[tuple[int, int]]) -> None:
    """Every offset below the reader's progress translates at or before the truth, exactly when it says so."""
    progress = state.progress().get((TOPIC, PARTITION))
    assert progress is not None, "a partition with progress must never look as if it had none"
    found = maps_of(state).get((TOPIC, PARTITION))
    assert found is not None
    for u in range(0, progress.next_upstream, 7):
        offset, rereads = found.translate_bounded(u) or (None, 0)
        right = truth(pairs, u, progress.downstream_end)
        assert offset is not None and offset <= right, f"translate({u}) = {offset}: past {right}, a skip"
        assert rereads or offset == right, f"translate({u}) = {offset}, labelled exact; the copy is at {right}"


def read(store: Store, rng: random.Random, since: int, until: int | None = None) -> SlottedState:
    """A reader: progress first, then the map, each taking its slots' ends in ascending slot order, a few
    appends apart (so that the ends often fall inside one commit's records). The progress read ends only once
    every transaction it met has committed: the map's ends come after that (the one-cut rule)."""
    n = len(store.logs[PROGRESS])
    times = [rng.randint(since, store.seq if until is None else until)]
    for _ in range(n - 1):
        times.append(min(times[-1] + rng.randint(0, 3), store.seq))
    progress = store.seen(PROGRESS, times)
    times.append(max([times[-1], *(committed for _p, committed, _k, _v in progress)]))
    for _ in range(n - 1):
        times.append(min(times[-1] + rng.randint(0, 3), store.seq))
    state = SlottedState()
    state.apply_progress((p, key, value) for p, _c, key, value in progress)
    state.apply_segments(store.view(MAP, times[n:]))
    return state


def old_layout(monkeypatch: pytest.MonkeyPatch, transactional: bool) -> tuple[Store, Copy]:
    """Ten commits on the one-partition topics of an older version, then the topics grown to 4."""
    store = Store(1)
    copy = Copy(store, monkeypatch)
    for _ in range(10):
        copy.batch(Writer(store, transactional))
    store.grow(4)
    copy.start()
    return store, copy


@pytest.mark.parametrize("thinning", [None, 2], ids=["exact", "thinned"])
@pytest.mark.parametrize(
    ("transactional", "order"),
    [(True, "random"), (True, "low-first"), (True, "high-first"), (False, "random")],
    ids=["exactly-once", "exactly-once-low-first", "exactly-once-high-first", "at-least-once"],
)
def test_readers_never_skip_while_a_partition_moves_up_its_slots(
    monkeypatch: pytest.MonkeyPatch, transactional: bool, order: str, thinning: int | None
) -> None:
    """With thinning on, the move's first commit also merges runs: the absorbed run's key is deleted, and a
    delete below seen before the merged run at the head would be a hole (the second review's finding)."""
    store, copy = old_layout(monkeypatch, transactional)
    if thinning is not None:
        monkeypatch.setattr(offset_runs, "DEFAULT_EXACT_RUNS", thinning)
        copy.start()
    moved_from = store.seq
    ends = []
    for seed in range(4):  # the move, its second step, and more commits
        copy.batch(Writer(store, transactional, seed=seed, order=order))
        ends.append(store.seq)
    rng = random.Random(7)
    for i in range(300):  # two thirds of the readers start inside the move's first commit
        assert_never_past(read(store, rng, moved_from, ends[0] if i % 3 else None), copy.pairs)
    below = [p for p in range(4) if p != head_slot(TOPIC, PARTITION, 4)]
    live_below = SlottedState()
    live_below.apply_segments(store.view(MAP, [store.seq] * 4))
    assert set(live_below.key_slots((TOPIC, PARTITION))) == {head_slot(TOPIC, PARTITION, 4)}, below


def test_a_move_cut_short_at_least_once_leaves_no_hole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only part of the runs reach the head (the rest refused): the next start still sees every run."""
    store, copy = old_layout(monkeypatch, False)
    head = head_slot(TOPIC, PARTITION, 4)
    refused = itertools.cycle([False, False, True])
    with pytest.raises(MirrorflowError):
        copy.batch(Writer(store, False, refuse=lambda topic, slot: topic == MAP and slot == head and next(refused)))
    copy.start()
    state = read(store, random.Random(1), store.seq)
    assert_never_past(state, copy.pairs)
    copy.batch(Writer(store, False))
    copy.batch(Writer(store, False))
    assert_never_past(read(store, random.Random(2), store.seq), copy.pairs)


def test_what_a_crash_leaves_below_is_finished_by_the_next_start_and_never_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At-least-once, the tombstones below refused: the next start tombstones them; pruning everything later
    must not bring the old runs back from below."""
    store, copy = old_layout(monkeypatch, False)
    copy.batch(Writer(store, False, refuse=lambda topic, slot: slot == 0))
    copy.start()
    copy.batch(Writer(store, False))
    state = SlottedState()
    state.apply_segments(store.view(MAP, [store.seq] * 4))
    state.apply_progress(store.view(PROGRESS, [store.seq] * 4))
    assert set(state.key_slots((TOPIC, PARTITION))) == {head_slot(TOPIC, PARTITION, 4)}
    assert state.progress_slots((TOPIC, PARTITION)) == [head_slot(TOPIC, PARTITION, 4)]
    copy.map.prune_below(copy.progress.next_upstream)  # retention takes every copied record
    copy.batch(Writer(store, False))
    after = SlottedState()
    after.apply_segments(store.view(MAP, [store.seq] * 4))
    runs = after.runs((TOPIC, PARTITION))
    assert runs is not None and all(r.upstream_end > 1100 for r in runs.runs()), "no old run comes back"


def live_below(store: Store) -> tuple[set[int], list[int]]:
    """The slots where the partition's map keys and progress are live, as a reader of every slot sees them."""
    state = SlottedState()
    state.apply_segments(store.view(MAP, [store.seq] * 4))
    state.apply_progress(store.view(PROGRESS, [store.seq] * 4))
    return set(state.key_slots((TOPIC, PARTITION))), state.progress_slots((TOPIC, PARTITION))


@pytest.mark.parametrize("transactional", [True, False], ids=["exactly-once", "at-least-once"])
def test_once_the_move_is_durable_a_start_reads_the_head_slot_alone(
    monkeypatch: pytest.MonkeyPatch, transactional: bool
) -> None:
    """The start cost of a settled partition is one slot per topic, whatever the slot count; until its move is
    durable, every start reads the chain (what a crash left below must be found)."""
    store, copy = old_layout(monkeypatch, transactional)
    head = head_slot(TOPIC, PARTITION, 4)
    store.reads = store.reads[-3:]
    chain = sorted({0, head, head % 2})
    assert store.reads == [(PROGRESS, [head]), (PROGRESS, chain), (MAP, chain)]  # the upgrade's first start
    copy.batch(Writer(store, transactional))  # the move's first step: the chain is still read at a restart
    store.reads.clear()
    copy.start()
    assert (MAP, chain) in store.reads and (PROGRESS, chain) in store.reads
    copy.batch(Writer(store, transactional))
    copy.batch(Writer(store, transactional))
    store.reads.clear()
    copy.start()
    assert store.reads == [(PROGRESS, [head]), (MAP, [head])]
    assert live_below(store) == ({head}, [head])
    copy.batch(Writer(store, transactional))
    assert_never_past(read(store, random.Random(3), store.seq), copy.pairs)
    store.grow(8)  # a growth: the count no longer matches the settled one, so the chain is read again
    store.reads.clear()
    copy.start()
    assert len(store.reads[-1][1]) > 1


def test_a_refused_tombstone_below_keeps_the_partition_unsettled_for_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """At-least-once, the tombstones below are refused and the run commits again: that later progress must not
    say settled (the next start would read the head alone and never tombstone what is left below, which comes
    back for every reader of the flow once retention prunes the head's runs)."""
    store, copy = old_layout(monkeypatch, False)
    head = head_slot(TOPIC, PARTITION, 4)
    copy.batch(Writer(store, False, refuse=lambda topic, slot: slot == 0))
    copy.batch(Writer(store, False))
    copy.batch(Writer(store, False))
    copy.start()
    copy.batch(Writer(store, False))
    copy.batch(Writer(store, False))
    assert live_below(store) == ({head}, [head])
    copy.map.prune_below(copy.progress.next_upstream)
    copy.batch(Writer(store, False))
    after = SlottedState()
    after.apply_segments(store.view(MAP, [store.seq] * 4))
    runs = after.runs((TOPIC, PARTITION))
    assert runs is not None and all(r.upstream_end > 1100 for r in runs.runs()), "no old run comes back"

"""What remembering `LogReader`s have read of compacted partitions, kept as compaction would: one reader's own, or
shared by the copy ranges of one Spark task (`replication.copy_group`), so that a state slot is fetched once per
task and then only tailed, however many of the task's ranges have their state in it (issue 17: a task of 8 ranges
read 8 slots' worth of other partitions' state, one per range).

Per partition it keeps the latest record per key (tombstones too: a later read must see a delete as a fresh read
would, until compaction drops it) and where the reads stopped, so it holds at most the partition's live keys. A
lock per partition is held by the read that moves it, from taking the partition's end to folding what it fetched:
a read's end is taken while no other read can move the partition, so what it is served is exactly the log below
that end (never a later cut of one slot beside an earlier cut of another: readers rely on taking the slots' ends
in ascending order, `state_records.SlottedState`). It releases each partition once that one is read to its end,
and holds none while it waits for one (`hold_all`). A read that fails leaves what it fetched below the failure,
a valid prefix (a read_committed fetch delivers a record only once everything below it is decided), and its
error, which a reader that waited for it behind the lock and ran out of patience reports.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer

from mirrorflow.kafka.read_stall import StalledReadError

T = TypeVar("T")

MAX_GAP_S = 12 * 3600.0
"""The longest time between two reads of a topic that may continue where the first ended; after a longer gap the
topic is read again from its start. Once the log cleaner has passed a tombstone, the broker keeps it only
`delete.retention.ms`: a reader that continues after that finds neither the deleted record's tombstone nor a sign
that it missed one, and keeps a key that is gone. This default is half of Kafka's default (24 h); a caller whose
topics keep tombstones for less passes half of theirs (the state topics: `internal_topics.STATE_TAIL_MAX_GAP_S`)."""


def boot_clock() -> float:
    """Seconds on a clock that also runs while the host is suspended (a gap must count that time: the broker's
    retention runs on), where Linux has one; wall-clock time elsewhere."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.time()


Record = tuple[int, int, bytes | None, bytes | None, int]
"""(partition, offset, key, value, timestamp_ms), as `compacted_log.read_to_end` yields them."""


class Kept:
    """One partition's remembered records, where reads of it stopped, and the lock of the read moving them."""

    __slots__ = ("failure", "lock", "moved_at", "position", "read_at", "records")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: dict[bytes | int, Record] = {}
        self.position = 0
        self.moved_at = time.monotonic()
        """When a read last moved `position`: a reader waiting behind the lock counts that as its own progress."""
        self.failure: Exception | None = None
        """The error of the last read that stopped short of its end (cleared by one that reached it)."""
        self.read_at = boot_clock()
        """When a read last fetched up to its end here (`LogCache.max_gap_s`)."""

    def keep(self, record: Record) -> None:
        """`record` is the latest of its key, and everything below it has been read; one below where the reads
        stopped (delivered again) is not, and is left out."""
        if record[1] < self.position:
            return
        self.records[record[2] if record[2] is not None else record[1]] = record
        self.reach(record[1] + 1)

    def reach(self, position: int) -> None:
        if position > self.position:
            self.position, self.moved_at = position, time.monotonic()

    def forget(self) -> None:
        """Read the partition again from its start: it now ends below where the reads stopped (re-created), or the
        last read is so long ago that the cleaner may have dropped tombstones this memory needed (`MAX_GAP_S`)."""
        self.records.clear()
        self.position = 0

    def in_order(self) -> list[Record]:
        return sorted(self.records.values(), key=lambda r: r[1])

    def hold(self, since: float, wait_s: float) -> bool | None:
        """Take the lock: False at once, True after waiting for another read; None when that read made no progress
        for `wait_s` counted from `since` (when this read began) or from its last progress, whichever is later:
        the same patience a read alone would have had with the transaction that holds them both."""
        if self.lock.acquire(blocking=False):
            return False
        while not self.lock.acquire(timeout=0.05):
            if time.monotonic() - max(since, self.moved_at) > wait_s:
                return None
        return True


class _Asked:
    """A topic's metadata as last asked, when it was asked, the lock of the request asking it again, and the error
    of the last request when it failed (with when it was asked)."""

    __slots__ = ("asked_at", "failure", "lock", "metadata")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.metadata: Any = None
        self.asked_at = 0.0
        self.failure: tuple[float, float, Exception] | None = None
        """(when the failed request was asked, when it failed, its error)."""


class LogCache:
    """Remembered partitions by (cluster, read_committed, topic, partition), safe to share between threads; with
    what its reads fetched from the brokers (`fetches`: partition reads that fetched; `records`: records
    fetched), which the benchmark and tests count.

    It also keeps, for the readers sharing it, what a read asks of the brokers besides records: each topic's
    metadata (`topic`), one read_uncommitted client per cluster that asks partitions' true ends (`asker`), and the
    fetching clients, lent for one fetch at a time (`borrow`). Every metadata answer about a state topic lists all
    its partitions (42 bytes each at replication factor 3: 172 KB at 4,096 slots), so a Spark task of 8 ranges that
    asked it at every read and client paid more in metadata than in state (issue 17; `make bench-state-metadata`
    counts the broker's answers)."""

    def __init__(self, max_gap_s: float = MAX_GAP_S) -> None:
        """`max_gap_s`: the longest time between two reads of a partition that may continue where the first one
        stopped (`MAX_GAP_S`; the state topics pass half their `delete.retention.ms`)."""
        self.max_gap_s = max_gap_s
        self._lock = threading.Lock()
        self._kept: dict[tuple[str, bool, str, int], Kept] = {}
        self._forgets: dict[tuple[str, bool, str], int] = {}
        self._asked: dict[tuple[str, str], _Asked] = {}
        self._askers: dict[tuple[str, frozenset[tuple[str, str]]], Consumer] = {}
        self._idle: dict[tuple[str, bool, frozenset[tuple[str, str]]], list[Consumer]] = {}
        self._warmed: set[tuple[str, bool, frozenset[tuple[str, str]]]] = set()
        self._closed = False
        self.clients_made = 0
        self.fetches = 0
        self.records = 0
        self.metadata_requests = 0

    def entry(self, cluster: str, committed: bool, topic: str, partition: int) -> Kept:
        with self._lock:
            return self._kept.setdefault((cluster, committed, topic, partition), Kept())

    def forgot(self, cluster: str, committed: bool, topic: str) -> None:
        """A partition of `topic` is read again from its start (`Kept.forget`)."""
        with self._lock:
            self._forgets[(cluster, committed, topic)] = self._forgets.get((cluster, committed, topic), 0) + 1

    def forgets(self, cluster: str, committed: bool, topic: str) -> int:
        """How many times a partition of `topic` was forgotten: a reader that builds on what earlier reads served
        (`copy_slots.MapFold`) may continue only while this stays the same."""
        with self._lock:
            return self._forgets.get((cluster, committed, topic), 0)

    def fetched(self, partitions: int, records: int) -> None:
        with self._lock:
            self.fetches += partitions
            self.records += records

    def topic(
        self, cluster: str, topic: str, asked_after: float, ask: Callable[[], T], count: Callable[[T], int | None]
    ) -> T:
        """`topic`'s metadata on `cluster` as an answer asked at or after `asked_after` (`time.monotonic`) gave
        it: the one kept, when that is recent enough, or `ask()`'s, kept when `count` gives its partition count
        (None: an error or a missing topic, asked again next time). A partition count only grows, so a kept answer
        is never above the truth; `asked_after` says how far below it may be: a copy asks for one taken after its
        fence (`copy_slots.after_fence`), so that no growth made before the fence is missed. An answer with fewer
        partitions than the one kept, or none, is a broker behind the others: the kept one stands, as true at the
        new ask (a copy that read a state topic as missing would start over). Callers waiting behind a request
        share its answer, or its error: each asking again in turn would wait its whole timeout one after the
        other."""
        arrived = time.monotonic()
        with self._lock:
            asked = self._asked.setdefault((cluster, topic), _Asked())
        with asked.lock:
            if asked.metadata is not None and asked.asked_at >= asked_after:
                return asked.metadata  # type: ignore[no-any-return]
            if asked.failure is not None and asked.failure[0] >= asked_after and arrived <= asked.failure[1]:
                raise copy.copy(asked.failure[2]) from asked.failure[2]  # waited behind it: its error
            started = time.monotonic()
            try:
                answer = ask()
            except Exception as err:
                asked.failure = (started, time.monotonic(), err)
                raise
            with self._lock:
                self.metadata_requests += 1
            found = count(answer)
            if found is None:  # an error or an absent topic: one that had partitions is a broker behind
                return answer if asked.metadata is None else asked.metadata
            asked.failure = None
            if asked.metadata is not None and found < (count(asked.metadata) or 0):
                asked.asked_at = started
                return asked.metadata  # type: ignore[no-any-return]
            asked.metadata, asked.asked_at = answer, started
            return answer

    def asker(self, cluster: str, conf: Mapping[str, str], make: Callable[[], Consumer]) -> Consumer:
        """The read_uncommitted client that asks `cluster`'s true ends for every reader sharing this cache (one
        per cluster and client settings, made by `make` at the first call; closed by `close`). Asking watermarks
        assigns nothing, so readers in several threads share it."""
        key = (cluster, _settings(conf))
        with self._lock:
            if self._closed:
                raise RuntimeError("a read through a LogCache after its close")
            found = self._askers.get(key)
            if found is None:
                found = self._askers[key] = make()
            return found

    def warm(
        self,
        cluster: str,
        committed: bool,
        conf: Mapping[str, str],
        make: Callable[[], Consumer],
        topics: list[str],
        timeout_s: float,
    ) -> None:
        """Make the first fetching client of its kind and fetch `topics`' metadata on it, once per cache: a copy
        does it before its fence (`LogReader.connect`), so that its first read after the fence, the one a run
        boundary waits for, borrows a client that is connected already."""
        key = (cluster, committed, _settings(conf))
        with self._lock:
            if key in self._warmed or self._closed:
                return
            self._warmed.add(key)
        client = make()
        with self._lock:
            self.clients_made += 1
        try:
            for topic in topics:
                client.list_topics(topic, timeout=timeout_s)
        finally:
            self._give_back(key, client)

    def _give_back(self, key: tuple[str, bool, frozenset[tuple[str, str]]], client: Consumer) -> None:
        with self._lock:
            if not self._closed:
                self._idle.setdefault(key, []).append(client)
                return
        client.close()  # returned after the cache was closed: nobody would close it

    @contextlib.contextmanager
    def borrow(
        self, cluster: str, committed: bool, conf: Mapping[str, str], make: Callable[[], Consumer]
    ) -> Iterator[Consumer]:
        """A fetching client of `cluster` for one fetch (assigned, read, unassigned by the borrower): an idle one
        another reader returned, or a new one made by `make` when all are in use, so that no read waits for a
        client. The readers sharing the cache mostly wait for each other on a slot's lock before they fetch
        (`hold_all`), so a Spark task whose ranges share a slot or two makes about that many."""
        key = (cluster, committed, _settings(conf))
        with self._lock:
            idle = self._idle.setdefault(key, [])
            client = idle.pop() if idle else None
        if client is None:
            client = make()
            with self._lock:
                self.clients_made += 1
        try:
            yield client
        except BaseException:
            client.close()  # whatever it holds (an assignment a failure left) goes with it
            raise
        self._give_back(key, client)

    def close(self) -> None:
        """Close the clients made by `asker` and `borrow`: the owner of a shared cache calls it once every reader
        is done."""
        with self._lock:
            clients = list(self._askers.values()) + [c for idle in self._idle.values() for c in idle]
            self._askers, self._idle, self._closed = {}, {}, True
        for client in clients:
            client.close()

    def __enter__(self) -> LogCache:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def kept_records(self) -> int:
        """How many records the cache holds now (its memory: at most the live keys of the partitions read)."""
        with self._lock:
            entries = list(self._kept.values())
        return sum(len(e.records) for e in entries)


def _settings(conf: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset((str(k), str(v)) for k, v in conf.items())


def hold_all(
    cluster: str, topic: str, kept: Mapping[int, Kept], since: float, wait_s: float
) -> tuple[dict[int, Kept], bool]:
    """Take the locks of the partitions in `kept` (ascending), holding none while waiting for one: a read waiting
    for a partition that a stalled read holds must not hold up the reads of its other partitions meanwhile (review
    of session 16). The locks held, and whether it waited for another read (`Kept.hold`, which says how long)."""
    held: dict[int, Kept] = {}
    waited = False
    while True:
        busy = None
        for p, entry in kept.items():
            if p not in held and not entry.lock.acquire(blocking=False):
                busy = p
                break
            held[p] = entry
        if busy is None:
            return held, waited
        for entry in held.values():
            entry.lock.release()
        got = kept[busy].hold(since, wait_s)
        if got is None:
            earlier = kept[busy].failure
            stalled = type(earlier) if isinstance(earlier, StalledReadError) else StalledReadError
            raise stalled(str(earlier) if earlier else behind(cluster, topic, busy, wait_s))
        held, waited = {busy: kept[busy]}, waited or got


def behind(cluster: str, topic: str, partition: int, wait_s: float) -> str:
    """Why a read that waited `wait_s` behind another read of `topic`-`partition`, still going, gives up."""
    return (
        f"reading {topic} on cluster '{cluster}' to its end made no progress for {wait_s:.0f} s: another read of "
        f"{topic}-{partition} in this process (a copy range of the same Spark task) has held it that long without "
        "progress, and it is still reading. Nothing was read past it."
    )

"""Read a (usually compacted) internal topic from the beginning to its true end, once.

Used for Mirrorflow's progress and offset-map topics and for MM2's checkpoints and offset-syncs topics.

The end of a partition is its high watermark, taken when the read starts (for many partitions: in ascending
order, each span of `ENDS_SPAN_S` read before the next is taken): every record written before then, committed
or not. A read_committed consumer cannot pass the first record of a transaction that is still
open (librdkafka's own watermarks on such a consumer are the last stable offset, which stops right there), so a
record committed after that open transaction would be missed by a read that ended at the last stable offset.
This read waits instead until every transaction below the end has committed or aborted. When the read makes no
progress for `wait_s` (a writer that was killed mid-transaction holds it until its coordinator aborts it), it
fails with `OpenTransactionError`, naming the partition and what to do: it never returns a stale view. A stall
with no open transaction in sight (the reader never reached a last stable offset below the end: no leader, an
unreachable broker) fails with `StalledReadError` instead, which says so. Best-effort readers (metrics, the
dashboard, health) pass a short `wait_s` (their own timeout) rather than block for `OPEN_TRANSACTION_WAIT_S`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import TopicMetadata

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.clients import consumer as make_consumer
from mirrorflow.kafka.log_cache import Kept, LogCache, Record, boot_clock, hold_all
from mirrorflow.kafka.log_fetch import ENDS_SPAN_S as ENDS_SPAN_S  # re-exported
from mirrorflow.kafka.log_fetch import consume_to as consume_to
from mirrorflow.kafka.log_fetch import true_ends
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.read_stall import OpenTransactionError as OpenTransactionError  # re-exported
from mirrorflow.kafka.read_stall import StalledReadError as StalledReadError

OPEN_TRANSACTION_WAIT_S = 90.0
"""How long a read waits without progress for open transactions to end. A killed copy task's transaction is
aborted by its coordinator once `transaction.timeout.ms` (60 s for the copy's producers) has passed since it
began, noticed within `transaction.abort.timed.out.transaction.cleanup.interval.ms` (10 s by default): at most
about 70 s after the reader starts waiting. 90 s covers that with room for writing the abort markers. The copy
always uses 60 s (`TargetWriter`; a flow's own `transaction.timeout.ms` does not apply to it, docs/copy.md)."""


class MissingTopicError(MirrorflowError):
    """A topic a reader needs (or had read before) does not exist on the cluster."""

    def __init__(self, cluster: str, topic: str, why: str) -> None:
        super().__init__(f"topic '{topic}' does not exist on cluster '{cluster}' ({why})")
        self.cluster, self.topic = cluster, topic


def latest_values(records: Iterable[tuple[int, int, bytes | None, bytes | None, int]]) -> dict[bytes, bytes]:
    """Fold `read_to_end`'s records as compaction would: the latest value per key, a tombstone removes the key."""
    latest: dict[bytes, bytes] = {}
    for _p, _o, key, value, _ts in records:
        if key is None:
            continue
        if value is None:
            latest.pop(key, None)
        else:
            latest[key] = value
    return latest


class LogReader:
    """Reads to the true end through one pair of clients, as often as needed: a copy start reads several state
    topics and slots one after the other, and each new client pays its connections and metadata again (about
    0.1-0.2 s on a local broker, far more than the records of a state slot). The reader, and for a
    read_committed reader a read_uncommitted twin that asks the true ends, live until `close`; between reads
    nothing is assigned. Not for concurrent use. A reader given a `shared` cache has no clients of its own: it
    borrows them from the cache (`LogCache.asker`, `borrow`), whose owner closes them."""

    def __init__(
        self,
        cluster: str,
        conf: Mapping[str, str],
        *,
        read_committed: bool = True,
        timeout_s: float = 60.0,
        wait_s: float = OPEN_TRANSACTION_WAIT_S,
        remember: bool = False,
        shared: LogCache | None = None,
    ) -> None:
        """`remember`: keep what each read delivered, as compaction would (the latest record per key, in offset
        order), and where it stopped: a later read of the same partition yields those records, then reads only
        from there to the new true end. That is a read of the log as a reader that started earlier and went on
        sees it, and what a read from the start sees once the cleaner has run. A copy start reads its state so
        before its fence, then again after it: the second read, the one a run boundary waits for, is a tail.
        `shared`: remember in that cache, which other readers (other threads) share (`log_cache`: the ranges of
        one Spark task); each read still takes its own ends and waits with its own `wait_s`."""
        self.cluster, self._conf, self._timeout_s, self.wait_s = cluster, conf, timeout_s, wait_s
        self._committed = read_committed
        self._cache = shared if shared is not None else LogCache() if remember else None
        self._shared = shared is not None
        # A reader sharing a cache borrows a fetching client from it for each fetch (`LogCache.borrow`) and asks
        # ends and metadata through its one asker: a Spark task's ranges then pay a client's connections and
        # metadata a few times between them, not once per range.
        self._reader: Consumer | None = None if self._shared else self._new_reader()
        self._asker: Consumer | None = None if read_committed or self._shared else self._reader
        self.counts_after: float | None = None
        """None: every read asks its topic's metadata (the partition count its slots are chosen from). A time
        (`time.monotonic`): a read through a cache (`remember`, `shared`) may take the count from an answer
        asked at or after it (`LogCache.topic`): a copy passes its fence's end, so that a growth made by a run
        before it is seen (`copy_slots.after_fence`), and a few seconds before its start for its read ahead of the
        fence (`copy_slots.RECENT_COUNT_S`)."""

    def read(
        self,
        topic: str,
        *,
        partitions: Sequence[int] | Callable[[int], Sequence[int]] | None = None,
        require: bool = False,
        on_count: Callable[[int], None] | None = None,
    ) -> Iterator[Record]:
        """`read_to_end` of `topic` through this reader's clients."""
        try:
            metadata = self._metadata(topic)
            if metadata is None or metadata.error is not None:
                if metadata is not None and metadata.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise KafkaOperationError(self.cluster, f"reading topic '{topic}'", metadata.error)
                if require:
                    raise MissingTopicError(self.cluster, topic, "it is needed here")
                if on_count is not None:
                    on_count(0)
                return
            if on_count is not None:
                on_count(len(metadata.partitions))
            if callable(partitions):
                partitions = partitions(len(metadata.partitions))
            # Ascending, always: readers of the state slots rely on taking lower slots' ends first (`state_records`).
            wanted = sorted(metadata.partitions) if partitions is None else sorted(partitions)
            self._ends_client()
            if self._cache is not None:
                yield from self._read_kept(topic, wanted)
                return
            for ends in true_ends(self._asker, topic, wanted, self._timeout_s):
                yield from self._fetch(topic, ends)
        except KafkaException as err:
            raise KafkaOperationError(self.cluster, f"reading topic '{topic}'", err) from err

    def _metadata(self, topic: str) -> TopicMetadata | None:
        """`topic`'s metadata: asked now, or kept by the cache (see `counts_after`)."""

        def ask() -> TopicMetadata | None:
            client = self._reader or self._ends_client()
            return client.list_topics(topic, timeout=self._timeout_s).topics.get(topic)

        if self._cache is None or self.counts_after is None:
            return ask()
        return self._cache.topic(self.cluster, topic, self.counts_after, ask, _partition_count)

    def _ends_client(self) -> Consumer:
        """The read_uncommitted client asking the true ends: the reader itself when it reads uncommitted, the
        shared cache's (one per Spark task, `LogCache.asker`), or this reader's own."""
        if self._asker is None:
            if self._shared and self._cache is not None:
                self._asker = self._cache.asker(self.cluster, self._conf, self._new_asker)
            else:
                self._asker = self._new_asker()
        return self._asker

    def _new_asker(self) -> Consumer:
        return make_consumer(self._conf, **{"isolation.level": "read_uncommitted"})

    def _new_reader(self) -> Consumer:
        settings = {
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if self._committed else "read_uncommitted",
            "auto.offset.reset": "earliest",
            # consume() waits its whole timeout unless the batch fills; short waits keep small reads fast.
            "fetch.wait.max.ms": 50,
        }
        return make_consumer(self._conf, **settings)

    def _fetching(self) -> AbstractContextManager[Consumer]:
        """The client that fetches: this reader's own, or one borrowed from the shared cache for one fetch."""
        if self._reader is not None:
            return contextlib.nullcontext(self._reader)
        assert self._cache is not None
        return self._cache.borrow(self.cluster, self._committed, self._conf, self._new_reader)

    def _fetch(
        self,
        topic: str,
        ends: dict[int, int],
        starts: Mapping[int, int] | None = None,
        since: float | None = None,
        on_done: Callable[[int], None] | None = None,
    ) -> Iterator[Record]:
        """The records of the partitions in `ends` from `starts` (default 0) below those ends (see `read`)."""
        starts = starts or {}
        ends = {p: end for p, end in ends.items() if starts.get(p, 0) < end}
        if not ends:
            return
        with self._fetching() as reader:
            reader.assign([TopicPartition(topic, p, starts.get(p, 0)) for p in ends])
            try:
                yield from consume_to(reader, self.cluster, topic, ends, self.wait_s, starts, since, on_done)
            finally:
                reader.unassign()

    def _read_kept(self, topic: str, wanted: Sequence[int]) -> Iterator[Record]:
        """A remembering read (`log_cache`): the partitions' locks taken in ascending order (so two reads never
        wait for each other crosswise), then their ends, the fetch from where the reads stopped, and what is
        remembered, yielded once the locks are released (a reader that stops iterating holds nothing). A partition
        read to its end is released at once: a read stalled on another partition must not hold up the reads of
        this one (a range's siblings, review of session 16)."""
        assert self._cache is not None and self._asker is not None
        since = time.monotonic()
        kept = {p: self._cache.entry(self.cluster, self._committed, topic, p) for p in wanted}
        held: dict[int, Kept] = {}
        served: dict[int, list[Record]] = {}

        def done(p: int) -> None:
            served[p] = kept[p].in_order()
            held.pop(p).lock.release()

        try:
            acquired, waited = hold_all(self.cluster, topic, kept, since, self.wait_s)
            held.update(acquired)
            for ends in true_ends(self._asker, topic, wanted, self._timeout_s):
                since_p = max(since, *(kept[p].moved_at for p in ends)) if waited else None
                self._tail(topic, ends, kept, since_p, done)
            for p in (p for p in held if kept[p].position):  # empty now, but read before: re-created
                self._cache.forgot(self.cluster, self._committed, topic)
                kept[p].forget()
        finally:
            for entry in held.values():
                entry.lock.release()
        yield from (r for p in sorted(served) for r in served[p])

    def _tail(
        self,
        topic: str,
        ends: dict[int, int],
        kept: Mapping[int, Kept],
        since: float | None,
        done: Callable[[int], None],
    ) -> None:
        """Fetch the partitions in `ends` from where their reads stopped into `kept` (from the start where a
        partition now ends below that, re-created, or was last read longer ago than the cache's `max_gap_s`); a
        stall is recorded for the reads waiting behind this one."""
        assert self._cache is not None
        for p, end in ends.items():
            if kept[p].position > end or boot_clock() - kept[p].read_at > self._cache.max_gap_s:
                if kept[p].position:
                    self._cache.forgot(self.cluster, self._committed, topic)
                kept[p].forget()
        starts = {p: kept[p].position for p in ends}
        fetched, finished = 0, set()

        def reached(p: int) -> None:  # read to its end: `done` serves and releases it
            kept[p].reach(ends[p])
            kept[p].failure, kept[p].read_at = None, boot_clock()
            finished.add(p)
            done(p)

        try:
            for p in [p for p, end in ends.items() if starts[p] >= end]:
                reached(p)
            for record in self._fetch(topic, ends, starts, since, reached):
                kept[record[0]].keep(record)
                fetched += 1
        except StalledReadError as err:
            pending = [p for p in ends if p not in finished]
            earlier = [kept[p].failure for p in pending if isinstance(kept[p].failure, OpenTransactionError)]
            for p in pending:
                kept[p].failure = err
            if since is not None and earlier and not isinstance(err, OpenTransactionError):
                # Waited out behind a read that met the open transaction, this one ran out of patience before it
                # met it itself: the earlier read's diagnosis is the one that says what to do.
                raise OpenTransactionError(str(earlier[0])) from err
            raise
        finally:
            self._cache.fetched(sum(1 for p, end in ends.items() if starts[p] < end), fetched)

    def forgets(self, topic: str) -> int:
        """`LogCache.forgets` of `topic` (0 for a reader that does not remember: it reads from the start)."""
        return 0 if self._cache is None else self._cache.forgets(self.cluster, self._committed, topic)

    def connect(self, *topics: str) -> None:
        """Open the clients' broker connections and fetch the topics' metadata now, ahead of the reads: a copy
        does it before fencing, so that its reads after the fence (the run boundary's gap) pay round trips, not
        client start-ups. Best-effort: a failure here is met again, and reported, by the read."""
        try:
            asker = self._ends_client()
            for topic in topics:
                if self._reader is not None:
                    self._reader.list_topics(topic, timeout=self._timeout_s)
                if asker is not self._reader:
                    self._connect_asker(asker, topic)
            if self._reader is None and self._cache is not None:  # shared: the task's first fetching client
                self._cache.warm(
                    self.cluster, self._committed, self._conf, self._new_reader, [*topics], self._timeout_s
                )
        except KafkaException:
            return

    def _connect_asker(self, asker: Consumer, topic: str) -> None:
        """`connect` the true ends' client to `topic`; a shared one once, by the first of the task's readers (its
        answer is kept as the topic's metadata too)."""

        def ask() -> TopicMetadata | None:
            return asker.list_topics(topic, timeout=self._timeout_s).topics.get(topic)

        if self._shared and self._cache is not None:
            self._cache.topic(self.cluster, topic, 0.0, ask, _partition_count)
        else:
            ask()

    def close(self) -> None:
        """Close this reader's own clients (a shared cache's are its owner's to close, `LogCache.close`)."""
        if self._shared:
            return
        if self._asker is not None and self._asker is not self._reader:
            self._asker.close()
        if self._reader is not None:
            self._reader.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def read_to_end(
    cluster: str,
    conf: Mapping[str, str],
    topic: str,
    *,
    partitions: Sequence[int] | Callable[[int], Sequence[int]] | None = None,
    read_committed: bool = True,
    timeout_s: float = 60.0,
    wait_s: float = OPEN_TRANSACTION_WAIT_S,
    require: bool = False,
    on_count: Callable[[int], None] | None = None,
    via: LogReader | None = None,
) -> Iterator[Record]:
    """Yield (partition, offset, key, value, timestamp_ms) of every record below each partition's high
    watermark at the call; nothing if the topic is absent, unless `require` (then `MissingTopicError`).
    `partitions` (default all) may be chosen from the topic's partition count, which `on_count` is told (0 when
    the topic is absent): the state topics' slots depend on it. `timeout_s` bounds each metadata request,
    `wait_s` a stretch without progress (see the module docstring). `via` reads through a `LogReader` the caller
    keeps open (its own isolation, timeout and wait then apply) instead of clients made for this read."""
    if via is not None:
        yield from via.read(topic, partitions=partitions, require=require, on_count=on_count)
        return
    with LogReader(cluster, conf, read_committed=read_committed, timeout_s=timeout_s, wait_s=wait_s) as reader:
        yield from reader.read(topic, partitions=partitions, require=require, on_count=on_count)


def _partition_count(metadata: TopicMetadata | None) -> int | None:
    """The partitions of a metadata answer that may be kept for later reads (`LogCache.topic`); None for an error
    or an absent topic (asked again by the next read)."""
    if metadata is None or metadata.error is not None or not metadata.partitions:
        return None
    return len(metadata.partitions)

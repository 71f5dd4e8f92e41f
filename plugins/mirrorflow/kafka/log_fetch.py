"""The two steps of every read to the true end (`compacted_log`): asking partitions' true ends, and fetching up
to them, with the waits and errors that module's docstring describes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from mirrorflow.kafka.log_cache import Record
from mirrorflow.kafka.operation_error import MOVING_LEADER, KafkaOperationError
from mirrorflow.kafka.read_stall import blocked as _blocked

ENDS_SPAN_S = 5.0
"""How long a read goes on taking partitions' ends (one watermark request each, in ascending order) before it
fetches up to those it took. Every partition's end is a promise that the fetch will soon reach the records below
it: the log cleaner may drop one of them once a record of its key written beyond the end is older than
`min.compaction.lag.ms` (`internal_topics.STATE_TOPIC_CONFIGS`). Taking all ends first made that time grow with
the partition count times the round trip (4,096 slots at 50 ms: 3.4 minutes before the first fetch, most of a
5-minute lag); in spans it is this plus one round trip, whatever the count (found by review,
tests/kafka/test_log_reader_cleaner.py)."""

_REFUSALS = {
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._SSL,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
}
"""Client-wide errors that end a read at once: waiting would not change them."""


RELIST_WAIT_S = 10.0
"""How long a read asks again for a partition its client does not know (`true_ends`, `consume_to`) before it
fails: a client that a Spark task's ranges share (`LogCache.asker`, `borrow`) may know the topic from before it
grew, and a broker behind the others may answer with the count before the growth for a moment."""


def _relist(client: Consumer, topic: str, partition: int, timeout_s: float, err: KafkaException) -> None:
    """Ask `topic`'s metadata again (every 0.5 s) until it has `partition`, for at most `RELIST_WAIT_S`; `err` if
    it never shows (a partition that is really not there: fail now, not after a read's whole wait)."""
    deadline = time.monotonic() + RELIST_WAIT_S
    while True:
        found = client.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if found is not None and found.error is None and partition in found.partitions:
            return
        if time.monotonic() >= deadline:
            raise err
        time.sleep(0.5)


def true_ends(asker: Consumer, topic: str, partitions: Sequence[int], timeout_s: float) -> Iterator[dict[int, int]]:
    """High watermark per non-empty partition, asked by a read_uncommitted consumer (a read_committed consumer's
    answer is the last stable offset), in ascending order; in spans of `ENDS_SPAN_S`, each to be read before the
    next is asked."""
    ends: dict[int, int] = {}
    since = time.monotonic()
    for p in partitions:
        if not ends:
            since = time.monotonic()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                low, high = asker.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)
                break
            except KafkaException as err:
                code = err.args[0].code()
                if code == KafkaError._UNKNOWN_PARTITION:
                    _relist(asker, topic, p, timeout_s, err)  # raises when the partition does not show
                elif code not in MOVING_LEADER or time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)
        if high > low:
            ends[p] = high
        if ends and time.monotonic() - since >= ENDS_SPAN_S:
            yield ends
            ends = {}
    if ends:
        yield ends


def consume_to(
    reader: Consumer,
    cluster: str,
    topic: str,
    ends: dict[int, int],
    wait_s: float,
    starts: Mapping[int, int] | None = None,
    since: float | None = None,
    on_done: Callable[[int], None] | None = None,
) -> Iterator[Record]:
    """Records below `ends` (from `starts`, default 0); a partition is done when the reader's position reaches
    its end. `since`: when the wait for progress began, if before this call (a read that waited behind another
    read of the same partitions, `log_cache`). `on_done(p)`: partition p is read to its end (called after its
    last record was yielded). An event about another partition (an error queued for an earlier
    read of a shared reader) is not this read's business. A client-wide error fails the read when it is fatal or
    refuses access; any other (a dropped broker connection, which librdkafka retries) is named if it lasts."""
    pending = dict(ends)
    reached = {p: (starts or {}).get(p, 0) for p in ends}  # the reader's position: the next offset it delivers
    stable_below: set[int] = set()  # partitions whose end-of-partition came at a last stable offset below the end
    notices: list[str] = []
    stalled_since = time.monotonic() if since is None else since
    while pending:
        moved = False
        for m in reader.consume(num_messages=1000, timeout=0.05):
            err = m.error()
            p = m.partition()
            if err is not None and m.topic() is None:
                if err.fatal() or err.code() in _REFUSALS:
                    raise KafkaOperationError(cluster, f"reading {topic}", err)
                notices[:] = [err.str()]
                continue
            if m.topic() != topic or p not in pending:
                continue
            if err is not None and err.code() == KafkaError._UNKNOWN_PARTITION:
                # A pooled client that knew the topic from before it grew: it learns the partition, or it is gone.
                _relist(reader, topic, p, 10.0, KafkaException(err))
                notices[:] = [err.str()]
                continue
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                raise KafkaOperationError(cluster, f"reading {topic}-{p}", err)
            position = m.offset() if err is not None else m.offset() + 1
            if err is not None and position < pending[p]:
                stable_below.add(p)
            before = reached[p]
            if position > before:
                reached[p], moved = position, True
            if err is None and before <= m.offset() < pending[p]:  # never one below what was delivered
                yield p, m.offset(), m.key(), m.value(), m.timestamp()[1]
            if reached[p] >= pending[p]:
                del pending[p]
                if on_done is not None:
                    on_done(p)
        if moved:
            stalled_since = time.monotonic()
        elif time.monotonic() - stalled_since > wait_s:
            raise _blocked(cluster, topic, pending, reached, wait_s, stable_below, notices)

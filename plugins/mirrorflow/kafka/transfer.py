"""The copy's target writer, transactional (exactly-once) or idempotent (at-least-once), and the batch it fills;
the source side is `kafka/partition_reader.py`. The hot loop (`TargetWriter.forward`) calls confluent-kafka
directly: one Python frame per batch.

Client settings come in three strengths: the copy's correctness settings (isolation, idempotence, transactions)
always apply; the throughput tuning below applies unless the operator's flow config sets the same key
(`<source>.consumer.*`, `<target>.producer.*`); everything else is the operator's."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from mirrorflow.core.predicates import Record
from mirrorflow.core.provenance import should_drop, with_origin
from mirrorflow.core.transforms import TransformChain, TransformError, dead_letter_headers
from mirrorflow.kafka import fence
from mirrorflow.kafka.clients import producer as make_producer
from mirrorflow.kafka.operation_error import FENCED_CODES, KafkaOperationError, error_code, is_fenced, kafka_cause
from mirrorflow.kafka.partition_reader import PARTITION_EOF, Message, tuned
from mirrorflow.kafka.record_size import BROKER_TOO_LARGE_HINT, RecordTooLarge

__all__ = ["WRITER_DEFAULTS", "Batch", "Message", "TargetWriter"]

TOO_LARGE = KafkaError.MSG_SIZE_TOO_LARGE

# Batches close at a commit's flush anyway, so a longer linger costs no latency and fills batches (librdkafka's
# 1 MB `batch.size` is the broker's default batch limit). 128 MiB unacknowledged, not 1 GiB: a task's budget.
WRITER_DEFAULTS: Mapping[str, str | int] = {"linger.ms": 20, "queue.buffering.max.kbytes": 131072}


class Batch:
    """The records of one transaction: upstream offsets in produce order, their downstream offsets as delivery
    reports arrive, and what the metrics need. One partition and an idempotent producer: reports come in
    produce order, so `downstreams[i]` is the copy of `upstreams[i]`."""

    __slots__ = (
        "bytes",
        "consumed_to",
        "downstreams",
        "dropped",
        "errors",
        "fenced",
        "newest_ts",
        "oldest_ts",
        "on_delivery",
        "ts_sum",
        "upstreams",
    )

    def __init__(self, consumed_to: int) -> None:
        self.consumed_to = consumed_to
        self.upstreams: list[int] = []
        self.downstreams: list[int] = []
        self.errors: list[str] = []
        self.fenced: KafkaError | None = None  # a delivery refused because a newer producer took over
        self.bytes = self.dropped = self.ts_sum = 0
        self.oldest_ts: int | None = None
        self.newest_ts: int | None = None
        record, errors = self.downstreams.append, self.errors.append

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            # Called once per record: a closure over bound appends is the cheapest callable there is.
            if err is None:
                record(msg.offset())
            else:
                errors(f"{err} ({BROKER_TOO_LARGE_HINT})" if err.code() == TOO_LARGE else str(err))
                if err.code() in FENCED_CODES:
                    self.fenced = err

        self.on_delivery = on_delivery


class TargetWriter:
    """Writes to the target cluster; in transactional mode every batch is one Kafka transaction.

    A new writer with the same transactional id fences any older one (a zombie Spark task or a retried
    attempt): the older producer's next call fails with a fatal fencing error; its open transaction aborts.
    """

    def __init__(
        self,
        cluster: str,
        conf: Mapping[str, str],
        *,
        transactional_id: str | None,
        timeout_s: float,
        overrides: Mapping[str, str | int] | None = None,
        tuning: Mapping[str, str | int] | None = None,
        max_message_bytes: int | None = None,
        connect_topic: str | None = None,
        abort_ahead: bool = False,
        before_fence: Callable[[], object] | None = None,
    ) -> None:
        """`max_message_bytes`: the remote topic's `max.message.bytes`, which librdkafka's `message.max.bytes`
        (1 MB by default, checked when a record is produced) follows unless the operator's `conf` sets it.
        `connect_topic`: fetched before init_transactions, so the fence waits for no connection (run boundaries);
        `abort_ahead`: a previous owner's open transaction is aborted first (`kafka.fence`: no 500 ms pause);
        `before_fence`: called once connected, just before the fence (a run boundary's read ahead)."""
        self.cluster = cluster
        self.timeout_s = timeout_s
        self.transactional = transactional_id is not None
        self._operator_cap = "message.max.bytes" in conf
        self._topic_limit = max_message_bytes
        # librdkafka accepts 1000..1000000000; a topic may allow up to 2^31-1.
        sized = {"message.max.bytes": min(max(max_message_bytes, 1000), 1_000_000_000)} if max_message_bytes else {}
        settings: dict[str, str | int | bool] = {
            **tuned(conf, {**WRITER_DEFAULTS, **(tuning or {}), **sized}),
            "enable.idempotence": True,
            "acks": "all",
            **(overrides or {}),
        }
        if transactional_id is not None:
            settings["transactional.id"] = transactional_id
            # Always 60 s, even over the flow's own setting: readers of the state wait out a killed writer's
            # transaction for 90 s derived from it (kafka/compacted_log.py, docs/copy.md).
            settings.setdefault("transaction.timeout.ms", 60000)
        self._producer: Producer = make_producer(conf, **settings)
        if transactional_id is not None:
            ahead = fence.AbortAhead(conf, transactional_id, connect_topic, timeout_s) if abort_ahead else fence.NONE
            with contextlib.suppress(KafkaException):  # best-effort: init_transactions reports a failure
                _ = connect_topic is None or self._producer.list_topics(connect_topic, timeout=timeout_s)
            _ = before_fence is None or before_fence()
            ahead.fire()
            self._call("initialising transactions", lambda: self._producer.init_transactions(timeout_s))

    def _call(self, what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except (KafkaException, SystemError) as err:  # SystemError: see `kafka_cause`
            raise KafkaOperationError(self.cluster, what, kafka_cause(err)) from err

    def begin(self) -> None:
        if self.transactional:
            self._call("beginning a transaction", self._producer.begin_transaction)

    def produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {"partition": partition, "key": key, "value": value, "on_delivery": on_delivery}
        if timestamp is not None and timestamp >= 0:
            kwargs["timestamp"] = timestamp
        if headers:
            kwargs["headers"] = list(headers)
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return
            except BufferError:
                # The local queue is full: serve delivery reports until there is room again.
                self._producer.poll(0.1)
            except KafkaException as err:
                raise self._produce_error(err, topic, partition, key, value, headers) from err

    def forward(
        self,
        messages: Sequence[Message],
        topic: str,
        partition: int,
        batch: Batch,
        *,
        end: int | None = None,
        provenance: tuple[str, str] | None = None,
    ) -> bool:
        """Produce the records of `messages` (one source partition, in order) below `end` to `topic`-`partition`
        with key, value, headers and timestamp; True once `end` is reached.

        `provenance` = (source alias, target alias): records that started on the target are dropped, the
        others carry their origin. Updates `batch`, including `consumed_to` past end-of-partition events.
        """
        produce = self._producer.produce
        upstream = batch.upstreams.append
        on_delivery = batch.on_delivery
        never = 1 << 62  # beyond any offset or timestamp
        limit = never if end is None else end
        consumed = batch.consumed_to
        nbytes, ts_sum, dropped = batch.bytes, batch.ts_sum, batch.dropped
        oldest = never if batch.oldest_ts is None else batch.oldest_ts
        newest = -never if batch.newest_ts is None else batch.newest_ts
        produced = len(batch.upstreams)
        reached = False
        for m in messages:
            err = m.error()
            if err is not None:
                if err.code() != PARTITION_EOF:
                    raise KafkaOperationError(self.cluster, f"reading the source of {topic}-{partition}", err)
                if m.offset() > consumed:
                    consumed = m.offset()
                continue
            offset = m.offset()
            if offset >= limit:
                consumed, reached = max(consumed, limit), True
                break
            consumed = offset + 1
            headers = m.headers()
            if provenance is not None:
                if should_drop(headers, provenance[1]):
                    dropped += 1
                    continue
                headers = with_origin(headers, provenance[0])
            value = m.value()
            ts = m.timestamp()[1]
            stamp = ts if ts > 0 else 0  # 0: the producer's clock, for records without a timestamp
            try:
                produce(topic, value, m.key(), partition, on_delivery=on_delivery, timestamp=stamp, headers=headers)
            except BufferError:
                self._produce_when_room(topic, partition, m, value, headers, on_delivery)
            except KafkaException as e:
                raise self._produce_error(e, topic, partition, m.key(), value, headers) from e
            upstream(offset)
            ts_sum += ts
            if ts < oldest:
                oldest = ts
            if ts > newest:
                newest = ts
            if value is not None:
                nbytes += len(value)
        batch.consumed_to = consumed
        batch.bytes, batch.ts_sum, batch.dropped = nbytes, ts_sum, dropped
        if len(batch.upstreams) > produced:
            batch.oldest_ts, batch.newest_ts = oldest, newest
        self._producer.poll(0)
        return reached or consumed >= limit

    def _produce_when_room(
        self,
        topic: str,
        partition: int,
        m: Message,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
        on_delivery: Callable[[KafkaError | None, Message], None],
    ) -> None:
        """The local queue is full: serve delivery reports until the record fits."""
        ts = max(m.timestamp()[1], 0)
        while True:
            self._producer.poll(0.05)
            try:
                self._producer.produce(
                    topic, value, m.key(), partition, on_delivery=on_delivery, timestamp=ts, headers=headers
                )
                return
            except BufferError:
                continue
            except KafkaException as err:
                raise self._produce_error(err, topic, partition, m.key(), value, headers) from err

    def _produce_error(
        self,
        err: KafkaException,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> KafkaOperationError:
        """The error of a refused produce; a record above the producer's size limit (its size counts the headers,
        as librdkafka's check does) says which key to raise."""
        if error_code(err) != TOO_LARGE:
            return KafkaOperationError(self.cluster, f"producing to {topic}-{partition}", err)
        size = len(key or b"") + len(value or b"")
        size += sum(len(name.encode()) + len(data or b"") for name, data in headers or ())
        return RecordTooLarge(
            self.cluster, topic, partition, size, err, operator_cap=self._operator_cap, writer_limit=self._topic_limit
        )

    def poll(self) -> None:
        self._producer.poll(0)

    def flush(self) -> None:
        """Wait for every record sent so far to be acknowledged (or fail)."""
        try:
            remaining = self._producer.flush(self.timeout_s)
        except (KafkaException, SystemError) as err:  # fatal producer errors (e.g. fenced) too; see `kafka_cause`
            raise KafkaOperationError(self.cluster, "flushing records", kafka_cause(err)) from err
        if remaining:
            raise KafkaOperationError(
                self.cluster,
                "flushing records",
                KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{remaining} records unacknowledged")),
            )

    def commit(self) -> None:
        if self.transactional:
            self._call("committing a transaction", lambda: self._producer.commit_transaction(self.timeout_s))
        else:
            self.flush()

    def fenced(self, err: BaseException) -> bool:
        """Whether `err` ended this transactional writer because a newer one with its id took over. librdkafka
        usually says so (`_FENCED`), but an EndTxn that races the newer writer's InitProducerId can fail with an
        unknown broker error (Kafka 4.3, transaction version 2): then the abort this calls for answers."""
        if is_fenced(err):
            return True
        if not self.transactional:
            return False
        try:
            self._producer.abort_transaction(self.timeout_s)
        except KafkaException as probe:
            return is_fenced(probe)
        return False

    def purge(self) -> None:
        """Drop what is queued or in flight without waiting for it (a handed-over copy's offset syncs: the new
        copy rewrites them after its own fence, and late ones would land behind its newer syncs)."""
        with contextlib.suppress(KafkaException):
            self._producer.purge()

    def abort(self) -> None:
        if self.transactional:
            # Fenced or fatal: the broker aborts the transaction on its own when it times out.
            with contextlib.suppress(KafkaException):
                self._producer.abort_transaction(self.timeout_s)

    def close(self) -> None:
        # Clean-up only (commit() and flush() report delivery failures). A transactional producer in a fatal
        # state raises from flush, which would replace the error that ended the copy with a raw librdkafka one.
        with contextlib.suppress(KafkaException):
            self._producer.flush(min(self.timeout_s, 5.0))

    def forward_transformed(
        self,
        messages: Sequence[Message],
        topic: str,
        partition: int,
        batch: Batch,
        chain: TransformChain,
        *,
        source_topic: str,
        end: int | None = None,
        provenance: tuple[str, str] | None = None,
        dead_letter: tuple[str, str] | None = None,
    ) -> bool:
        """`forward` through a transform chain (a flow without transforms pays nothing). A record the chain drops,
        or that fails with `dead_letter` = (topic, flow name) set, is consumed but not copied (a gap in the offset
        map); the failed one goes, as it was read, to the dead-letter topic in the same transaction. Without
        `dead_letter` a failure raises `TransformError` (topic, partition, offset)."""
        on_delivery, errors = batch.on_delivery, batch.errors

        def dead_letter_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(f"dead-letter topic: {err}")

        limit = (1 << 62) if end is None else end
        consumed, reached = batch.consumed_to, False
        for m in messages:
            err = m.error()
            if err is not None:
                if err.code() != PARTITION_EOF:
                    raise KafkaOperationError(self.cluster, f"reading the source of {topic}-{partition}", err)
                consumed = max(consumed, m.offset())
                continue
            offset = m.offset()
            if offset >= limit:
                consumed, reached = max(consumed, limit), True
                break
            consumed = offset + 1
            headers = m.headers()
            if provenance is not None and should_drop(headers, provenance[1]):
                batch.dropped += 1
                continue
            ts = m.timestamp()[1]
            record = Record(topic, source_topic, partition, offset, ts, m.key(), m.value(), list(headers or ()))
            try:
                out = chain.apply(record)
            except TransformError as error:
                if dead_letter is None:
                    raise
                dlq_headers = dead_letter_headers(headers, dead_letter[1], error)
                self.produce(dead_letter[0], -1, m.key(), m.value(), max(ts, 0), dlq_headers, dead_letter_delivery)
                chain.dead_lettered += 1
                batch.dropped += 1
                continue
            if out is None:
                batch.dropped += 1
                continue
            out_headers = with_origin(out.headers, provenance[0]) if provenance is not None else out.headers
            stamp = out.timestamp if out.timestamp > 0 else 0
            self.produce(topic, partition, out.key, out.value, stamp, out_headers, on_delivery)
            batch.upstreams.append(offset)
            batch.ts_sum += ts
            batch.oldest_ts = ts if batch.oldest_ts is None else min(batch.oldest_ts, ts)
            batch.newest_ts = ts if batch.newest_ts is None else max(batch.newest_ts, ts)
            if out.value is not None:
                batch.bytes += len(out.value)
        batch.consumed_to = consumed
        self._producer.poll(0)
        return reached or consumed >= limit

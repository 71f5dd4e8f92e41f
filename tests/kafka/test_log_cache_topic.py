"""What a Spark task's copy ranges share besides records (`LogCache.topic`, `borrow`, `close`), and the fetch's
guard against records delivered again (`log_fetch.consume_to`). No broker: the metadata answers are partition
counts, the clients stand-ins that record their closes."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from mirrorflow.kafka.log_cache import Kept, LogCache
from mirrorflow.kafka.log_fetch import consume_to


def asking(*answers: int | Exception) -> tuple[list[float], Any]:
    """An `ask` giving `answers` in turn (an exception is raised), and the times it was called."""
    calls: list[float] = []
    queue = list(answers)

    def ask() -> int:
        calls.append(time.monotonic())
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return calls, ask


def count(answer: int) -> int | None:
    return answer or None


def test_a_kept_answer_serves_readers_asking_no_later_than_it_was_asked() -> None:
    cache = LogCache()
    calls, ask = asking(4, 8)
    before = time.monotonic()
    assert cache.topic("B", "t", 0.0, ask, count) == 4
    assert cache.topic("B", "t", before, ask, count) == 4 and len(calls) == 1, "asked after `before`: kept"
    fenced = time.monotonic()
    assert cache.topic("B", "t", fenced, ask, count) == 8 and len(calls) == 2, "asked before the fence: asked again"
    assert cache.topic("B", "other", 0.0, asking(2)[1], count) == 2, "per topic"


def test_an_answer_below_the_kept_count_is_a_broker_behind_and_the_kept_count_stands() -> None:
    cache = LogCache()
    calls, ask = asking(8, 4)
    assert cache.topic("B", "t", 0.0, ask, count) == 8
    later = time.monotonic()
    assert cache.topic("B", "t", later, ask, count) == 8, "a smaller count never replaces a larger one"
    assert cache.topic("B", "t", later, ask, count) == 8 and len(calls) == 2, "and stands as asked at the new ask"


def test_an_unusable_answer_is_not_kept_and_does_not_replace_a_kept_one() -> None:
    cache = LogCache()
    calls, ask = asking(0, 8, 0)
    assert cache.topic("B", "t", 0.0, ask, count) == 0, "an absent topic is returned, not kept"
    assert cache.topic("B", "t", time.monotonic(), ask, count) == 8
    assert cache.topic("B", "t", time.monotonic(), ask, count) == 8, "missing after it had 8: a broker behind"
    assert len(calls) == 3


def test_a_failed_ask_is_shared_with_the_callers_waiting_behind_it_not_with_later_ones() -> None:
    cache = LogCache()
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def failing() -> int:
        calls.append(1)
        started.set()
        release.wait(5)
        raise RuntimeError("broker down")

    since = time.monotonic()
    errors: list[str] = []

    def caller() -> None:
        try:
            cache.topic("B", "t", since, failing, count)
        except RuntimeError as err:
            errors.append(str(err))

    first = threading.Thread(target=caller)
    first.start()
    assert started.wait(5)
    second = threading.Thread(target=caller)  # arrives while the first asks: waits behind it
    second.start()
    time.sleep(0.2)
    release.set()
    first.join(5)
    second.join(5)
    assert errors == ["broker down", "broker down"] and calls == [1], "one request, its error shared"
    assert cache.topic("B", "t", since, asking(4)[1], count) == 4, "a caller arriving after the failure asks again"


def test_callers_asking_at_once_share_one_request() -> None:
    cache = LogCache()
    release = threading.Event()
    calls: list[int] = []

    def slow() -> int:
        calls.append(1)
        release.wait(5)
        return 4

    since = time.monotonic()
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(cache.topic("B", "t", since, slow, count)))]
    threads += [threading.Thread(target=lambda: results.append(cache.topic("B", "t", since, slow, count)))]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    release.set()
    for thread in threads:
        thread.join(5)
    assert results == [4, 4] and calls == [1]


class Client:
    def __init__(self, closes: list[Client]) -> None:
        self.closes = closes

    def close(self) -> None:
        self.closes.append(self)


def test_borrowed_clients_are_reused_closed_on_failure_and_closed_when_returned_after_the_cache() -> None:
    closes: list[Client] = []
    cache = LogCache()
    make = lambda: Client(closes)  # noqa: E731
    with cache.borrow("B", True, {}, make) as first, cache.borrow("B", True, {}, make) as second:  # type: ignore[arg-type,return-value]
        assert first is not second, "none idle: a new one"
    with cache.borrow("B", True, {}, make) as again:  # type: ignore[arg-type,return-value]
        assert again in (first, second) and cache.clients_made == 2
    with pytest.raises(ValueError), cache.borrow("B", True, {}, make) as failed:  # type: ignore[arg-type,return-value]
        raise ValueError("a fetch failed")
    assert closes == [failed], "a client a failure left is closed, not pooled"
    late = cache.borrow("B", True, {}, make)  # type: ignore[arg-type,return-value]
    held = late.__enter__()
    cache.close()
    assert closes == [failed], "nothing idle to close"
    late.__exit__(None, None, None)
    assert closes == [failed, held], "returned after the close: closed"
    with LogCache() as other, other.borrow("B", True, {}, make) as idle:  # type: ignore[arg-type,return-value]
        pass
    assert closes[-1] is idle, "an idle client is closed with its cache"
    with pytest.raises(RuntimeError):
        cache.asker("B", {}, make)  # type: ignore[arg-type,return-value]


class Message:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


class Reader:
    def __init__(self, offsets: list[int]) -> None:
        self.batches = [[Message(o) for o in offsets]]

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return self.batches.pop(0) if self.batches else []


def test_a_fetch_never_yields_a_record_below_where_it_started_or_below_one_it_delivered() -> None:
    reader = Reader([3, 5, 4, 6])  # 3: below the start, left from an earlier reader's fetch; 4: delivered again
    got = [r[1] for r in consume_to(reader, "B", "t", {0: 7}, 1.0, {0: 5})]  # type: ignore[arg-type]
    assert got == [5, 6]
    compacted = Reader([57, 60, 61])  # a cleaned log: the first record far above 0, gaps (markers, compaction)
    assert [r[1] for r in consume_to(compacted, "B", "t", {0: 62}, 1.0)] == [57, 60, 61]  # type: ignore[arg-type]


def test_a_kept_partition_ignores_a_record_below_where_its_reads_stopped() -> None:
    kept = Kept()
    kept.keep((0, 5, b"k", b"new", 0))
    kept.keep((0, 4, b"k", b"old", 0))
    assert kept.in_order() == [(0, 5, b"k", b"new", 0)] and kept.position == 6

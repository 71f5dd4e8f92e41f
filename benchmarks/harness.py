"""What every benchmark part shares: the cases, topics, source data, "has the copy arrived" and RSS sampling.

Source records carry their global index as the key (`k<i>` on partition `i % partitions`), so the last record of
each partition is known: a copy is complete when the target's committed end reaches the source's and the last
committed record there has the expected key. End offsets alone are not enough for transactional copies, whose
commit markers take offsets too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.clients import admin_client
from mirrorflow.local.cluster import LocalClusters

KEEP = {"retention.ms": "-1"}
COMPACT = {"cleanup.policy": "compact"}


@dataclass(frozen=True)
class Case:
    """One source topic: `records` records of `size` value bytes over `partitions` partitions."""

    records: int
    size: int
    partitions: int
    topic: str

    @property
    def name(self) -> str:
        size = f"{self.size // 1024}KB" if self.size >= 1024 else f"{self.size}B"
        return f"{size} x {self.partitions}p"

    @property
    def value_bytes(self) -> int:
        return self.records * self.size

    def last_keys(self) -> list[bytes | None]:
        """The key of the last record of each partition (None for an empty partition)."""
        keys: list[bytes | None] = []
        for p in range(self.partitions):
            last = p + ((self.records - 1 - p) // self.partitions) * self.partitions
            keys.append(b"k%d" % last if last < self.records and self.records > p else None)
        return keys

    def source_ends(self) -> list[int]:
        return [len(range(p, self.records, self.partitions)) for p in range(self.partitions)]


@contextlib.contextmanager
def bench_clusters(prefix: str, *, warm: bool = True) -> Iterator[tuple[Path, str, str]]:
    """Two single-broker clusters A (source) and B (target) in a new temporary directory: (that directory, A's
    and B's bootstrap), both warmed up unless `warm` is False; removed with the directory afterwards."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    clusters = LocalClusters.up(["A", "B"], directory / "clusters", heap_max="1g", tie_to_parent=True)
    try:
        source, target = clusters.bootstrap("A"), clusters.bootstrap("B")
        if warm:
            warm_up(source)
            warm_up(target)
        yield directory, source, target
    finally:
        clusters.down(purge=True)
        shutil.rmtree(directory, ignore_errors=True)


def run_id() -> str:
    return uuid.uuid4().hex[:6]


def create_topics(bootstrap: str, topics: list[NewTopic]) -> None:
    """Creates `topics`; ones that already exist (internal topics of an earlier variant) are reused."""
    if not topics:
        return
    admin = admin_client({"bootstrap.servers": bootstrap})  # held: results fail once the client is collected
    for f in admin.create_topics(topics).values():
        try:
            f.result(60)
        except KafkaException as err:
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    wait_for_leaders(bootstrap, [(t.topic, p) for t in topics for p in range(t.num_partitions)])


def wait_for_leaders(bootstrap: str, partitions: list[tuple[str, int]], timeout_s: float = 120) -> None:
    """A created topic is not usable at once: its partitions answer NOT_LEADER until the broker has loaded
    them (seconds on a busy host). Waits until each one answers a list-offsets request."""
    consumer = Consumer(
        with_logger({"bootstrap.servers": bootstrap, "group.id": f"bench-ready-{uuid.uuid4().hex[:8]}"})
    )
    deadline = time.monotonic() + timeout_s
    try:
        for topic, p in partitions:
            while True:
                try:
                    consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
    finally:
        consumer.close()


def delete_topics(bootstrap: str, names: list[str]) -> None:
    """Frees the disk of a measured copy (1 M records of 1 KB are 1 GB per copy)."""
    if not names:
        return
    admin = admin_client({"bootstrap.servers": bootstrap})
    for f in admin.delete_topics(names).values():
        with contextlib.suppress(KafkaException):
            f.result(60)


def produce_source(bootstrap: str, case: Case) -> None:
    producer = Producer(with_logger({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000}))
    payload = os.urandom(case.size)
    now = int(time.time() * 1000)
    produce, parts = producer.produce, case.partitions
    for i in range(case.records):
        while True:
            try:
                produce(case.topic, payload, b"k%d" % i, i % parts, timestamp=now)
                break
            except BufferError:  # the local queue is full (1 GB of 1 KB records and more): let it drain
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise RuntimeError(f"producing {case.topic}: records unacknowledged")


def warm_up(bootstrap: str) -> None:
    """A fresh cluster creates its transaction-state topic on the first transactional producer; a long-running
    target has it already, so that happens before any timing."""
    producer = Producer(
        with_logger({"bootstrap.servers": bootstrap, "transactional.id": f"bench-warm-up-{uuid.uuid4()}"})
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.commit_transaction(60)


class ArrivalWatch:
    """Polls a target topic until a copy of `case` is complete; remembers when the first record arrived."""

    def __init__(self, bootstrap: str, topic: str, case: Case) -> None:
        self.topic, self.case = topic, case
        self._consumer = Consumer(
            with_logger(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"bench-watch-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "isolation.level": "read_committed",
                    "fetch.wait.max.ms": 10,
                }
            )
        )
        self._ends = case.source_ends()
        self._keys = case.last_keys()
        self._done: set[int] = {p for p, end in enumerate(self._ends) if end == 0}
        self.first_arrival: float | None = None
        self._bootstrap = bootstrap
        self._closed = threading.Event()
        self._first = threading.Thread(target=self._watch_first, daemon=True, name="first-arrival")
        self._first.start()

    def _watch_first(self) -> None:
        """Its own consumer, every 50 ms, so that slow completion checks do not delay the first sighting."""
        consumer = Consumer(
            with_logger({"bootstrap.servers": self._bootstrap, "group.id": f"bench-first-{uuid.uuid4().hex[:8]}"})
        )
        try:
            while not self._closed.wait(0.05):
                for p in range(self.case.partitions):
                    try:
                        high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5)[1]
                    except KafkaException:
                        break  # not created yet
                    if high > 0:
                        self.first_arrival = time.perf_counter()
                        return
        finally:
            consumer.close()

    def close(self) -> None:
        self._closed.set()
        self._first.join(15)
        self._consumer.close()

    def _end(self, p: int) -> int:
        try:
            return int(self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5)[1])
        except KafkaException:
            return -1  # not created yet (MM2 creates its remote topics itself)

    def _last_key(self, p: int, end: int) -> bytes | None:
        """The key of the last committed data record below `end` (the few offsets before it may be markers)."""
        self._consumer.assign([TopicPartition(self.topic, p, max(0, end - 4))])
        key = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = self._consumer.poll(1.0)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                continue
            key = m.key()
        self._consumer.unassign()
        return key

    def complete(self) -> bool:
        for p in range(self.case.partitions):
            if p in self._done:
                continue
            end = self._end(p)
            if end < self._ends[p]:
                return False
            if self._last_key(p, end) == self._keys[p]:
                self._done.add(p)
            else:
                return False
        return True

    def wait(self, timeout_s: float, alive: threading.Event | None = None, every_s: float = 0.1) -> float:
        """perf_counter() when complete; raises TimeoutError after `timeout_s` or once `alive` is cleared."""
        deadline = time.monotonic() + timeout_s
        while not self.complete():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.topic}: copy incomplete after {timeout_s:.0f}s")
            if alive is not None and not alive.is_set():
                raise RuntimeError(f"{self.topic}: the copy process ended before the copy was complete")
            time.sleep(every_s)
        return time.perf_counter()


class Watching:
    """Closes the watch after a blocking copy (its first-arrival thread runs on its own meanwhile)."""

    def __init__(self, watch: ArrivalWatch) -> None:
        self.watch = watch

    def __enter__(self) -> ArrivalWatch:
        return self.watch

    def __exit__(self, *exc: object) -> None:
        self.watch.close()


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def tree_of(pid: int) -> list[int]:
    """`pid` and all its descendants, now."""
    tree, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, []))
    return out


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class RssSampler:
    """Samples the summed RSS of a process tree from /proc every `every_s` until stopped; keeps the peak.

    `exclude` leaves processes out (the benchmark's own process when it is the Spark driver)."""

    def __init__(self, pid: int, every_s: float = 0.2, exclude: frozenset[int] = frozenset()) -> None:
        self.pid, self.every_s, self.exclude = pid, every_s, exclude
        self.peak_kib = 0
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")

    def _run(self) -> None:
        while True:
            sizes = {p: rss_kib(p) for p in tree_of(self.pid) if p not in self.exclude}
            self.peak_kib = max(self.peak_kib, sum(sizes.values()))
            for p, kib in sizes.items():
                self.peaks[p] = max(self.peaks.get(p, 0), kib)
            if self._stop.wait(self.every_s):
                return

    def largest_mib(self, leave_out: frozenset[int] = frozenset()) -> float | None:
        """The highest peak of any single process of the tree but `leave_out` (e.g. Spark's JVM: what is left
        are its Python workers, each running copy tasks)."""
        peaks = [kib for p, kib in self.peaks.items() if p not in leave_out]
        return max(peaks) / 1024 if peaks else None

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    @property
    def peak_mib(self) -> float:
        return self.peak_kib / 1024

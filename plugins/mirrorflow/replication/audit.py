"""The replication audit (`mirrorflow audit`, docs/design.md §1.3 and §6): did every copied record arrive once, in its
partition, in order, unchanged?

Each record is reduced to a 16-byte BLAKE2b hash of (key, value, headers without Mirrorflow's provenance header,
timestamp) as it is read, so only hashes (and source timestamps) are held, never records. Per topic:

* expected, per source partition: the committed source records below the flow's committed progress
  (`next_upstream`), minus the records the provenance rule drops (origin header equal to the target alias);
  records at or beyond it are `not_yet_copied`, not lost;
* actual: the committed records of the same remote partition (those the source has since deleted by retention
  are skipped, found through the offset map);
* counts are multiset differences: an expected record absent from its partition but present in another is
  `misplaced`, otherwise `lost`; a surplus copy of an expected record is `duplicated`; a target record that
  matches a not-yet-copied source record is `ahead` (an at-least-once tail), anything else `unexpected`;
* `out_of_order` is the number of target records outside a longest increasing run of source positions (the
  fewest records that would have to move to restore the source order).

Latency: the copy keeps source timestamps, so on a CreateTime remote topic the target holds no append time and
the audit cannot measure latency from records. If the remote topic uses LogAppendTime the timestamp is left out
of the hash and p50/p99/max come from (target append time - source timestamp); otherwise the copy's own
`replication-latency-ms` metrics are reported when present (max and avg only), else "not measurable".
"""

from __future__ import annotations

import hashlib
import re
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.core.progress import progress_topic
from mirrorflow.core.provenance import ORIGIN_HEADER, should_drop
from mirrorflow.kafka.audit_reader import partition_count, read_partition
from mirrorflow.replication.discovery import discover
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_rules import internal_separator
from mirrorflow.replication.metrics import flow_views
from mirrorflow.replication.offset_translation import load_offset_maps
from mirrorflow.replication.state_records import read_progress

Header = tuple[str, bytes | None]
FAULTS = ("lost", "duplicated", "out_of_order", "misplaced", "unexpected")


def _field(data: bytes | None) -> bytes:
    return b"\xff" if data is None else len(data).to_bytes(4, "big") + data


def record_hash(key: bytes | None, value: bytes | None, headers: Sequence[Header], timestamp: int | None) -> bytes:
    """The identity of a record as the copy must preserve it (the provenance header is the copy's own)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(_field(key))
    h.update(_field(value))
    for name, data in headers:
        if name != ORIGIN_HEADER:
            h.update(_field(name.encode("utf-8")))
            h.update(_field(data))
    h.update(b"T" if timestamp is None else timestamp.to_bytes(8, "big", signed=True))
    return h.digest()


@dataclass
class PartitionRecords:
    """One side of one partition: record hashes in log order, and their timestamps."""

    hashes: list[bytes] = field(default_factory=list)
    timestamps: array[int] = field(default_factory=lambda: array("q"))
    offsets: array[int] = field(default_factory=lambda: array("q"))

    def add(self, digest: bytes, timestamp: int, offset: int = -1) -> None:
        self.hashes.append(digest)
        self.timestamps.append(timestamp)
        self.offsets.append(offset)

    def drop_below(self, offset: int) -> None:
        """Forget records at offsets below `offset`."""
        k = bisect_left(self.offsets, offset)
        del self.hashes[:k]
        del self.timestamps[:k]
        del self.offsets[:k]


@dataclass
class TopicAudit:
    topic: str
    remote_topic: str
    checked: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    misplaced: int = 0
    unexpected: int = 0
    ahead: int = 0
    not_yet_copied: int = 0
    latencies_ms: list[int] = field(default_factory=list, repr=False)

    def counts(self) -> dict[str, int]:
        return {
            "checked": self.checked,
            **{name: getattr(self, name) for name in FAULTS},
            "ahead": self.ahead,
            "not_yet_copied": self.not_yet_copied,
        }


def _longest_increasing(values: Sequence[int]) -> int:
    tails: list[int] = []
    for v in values:
        i = bisect_left(tails, v)
        if i == len(tails):
            tails.append(v)
        else:
            tails[i] = v
    return len(tails)


def compare_topic(
    topic: str,
    remote_topic: str,
    expected: Mapping[int, PartitionRecords],
    actual: Mapping[int, PartitionRecords],
    pending: Counter[bytes] | None = None,
    *,
    append_time: bool = False,
) -> TopicAudit:
    """Compare source (`expected`) and target (`actual`) partitions; `pending` holds not-yet-copied hashes."""
    result = TopicAudit(topic, remote_topic)
    pending = Counter(pending or {})
    result.not_yet_copied = sum(pending.values())
    missing: Counter[bytes] = Counter()
    extra: Counter[bytes] = Counter()
    known: set[bytes] = set()
    for p in sorted(set(expected) | set(actual)):
        src = expected.get(p, PartitionRecords())
        dst = actual.get(p, PartitionRecords())
        result.checked += len(src.hashes)
        known.update(src.hashes)
        want, have = Counter(src.hashes), Counter(dst.hashes)
        missing.update(want - have)
        extra.update(have - want)
        # k-th occurrence of a hash in the target pairs with its k-th occurrence in the source
        positions: dict[bytes, list[int]] = {}
        for i, digest in enumerate(src.hashes):
            positions.setdefault(digest, []).append(i)
        seen: Counter[bytes] = Counter()
        order: list[int] = []
        for j, digest in enumerate(dst.hashes):
            slots = positions.get(digest)
            k = seen[digest]
            seen[digest] += 1
            if slots is None or k >= len(slots):
                continue
            order.append(slots[k])
            if append_time:
                result.latencies_ms.append(max(0, dst.timestamps[j] - src.timestamps[slots[k]]))
        result.out_of_order += len(order) - _longest_increasing(order)
    for digest, count in extra.items():
        moved = min(count, missing[digest])
        result.misplaced += moved
        missing[digest] -= moved
        surplus = count - moved
        early = min(surplus, pending[digest])
        result.ahead += early
        surplus -= early
        if digest in known:
            result.duplicated += surplus
        else:
            result.unexpected += surplus
    result.lost = sum(missing.values())
    return result


def percentile(values: Sequence[int], q: float) -> int:
    """Nearest-rank percentile of non-empty `values`."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def latency_report(append_time: Sequence[int], metrics: Iterable[Mapping[str, float]] | None) -> dict[str, Any]:
    """Latency percentiles when measurable (see the module docstring for the sources, in order)."""
    if append_time:
        return {
            "measurable": True,
            "source": "log-append-time",
            "p50_ms": percentile(append_time, 50),
            "p99_ms": percentile(append_time, 99),
            "max_ms": max(append_time),
        }
    values = [m for m in metrics or () if "replication-latency-ms-max" in m]
    if values:
        return {
            "measurable": True,
            "source": "copy-metrics",
            "p50_ms": None,
            "p99_ms": None,
            "max_ms": max(m["replication-latency-ms-max"] for m in values),
            "avg_ms": round(sum(m.get("replication-latency-ms-avg", 0.0) for m in values) / len(values), 3),
            "note": "from the copy's replication-latency-ms metrics; percentiles need a LogAppendTime remote topic",
        }
    return {
        "measurable": False,
        "source": None,
        "note": "not measurable: the remote topics keep source timestamps (CreateTime) and no copy metrics exist",
    }


def summarise(topics: Sequence[TopicAudit], latency: dict[str, Any]) -> dict[str, Any]:
    """The `audit --json` document (docs/design.md §6)."""
    total = {"lost": 0, "duplicated": 0, "out_of_order": 0, "misplaced": 0, "checked": 0}
    extra = {"unexpected": 0, "ahead": 0, "not_yet_copied": 0}
    for t in topics:
        for name in (*total, *extra):
            bucket = total if name in total else extra
            bucket[name] += getattr(t, name)
    return {
        **total,
        **extra,
        "clean": all(total[k] == 0 for k in FAULTS if k in total) and extra["unexpected"] == 0,
        "latency": latency,
        "topics": [{"topic": t.topic, "remote_topic": t.remote_topic, **t.counts()} for t in topics],
    }


def committed_progress(flow: Flow, timeout_s: float) -> dict[tuple[str, int], int]:
    """`next_upstream` per source partition from the flow's progress topic on the target (progress alone; the
    audit itself takes it with the map, from one cut)."""
    topic = progress_topic(flow.source, internal_separator(flow))
    conf = flow.target_consumer.librdkafka()
    return {tp: p.next_upstream for tp, p in read_progress(flow.target, conf, topic, timeout_s=timeout_s).items()}


def audit_flow(flow: Flow, *, topics: str | None = None, timeout_s: float | None = None) -> dict[str, Any]:
    """Audit every replicated topic of `flow` (those matching the `topics` regex); reads only."""
    try:
        wanted = re.compile(topics) if topics else None
    except re.error as err:
        raise UsageError(f"--topics {topics!r} is not a valid regex ({err})") from None
    timeout = flow.admin_timeout_ms / 1000 if timeout_s is None else timeout_s
    with FlowClients(flow) as clients:
        plan = discover(flow, clients)
    selected = [t for t in plan.replicated() if wanted is None or wanted.fullmatch(t.topic)]
    # Progress and map from one cut (`read_offset_maps`): what counts as copied is what the map covers.
    maps = load_offset_maps(flow, topics=[t.topic for t in selected], timeout_s=timeout)
    progress = {tp: stored.next_upstream for tp, stored in maps.progress.items()}
    results = [_audit_topic(flow, t.topic, t.remote_topic, progress, maps, timeout) for t in selected]
    append = [ms for r in results for ms in r.latencies_ms]
    metrics: list[dict[str, float]] | None = None
    if not append:
        try:
            names = {t.remote_topic for t in selected}
            metrics = [v.values for v in flow_views(flow, timeout_s=timeout) if v.topic in names]
        except MirrorflowError:
            metrics = None
    document = summarise(results, latency_report(append, metrics))
    document["flow"] = flow.name
    return document


def _audit_topic(
    flow: Flow,
    topic: str,
    remote: str,
    progress: Mapping[tuple[str, int], int],
    maps: Any,
    timeout: float,
) -> TopicAudit:
    source_conf = flow.source_consumer.librdkafka()
    target_conf = flow.target_consumer.librdkafka()
    partitions = partition_count(flow.source, source_conf, topic, timeout) or 0
    remote_partitions = partition_count(flow.target, target_conf, remote, timeout) or 0
    actual: dict[int, PartitionRecords] = {}
    append_time = False
    for p in range(remote_partitions):
        records = PartitionRecords()
        for r in read_partition(flow.target, target_conf, remote, p, timeout_s=timeout):
            append_time = append_time or r.log_append_time
            records.add(
                record_hash(r.key, r.value, r.headers, None if r.log_append_time else r.timestamp),
                r.timestamp,
                r.offset,
            )
        actual[p] = records
    expected: dict[int, PartitionRecords] = {}
    pending: Counter[bytes] = Counter()
    for p in range(partitions):
        records = PartitionRecords()
        copied_to = progress.get((topic, p), 0)
        first, unsure = True, 0
        for r in read_partition(flow.source, source_conf, topic, p, timeout_s=timeout):
            if first:
                first = False
                unsure = _skip_expired(actual, maps, topic, p, r.offset)
            if flow.provenance_headers and should_drop(r.headers, flow.target):
                continue
            digest = record_hash(r.key, r.value, r.headers, None if append_time else r.timestamp)
            if r.offset >= copied_to:
                pending[digest] += 1
            else:
                records.add(digest, r.timestamp)
        expected[p] = records
        if unsure:
            _drop_expired_head(actual.get(p), records, unsure)
    return compare_topic(topic, remote, expected, actual, pending, append_time=append_time)


def _skip_expired(actual: dict[int, PartitionRecords], maps: Any, topic: str, p: int, log_start: int) -> int:
    """Drop target records whose source records retention has already deleted (found through the offset map);
    how many more at the head may be such records (the translation's re-read bound: in a thinned run of the map
    the log start translates a little early, never late)."""
    offset_map = maps.get(topic, p)
    if offset_map is None or offset_map.start is None or log_start <= offset_map.start or p not in actual:
        return 0
    found = offset_map.translate_bounded(log_start, clamp_ahead=True)
    if found is None:
        return 0
    actual[p].drop_below(found[0])
    return int(found[1])


def _drop_expired_head(actual: PartitionRecords | None, expected: PartitionRecords, bound: int) -> None:
    """Drop at most `bound` target records before the copy of the first surviving source record: their sources
    were deleted by retention. Only when that copy is found within the bound; otherwise nothing is dropped and
    the audit counts what it sees."""
    if actual is None or not expected.hashes:
        return
    head = actual.hashes[: bound + 1]
    if expected.hashes[0] in head:
        k = head.index(expected.hashes[0])
        if k:
            actual.drop_below(actual.offsets[k])

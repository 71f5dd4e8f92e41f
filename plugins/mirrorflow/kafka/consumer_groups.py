"""Consumer-group calls for checkpoints and group offset sync, for many groups at a time.

Kafka's OffsetFetch takes one group per request in librdkafka, so "batched" listing (MM2 4.0, KAFKA-17233) is
done by keeping a window of requests in flight. Group coordinators answer NOT_COORDINATOR or
COORDINATOR_LOAD_IN_PROGRESS while `__consumer_offsets` is being created or moved (a fresh cluster does this on
its first group call); those answers are retried until the deadline instead of failing the step. Offsets are
read through consumers (`mirrorflow.kafka.group_coordinator.fetch_committed`), never the admin call that crashes on
NOT_COORDINATOR (librdkafka issue 5040).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.group_coordinator import (
    CommittedOffset,
    all_partitions,
    alter_group_offsets,
    fetch_committed,
    reader_settings,
)
from mirrorflow.kafka.operation_error import KafkaOperationError, error_code

_RETRIABLE = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)
# What the group coordinator answers an admin offset write while the group has live members (classic and
# KIP-848 consumer groups alike): the write did not happen because the group is in use.
_ACTIVE_GROUP_CODES = frozenset(
    {
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError.STALE_MEMBER_EPOCH,
    }
)
_WINDOW = 32
_READERS = 8  # consumers reading group offsets at once (each is one connection and one OffsetFetch)
_RETRY_PAUSE_S = 0.2

T = TypeVar("T")


@dataclass(frozen=True)
class GroupState:
    """Kafka's state name (EMPTY, STABLE, DEAD, ...; DEAD also for a group that does not exist) and members."""

    state: str
    members: int


def is_active_group_error(error: BaseException) -> bool:
    """Whether a failed offset write means "the group has active members"."""
    return isinstance(error, KafkaOperationError) and error.code in _ACTIVE_GROUP_CODES


def _gather(
    cluster: str,
    groups: Sequence[str],
    what: str,
    send: Callable[[list[str]], Mapping[str, Future[T]]],
    timeout_s: float,
) -> dict[str, T]:
    """Run `send` over `groups` a window at a time, retrying coordinator hiccups until the deadline."""
    deadline = time.monotonic() + timeout_s
    results: dict[str, T] = {}
    pending = list(dict.fromkeys(groups))
    while pending:
        retry: list[str] = []
        for start in range(0, len(pending), _WINDOW):
            futures = send(pending[start : start + _WINDOW])
            for group, future in futures.items():
                try:
                    results[group] = future.result()
                except KafkaException as err:
                    if error_code(err) in _RETRIABLE and time.monotonic() < deadline:
                        retry.append(group)
                        continue
                    raise KafkaOperationError(cluster, f"{what} '{group}'", err) from err
        pending = retry
        if pending:
            time.sleep(_RETRY_PAUSE_S)
    return results


def list_committed_offsets(
    admin: AdminClient,
    cluster: str,
    groups: Sequence[str],
    timeout_s: float,
    topics: Callable[[str], bool] | None = None,
) -> dict[str, dict[tuple[str, int], CommittedOffset]]:
    """Committed offsets of every group in `groups` (a few consumers at a time, see `fetch_committed`) on the
    topics `topics` accepts (every topic if None); partitions without a commit (offset < 0) are left out.

    Every group is read even if some fail; the error then names each group that failed (and how), so one
    unreadable group is never hidden behind another's error or a generic one."""
    unique = list(dict.fromkeys(groups))
    if not unique:
        return {}
    settings = reader_settings(admin, cluster)
    partitions = all_partitions(admin, cluster, timeout_s, topics)

    def read(group: str) -> dict[tuple[str, int], CommittedOffset] | Exception:
        try:  # each group's own clock: with thousands of groups the last ones start long after the first
            return fetch_committed(settings, cluster, group, partitions, time.monotonic() + timeout_s)
        except Exception as err:  # reported below, with the group's name
            return err

    with ThreadPoolExecutor(max_workers=min(_READERS, len(unique)), thread_name_prefix="group-offsets") as pool:
        results = dict(zip(unique, pool.map(read, unique), strict=True))
    failed = {g: r for g, r in results.items() if isinstance(r, Exception)}
    if failed:
        first = next(iter(failed.values()))
        raise MirrorflowError(
            f"reading the offsets of {len(failed)} of {len(unique)} consumer groups on '{cluster}' failed: "
            + "; ".join(f"{g}: {err}" for g, err in list(failed.items())[:5])
            + (f"; and {len(failed) - 5} more" if len(failed) > 5 else "")
        ) from first
    return {g: r for g, r in results.items() if not isinstance(r, Exception)}


def describe_group_states(
    admin: AdminClient, cluster: str, groups: Sequence[str], timeout_s: float
) -> dict[str, GroupState]:
    """State of each group; a group the cluster does not know is reported as DEAD with no members."""
    if not groups:
        return {}

    def send(batch: list[str]) -> Mapping[str, Future[Any]]:
        futures: Mapping[str, Future[Any]] = admin.describe_consumer_groups(batch, request_timeout=timeout_s)
        return futures

    raw = _gather(cluster, groups, "describing consumer group", _tolerate_unknown(send), timeout_s)
    return {group: description for group, description in raw.items() if isinstance(description, GroupState)}


def _tolerate_unknown(
    send: Callable[[list[str]], Mapping[str, Future[Any]]],
) -> Callable[[list[str]], Mapping[str, Future[Any]]]:
    """Map each description to a `GroupState`; GROUP_ID_NOT_FOUND (KIP-848 brokers) becomes DEAD."""

    def wrapped(batch: list[str]) -> Mapping[str, Future[Any]]:
        out: dict[str, Future[Any]] = {}
        for group, future in send(batch).items():
            converted: Future[Any] = Future()
            try:
                description = future.result()
                converted.set_result(GroupState(description.state.name, len(description.members or [])))
            except KafkaException as err:
                if error_code(err) == KafkaError.GROUP_ID_NOT_FOUND:
                    converted.set_result(GroupState("DEAD", 0))
                else:
                    converted.set_exception(err)
            out[group] = converted
        return out

    return wrapped


def write_group_offsets(
    admin: AdminClient,
    cluster: str,
    group: str,
    offsets: Mapping[tuple[str, int], CommittedOffset],
    timeout_s: float,
) -> None:
    """`alter_group_offsets`, retrying coordinator hiccups; raises (see `is_active_group_error`) if in use."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            alter_group_offsets(admin, cluster, group, offsets, timeout_s)
            return
        except KafkaOperationError as err:
            if err.code not in _RETRIABLE or time.monotonic() >= deadline:
                raise
        time.sleep(_RETRY_PAUSE_S)

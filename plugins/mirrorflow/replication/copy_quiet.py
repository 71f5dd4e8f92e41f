"""Quiet partitions of a continuous copy: the ones that need no Spark slot of their own this run (issue 19).

A continuous run holds every Spark task it starts for its whole length, so without this a flow whose partitions
carry no traffic still pins one slot per `mirrorflow.copy.partitions.per.task` partitions. Before it groups its
ranges, the driver asks each cluster once for its partitions' newest timestamps (ListOffsets' max timestamp,
KIP-734: records keep their timestamps when copied; an exactly-once copy's commit markers carry the commit's
time). A source partition is quiet when it is empty, or when

* its newest record is older than the run's length (nothing produced during the last run), and
* the remote partition's newest timestamp is older than the run's length too (the copy wrote and committed
  nothing during the last run: a copy working through a backlog commits all the time), and
* the remote's newest is not older than the source's (the copy wrote after the newest source record: at least
  once, the copy of that record; exactly once, a marker committed after it).

Anything else is busy: recent records, a backlog nobody copied yet (a first start, a paused flow), a lookup that
failed. Two cases can still pass a backlog for quiet for a run: records stamped in the past by their producer
(older than the copy's last marker), and an at-least-once backlog whose records all carry the timestamp of the
last one copied. They are still copied, only without a slot of their own, and the copy's own writes make them
busy at the next run except in the second case.

The quiet ranges share one Spark task (`copy_plan.spread_quiet`); each still has its own thread, so a quiet
partition that wakes up is copied at once, only not on a slot of its own until the next run re-groups it. The
choice affects where a range runs, never what is copied: a wrong guess costs throughput for one run at most.
Cost: two ListOffsets round trips per run (one per leader), no state read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Protocol

from mirrorflow.config.model import Flow
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.offsets import newest_timestamps

log = logging.getLogger(__name__)

Partition = tuple[str, int]


class CopiedPartition(Protocol):
    """What the lookup needs of a range: a `CopyTask`, or the Airflow task's sizing before the copy is planned."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def remote_topic(self) -> str: ...


def classify(
    tasks: Sequence[CopiedPartition],
    source_newest: dict[Partition, int],
    remote_newest: dict[Partition, int],
    cutoff_ms: int,
) -> set[Partition]:
    """The quiet partitions among `tasks` (see the module docstring), from the newest timestamps found (-1 for an
    empty partition); a partition missing from either lookup is busy, and so is one the source calls empty while
    its copy wrote after the cutoff (a busy partition's answer sometimes comes back without an offset)."""
    quiet: set[Partition] = set()
    for task in tasks:
        newest = source_newest.get((task.topic, task.partition))
        written = remote_newest.get((task.remote_topic, task.partition))
        if newest is None or written is None:
            continue
        if (newest < 0 and written < cutoff_ms) or (newest < cutoff_ms and newest <= written < cutoff_ms):
            quiet.add((task.topic, task.partition))
    return quiet


def quiet_partitions(flow: Flow, tasks: Sequence[CopiedPartition], quiet_after_s: float) -> set[Partition]:
    """The partitions of `tasks` with nothing copied or to copy in the last `quiet_after_s` (the run's length).
    A failed lookup (a broker older than Kafka 3.0, a refused Describe) is logged and makes every range busy."""
    timeout_s = flow.admin_timeout_ms / 1000
    try:
        source = newest_timestamps(
            admin_client(flow.source_admin.librdkafka()),
            flow.source,
            [(t.topic, t.partition) for t in tasks],
            timeout_s=timeout_s,
        )
        remote = newest_timestamps(
            admin_client(flow.target_admin.librdkafka()),
            flow.target,
            [(t.remote_topic, t.partition) for t in tasks],
            timeout_s=timeout_s,
        )
    except MirrorflowError as err:
        log.warning(
            "flow %s: the newest record timestamps could not be listed, so every partition gets a Spark slot share "
            "of its own this run (quiet partitions are grouped only when known): %s",
            flow.name,
            err,
        )
        return set()
    return classify(tasks, source, remote, int(time.time() * 1000 - quiet_after_s * 1000))

"""The records of the runbook topic: where failover runbooks keep their state, reports and pause markers.

Topic `mirrorflow-runbook.internal` (compacted, one partition) on the cluster the clients move to: the DR
cluster of a failover, the primary of a failback. That cluster must be up for the runbook to mean anything, and
it is the target of the paused flow, which every worker running that flow reaches anyway. The `mirrorflow-`
prefix and `.internal` suffix keep it out of replication like Mirrorflow's other internal topics.

Keys are UTF-8 JSON arrays, so compaction keeps one record per runbook, per report and per paused flow:
  ["runbook", direction, primary alias, dr alias, <holder id>, <source id>, run]
  ["report",  direction, primary alias, dr alias, <holder id>, <source id>, run]
  ["pause",   flow source alias, flow target alias, <holder id>, <source id>]
The holder is the cluster whose topic it is (the flow's target); the source is the flow's other cluster, whose
id is "" when it did not answer (an unplanned run): such a record applies to any source of that alias, the safe
side; and a reader that cannot get the source's id takes every record of the aliases and holder as its own
(`RunbookId.owns`, `pause_applies`). `run` is "" for the CLI's current runbook of a direction and pair (a
finished one is moved to `done-<ms>` when a new one starts), the DAG run id for the Airflow DAGs. So a topic
restored or copied elsewhere, or a cluster recreated under the same alias, never inherits another pair's state.
A value is UTF-8 JSON with "version": 1 and "clusters" (the ids by alias); a tombstone (None) deletes.
Values hold offsets, step results and reasons, never a secret.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mirrorflow.core.errors import MirrorflowError

RUNBOOK_TOPIC = "mirrorflow-runbook.internal"
RUNBOOK = "runbook"
REPORT = "report"
PAUSE = "pause"
DRILL = "drill"
RECORD_VERSION = 1
KEPT_RUNS = 20
"""DAG runs kept per direction and pair (state and report); older finished ones are deleted when a run starts."""


@dataclass(frozen=True)
class RunbookId:
    """One runbook: what the CLI names by direction and aliases, the DAG by its run id too."""

    direction: str
    primary: str
    dr: str
    holder_id: str
    """`cluster.id` of the cluster whose topic holds the state (the runbook's target)."""
    source_id: str
    """`cluster.id` of the runbook flow's source, "" when it did not answer."""
    run: str = ""

    def key(self, kind: str = RUNBOOK) -> bytes:
        return _key([kind, self.direction, self.primary, self.dr, self.holder_id, self.source_id, self.run])

    def owns(self, parts: list[str], kind: str = RUNBOOK) -> bool:
        """A decoded key of this runbook's `kind`: same direction, aliases, holder and run, and a source id that
        is ours or unknown on either side (a runbook begun, or resumed, while the source did not answer)."""
        if len(parts) != 7 or parts[0] != kind or parts[6] != self.run:
            return False
        return parts[1:5] == [self.direction, self.primary, self.dr, self.holder_id] and same_source(
            parts[5], self.source_id
        )

    def describe(self) -> str:
        run = f" run {self.run}" if self.run else ""
        return f"{self.direction} {self.primary}->{self.dr}{run}"


def pause_key(source: str, target: str, target_id: str, source_id: str) -> bytes:
    return _key([PAUSE, source, target, target_id, source_id])


def pause_applies(parts: list[str], source: str, target: str, target_id: str, source_id: str) -> bool:
    """A decoded pause key that pauses the flow `source`->`target` on these clusters: same aliases and holder,
    and the source's id ours or unknown on either side. With the source's id unknown (it does not answer), a
    marker written with any id applies: pausing too much is the safe side."""
    return len(parts) == 5 and parts[:4] == [PAUSE, source, target, target_id] and same_source(parts[4], source_id)


def drill_key(source: str, target: str, holder_id: str, slot: int) -> bytes:
    """One of the rotating slots that keep a pair's last drills (`replication/failover/drill.py`)."""
    return _key([DRILL, source, target, holder_id, str(slot)])


def is_drill_of(parts: list[str], source: str, target: str, holder_id: str) -> bool:
    return len(parts) == 5 and parts[:4] == [DRILL, source, target, holder_id]


def same_source(stored: str, now: str) -> bool:
    return not stored or not now or stored == now


def _key(parts: list[str]) -> bytes:
    return json.dumps(parts, separators=(",", ":")).encode()


def decode_key(key: bytes | None) -> list[str] | None:
    """The key's parts, or None for a record that is not ours (the topic is ours, but be lenient on reads)."""
    if key is None:
        return None
    try:
        parts = json.loads(key)
    except ValueError:
        return None
    if not isinstance(parts, list) or not parts or not all(isinstance(p, str) for p in parts):
        return None
    return parts


def encode_value(body: Mapping[str, Any], clusters: Mapping[str, str | None]) -> bytes:
    return json.dumps({"version": RECORD_VERSION, "clusters": dict(clusters), **body}, sort_keys=True).encode()


def decode_value(value: bytes, where: str) -> dict[str, Any]:
    try:
        data = json.loads(value)
    except ValueError as err:
        raise MirrorflowError(f"{where}: unreadable runbook record ({err})") from None
    if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
        found = data.get("version") if isinstance(data, dict) else type(data).__name__
        raise MirrorflowError(
            f"{where}: runbook record version {found}, this Mirrorflow reads version {RECORD_VERSION}: upgrade it"
        )
    return data


def same_clusters(stored: Mapping[str, Any], now: Mapping[str, str | None]) -> bool:
    """True unless an alias is known on both sides with different ids: a record of other clusters.

    An id missing on either side (a cluster unreachable when written or now) does not separate: pausing a flow
    or resuming a runbook wrongly is the lesser harm than copying into a cluster clients have moved to."""
    for alias, cluster_id in now.items():
        before = stored.get(alias)
        if cluster_id and before and before != cluster_id:
            return False
    return True

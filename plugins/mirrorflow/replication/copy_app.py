"""The leased copy application (issue 19): a continuous exactly-once flow with rounds copies in one Spark
application that outlives the DAG runs supervising it, so a DAG run's boundary starts no JVM, session or copy.

Without a lease every DAG run's copy task submits an application that copies for `run.seconds`, and the next
run's application fences it: on a busy host the new application's start (a JVM, Spark, Python workers, beside
the running copy) raised latency for 20-40 s at every boundary (docs/benchmarks.md, sessions 18 and 20). With
rounds (`copy_rounds`) one application can run any length of time, so the copy task of each DAG run now
supervises instead:
* it reads the flow's application record (its heartbeat) and lease from the runbook topic on the flow's target;
* an application that beat within `stale_s` under the same configuration is adopted: its lease is extended past
  this DAG run's end, by `handover.seconds` and two rounds, so the next DAG run finds it alive;
* otherwise (none, stale, ended, or started under another configuration) it submits a new one under a new id
  and lease; the new application fences the old one's ranges as the next DAG run's did before (claims ordered
  by DAG run start, `copy_claims`), and the old one, whose lease names another application, ends at its own;
* until the DAG run's end it watches the heartbeat: an application that stops beating, or ends with an error,
  fails the task (Airflow's retry submits a new one); one paused by a failover ends the task as paused.
The application ends by itself when its lease runs out (the flow DAG paused, the scheduler stopped): nothing runs
on unsupervised for longer than a DAG run, `handover.seconds` and two rounds. Its ranges plan three `run.seconds`
past the lease (`copy_rounds.RANGE_SPAN_RUNS`), so a DAG run's extension touches no range, and the application
cancels them itself at the lease's end; a range is renewed (an in-application handover, not a new application)
once the lease outgrows its span.

The records, in the runbook topic (compacted, one partition, `core/runbook_record.py`), one key each per flow:
  ["copy-lease", source alias, target alias] -> {"app", "until_ms", "by"}  (written by the copy tasks)
  ["copy-app", source alias, target alias]   -> {"app", "at_ms", "config", "round", "ended", "counts", ...}
A flow beats once per round: at 60 s rounds 1,440 records a day per flow, compacted to one.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.core.runbook_record import RUNBOOK_TOPIC, decode_value, encode_value
from mirrorflow.kafka.produce import OutgoingRecord
from mirrorflow.kafka.runbook_store import ensure_runbook_topic, read_latest, topic_exists
from mirrorflow.replication.copy_totals import FOLDED, RoundsOutcome
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.pause_markers import PAUSE_CHECK_WAIT_S

APP = "copy-app"
LEASE = "copy-lease"
PAUSED = "paused"
"""How an `ended` reason of a failover's pause begins."""


def record_key(kind: str, flow: Flow) -> bytes:
    return json.dumps([kind, flow.source, flow.target], separators=(",", ":")).encode()


def new_app_id(flow: Flow) -> str:
    return f"{flow.source}-{flow.target}-{uuid.uuid4().hex[:12]}"


def stale_s(flow: Flow) -> float:
    """How long a heartbeat is believed: three rounds and a minute (a round's plan may wait on a broker)."""
    return 3 * float(flow.copy_round_seconds) + 60.0


def lease_until_ms(flow: Flow, run_end_ms: int, now_ms: int) -> int:
    """The lease a supervising DAG run gives: past its own end by `handover.seconds`, two rounds and a margin, so
    the next DAG run (started `handover.seconds` before this one's end) extends it before it runs out."""
    ahead_s = float(flow.copy_handover_seconds) + 2 * float(flow.copy_round_seconds) + 30.0
    return max(run_end_ms, now_ms) + int(ahead_s * 1000)


def config_id(config_path: str, flow: Flow, clusters: list[str] | None, master: str) -> str:
    """What a running application must share with its supervisor to be adopted: the config file's settings
    (`mirrorflow.spark.conf.*` among them), the flow, `--clusters`, the Spark master and the installed Mirrorflow
    code (its files' contents). A change to any of them starts a new application that takes over from the old
    one. Not the Spark settings derived from partition counts (they would start a new application whenever a
    topic grows), nor what `${env:}`/`${file:}` references and Airflow connections resolve to. Secret values
    (keys `is_secret_key` flags, written in clear) are left out, so no hash of a secret is written anywhere:
    after changing only a secret, restart the application (docs/airflow.md)."""
    from mirrorflow.config.issues import IssueLog
    from mirrorflow.config.keys import is_secret_key
    from mirrorflow.config.properties_file import read_properties

    props = read_properties(config_path, IssueLog(config_path))
    values = props.values if props is not None else {}
    settings = sorted((k, "<secret>" if is_secret_key(k) else v) for k, v in values.items())
    digest = hashlib.sha256(json.dumps([settings, master, flow.name, clusters or []]).encode())
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class AppState:
    """The flow's lease and heartbeat as the runbook topic holds them (None: no record)."""

    lease: dict[str, Any] | None
    beat: dict[str, Any] | None

    def holder_beat(self) -> dict[str, Any] | None:
        """The heartbeat of the application holding the lease, None when the last one is another's (a starting
        holder that has not beaten yet, or an old application's last beat written after the lease moved)."""
        lease, beat = self.lease, self.beat
        if lease is None or beat is None or beat.get("app") != lease.get("app"):
            return None
        return beat

    def adoptable(self, now_ms: int, stale: float, ahead_s: float, config: str, start_wait_s: float) -> bool:
        """Whether a supervisor may adopt the lease's application: submitted for `config`, its lease running at
        least `ahead_s` more (time to read the extension before its lease's end, where it cancels its ranges), and
        either beating within `stale` seconds without having ended, or submitted less than `start_wait_s` ago and
        not beaten yet (starting)."""
        lease = self.lease
        if lease is None or lease.get("config") != config or int(lease.get("until_ms", 0)) < now_ms + ahead_s * 1000:
            return False
        beat = self.holder_beat()
        if beat is None:
            return now_ms - int(lease.get("submitted_ms", 0)) < start_wait_s * 1000
        return not beat.get("ended") and now_ms - int(beat.get("at_ms", 0)) < stale * 1000


def process_gone(beat: Mapping[str, Any]) -> bool:
    """Whether the heartbeat's driver is known to be gone: it ran on this machine and its process is no more. A
    supervisor elsewhere waits for the heartbeat to go stale instead (`stale_s`)."""
    pid = beat.get("pid")
    if beat.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process (a task run as another user): alive as far as we know
        return False
    try:  # a killed driver whose parent died too waits as a zombie until something reaps it
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


def read_state(flow: Flow, clients: FlowClients) -> AppState:
    """The flow's lease and heartbeat; both None on a target where the runbook topic does not exist yet."""
    if not topic_exists(clients.target_admin, flow.target, RUNBOOK_TOPIC, clients.timeout_s):
        return AppState(None, None)
    conf = flow.target_admin.librdkafka()
    latest = read_latest(flow.target, conf, RUNBOOK_TOPIC, clients.timeout_s, wait_s=PAUSE_CHECK_WAIT_S)
    where = f"topic {RUNBOOK_TOPIC} on '{flow.target}'"
    found = [latest.get(record_key(kind, flow)) for kind in (LEASE, APP)]
    lease, beat = (decode_value(value, where) if value is not None else None for value in found)
    return AppState(lease, beat)


def write(flow: Flow, clients: FlowClients, kind: str, body: Mapping[str, Any]) -> None:
    """One record (the lease or the heartbeat), delivered or raised; the topic is made on first use."""
    if kind == LEASE:  # the first write of a flow's application is its lease: the topic may not exist yet
        rf = flow.checkpoints_topic_replication_factor
        ensure_runbook_topic(clients.target_admin, flow.target, RUNBOOK_TOPIC, rf, clients.timeout_s)
    value = encode_value(body, {})
    clients.target_writer.write([OutgoingRecord(RUNBOOK_TOPIC, 0, record_key(kind, flow), value)])


def beat_body(app: str, config: str, started_ms: int, out: RoundsOutcome, ended: str | None) -> dict[str, Any]:
    """The heartbeat: what the supervisor needs (who, when, under which configuration, ended why) and the copy's
    counts since the application started (the jobs it forgot, and at its end all of them)."""
    counts = dict(out.folded)
    for key in FOLDED:
        counts[key] = counts.get(key, 0) + sum(getattr(r, key) for r in out.results)
    return {
        "app": app,
        "at_ms": int(time.time() * 1000),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "config": config,
        "started_ms": started_ms,
        "round": out.rounds,
        "live_spark_tasks": out.live,
        "renewals": out.renewals,
        "round_handovers": out.handovers,
        "round_restarts": out.restarts,
        "ended": ended,
        "counts": {k: v for k, v in counts.items() if k in FOLDED or k in ("handed_over", "offset_syncs")},
    }


@dataclass
class Watch:
    """What a supervising DAG run saw of the application: the counts when it began watching, the last beat."""

    app: str
    adopted: bool
    first: dict[str, float] = field(default_factory=dict)
    last: dict[str, Any] | None = None

    def summary(self) -> dict[str, Any]:
        """The DAG run's totals: what the application's ranges whose Spark jobs ended while this run watched had
        copied (a range counts once its job ends: at a renewal, about every three DAG runs, `RANGE_SPAN_RUNS`;
        the copy's live figures are its metrics)."""
        counts = dict((self.last or {}).get("counts") or {})
        out: dict[str, Any] = {k: max(0, counts.get(k, 0) - self.first.get(k, 0)) for k in counts}
        out.update(app=self.app, adopted=self.adopted, rounds=(self.last or {}).get("round", 0))
        out["spark_tasks"] = (self.last or {}).get("live_spark_tasks", 0)
        return out

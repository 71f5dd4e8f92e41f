"""A continuous exactly-once run in rounds on Spark (`mirrorflow.copy.round.seconds`): the Spark side of
`replication.copy_rounds`. Every round plans on the driver (discovery, the plan, the quiet partitions), each
changed group of ranges runs as a Spark job of its own (one task), named so that it can be cancelled alone.
"""

from __future__ import annotations

import logging
import os
import re
import time

from pyspark.sql import SparkSession

from mirrorflow.config.model import Flow
from mirrorflow.replication.copy_app import APP, PAUSED, beat_body, read_state, write
from mirrorflow.replication.copy_plan import copyable, idle_counts, plan_copy, summarise
from mirrorflow.replication.copy_rounds import RANGE_SPAN_RUNS, CopyRounds
from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.copy_totals import RoundsOutcome, add_folded
from mirrorflow.replication.discovery import discover
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import flow_paused, state_root_override
from mirrorflow.spark.copy_tasks import Runtime, python_error_line, run_copy_groups, spread_over_cores

log = logging.getLogger(__name__)


def copy_in_rounds(
    flow: Flow,
    spark: SparkSession,
    *,
    run_seconds: float,
    run_started_ms: int | None,
    try_number: int = 0,
    app: tuple[str, str] | None = None,
) -> dict[str, object]:
    """A continuous exactly-once run that plans again every `mirrorflow.copy.round.seconds` inside this Spark
    application and starts Spark tasks only for the groups of ranges that changed (`copy_rounds`). A partition
    is quiet after a whole run's length without traffic, as without rounds, so that a partition pausing for a
    round does not move between tasks. `app`: (application id, `copy_app.config_id`) of a leased application,
    which runs on while its lease grows and beats after every round (`replication/copy_app.py`)."""
    runtimes: list[Runtime] = []
    sc = spark.sparkContext

    def plan_round(left_s: float, started_ms: int) -> tuple[list[list[CopyTask]], int]:
        with FlowClients(flow) as clients:
            found = discover(flow, clients)
        tasks = plan_copy(flow, copyable(found), interval=False, run_seconds=left_s, run_started_ms=started_ms)
        return spread_over_cores(flow, tasks, spark, interval=False, share=2, quiet_after_s=run_seconds)

    def run(group: list[CopyTask], name: str) -> list[CopyResult]:
        seen: list[Runtime] = []
        results = run_copy_groups(spark, [group], runtimes=seen, job_group=name)
        runtimes.extend(r for r in seen if r not in runtimes)  # the same few environments, not one per job
        return results

    def cancel(names: list[str]) -> None:
        for name in names:
            sc.cancelJobGroup(name)

    def active(name: str) -> bool:
        tracker = sc.statusTracker()
        for job_id in tracker.getJobIdsForGroup(name):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None and stage.numActiveTasks + stage.numCompletedTasks + stage.numFailedTasks:
                    return True
        return False

    def paused() -> str | None:
        with FlowClients(flow) as clients:
            return flow_paused(flow, clients, state_root_override())

    leased = _Leased(flow, app, int(time.time() * 1000)) if app is not None else None
    rounds = CopyRounds(
        run_seconds=run_seconds,
        round_seconds=float(flow.copy_round_seconds),
        handover_seconds=float(flow.copy_handover_seconds),
        run_started_ms=run_started_ms or int(time.time() * 1000),
        plan=plan_round,
        run=run,
        cancel=cancel,
        paused=paused,
        active=active,
        try_number=try_number,
        lease=leased.lease if leased else None,
        beat=leased.beat if leased else None,
        span_s=RANGE_SPAN_RUNS * float(flow.copy_run_seconds),
    )
    try:
        out = rounds.copy()
    except BaseException as err:
        if leased is not None:
            leased.end(f"failed: {python_error_line(str(err))[:500]}")
        raise
    if leased is not None:
        leased.end(f"{PAUSED}: {out.paused}" if out.paused else "its lease ran out", out)
    return _summary(flow, out, runtimes)


def _summary(flow: Flow, out: RoundsOutcome, runtimes: list[Runtime]) -> dict[str, object]:
    """The run's summary, as a copy without rounds gives it, and the rounds' own counts."""
    summary = summarise(out.results)
    summary.update(spark_tasks=len(out.groups), quiet_partitions=out.quiet, rounds=out.rounds)
    summary.update(round_handovers=out.handovers, round_restarts=out.restarts, cancelled_spark_tasks=out.cancelled)
    summary.update(idle_counts([[(t.topic, t.partition) for t in g] for g in out.groups], out.results))
    add_folded(summary, out.folded)  # a leased application's forgotten jobs
    summary["executors"] = [dict(seen) for seen in sorted({tuple(sorted(r.items())) for r in runtimes})]
    summary.update(flow=flow.name, mode="continuous")
    if out.paused:
        summary["paused"] = out.paused
    return summary


class _Leased:
    """A leased application's side of `copy_app`: reads its lease before each round, beats after it. While
    another application holds the lease it writes nothing (its heartbeat would hide the holder's)."""

    def __init__(self, flow: Flow, app: tuple[str, str], started_ms: int) -> None:
        self.flow, (self.app, self.config), self.started_ms = flow, app, started_ms
        self.taken_by: str | None = None
        self.clients = FlowClients(flow)

    def lease(self) -> int | None:
        held = read_state(self.flow, self.clients).lease
        if held is not None and held.get("app") == self.app:
            self.taken_by = None  # named again (an adopter wrote it back): this one plans and beats again
            return int(held.get("until_ms", 0))
        if held is not None and self.taken_by != str(held.get("app")):
            self.taken_by = str(held.get("app"))
            log.warning("copy application %s: %s holds the lease for %s", self.app, held.get("by"), self.taken_by)
        return -1 if held is not None else None

    def beat(self, out: RoundsOutcome, ended: str | None = None) -> None:
        if self.taken_by is not None:
            return
        try:
            write(self.flow, self.clients, APP, beat_body(self.app, self.config, self.started_ms, out, ended))
        except Exception:
            self.clients.close()  # a producer in a fatal state would fail every heartbeat: a new one next time
            self.clients = FlowClients(self.flow)
            raise

    def end(self, why: str, out: RoundsOutcome | None = None) -> None:
        """The last heartbeat says why the application ended, unless the lease moved meanwhile (read again: the
        holder's heartbeat must stay the last). A failed write is logged: the lease ends it anyway."""
        try:
            self.lease()
            self.beat(out or RoundsOutcome([], []), why)
        except Exception as err:
            log.warning("copy application %s: its last heartbeat was not written: %s", self.app, err)
        finally:
            self.clients.close()


def round_master(master: str) -> str:
    """A local master with twice the task threads: two rounds' Spark tasks run at once while they hand over;
    each round plans for half of them (`spread_over_cores(share=2)`). `local` is one thread, `local[*]` one per
    core; a retry count (`local[N,F]`) is kept. Other masters as given."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,(\d+))?\])?", master.strip())
    if m is None:
        return master
    threads = 1 if m.group(1) is None else (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))
    retries = f",{m.group(2)}" if m.group(2) else ""
    return f"local[{2 * threads}{retries}]"

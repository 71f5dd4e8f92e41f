"""Fault matrix, a zombie across regrouping (issue 17): a continuous exactly-once copy job is frozen (SIGSTOP of
its whole process tree: the JVM and PySpark's workers, which copy) while records keep arriving; the flow then
runs again with another grouping of its partitions into Spark tasks (another number of slots: one task copying
four partitions, two tasks of two, four of one); once that run writes, the frozen job is woken (SIGCONT).

Each partition's transactional id is fixed per flow and source partition, not per task, so the new grouping's
producers fence the frozen ones whatever task a partition lands in: the zombie's open transaction is aborted,
its next commit fails, it finds the new run's claim and ends as handed over, every range of it. The new run is
never fenced back. After the trials a last interval run copies what is left and the audit finds every record
once (0 lost, 0 duplicated, in order).

`make test` runs one trial; `make test-faults` runs MIRRORFLOW_FAULT_TRIALS (10), the grouping changing each time.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.replication.helpers import FAULT_KEYS
from tests.spark.driver_helpers import (
    PARTITIONS,
    TRIALS,
    SteadyProducer,
    freeze,
    remote_end,
    spark_submit,
    thaw,
    wait_for_writes,
    write_config,
)

from mirrorflow.config.loader import load_config
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.audit import audit_flow
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration
Popen = subprocess.Popen[bytes]
RATE = 300  # records per second, produced from a trial's start to its end (both runs' Spark starts included)
MASTERS = ("local[1]", "local[2]", "local[4]")  # 4 partitions: 1 task of 4, 2 tasks of 2, 4 tasks of 1
NEW_RUN_S = 90  # the new grouping's run: long enough to be copying when the zombie wakes
FROZEN_S = 70  # past the copy's transaction.timeout.ms (60 s): the zombie's unsent records have expired on waking


def summary(path: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(path.read_text())
    return found


def totals(found: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in found.items() if k not in ("ranges", "executors")}


def ended(proc: Popen, log: Path, what: str, timeout_s: float) -> None:
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} still runs after {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")
    assert rc == 0, f"{what} exited {rc}:\n{log.read_text()[-3000:]}"


def one_trial(n: int, config: Path, tmp_path: Path, target: str, remote: str, reap: list[Popen]) -> None:
    """Freeze a run grouped one way, run the flow grouped another way, wake the frozen run; check both ends."""
    old, new = MASTERS[n % len(MASTERS)], MASTERS[(n + 1) % len(MASTERS)]
    rng = random.Random(f"zombie{n}")

    def continuous(name: str, seconds: int, master: str) -> Popen:
        out = tmp_path / f"{name}{n}.json"
        args = ("--mode", "continuous", "--run-seconds", str(seconds), "--master", master, "--summary-file", str(out))
        reap.append(spark_submit(config, tmp_path / f"{name}{n}.log", "--flow", "A->B", *args))
        return reap[-1]

    zombie = continuous("zombie", 600, old)
    wait_for_writes(zombie, target, remote, remote_end(target, remote), tmp_path / f"zombie{n}.log")
    time.sleep(rng.uniform(0.0, 2.0))
    frozen, frozen_at = freeze(zombie), time.monotonic()
    time.sleep(2.0)  # what the zombie had sent before it stopped reaches the broker
    # Aborting the zombie's open transaction adds a marker per partition: the new run has committed records once
    # the committed end passes everything the zombie wrote and those markers.
    above = remote_end(target, remote) + 2 * PARTITIONS
    fresh = continuous("new", NEW_RUN_S, new)
    wait_for_writes(fresh, target, remote, above, tmp_path / f"new{n}.log", committed=True)
    time.sleep(max(0.0, frozen_at + FROZEN_S - time.monotonic()))
    print(f"trial {n}: froze a {old} run ({len(frozen)} processes); a {new} run commits; waking the frozen one")
    thaw(frozen)
    ended(zombie, tmp_path / f"zombie{n}.log", f"the woken {old} run", 180)
    ended(fresh, tmp_path / f"new{n}.log", f"the {new} run", 300)
    woken, later = summary(tmp_path / f"zombie{n}.json"), summary(tmp_path / f"new{n}.json")
    print(f"trial {n}: woken run {totals(woken)}; new run {totals(later)}")
    assert woken["handed_over"] == len(woken["ranges"]) == PARTITIONS, "every range of the zombie is fenced"
    # Fenced back by the zombie, a task of the new run would fail (no newer claim) and Spark would retry it.
    assert later["handed_over"] == 0 and "Lost task" not in (tmp_path / f"new{n}.log").read_text()


# Each trial starts two JVMs and SparkContexts: minutes apiece when the machine is busy.
@pytest.mark.timeout(600 + 600 * TRIALS)
def test_a_zombie_of_an_earlier_grouping_is_fenced(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    unique_topic: Callable[..., str],
    reap: list[Popen],
) -> None:
    topic = unique_topic("zombie")
    kafka_admin("A").create_topics([NewTopic(topic, PARTITIONS, 1, config={"retention.ms": "-1"})])[topic].result()
    config = write_config(tmp_path, kafka_clusters, topic)
    flow = load_config(config).flow("A->B")
    assert flow.delivery == "exactly-once"
    run_control_plane(flow)
    remote, target = f"A.{topic}", kafka_clusters.bootstrap("B")
    with SteadyProducer(kafka_clusters.bootstrap("A"), topic, RATE) as source:
        for n in range(TRIALS):
            source.allow(10**9)
            one_trial(n, config, tmp_path, target, remote, reap)
            source.allow(0)  # a pause between trials
    log = tmp_path / "final.log"
    final = spark_submit(config, log, "--flow", "A->B", "--mode", "interval")
    reap.append(final)
    ended(final, log, "the last interval run", 600)
    report = audit_flow(flow, topics=topic, timeout_s=60)
    faults = {k: report[k] for k in FAULT_KEYS}
    print(f"zombies: {TRIALS} trials, produced {source.count}, audit {faults}")
    assert report["checked"] == source.count and report["not_yet_copied"] == 0, report
    assert faults == dict.fromkeys(FAULT_KEYS, 0), report

"""Fault matrix, Spark driver: `spark-submit` of the copy job (local master) is killed with SIGKILL, its whole
process group at once, at random points while records keep arriving; the next run resumes exactly where the
committed progress says and the audit finds every record once, in its partition and in order.

`make test` runs one trial (killed mid-copy); `make test-faults` runs MIRRORFLOW_FAULT_TRIALS (10) trials.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.replication.helpers import FAULT_KEYS
from tests.spark.driver_helpers import (
    PARTITIONS,
    TRIALS,
    SteadyProducer,
    copied,
    kill_driver,
    remote_end,
    spark_submit,
    write_config,
)

from mirrorflow.config.loader import load_config
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.audit import audit_flow
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration
PER_TRIAL = 30_000  # records per trial, however long a slow machine takes to start Spark


@dataclass
class Trial:
    kill_at_s: float
    where: str  # "before writes" or "mid-copy"
    copied_by_trial: int
    leftovers: int


# Each trial starts a JVM and a SparkContext: minutes apiece when the machine is busy.
@pytest.mark.timeout(600 + 300 * TRIALS)
def test_killed_drivers_resume_exactly(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    unique_topic: Callable[..., str],
    reap: list[subprocess.Popen[bytes]],
) -> None:
    topic = unique_topic("driver")
    kafka_admin("A").create_topics([NewTopic(topic, PARTITIONS, 1, config={"retention.ms": "-1"})])[topic].result()
    config = write_config(tmp_path, kafka_clusters, topic)
    flow = load_config(config).flow("A->B")
    run_control_plane(flow)
    remote = f"A.{topic}"
    log = tmp_path / "spark-submit.log"
    rng = random.Random(topic)
    trials: list[Trial] = []
    with SteadyProducer(kafka_clusters.bootstrap("A"), topic) as source:
        for n in range(TRIALS):
            before, copied_before = remote_end(kafka_clusters.bootstrap("B"), remote), copied(flow, topic)
            source.allow(PER_TRIAL)
            proc = spark_submit(config, log, "--flow", "A->B", "--mode", "continuous", "--run-seconds", "120")
            reap.append(proc)
            started = time.monotonic()
            # The first trial always waits for the copy to write; the others also die at random earlier points.
            if n == 0 or rng.random() < 0.7:
                while proc.poll() is None and remote_end(kafka_clusters.bootstrap("B"), remote) == before:
                    assert time.monotonic() - started < 300, "the copy job wrote nothing in 300 s"
                    time.sleep(0.05)
                time.sleep(rng.uniform(0.0, 3.0))
            else:
                time.sleep(rng.uniform(0.5, 15.0))
            assert proc.poll() is None, f"the driver ended before the kill:\n{log.read_text()[-3000:]}"
            wrote = remote_end(kafka_clusters.bootstrap("B"), remote) > before
            kill_at = time.monotonic() - started
            leftovers = kill_driver(proc)
            trial = Trial(round(kill_at, 1), "mid-copy" if wrote else "before writes", 0, leftovers)
            trial.copied_by_trial = copied(flow, topic) - copied_before
            trials.append(trial)
            print(f"driver kill {n}: {trial}")
    assert any(t.where == "mid-copy" for t in trials)

    resumed_from = copied(flow, topic)
    summary_file = tmp_path / "summary.json"
    final = spark_submit(config, log, "--flow", "A->B", "--mode", "interval", "--summary-file", str(summary_file))
    reap.append(final)
    assert final.wait(timeout=600) == 0, log.read_text()[-3000:]
    summary = json.loads(summary_file.read_text())
    assert summary["records"] == source.count - resumed_from, "the run copies exactly what was left"

    report = audit_flow(flow, topics=topic, timeout_s=60)
    faults = {k: report[k] for k in FAULT_KEYS}
    print(f"driver kills: {len(trials)} trials, produced {source.count}, audit {faults}")
    assert report["checked"] == source.count and report["not_yet_copied"] == 0, report
    assert faults == dict.fromkeys(FAULT_KEYS, 0), report

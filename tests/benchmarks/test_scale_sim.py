"""`make scale-sim` keeps measuring the real start-up reads: the module attributes it replaces with synthetic
topics exist and are the ones the timed functions read through, so a moved read fails here, not in the benchmark
(it once patched `copy_range.read_to_end` long after that read had moved to `copy_setup`)."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

SCALE_SIM = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_sim.py"


@pytest.fixture(scope="module")
def scale_sim() -> ModuleType:
    """The benchmark module; it points Airflow at a throw-away home on import, which is undone for other tests."""
    saved = dict(os.environ)
    spec = importlib.util.spec_from_file_location("scale_sim_under_test", SCALE_SIM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return module


def test_the_patched_attributes_exist(scale_sim: ModuleType) -> None:
    assert scale_sim.PATCHED
    for module, name in scale_sim.PATCHED:
        assert hasattr(module, name), f"scale_sim patches {module.__name__}.{name}, which no longer exists"


def test_the_startup_scan_reads_only_the_synthetic_topics(scale_sim: ModuleType, tmp_path: Path) -> None:
    """With the patches in place no read reaches a broker: the tasks point at closed ports with a 1 s timeout, so
    a read the benchmark failed to replace would raise instead of returning the synthetic state."""
    config = tmp_path / "mm2.properties"
    config.write_text(
        "clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:2\nA->B.enabled = true\n"
    )
    flow = scale_sim.load_config(config).flow("A->B")
    _planned, tasks, _plan = scale_sim.planning(flow, 20, 10)
    assert all(t.source_topic_id and t.remote_topic_id for t in tasks), "tasks carry topic IDs as in a real run"
    found = scale_sim.startup_scan([replace(t, timeout_s=1.0) for t in tasks], 2)
    assert found["progress records per task scan (uncompacted x2)"] == 2 * len(tasks)


def test_the_tail_model_reads_every_commit_of_the_slot_in_the_tail(scale_sim: ModuleType, tmp_path: Path) -> None:
    """The steady-state model reads, for each partition sharing the measured range's head slot, one progress
    record and one map run per commit of the uncleaned tail, and fetches more bytes than the live state alone
    (the baseline it prints beside): the start-up cost the compaction lag leaves, not a model of compacted logs."""
    config = tmp_path / "mm2.properties"
    config.write_text(
        "clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:2\nA->B.enabled = true\n"
    )
    flow = scale_sim.load_config(config).flow("A->B")
    _planned, tasks, _plan = scale_sim.planning(flow, 20, 10)
    found = scale_sim.tail_scan([replace(t, timeout_s=1.0) for t in tasks], [0.5], tail_s=20.0, snapshot_s=1.0)
    mates = int(found["flow partitions per slot: mean / median (measured) / max"].split(" / ")[1])
    progress, runs, snapshots = (
        int(n.replace(",", "")) for n in found["c = 0.5/s: progress / map / metrics records read"].split(" / ")
    )
    assert (progress, runs, snapshots) == (10 * mates, 11 * mates, 10 * mates)
    baseline = found["c = 0 (live state only, baseline): MB fetched per range (x8 per Spark task)"]
    assert found["c = 0.5/s: MB fetched per range (x8 per Spark task)"] > baseline
    sparse = scale_sim.tail_scan([replace(t, timeout_s=1.0) for t in tasks], [0.5], tail_s=20.0, snapshot_s=4.0)
    assert sparse["c = 0.5/s: progress / map / metrics records read"].endswith(f" / {5 * mates}"), "one per 4 s"


def test_the_task_model_counts_each_slot_once_per_task_when_reads_are_shared(
    scale_sim: ModuleType, tmp_path: Path
) -> None:
    """Per Spark task of 8 ranges: today each range fetches its whole head slot; grouped by slot with shared reads,
    each slot the task touches is fetched once (issue 17, docs/scaling.md item 1), and the MB follow."""
    config = tmp_path / "mm2.properties"
    config.write_text(
        "clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:2\nA->B.enabled = true\n"
    )
    flow = scale_sim.load_config(config).flow("A->B")
    _planned, tasks, _plan = scale_sim.planning(flow, 400, 10)
    labels = ("0 (live state only, baseline)", "1/s")
    tail = {f"c = {label}: MB fetched per range (x8 per Spark task)": 1.0 for label in labels}
    found = scale_sim.task_scan(tasks, tail, [1.0])
    today = found["today (round-robin, a read per range): partitions' state fetched per task (median / max)"]
    shared = found["grouped by slot, shared reads: partitions' state fetched per task (median / max)"]
    assert int(shared.split(" / ")[0]) * 2 < int(today.split(" / ")[0]), (today, shared)
    assert (
        found["grouped by slot, shared reads: c = 1/s: MB fetched per task"]
        < found["today (round-robin, a read per range): c = 1/s: MB fetched per task"]
    )

"""`make scale-sim`: what 10,000 partitions and 100 flows cost Mirrorflow's planning, measured without a cluster.

Drives the real code on synthetic metadata (docs/scaling.md reports the numbers):
* discovery (`plan_topics`, MM2's topic selection) and copy planning (`copyable`, `plan_copy`) for one flow with
  `--partitions` source partitions, and the size of the `CopyTask`s Spark ships (one Spark task each);
* the XCom payloads the flow DAG's tasks push (`plan_summary`, `control_plane_summary`, `repeated_summary`, the
  copy operator's totals) and the job summary the copy job prints to the task log;
* the start-up reads of every copy task (`load_progress`, `load_segments`, `load_snapshot`), fed the records the
  state topics hold at this scale instead of a broker, in both layouts side by side: the one-partition topics of
  older versions (every task reads all of them) and today's slots (a task reads its own slot of each topic);
* Airflow's DagBag over the real `dags/` for a `--flows`-flow mm2.properties: cold, warm, one DAG (a worker's
  parse) and one data centre's `MIRRORFLOW_CLUSTERS` subset;
* optionally (`--spark`) a Spark local job of one task per partition carrying the real `CopyTask`s, doing no copy:
  the scheduling cost of that many tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
HOME = Path(tempfile.mkdtemp(prefix="mirrorflow-scale-sim-"))
os.environ.update(  # before Airflow is imported: a throw-away home, no examples, no DB access needed
    AIRFLOW_HOME=str(HOME),
    AIRFLOW__CORE__LOAD_EXAMPLES="False",
    AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
    AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{HOME}/airflow.db",
    AIRFLOW__LOGGING__LOGGING_LEVEL="WARNING",
)

from mirrorflow.airflow.reports import control_plane_summary, plan_summary, repeated_summary  # noqa: E402
from mirrorflow.airflow.spark import SUMMARY_KEYS  # noqa: E402
from mirrorflow.config.loader import load_config  # noqa: E402
from mirrorflow.config.model import Flow  # noqa: E402
from mirrorflow.core.progress import topic_id_text  # noqa: E402
from mirrorflow.replication.checkpoints import CheckpointReport, EmittedCheckpoint  # noqa: E402
from mirrorflow.replication.copy_plan import copyable, plan_copy, summarise, totals_line  # noqa: E402
from mirrorflow.replication.copy_task import CopyResult, CopyTask  # noqa: E402
from mirrorflow.replication.discovery import FlowPlan, plan_topics  # noqa: E402
from mirrorflow.replication.flow_cycle import ControlPlaneReport  # noqa: E402
from mirrorflow.replication.flow_rules import FlowRules  # noqa: E402
from mirrorflow.replication.topic_sync import CreatedTopic, TopicSyncReport  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))  # its sibling, also when a test loads this file by path
import scale_state  # noqa: E402
from scale_state import (  # noqa: E402
    MARKERS_KEPT_S,
    PATCHED,
    SNAPSHOT_INTERVAL_S,
    TAIL_S,
    startup_scan,
    tail_scan,
    task_scan,
    timed,
)

__all__ = ["PATCHED", "startup_scan", "tail_scan", "task_scan", "timed"]


def synthetic_ids(plan: FlowPlan) -> dict[str, tuple[str, str]]:
    """Topic IDs for every replicated topic (no cluster to describe): the tasks carry them, as in a real run."""
    return {
        t.topic: (topic_id_text(hash_id(t.topic)), topic_id_text(hash_id(t.remote_topic))) for t in plan.replicated()
    }


def hash_id(name: str) -> bytes:
    import hashlib

    return hashlib.blake2b(name.encode(), digest_size=16).digest()


def tree_cpu(root: psutil.Process) -> float:
    """User + system CPU seconds of a process and its live descendants (Spark's JVM and Python workers)."""
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            continue
    return total


def json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


def write_flow_config(path: Path, clusters: int, flows: int) -> Path:
    aliases = [f"dc{i:02d}" for i in range(clusters)]
    pairs = [(s, t) for s in aliases for t in aliases if s != t][:flows]
    lines = [f"clusters = {', '.join(aliases)}"]
    lines += [f"{a}.bootstrap.servers = 127.0.0.1:{9100 + i}" for i, a in enumerate(aliases)]
    lines += [f"{s}->{t}.enabled = true" for s, t in pairs]
    path.write_text("\n".join(lines) + "\nreplication.factor = 1\n")
    return path


def synthetic_metadata(topics: int, per_topic: int, source: str) -> tuple[dict[str, int], dict[str, int]]:
    """Source topics (plus the internal ones every cluster has) and the target after a first sync."""
    src = {f"orders-{i:05d}": per_topic for i in range(topics)}
    src.update({"__consumer_offsets": 50, "__transaction_state": 50, "heartbeats": 1, "mm2-offset-syncs.B.internal": 1})
    tgt = {f"{source}.{name}": n for name, n in src.items() if not name.startswith(("__", "mm2-"))}
    tgt.update({"__consumer_offsets": 50, f"{source}.checkpoints.internal": 1})
    return src, tgt


def planning(flow: Flow, partitions: int, per_topic: int) -> tuple[dict[str, Any], list[CopyTask], FlowPlan]:
    rules = FlowRules.of(flow)
    src, tgt = synthetic_metadata(partitions // per_topic, per_topic, flow.source)
    first_s, first = timed(lambda: plan_topics(rules, src, {}, flow=flow.name))
    steady_s, plan = timed(lambda: plan_topics(rules, src, tgt, flow=flow.name))
    ends = {(t.topic, p): 1_000_000 for t in plan.replicated() for p in range(t.partitions)}
    ids = synthetic_ids(plan)
    plan_s, tasks = timed(
        lambda: plan_copy(
            flow, copyable(plan), interval=True, end_offsets=ends, identities=ids, size_limits={}, state_partitions=1
        )
    )
    from pyspark import cloudpickle

    payload = [len(cloudpickle.dumps(t)) for t in tasks]
    out = {
        "source partitions": sum(src.values()),
        "replicated partitions (= Spark tasks per copy run)": len(tasks),
        "discovery, first run (all topics to create) CPU ms": round(first_s * 1000, 1),
        "discovery, steady state CPU ms": round(steady_s * 1000, 1),
        "copy planning (copyable + plan_copy) CPU ms": round(plan_s * 1000, 1),
        "CopyTask pickled bytes (median)": int(statistics.median(payload)),
        "all CopyTasks pickled MB (shipped by the driver)": round(sum(payload) / 1e6, 2),
        "topics to create on the first run": len(first.to_create()),
    }
    return out, tasks, plan


def xcom_sizes(flow: Flow, plan: FlowPlan, tasks: list[CopyTask], first_plan: FlowPlan) -> dict[str, Any]:
    created = tuple(CreatedTopic(t.remote_topic, t.topic, t.partitions, 1) for t in first_plan.to_create())
    report = ControlPlaneReport(
        flow.name,
        flow.source,
        flow.target,
        False,
        0,
        1,
        ("topics",),
        first_plan,
        TopicSyncReport(flow.name, False, created, ()),
    )
    emitted = tuple(
        EmittedCheckpoint(f"group-{g:03d}", t.remote_topic, t.partition, 100, 90, 5) for g in range(10) for t in tasks
    )
    checkpoints = CheckpointReport(flow.name, flow.source, flow.target, "A.checkpoints.internal", True, emitted=emitted)
    results = [
        CopyResult(t.topic, t.partition, t.remote_topic, 0, 1000, 1000, 1000, 1_000_000, 0, 2, 1, 40, 20_000)
        for t in tasks
    ]
    summary = summarise(results)
    totals = {k: summary[k] for k in SUMMARY_KEYS} | {"flow": flow.name, "master": "spark://m:7077", "partitions": 1}
    return {
        "discover XCom bytes": json_size(plan_summary(plan)),
        "sync_topics XCom bytes (first run, every topic created)": json_size(control_plane_summary(report)),
        "emit_checkpoints XCom bytes (10 groups x all partitions)": json_size(repeated_summary([checkpoints], 300.0)),
        "copy XCom bytes (totals only)": json_size(totals),
        "copy job totals printed to the task log, bytes": len(totals_line(summary)),
        "per-partition summary (--summary-file only), KB": round(len(json.dumps(summary, indent=2)) / 1000, 1),
    }


def dag_parsing(flows: int, clusters: int) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    config = write_flow_config(HOME / "mm2-flows.properties", clusters, flows)
    os.environ["MIRRORFLOW_CONFIG"] = str(config)
    dag_file = str(REPO / "dags" / "mirrorflow_flows.py")

    def bag() -> Any:
        return DagBag(dag_folder=dag_file)

    started = time.process_time()
    cold = bag()
    cold_s = time.process_time() - started
    assert not cold.import_errors, cold.import_errors
    warm_s, warm = timed(bag, 3)
    tasks = sum(len(d.tasks) for d in warm.dags.values())
    os.environ["_AIRFLOW_PARSING_CONTEXT_DAG_ID"] = "mirrorflow__dc00__dc01"
    one_s, one = timed(bag, 3)
    del os.environ["_AIRFLOW_PARSING_CONTEXT_DAG_ID"]
    os.environ["MIRRORFLOW_CLUSTERS"] = "dc00"
    dc_s, dc = timed(bag, 3)
    del os.environ["MIRRORFLOW_CLUSTERS"]
    load_s, _ = timed(lambda: load_config(config), 3)
    return {
        "flows in the file": len(load_config(config).flows),
        "DAGs (flows + one heartbeats DAG per target)": len(warm.dags),
        "Airflow tasks in all DAGs": tasks,
        "DagBag cold (first parse in the process) CPU ms": round(cold_s * 1000),
        "DagBag warm (the DAG processor's re-parse) CPU ms": round(warm_s * 1000),
        "of which load_config CPU ms": round(load_s * 1000),
        "one DAG (a worker's parse) CPU ms": round(one_s * 1000),
        "DAGs built for one DAG": len(one.dags),
        "MIRRORFLOW_CLUSTERS=dc00: DAGs": len(dc.dags),
        "MIRRORFLOW_CLUSTERS=dc00: warm CPU ms": round(dc_s * 1000),
    }


def spark_tasks(all_tasks: list[CopyTask], count: int, master: str) -> dict[str, Any]:
    """A job of one Spark task per CopyTask (as `run_copy_groups` runs it when slots are as many as partitions)
    that only counts its input; the first `count` tasks, extrapolated to all (the cost per task does not depend
    on the job's size)."""
    tasks = all_tasks[:count]
    from mirrorflow.spark.copy_job import spark_session

    spark = spark_session(master, "mirrorflow-scale-sim")
    try:
        sc = spark.sparkContext
        sc.parallelize([1, 2], 2).count()  # start the Python workers before timing
        me = psutil.Process()
        cpu_before, started = tree_cpu(me), time.perf_counter()
        counts = sc.parallelize(tasks, len(tasks)).mapPartitions(lambda part: [sum(1 for _ in part)]).collect()
        elapsed, cpu = time.perf_counter() - started, tree_cpu(me) - cpu_before
    finally:
        spark.stop()
    assert sum(counts) == len(tasks)
    return {
        "Spark master": master,
        "Spark tasks": len(counts),
        "job wall time s (no copy; includes waiting for the shared CPUs)": round(elapsed, 1),
        "job CPU s (driver, JVM, Python workers)": round(cpu, 1),
        "CPU per Spark task ms": round(cpu / len(counts) * 1000, 2),
        f"CPU s for all {len(all_tasks)} tasks (extrapolated)": round(cpu / len(counts) * len(all_tasks)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scale_sim", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--partitions", type=int, default=10_000, help="replicated source partitions of one flow")
    parser.add_argument("--per-topic", type=int, default=10, help="partitions per source topic")
    parser.add_argument("--flows", type=int, default=100, help="enabled flows of the DAG-parsing config")
    parser.add_argument("--clusters", type=int, default=11, help="clusters of the DAG-parsing config")
    parser.add_argument("--dirty", type=int, default=10, help="uncompacted versions per progress key")
    parser.add_argument(
        "--commit-rates",
        default="0.1,1,10",
        help="exactly-once commits a second per partition for the uncleaned-tail model, comma-separated "
        "(default %(default)s; 1/s is a loaded partition); the live state alone is always measured beside them",
    )
    parser.add_argument("--tail-seconds", type=float, default=TAIL_S, help="uncleaned tail (default %(default)s)")
    parser.add_argument(
        "--snapshot-seconds",
        type=float,
        default=SNAPSHOT_INTERVAL_S,
        help="metrics snapshot interval of a busy partition (default %(default)s)",
    )
    parser.add_argument(
        "--markers-seconds",
        type=float,
        default=MARKERS_KEPT_S,
        help="how long the cleaner keeps commit markers, delete.retention.ms (default %(default)s)",
    )
    parser.add_argument(
        "--state-partitions-max", type=int, default=scale_state.STATE_CAP, help="mirrorflow.state.partitions.max"
    )
    parser.add_argument("--spark", default="local[2]", help="master of the task-count job; 'none' skips it")
    parser.add_argument("--spark-tasks", type=int, default=2000, help="Spark job: the first N tasks (0: all)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    scale_state.STATE_CAP = args.state_partitions_max
    config = HOME / "mm2-one.properties"
    config.write_text(
        "clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:2\nA->B.enabled = true\n"
    )
    flow = load_config(config).flow("A->B")
    results: dict[str, dict[str, Any]] = {}

    def report(section: str, values: dict[str, Any]) -> None:
        results[section] = values
        print(f"\n{section}")
        for key, value in values.items():
            print(f"  {key:<62} {value}", flush=True)

    planned, tasks, plan = planning(flow, args.partitions, args.per_topic)
    report("planning (one flow)", planned)
    src, _ = synthetic_metadata(args.partitions // args.per_topic, args.per_topic, flow.source)
    first_plan = plan_topics(FlowRules.of(flow), src, {}, flow=flow.name)
    report("XCom and logs", xcom_sizes(flow, plan, tasks, first_plan))
    report("copy task start-up scan", startup_scan(tasks, args.dirty))
    rates = [float(r) for r in args.commit_rates.split(",") if r.strip()]
    tail = tail_scan(tasks, rates, args.tail_seconds, args.snapshot_seconds, args.markers_seconds)
    report("copy task start-up in steady state (settled head, uncleaned tail)", tail)
    report("Spark task start-up (8 ranges): a read per range vs grouped by slot, shared", task_scan(tasks, tail, rates))
    report("DAG parsing", dag_parsing(args.flows, args.clusters))
    if args.spark != "none":
        report("Spark", spark_tasks(tasks, args.spark_tasks or len(tasks), args.spark))
    report("machine", {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()[0]})
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

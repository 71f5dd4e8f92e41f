"""Airflow's share of a run's fixed cost: `dag.test()` of one flow DAG (every task: discovery, topic/config/ACL
sync, the `spark-submit` copy, checkpoints, group sync, heartbeats) for a flow with nothing left to copy.

Airflow must read its settings before it is first imported, so the DAG runs in a child process: `main` there
prepares a private home (SQLite), runs the DAG twice and prints the seconds of each run as JSON. The first run
includes Airflow's own first imports in that process; the second is what each later run costs. Under a real
scheduler every task also starts its own task process, which `dag.test()` (one process) leaves out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import Overhead


def airflow_overhead(config: Path, flow: str, copy_seconds: float | None, timeout_s: float = 900) -> list[Overhead]:
    """Two `dag.test()` runs of `flow`'s DAG (`config` must put that flow in interval mode)."""
    with tempfile.TemporaryDirectory(prefix="mirrorflow-bench-airflow-") as home:
        command = [sys.executable, __file__, "--config", str(config), "--flow", flow, "--home", home]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"dag.test() failed ({done.returncode}):\n{(done.stderr or done.stdout)[-2000:]}")
    first, second = json.loads(done.stdout.strip().splitlines()[-1])
    what = "Airflow dag.test() of the flow DAG, nothing to copy (all tasks, copy by spark-submit local[*]), {} run"
    return [Overhead(what.format("first"), first, copy_seconds), Overhead(what.format("second"), second, copy_seconds)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--flow", required=True)
    parser.add_argument("--home", type=Path, required=True)
    args = parser.parse_args()
    from mirrorflow.airflow.dag_ids import flow_dag_id
    from mirrorflow.airflow.embedded import prepare_home, run_flow_dags
    from mirrorflow.config.loader import load_config

    prepare_home(args.home, args.config)
    flow = load_config(args.config).flow(args.flow)
    dag_id = flow_dag_id(flow.source, flow.target)
    seconds = []
    for _ in range(2):
        started = time.perf_counter()
        (result,) = run_flow_dags(only={dag_id: dag_id})
        seconds.append(time.perf_counter() - started)
        if result.state != "success":
            raise SystemExit(f"{dag_id}: {result.state} {result.task_states}")
    print(json.dumps(seconds))


if __name__ == "__main__":
    main()

"""How much of a Spark cluster one flow's copy asks for, and what its timeout says when it fires.

On a standalone master an application without `spark.cores.max` takes every free core, and applications queue
first in, first out: with two flows, the first copy would hold the whole cluster for its run and the second
would wait. So the copy task always caps its cores there. Its default is what the copy can use: one core per
Spark task, and the copy runs ceil(copyable partitions / `mirrorflow.copy.partitions.per.task`) tasks
(`copy_plan.spread`), at least one; a continuous copy puts its quiet partitions (nothing produced or copied
during the last run, `copy_quiet`) in one task and counts only the busy ones per task, so an idle flow holds
one core of the cluster for its run. Partitions are known only at run time (topics come and grow), so the
count is read when the task runs, from the clusters' metadata (the discovery the job itself repeats).

What spark-submit gets, lowest precedence first (docs/airflow.md, "Spark sizing"):
1. the operator's own `conf=` argument (a hand-written DAG's);
2. the flow's `mirrorflow.spark.conf.*` pass-through;
3. the sizing keys: `spark.executor.memory`, `spark.driver.memory`, and on a standalone master `spark.cores.max`;
4. what Mirrorflow needs to run the job at all (`packaging.cluster_conf()` on a standalone master).
Loading the config refuses a pass-through key that collides with 3 or 4 (config/spark_conf.py), so the order
only matters for a hand-written `conf=`.

Local masters have no cores to share (`local[N]` is the size); YARN and Kubernetes size an application by
executors, not by a total: pass `spark.executor.instances` and `spark.executor.cores`, or
`spark.dynamicAllocation.maxExecutors`, through `mirrorflow.spark.conf.*`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from mirrorflow.config.keys import is_secret_key
from mirrorflow.config.model import Flow
from mirrorflow.config.spark_conf import TOTAL_CORES_KEY
from mirrorflow.replication.round_claims import rounds_apply
from mirrorflow.spark.packaging import cluster_conf, is_standalone

log = logging.getLogger(__name__)

INTERVAL_TIMEOUT_KEY = "mirrorflow.copy.interval.timeout.seconds"


def tasks_needed(partitions: int, per_task: int) -> int:
    """The Spark tasks a copy of `partitions` runs when each copies up to `per_task` of them: at least one."""
    return max(1, -(-partitions // max(per_task, 1)))


class CopyLoad(NamedTuple):
    """The partitions a copy would copy now, and how many of them are quiet (`copy_quiet`: continuous only)."""

    partitions: int
    quiet: int = 0


class _Copied(NamedTuple):
    topic: str
    partition: int
    remote_topic: str


def cores_needed(load: CopyLoad, per_task: int) -> int:
    """One core per Spark task the copy runs: busy partitions `per_task` to a task, and every quiet partition
    in one task of its own (`copy_plan.spread_quiet`), so an idle flow holds one core."""
    if not load.quiet:
        return tasks_needed(load.partitions, per_task)
    busy = load.partitions - load.quiet
    return (tasks_needed(busy, per_task) if busy > 0 else 0) + 1


def copy_partitions(flow: Flow, quiet_after_s: float | None = None) -> CopyLoad:
    """The source partitions the copy would copy now (replicated topics whose remote topic exists), and with
    `quiet_after_s` (a continuous run's length) how many of them are quiet. The copy job looks again when it
    groups its ranges: a partition that woke up since shares the cores counted here."""
    from mirrorflow.airflow.connections import with_connections
    from mirrorflow.replication.copy_plan import copyable
    from mirrorflow.replication.copy_quiet import quiet_partitions
    from mirrorflow.replication.discovery import discover
    from mirrorflow.replication.flow_clients import FlowClients

    flow = with_connections(flow)
    with FlowClients(flow) as clients:
        sources = copyable(discover(flow, clients))
    copied = [_Copied(s.topic, p, s.remote_topic) for s in sources for p in range(s.partitions)]
    quiet = quiet_partitions(flow, copied, quiet_after_s) if quiet_after_s is not None and copied else set()
    return CopyLoad(len(copied), len(quiet))


def submit_conf(
    flow: Flow,
    master: str,
    partitions: Callable[[Flow], int | CopyLoad] | None = None,
    *,
    quiet_after_s: float | None = None,
) -> dict[str, str]:
    """The `--conf` settings of the flow's copy on `master` (steps 2-4 of the module's precedence).

    `partitions` (default `copy_partitions`, with `quiet_after_s` for a continuous copy) is called only when
    the cores must be derived (a standalone master, no explicit key)."""
    conf = flow.spark_submit_conf()
    hide_secrets(conf)
    if flow.spark_executor_memory:
        conf["spark.executor.memory"] = flow.spark_executor_memory
    if flow.spark_driver_memory:
        conf["spark.driver.memory"] = flow.spark_driver_memory
    if master.strip().startswith("local"):
        conf.setdefault("spark.ui.enabled", "false")  # nobody reads a local run's UI (copy_job.in_process_conf)
    if is_standalone(master):
        count = partitions or (lambda f: copy_partitions(f, quiet_after_s))
        cores = standalone_cores(flow, count)
        rounds = rounds_apply(flow.delivery, flow.copy_round_seconds, flow.copy_run_seconds)
        if flow.copy_mode == "continuous" and rounds and flow.spark_total_executor_cores is None:
            cores *= 2  # two rounds' tasks run at once while they hand over (replication/copy_rounds.py)
        conf["spark.cores.max"] = str(cores)
        conf.update(cluster_conf())
    elif flow.spark_total_executor_cores is not None and not master.strip().startswith("local"):
        log.warning(
            "flow %s: %s applies to Spark standalone masters only, not %s; size the copy with "
            "mirrorflow.spark.conf.spark.executor.instances and spark.executor.cores (or "
            "spark.dynamicAllocation.maxExecutors)",
            flow.name,
            TOTAL_CORES_KEY,
            master,
        )
    return conf


def hide_secrets(conf: dict[str, str]) -> None:
    """Register secret-looking values with Airflow's log masker: the provider logs the whole spark-submit
    command and masks only keys naming a secret or password (not `spark.hadoop.fs.s3a.access.key`)."""
    from airflow.sdk.log import mask_secret

    for key, value in conf.items():
        if is_secret_key(key):
            mask_secret(value, key)


def standalone_cores(flow: Flow, partitions: Callable[[Flow], int | CopyLoad] | None = None) -> int:
    """`spark.cores.max` of the flow's copy: the explicit key, or one core per Spark task the copy needs
    (`cores_needed`)."""
    if flow.spark_total_executor_cores is not None:
        log.info("flow %s: spark.cores.max = %d (%s)", flow.name, flow.spark_total_executor_cores, TOTAL_CORES_KEY)
        return flow.spark_total_executor_cores
    found = (partitions or copy_partitions)(flow)
    load = found if isinstance(found, CopyLoad) else CopyLoad(found)
    cores = cores_needed(load, flow.copy_partitions_per_task)
    log.info(
        "flow %s: spark.cores.max = %d (%d copyable partitions, %d of them quiet and sharing one core, "
        "mirrorflow.copy.partitions.per.task = %d; set %s to choose)",
        flow.name,
        cores,
        load.partitions,
        load.quiet,
        flow.copy_partitions_per_task,
        TOTAL_CORES_KEY,
    )
    return cores


def timeout_message(flow_name: str, mode: str, seconds: float, master: str | None) -> str:
    """What a copy that hit its `execution_timeout` tells the operator: what happened, the likely cause, the fix."""
    limit = INTERVAL_TIMEOUT_KEY if mode == "interval" else "mirrorflow.copy.run.seconds plus a margin"
    text = (
        f"flow {flow_name}: the {mode} copy did not finish within {seconds:g} s ({limit}); Airflow stopped the task "
        "and spark-submit was killed, so its Spark application no longer holds cores. "
    )
    if master is None or is_standalone(master):
        text += (
            "On a shared Spark standalone cluster it most likely waited for cores held by other applications (the "
            "master's UI lists it as WAITING): cap every application's cores (spark.cores.max, here "
            f"{TOTAL_CORES_KEY}; spark.deploy.defaultCores on the master) or add workers. "
        )
    else:
        text += f"Check whether the Spark cluster ({master}) gave it executors. "
    if mode == "interval":
        text += f"If the copy was merely slow (a backlog), raise {INTERVAL_TIMEOUT_KEY}. "
    return text + "The next try resumes from the positions the copy committed."

"""The `copy` task: `spark-submit spark_jobs/mirrorflow_copy.py CONFIG --flow A->B` on the `mirrorflow_spark`
connection, never on a master nobody chose.

The Spark provider falls back to `--master yarn` when its connection is missing, with one log line. So the
master is settled here, at run time, before the hook is built:
* the Airflow connection `mirrorflow_spark` when it exists (a deployment's cluster: YARN, Kubernetes, standalone);
* otherwise the flow's `mirrorflow.spark.master` (default `local[*]`), installed for this task process as
  `AIRFLOW_CONN_MIRRORFLOW_SPARK` and removed afterwards.
A flow that sets `mirrorflow.spark.master` explicitly and a connection that points elsewhere is an error.

With a local master the job runs on the worker: `spark-submit` and the executors' Python come from the
interpreter running Airflow (pip-installed pyspark finds SPARK_HOME through that `bin/`). On a standalone
cluster (`spark://...`) the driver still runs here (client mode, the only one Spark offers Python there) and the
executors get the package as `--py-files` and a packed env as `--archives` (`mirrorflow.spark.packaging`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import _mask_sensitive_values
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from mirrorflow.airflow.copy_app_task import leased, revoke_lease, supervise, with_run_seconds
from mirrorflow.airflow.embedded import REPO
from mirrorflow.airflow.spark_sizing import submit_conf, timeout_message
from mirrorflow.airflow.tasks import fail_fast, find_flow, load_flow, skip_if_paused
from mirrorflow.config.overrides import CLUSTER_SETTINGS_ENV
from mirrorflow.config.providers import secrets_in_clear
from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.replication.copy_app import config_id
from mirrorflow.replication.flow_cycle import STATE_DIR_ENV, state_root_override
from mirrorflow.replication.job_summary import COUNTS, collect_summary, totals
from mirrorflow.spark.packaging import ARCHIVE_ALIAS, is_standalone, package_py_files, packed_env
from mirrorflow.spark.quiet import quiet_driver_conf

SPARK_CONN_ID = "mirrorflow_spark"
SUMMARY_KEYS = COUNTS
SLOT_KEYS = ("spark_tasks", "idle_spark_tasks", "idle_partitions", "quiet_partitions")
"""What the run's Spark slots did: a continuous copy holds each task's core for the whole run, busy or not (the
partitions found quiet at its start share one task: `replication/copy_quiet.py`)."""


def conn_env_var(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def is_local(master: str) -> bool:
    return master.strip().startswith("local")


def driver_is_here(master: str) -> bool:
    """Whether the job's driver runs in this task's process tree (so its summary file can be read back)."""
    return is_local(master) or is_standalone(master)


def cluster_deploy(conn_id: str = SPARK_CONN_ID, operator_mode: str | None = None) -> bool:
    """Whether the driver runs inside the cluster, as the provider decides it: the operator's own `deploy_mode=`
    (a hand-written DAG's), else the Spark connection's `deploy-mode` extra (a flow cannot set
    `spark.submit.deployMode`: `config/spark_conf.py`)."""
    mode = operator_mode or _connection_deploy_mode(conn_id) or "client"
    return str(mode).strip().lower() == "cluster"


def _connection_deploy_mode(conn_id: str) -> str | None:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        extra = BaseHook.get_connection(conn_id).extra_dejson
    except AirflowNotFoundException:
        return None
    return str(extra.get("deploy-mode") or "") or None


def refuse_secrets_in_clear(config_path: str, flow: str) -> None:
    """UsageError when the config, about to be shipped with `--files`, writes a secret in clear: Spark copies
    it to the cluster's storage (YARN's staging directory; on Kubernetes `spark.kubernetes.file.upload.path`,
    which it never cleans). Names keys and lines, never values."""
    found = secrets_in_clear(config_path)
    if found:
        where = ", ".join(f"{key} (line {line})" for key, line in found)
        raise UsageError(
            f"the copy of flow {flow} runs in deploy-mode cluster, so {config_path} is copied to the cluster's "
            f"storage, but it writes secrets in clear: {where}. Write them as references resolved where the driver "
            "runs: ${env:VAR} (on Kubernetes from a Secret: mirrorflow.spark.conf.spark.kubernetes.driver."
            "secretKeyRef.VAR = <secret>:<key>) or ${file:/path:key} on the driver's machine"
        )


def connection_master(conn: Any) -> str:
    """The master a Spark connection stands for, read as the Spark provider's hook reads it."""
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = str(conn.host)
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master


def existing_master(conn_id: str) -> str | None:
    """The master of Airflow connection `conn_id`, or None when no secrets backend defines it."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return connection_master(BaseHook.get_connection(conn_id))
    except AirflowNotFoundException:
        return None


@contextmanager
def spark_connection(conn_id: str, flow_master: str, explicit: bool, flow: str) -> Iterator[str]:
    """Make `conn_id` resolvable for the duration of the block; yields the master the job will use."""
    master = existing_master(conn_id)
    if master is not None:
        if explicit and master != flow_master:
            raise UsageError(
                f"flow {flow} sets mirrorflow.spark.master = {flow_master} but the Airflow connection "
                f"{conn_id!r} points at {master}; remove one of them"
            )
        yield master
        return
    name = conn_env_var(conn_id)
    os.environ[name] = json.dumps({"conn_type": "spark", "host": flow_master})
    try:
        yield flow_master
    finally:
        os.environ.pop(name, None)


def local_env(bin_dir: Path | None = None) -> dict[str, str]:
    """PATH and PySpark's Python for a local master: the interpreter running this task."""
    bin_dir = bin_dir or Path(sys.executable).parent
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
    }


def run_started_args(context: Any) -> list[str]:
    """`--run-started-ms` of the DAG run's start (the scheduler's clock, one for every try of the task): overlapping
    continuous runs are ordered by it (`copy_claims`), so an Airflow retry of an older run's copy stays older than
    the run that started after it. None without a DAG run (the job then takes its own start). The try number is
    for rounds only (`replication/copy_rounds.py`): they order a retry's claims after those of the try it
    replaces; a run without rounds claims at the DAG run's start in every try."""
    dag_run = context.get("dag_run") if hasattr(context, "get") else None
    started = getattr(dag_run, "start_date", None)
    if started is None:
        return []
    ti = context.get("ti")
    tried = int(getattr(ti, "try_number", 0) or 0)
    return ["--run-started-ms", str(int(started.timestamp() * 1000)), "--try-number", str(tried)]


class MirrorflowCopyOperator(SparkSubmitOperator):
    """SparkSubmitOperator for one flow's copy; returns the job's totals (no per-partition lines) to XCom."""

    def __init__(
        self,
        *,
        application: str,
        config_path: str,
        flow_name: str,
        clusters: Sequence[str] | None,
        copy_mode: str,
        run_seconds: int,
        spark_master: str,
        explicit_master: bool,
        **kwargs: Any,
    ) -> None:
        args = [config_path, "--flow", flow_name, "--mode", copy_mode]
        if copy_mode == "continuous":
            args += ["--run-seconds", str(run_seconds)]
        if clusters:
            args += ["--clusters", *clusters]
        super().__init__(
            application=application,
            application_args=args,
            conn_id=SPARK_CONN_ID,
            name=f"mirrorflow-copy-{flow_name.replace('->', '-')}",
            **kwargs,
        )
        self.config_path = config_path
        self.flow_name = flow_name
        self.clusters = list(clusters) if clusters else None
        self.spark_master = spark_master
        self.explicit_master = explicit_master
        self._master_seen: str | None = None
        self._submitted = False  # whether spark-submit was started (on_kill has something to kill)
        self.binary = kwargs.get("spark_binary") or "spark-submit"
        self.deploy_mode_argument: str | None = kwargs.get("deploy_mode")
        self.copy_mode = copy_mode
        self.run_seconds = run_seconds

    def execute(self, context: Any) -> dict[str, Any] | None:  # type: ignore[override]  # the totals go to XCom
        from airflow.sdk.exceptions import AirflowTaskTimeout

        try:
            return fail_fast(self._submit)(context)  # type: ignore[no-any-return]
        except AirflowTaskTimeout as err:  # Airflow's own says only "Timeout, PID: n"
            self.on_kill()  # Airflow calls it too (task_runner); stopping first makes the message true either way
            seconds = self.execution_timeout.total_seconds() if self.execution_timeout else 0.0
            master = self._master_seen
            raise AirflowTaskTimeout(timeout_message(self.flow_name, self.copy_mode, seconds, master)) from err

    def on_kill(self) -> None:
        """Kill spark-submit, and so free its application's cores; nothing to kill before it was started (the
        provider's own on_kill would first build a hook, on a connection this task may have removed)."""
        if self._submitted:
            super().on_kill()

    def _submit(self, context: Any) -> dict[str, Any] | None:
        ti = context.get("ti") if hasattr(context, "get") else None
        if ti is not None and int(getattr(ti, "try_number", 1) or 1) > 1:
            # Airflow retries only the failed task: the pause checks of the run's earlier tasks are old news, and
            # a failover may have paused the flow since (a copy now would write behind the moved clients).
            skip_if_paused(load_flow(self.config_path, self.flow_name, self.clusters))
        if not Path(self.application).is_file():
            raise MirrorflowError(f"the copy job {self.application} does not exist; check the Mirrorflow checkout")
        base_args = list(self.application_args or [])
        base_env = dict(self.env_vars or {})
        base_ship = (self.py_files, self.conf)
        base_files = self.files
        with (
            spark_connection(SPARK_CONN_ID, self.spark_master, self.explicit_master, self.flow_name) as master,
            tempfile.TemporaryDirectory(prefix="mirrorflow-copy-") as tmp,
        ):
            self._master_seen = master
            in_cluster = cluster_deploy(SPARK_CONN_ID, self.deploy_mode_argument)
            if in_cluster and driver_is_here(master):
                raise UsageError(
                    f"the copy of flow {self.flow_name} is to run in deploy-mode cluster on {master}, but Spark runs "
                    "a Python application's driver in the cluster on YARN and Kubernetes only; remove deploy-mode "
                    f"from the Airflow connection {SPARK_CONN_ID} (or the operator's deploy_mode)"
                )
            flow = find_flow(self.config_path, self.flow_name, self.clusters)
            quiet_after = float(self.run_seconds) if self.copy_mode == "continuous" else None
            self.conf = {**(base_ship[1] or {}), **submit_conf(flow, master, quiet_after_s=quiet_after)}
            summary_file = Path(tmp) / "summary.json" if driver_is_here(master) else None
            summary_key = None if summary_file else f"{self.flow_name}/{uuid.uuid4().hex}"
            self.application_args = [*base_args, "--master", master, *run_started_args(context)]
            if summary_file is not None:
                self.application_args += ["--summary-file", str(summary_file)]
            else:  # the driver may run in the cluster: its totals come back through the target cluster
                self.application_args += ["--summary-key", str(summary_key)]
            if in_cluster:  # the driver runs in the cluster: the config goes with it
                refuse_secrets_in_clear(self.config_path, self.flow_name)
                self.files = ",".join(filter(None, [base_files, self.config_path]))
                self.application_args[0] = Path(self.config_path).name
            self.env_vars = {**base_env, **self._job_env(master)}
            since_ms = int(time.time() * 1000)
            if driver_is_here(master):
                self.conf = quiet_driver_conf(self.conf)  # Spark's banner and INFO lines off the task log
            if leased(flow, self.copy_mode, float(self.run_seconds), driver_is_here(master), in_cluster):
                try:
                    return self._supervise(context, master, [*base_args, "--master", master], base_ship[0])
                finally:
                    self.application_args, self.env_vars = base_args, base_env
                    self.py_files, self.conf, self.files = (*base_ship, base_files)
            if self.copy_mode == "continuous" and flow.delivery == "exactly-once":
                by = f"DAG run {getattr(context.get('dag_run'), 'run_id', '-')}"
                revoke_lease(load_flow(self.config_path, self.flow_name, self.clusters), by, self.log)
            if is_standalone(master):
                self.py_files = ",".join(filter(None, [base_ship[0], str(package_py_files(Path(tmp)))]))
                # `spark.archives` is `--archives` (the provider keeps its own argument private).
                self.conf["spark.archives"] = f"{packed_env()}#{ARCHIVE_ALIAS}"
            self._submitted = True
            try:
                super().execute(context)
            finally:
                self.application_args, self.env_vars = base_args, base_env
                self.py_files, self.conf, self.files = (*base_ship, base_files)
            if summary_key is not None:
                summary = collect_summary(
                    load_flow(self.config_path, self.flow_name, self.clusters), summary_key, since_ms
                )
            elif summary_file is not None and summary_file.is_file():
                summary = totals(json.loads(summary_file.read_text()))
            else:
                summary = None
            if summary is None:
                return None
        return self._result(summary, master)

    def _result(self, summary: dict[str, Any], master: str) -> dict[str, Any]:
        """The job's totals for XCom, and the log's word on slots held by idle partitions."""
        result = {key: summary[key] for key in (*SUMMARY_KEYS, *SLOT_KEYS) if key in summary}
        result.update(flow=self.flow_name, master=master, partitions=summary.get("partitions", 0))
        self.log.info("flow %s: copied %s", self.flow_name, result)
        if result.get("idle_spark_tasks"):
            self.log.info(
                "flow %s: %s of %s Spark tasks copied nothing this run, holding their slots (idle partitions: "
                "%s); partitions quiet at the next run's start share one task, and more partitions per task "
                "(mirrorflow.copy.partitions.per.task) frees slots",
                self.flow_name,
                result["idle_spark_tasks"],
                result.get("spark_tasks"),
                result.get("idle_partitions"),
            )
        return result

    def _supervise(self, context: Any, master: str, args: list[str], py_files: str | None) -> dict[str, Any]:
        """A leased application (`airflow/copy_app_task.py`): adopt the flow's running one or submit a detached
        one, and watch it until this DAG run's end; returns this run's totals."""
        flow = load_flow(self.config_path, self.flow_name, self.clusters)
        config = config_id(self.config_path, flow, self.clusters, master)
        dag_run, ti = context.get("dag_run"), context.get("ti")
        started = getattr(dag_run, "start_date", None)
        begin_ms = int(started.timestamp() * 1000) if started is not None else int(time.time() * 1000)
        by = f"DAG run {getattr(dag_run, 'run_id', '-')} try {getattr(ti, 'try_number', 0)}"

        def command(app: str, seconds: float, where: Path, started_ms: int) -> list[str]:
            ids = ["--app-id", app, "--config-id", config, "--run-started-ms", str(started_ms)]
            self.application_args = [*with_run_seconds(args, seconds), *ids]
            if is_standalone(master):
                self.py_files = ",".join(filter(None, [py_files, str(package_py_files(where))]))
                self.conf = {**(self.conf or {}), "spark.archives": f"{packed_env()}#{ARCHIVE_ALIAS}"}
            return list(self._get_hook()._build_spark_submit_command(self.application))

        summary = supervise(
            flow,
            config=config,
            run_end_ms=begin_ms + int(self.run_seconds * 1000),
            by=by,
            command=command,
            env=dict(self.env_vars or {}),
            mask=_mask_sensitive_values,
            log=self.log,
        )
        result = {key: summary[key] for key in (*SUMMARY_KEYS, "spark_tasks", "paused") if key in summary}
        result.update(flow=self.flow_name, master=master, app=summary["app"], adopted=summary["adopted"])
        self.log.info("flow %s: copy application %s copied %s", self.flow_name, summary["app"], result)
        return result

    def _job_env(self, master: str) -> dict[str, str]:
        env: dict[str, str] = {}
        if driver_is_here(master):
            env.update(local_env())
            if not is_local(master):
                del env["PYSPARK_PYTHON"]  # executors run the shipped env (cluster_conf)
            if shutil.which(self.binary, path=env["PATH"]) is None:
                raise MirrorflowError(
                    f"{self.binary} is not on PATH ({env['PATH']}); install pyspark into Airflow's environment "
                    "or put Spark's bin directory on PATH"
                )
        from mirrorflow.airflow.connections import cluster_settings

        root = state_root_override(REPO)  # pause markers outside Kafka: the driver's rounds read the same place
        if root is not None:
            env[STATE_DIR_ENV] = str(root.resolve())
        settings = cluster_settings(find_flow(self.config_path, self.flow_name, self.clusters))
        if settings:
            if not driver_is_here(master):
                raise UsageError(
                    f"flow {self.flow_name} takes credentials from Airflow connections, which Mirrorflow hands to "
                    "the Spark job through the driver's environment, so only where the driver runs in this task "
                    f"(local and spark:// masters); on {master} Spark would pass them as configuration, shown in "
                    "its UI and logs. Give the cluster the credentials through mm2.properties (${env:...} or "
                    "${file:...} references resolved on the driver) instead; on Kubernetes, from a Secret: "
                    '`<alias>.sasl.jaas.config = ...password="${env:MF_PW}";` with '
                    "`A->B.mirrorflow.spark.conf.spark.kubernetes.driver.secretKeyRef.MF_PW = <secret>:<key>`"
                )
            # The driver runs in this task (client mode) and reads them from its environment; executors get the
            # clients it builds inside their copy ranges, as they get credentials written in mm2.properties.
            env[CLUSTER_SETTINGS_ENV] = json.dumps(settings)
        return env

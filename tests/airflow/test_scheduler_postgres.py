"""A flow DAG under a real Airflow scheduler: PostgreSQL metadata DB, LocalExecutor, no `dag.test()`.

Debian's PostgreSQL runs as the `postgres` user (`mirrorflow.local.postgres`); a fresh AIRFLOW_HOME points at
it; `airflow db migrate`, then `airflow dag-processor`, `airflow scheduler` and the Execution API
(`airflow api-server --apps execution`, which LocalExecutor's task processes report to) run as subprocesses
with their own environment, so the session-wide Airflow settings of tests/conftest.py stay untouched. The run
is triggered with `airflow dags trigger`, and the records must arrive at B. Then, on the same Airflow, a failover
and a failback run as triggered DAG runs, each task in its own LocalExecutor process: the flow DAG must read
paused in Airflow's REST API after the failover and unpaused after the failback (the runbook reaches the API
through the `mirrorflow_airflow_api` connection, as a deployment does).

Cost on 2 cores: ~3-5 min (PostgreSQL ~5 s, migrate ~20 s, processes ~30 s, one run with spark-submit local[2],
two runbook runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.airflow.notify_probe import NOTIFY_FILE_ENV
from tests.kafka_helpers import commit_when_ready

from mirrorflow.airflow.embedded import airflow_environment
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.postgres import LocalPostgres
from mirrorflow.local.process import free_ports, tail
from mirrorflow.local.properties import mm2_config_text

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent
DAG_ID = "mirrorflow__A__B"
REVERSE_DAG_ID = "mirrorflow__B__A"
API_USER, API_PASSWORD = "admin", "scheduler-api-password"
RECORDS = 90
RUN_TIMEOUT_S = 900.0
DEADLINE_S = 3
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Airflow:
    env: dict[str, str]
    home: Path
    postgres: LocalPostgres
    logs: list[Path]

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "airflow"), *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        connection = psycopg2.connect(host="127.0.0.1", port=self.postgres.port, user="postgres", dbname="airflow")
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return list(cursor.fetchall())
        finally:
            connection.close()

    def api(self, method: str, path: str, body: dict[str, Any] | None = None, token: str | None = None) -> Any:
        """Airflow's REST API as the operator's user (the api-server this fixture runs serves it)."""
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        data = None if body is None else json.dumps(body).encode()
        url = f"http://127.0.0.1:{self.env['AIRFLOW__API__PORT']}{path}"
        request = urllib.request.Request(url, data, headers, method=method)
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)

    def dag_paused(self, dag_id: str) -> bool:
        token = self.api("POST", "/auth/token", {"username": API_USER, "password": API_PASSWORD})["access_token"]
        return bool(self.api("GET", f"/api/v2/dags/{dag_id}", token=token)["is_paused"])

    def diagnostics(self) -> str:
        return "\n".join(f"== {log.name}\n{tail(log, 30)}" for log in self.logs)


def write_config(path: Path, clusters: LocalClusters, topic: str) -> Path:
    path.write_text(
        mm2_config_text({a: clusters.bootstrap(a) for a in ("A", "B")}) + "A->B.enabled = true\n"
        f"A->B.topics = {topic}\n"
        f"A->B.groups = {topic}-.*\n"
        # the failover's way back: its DAG exists and is armed (unpaused) by the runbook
        "B->A.enabled = true\nB->A.heartbeats.replication.enabled = false\nB->A.mirrorflow.copy.mode = interval\n"
        "A->B.heartbeats.replication.enabled = false\n"
        "A->B.mirrorflow.copy.mode = interval\n"
        "A->B.mirrorflow.spark.master = local[2]\n"
        "mirrorflow.schedule = none\n"  # runs only when triggered
        # The run takes longer than this: the scheduler must raise the flow's DeadlineAlert and run its callback.
        f"A->B.mirrorflow.airflow.deadline.seconds = {DEADLINE_S}\n"
        "A->B.mirrorflow.airflow.deadline.notifier = tests.airflow.notify_probe.record_deadline\n"
    )
    return path


def airflow_env(home: Path, config: Path, postgres: LocalPostgres) -> dict[str, str]:
    """A clean environment: none of the session's AIRFLOW_* settings, all of this Airflow's."""
    api_port, log_port, trigger_log_port = free_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(airflow_environment(home, config, parallelism=2))
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({API_USER: API_PASSWORD}))
    api_conn = {"conn_type": "http", "host": f"http://127.0.0.1:{api_port}", "login": API_USER}
    env.update(
        {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url,
            # Airflow derives an asyncpg URL for its async engine; asyncpg is not installed and none of the
            # processes here need the async engine (the REST "wait for a DAG run" endpoint and multi-team do).
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": "",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            # Every process must sign and check task tokens with the same secret.
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            # The 5 s default read timeout of task processes on the Execution API fails tasks on a busy machine.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_port),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_log_port),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            NOTIFY_FILE_ENV: str(home / "deadline.jsonl"),  # the deadline callback's evidence
            # The REST API (and its token endpoint) for the runbook's native pause, as one admin user.
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{API_USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW_CONN_MIRRORFLOW_AIRFLOW_API": json.dumps({**api_conn, "password": API_PASSWORD}),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")])),
        }
    )
    return env


def start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A process in its own session (its LocalExecutor workers and spark-submit JVMs join it); SIGTERM'd
    by Linux if pytest dies first."""
    with log.open("ab") as out:
        return subprocess.Popen(
            ["setpriv", "--pdeathsig", "TERM", "--", *command],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process group we started, then SIGKILL what is left after 30 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + 30
        for proc in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))


@pytest.fixture
def airflow_on_postgres(
    tmp_path: Path, kafka_clusters: LocalClusters, unique_topic: Callable[..., str]
) -> Iterator[tuple[Airflow, str]]:
    topic = unique_topic("scheduler")
    config = write_config(tmp_path / "mm2.properties", kafka_clusters, topic)
    postgres = LocalPostgres().start()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        home = tmp_path / "airflow-home"
        home.mkdir()
        airflow = Airflow(airflow_env(home, config, postgres), home, postgres, [])
        migrated = airflow.cli("db", "migrate")
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        airflow_bin = str(BIN / "airflow")
        for name, command in (
            ("api-server", [airflow_bin, "api-server", "--apps", "all", "--workers", "1"]),
            ("dag-processor", [airflow_bin, "dag-processor"]),
            ("scheduler", [airflow_bin, "scheduler"]),
        ):
            log = tmp_path / f"{name}.log"
            airflow.logs.append(log)
            processes.append(start(command, airflow.env, log))
        yield airflow, topic
    finally:
        stop(processes)
        postgres.stop()


def wait_for(what: str, airflow: Airflow, probe: Callable[[], Any], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}\n{airflow.diagnostics()}")
        time.sleep(2)


def run_to_end(airflow: Airflow, dag_id: str, conf: dict[str, Any] | None = None) -> dict[str, str]:
    """Trigger `dag_id` (with `conf`) and wait for that run to end; it must succeed with every task. Returns the
    run's task states."""
    run_id = f"test__{uuid.uuid4().hex[:8]}"
    args = ["dags", "trigger", dag_id, "--run-id", run_id, *(["--conf", json.dumps(conf)] if conf else [])]
    triggered = airflow.cli(*args)
    assert triggered.returncode == 0, triggered.stderr[-3000:]
    in_run = "WHERE dag_id = %s AND run_id = %s"

    def finished() -> str | None:
        [(state,)] = airflow.query(f"SELECT state FROM dag_run {in_run}", dag_id, run_id)
        return state if state in ("success", "failed") else None

    state = wait_for(f"the triggered run of {dag_id} to finish", airflow, finished, RUN_TIMEOUT_S)
    tasks = dict(airflow.query(f"SELECT task_id, state FROM task_instance {in_run}", dag_id, run_id))
    assert state == "success", f"{tasks}\n{airflow.diagnostics()}"
    assert set(tasks.values()) <= {"success", "skipped"} and "success" in tasks.values(), tasks
    return tasks


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer(with_logger({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}"}))
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        consumer.close()


def test_a_triggered_flow_dag_runs_under_the_scheduler_on_postgres(
    airflow_on_postgres: tuple[Airflow, str],
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
) -> None:
    airflow, topic = airflow_on_postgres
    kafka_admin("A").create_topics([NewTopic(topic, 2, 1)])[topic].result()
    producer = kafka_producer("A")
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0

    # The dag-processor parses dags/ and stores the DAG in PostgreSQL; then the run is triggered.
    wait_for(
        "the DAG in the metadata DB", airflow, lambda: airflow.query("SELECT 1 FROM dag WHERE dag_id = %s", DAG_ID), 300
    )
    run_to_end(airflow, DAG_ID)
    jobs = {row[0] for row in airflow.query("SELECT job_type FROM job")}
    assert "SchedulerJob" in jobs, jobs

    [(copy_xcom,)] = airflow.query("SELECT value FROM xcom WHERE dag_id = %s AND task_id = 'copy'", DAG_ID)
    copied = copy_xcom if isinstance(copy_xcom, dict) else json.loads(copy_xcom)
    assert (copied["records"], copied["master"]) == (RECORDS, "local[2]")
    # each partition: its 45 records plus the commit marker of the one transaction that carried them
    assert end_offsets(kafka_clusters.bootstrap("B"), f"A.{topic}", 2) == [RECORDS // 2 + 1] * 2

    # The run outlived its deadline: the scheduler found it missed and the executor ran the flow's callback.
    notified = airflow.home / "deadline.jsonl"
    wait_for("the deadline callback", airflow, lambda: notified.is_file() and notified.read_text(), 180)
    [line] = [json.loads(text) for text in notified.read_text().splitlines()]
    assert line["flow"] == "A->B", line
    assert airflow.query("SELECT missed FROM deadline") == [(True,)]

    # A failover and a failback as an operator triggers them (each task in its own process): the flow DAG reads
    # paused in Airflow's API after the failover, unpaused after the failback; the reverse flow the other way.
    group = f"{topic}-g1"
    a_conf = {"bootstrap.servers": kafka_clusters.bootstrap("A")}
    for partition, offset in ((0, 10), (1, 30)):
        commit_when_ready(a_conf, group, TopicPartition(topic, partition, offset))
    runbook = {"primary": "A", "dr": "B", "groups": group, "dry_run": False, "fence": "none", "max_lag_records": 1000}
    assert not airflow.dag_paused(DAG_ID)
    run_to_end(airflow, "mirrorflow_failover", runbook)
    assert (airflow.dag_paused(DAG_ID), airflow.dag_paused(REVERSE_DAG_ID)) == (True, False)
    assert airflow.query("SELECT is_paused FROM dag WHERE dag_id = %s", DAG_ID) == [(True,)]
    run_to_end(airflow, "mirrorflow_failback", runbook)
    assert (airflow.dag_paused(DAG_ID), airflow.dag_paused(REVERSE_DAG_ID)) == (False, True)
    # ...and in Kafka, where the tasks look (review, issue 22): the original flow's DAG runs again, so the
    # failover's marker is gone (else each run would skip and end green); the failback's own holds.
    from mirrorflow.airflow.tasks import load_flow, pause_check
    from mirrorflow.replication.flow_clients import FlowClients
    from mirrorflow.replication.pause_markers import unpause

    config = airflow.env["MIRRORFLOW_CONFIG"]
    assert pause_check(load_flow(config, "A->B")) is None
    reverse = load_flow(config, "B->A")
    assert "paused by a failback" in str(pause_check(reverse))
    with FlowClients(reverse) as clients:
        assert unpause(reverse, clients)  # the session's clusters are shared: no flow left paused on them
    task_logs = "".join(p.read_text(errors="replace") for p in (airflow.home / "logs").rglob("*.log"))
    assert "mirrorflow__A__B" in task_logs and API_PASSWORD not in task_logs

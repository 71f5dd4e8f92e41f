"""The copy task's spark-submit: the master nobody chose (YARN) is never used, and secrets stay off the command.

A stand-in `spark-submit` records what the Spark provider's hook runs, so these tests follow the operator's real
execute path without starting a JVM; tests/airflow/test_flow_dag_run.py runs the real one.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mirrorflow.airflow.spark import SPARK_CONN_ID, MirrorflowCopyOperator
from mirrorflow.core.errors import UsageError
from mirrorflow.spark.quiet import LOG4J2_FILE

CONN_ENV = "AIRFLOW_CONN_MIRRORFLOW_SPARK"
RECORDER = f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
keys = ("PATH", "PYSPARK_PYTHON", "MIRRORFLOW_CLUSTER_SETTINGS")
with open(os.environ["FAKE_SPARK_RECORD"], "w") as out:
    json.dump({{"argv": args, "env": {{k: os.environ.get(k) for k in keys}}}}, out)
if "--summary-file" in args:
    with open(args[args.index("--summary-file") + 1], "w") as out:
        json.dump({{"records": 3, "bytes": 30, "ranges": [{{}}, {{}}], "flow": "A->B"}}, out)
"""


@pytest.fixture
def fake_spark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], dict[str, Any]]:
    """Installs the recorder; calling the fixture's value returns what the last spark-submit received."""
    binary = tmp_path / "spark-submit"
    binary.write_text(RECORDER)
    binary.chmod(0o755)
    record = tmp_path / "record.json"
    monkeypatch.setenv("FAKE_SPARK_RECORD", str(record))
    monkeypatch.delenv(CONN_ENV, raising=False)
    return lambda: json.loads(record.read_text())


def operator(config: Path, tmp_path: Path, *, master: str = "local[*]", explicit: bool = False) -> Any:
    app = tmp_path / "app.py"
    app.write_text("")
    return MirrorflowCopyOperator(
        task_id="copy",
        application=str(app),
        config_path=str(config),
        flow_name="A->B",
        clusters=None,
        copy_mode="interval",
        run_seconds=300,
        spark_master=master,
        explicit_master=explicit,
        spark_binary=str(tmp_path / "spark-submit"),
    )


@pytest.fixture
def config(write_config: Callable[..., Path]) -> Path:
    return write_config(
        "clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:2\nA->B.enabled = true\n"
    )


def master_of(argv: list[str]) -> str:
    return argv[argv.index("--master") + 1]


def test_without_a_connection_the_flows_master_is_used_never_yarn(
    config: Path, tmp_path: Path, fake_spark: Callable[[], dict[str, Any]]
) -> None:
    result = operator(config, tmp_path, master="local[2]", explicit=True).execute({})
    seen = fake_spark()
    assert master_of(seen["argv"]) == "local[2]"
    assert "yarn" not in seen["argv"]
    app = seen["argv"].index(str(tmp_path / "app.py"))
    assert seen["argv"][app + 1 : app + 6] == [str(config), "--flow", "A->B", "--mode", "interval"]
    assert master_of(seen["argv"][app:]) == "local[2]"  # the job's SparkSession gets the same master
    assert seen["env"]["PYSPARK_PYTHON"] == sys.executable
    assert seen["env"]["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert seen["env"]["MIRRORFLOW_CLUSTER_SETTINGS"] is None
    assert result == {
        "records": 3, "bytes": 30, "flow": "A->B", "master": "local[2]", "partitions": 2
    }  # fmt: skip
    assert CONN_ENV not in os.environ


def test_a_defined_mirrorflow_spark_connection_wins_over_the_default(
    config: Path, tmp_path: Path, fake_spark: Callable[[], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONN_ENV, json.dumps({"conn_type": "spark", "host": "yarn"}))
    # An earlier in-process local copy may have set PYSPARK_PYTHON in this process: judge the operator's own env.
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert operator(config, tmp_path).execute({}) is None  # a remote driver writes no local summary
    seen = fake_spark()
    assert master_of(seen["argv"]) == "yarn"
    assert "--summary-file" not in seen["argv"]
    assert seen["env"]["PYSPARK_PYTHON"] is None


def test_an_explicit_flow_master_that_contradicts_the_connection_is_refused(
    config: Path, tmp_path: Path, fake_spark: Callable[[], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config contradiction is not retried: Airflow's fail-now exception, with the operator's error as cause."""
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv(CONN_ENV, json.dumps({"conn_type": "spark", "host": "local[4]"}))
    with pytest.raises(
        AirflowFailException, match=r"sets mirrorflow.spark.master = local\[2\].*points at local\[4\]"
    ) as e:
        operator(config, tmp_path, master="local[2]", explicit=True).execute({})
    assert isinstance(e.value.__cause__, UsageError)


CONNECTION_EXTRA = {"bootstrap.servers": "a:9092", "sasl.password": "spark-secret-pw"}


@pytest.fixture
def connected_config(write_config: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """A flow whose cluster A takes its settings (a password among them) from the Airflow connection kafka_a."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_A", json.dumps({"conn_type": "kafka", "extra": CONNECTION_EXTRA}))
    return write_config(
        "clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:2\n"
        "A.mirrorflow.connection = kafka_a\nA->B.enabled = true\n"
    )


def test_connection_credentials_reach_the_job_in_its_environment_only(
    connected_config: Path, tmp_path: Path, fake_spark: Callable[[], dict[str, Any]]
) -> None:
    operator(connected_config, tmp_path).execute({})
    seen = fake_spark()
    assert json.loads(seen["env"]["MIRRORFLOW_CLUSTER_SETTINGS"]) == {"A": CONNECTION_EXTRA}
    assert "spark-secret-pw" not in " ".join(seen["argv"])


def test_connection_credentials_are_refused_where_spark_would_show_them_as_configuration(
    connected_config: Path, tmp_path: Path, fake_spark: Callable[[], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On YARN and Kubernetes the Spark provider passes the task's environment on as `--conf` (the driver runs
    elsewhere): the credentials would be shown in Spark's UI, so the copy is refused with the way out."""
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv(CONN_ENV, json.dumps({"conn_type": "spark", "host": "yarn"}))
    with pytest.raises(AirflowFailException) as refused:
        operator(connected_config, tmp_path).execute({})
    message = str(refused.value)
    assert "shown in its UI" in message and "${env:...}" in message and "spark-secret-pw" not in message


def test_the_conn_id_is_the_projects_own() -> None:
    assert SPARK_CONN_ID == "mirrorflow_spark"


@pytest.mark.integration
def test_a_retried_copy_checks_the_pause_again(
    write_config: Callable[..., Path],
    tmp_path: Path,
    fake_spark: Callable[[], dict[str, Any]],
    kafka_clusters: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review: Airflow retries only the failed copy task, after the run's pause checks; a failover that paused
    the flow meanwhile must stop the retry, or it copies behind the clients that moved."""
    from airflow.sdk.exceptions import AirflowSkipException

    from mirrorflow.replication.flow_cycle import STATE_DIR_ENV
    from mirrorflow.replication.pause_markers import write_pause_marker

    config = write_config(
        f"clusters = A, B\nA.bootstrap.servers = {kafka_clusters.bootstrap('A')}\n"
        f"B.bootstrap.servers = {kafka_clusters.bootstrap('B')}\nA->B.enabled = true\n"
    )
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    write_pause_marker(tmp_path / "state" / "failover-A-B", "A->B", "failover A->B")
    first, retry = SimpleNamespace(try_number=1), SimpleNamespace(try_number=2)
    operator(config, tmp_path).execute({"ti": first})  # the run's own tasks checked before the first try
    assert fake_spark()["argv"]
    with pytest.raises(AirflowSkipException, match="paused"):
        operator(config, tmp_path).execute({"ti": retry})


def test_the_copy_tasks_spark_submit_points_the_driver_at_the_quiet_log4j2_file(
    config: Path, tmp_path: Path, fake_spark: Callable[[], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's banner and INFO lines stay out of the task log unless MIRRORFLOW_SPARK_LOG_LEVEL asks for them."""
    monkeypatch.setenv("MIRRORFLOW_SPARK_LOG_LEVEL", "info")
    task = operator(config, tmp_path, master="local[2]", explicit=True)
    task.execute({})
    argv = fake_spark()["argv"]
    options = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--conf"]
    driver = [o for o in options if o.startswith("spark.driver.extraJavaOptions=")]
    assert len(driver) == 1, options
    assert f"-Dlog4j2.configurationFile={LOG4J2_FILE.as_uri()}" in driver[0]
    assert "-Dmirrorflow.spark.log.level=INFO" in driver[0]
    assert LOG4J2_FILE.is_file()
    assert not task.conf  # the operator's own settings are left as they were for a retry

    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("MIRRORFLOW_SPARK_LOG_LEVEL", "chatty")
    with pytest.raises(AirflowFailException, match="MIRRORFLOW_SPARK_LOG_LEVEL='CHATTY' is not a log4j level"):
        operator(config, tmp_path).execute({})  # a typo is an error, not silently the default


def test_the_copy_job_is_told_when_the_dag_run_started(
    config: Path, tmp_path: Path, fake_spark: Callable[[], dict[str, Any]]
) -> None:
    """Overlapping continuous runs are ordered by their start (`copy_claims`): the DAG run's, the same for every
    try, so an Airflow retry of an older run's copy never counts as newer than the run after it."""
    from datetime import datetime

    started = datetime(2026, 11, 28, 3, 0, 0, tzinfo=UTC)
    run = SimpleNamespace(start_date=started)
    operator(config, tmp_path).execute({"dag_run": run, "ti": SimpleNamespace(try_number=1)})
    argv = fake_spark()["argv"]
    assert argv[argv.index("--run-started-ms") + 1] == str(int(started.timestamp() * 1000))
    assert argv[argv.index("--try-number") + 1] == "1", "rounds and retries order their claims by it"
    operator(config, tmp_path).execute({})
    assert "--run-started-ms" not in fake_spark()["argv"], "without a DAG run the job takes its own start"

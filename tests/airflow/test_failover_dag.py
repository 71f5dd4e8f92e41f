"""The runbook DAGs `mirrorflow_failover` / `mirrorflow_failback` from the real `dags/`, and the pause marker.

The form (Params) is checked as parsed and as Airflow enforces it on trigger; `dag.test()` runs a dry run and a
planned failover against the session's clusters A and B; a flow paused by a failover skips in its DAG and in
`mirrorflow run`.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from tests.airflow.api_server import serving

from mirrorflow.airflow.failover_dag import STEP_NAMES, options_from_params
from mirrorflow.core.errors import UsageError
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.failover.steps import STEPS
from mirrorflow.replication.pause_markers import paused_flows, write_pause_marker

RUNBOOKS = ("mirrorflow_failover", "mirrorflow_failback")
DAGS = Path(__file__).resolve().parents[2] / "dags"
UNREACHABLE = {"A": "127.0.0.1:1", "B": "127.0.0.1:2"}


def offline_config(tmp_path: Path) -> Path:
    path = tmp_path / "mm2.properties"
    path.write_text(mm2_config_text(UNREACHABLE) + "A->B.enabled = true\nA->B.topics = t.*\nmirrorflow.schedule = 1h\n")
    return path


@pytest.fixture
def dag_bag(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """`dag_bag(config)` -> a DagBag of the whole real `dags/` folder reading `config` (both DAG files)."""

    def load(config: Path) -> Any:
        from airflow.dag_processing.dagbag import DagBag

        monkeypatch.setenv("MIRRORFLOW_CONFIG", str(config))
        for name in ("MIRRORFLOW_CLUSTERS", "MIRRORFLOW_STRICT"):
            monkeypatch.delenv(name, raising=False)
        bag = DagBag(dag_folder=str(DAGS))
        assert bag.import_errors == {}
        return bag

    return load


@pytest.fixture
def state_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Pause markers and runbook state of this test only (never the checkout's var/failover)."""
    root = tmp_path / "failover-state"
    monkeypatch.setenv("MIRRORFLOW_STATE_DIR", str(root))
    return root


def test_step_names_are_the_runbook_steps() -> None:
    assert list(STEP_NAMES) == [name for name, _ in STEPS]


def test_runbook_tasks_jump_the_queue_and_cannot_hang(tmp_path: Path, dag_bag: Callable[..., Any]) -> None:
    """Started mid-incident, a runbook must not wait behind flow loops for a worker slot, and a step stuck on an
    unreachable cluster fails (to be cleared and resumed) instead of holding the run forever."""
    config = offline_config(tmp_path)
    config.write_text(config.read_text() + "A->B.mirrorflow.runbook.step.timeout.seconds = 600\n")
    for dag_id in RUNBOOKS:
        for task in dag_bag(config).dags[dag_id].tasks:
            assert (task.priority_weight, str(task.weight_rule)) == (1000, "absolute"), task.task_id
            assert task.execution_timeout == dt.timedelta(seconds=600), task.task_id


def test_runbook_runs_past_the_rto_target_raise_a_deadline_alert(tmp_path: Path, dag_bag: Callable[..., Any]) -> None:
    from mirrorflow.airflow.failover_dag import RTO_LOG

    config = offline_config(tmp_path)
    for dag_id in RUNBOOKS:
        assert not dag_bag(config).dags[dag_id].deadline  # opt-in (airflow/alerts.deadline_alert)
    config.write_text(config.read_text() + "A->B.mirrorflow.runbook.rto.target.seconds = 300\n")
    for dag_id in RUNBOOKS:
        [alert] = dag_bag(config).dags[dag_id].deadline
        assert alert.interval == dt.timedelta(seconds=300) and alert.callback.path == RTO_LOG, dag_id
        assert alert.callback.kwargs == {"runbook": dag_id.removeprefix("mirrorflow_")}


def test_dag_bag_holds_both_runbooks_with_the_form(tmp_path: Path, dag_bag: Callable[..., Any]) -> None:
    bag = dag_bag(offline_config(tmp_path))
    assert bag.import_errors == {}
    for dag_id in RUNBOOKS:
        dag = bag.dags[dag_id]
        assert dag.schedule is None or getattr(dag, "timetable", None).__class__.__name__ == "NullTimetable"
        assert dag.max_active_runs == 1
        assert [t.task_id for t in dag.topological_sort()] == [*STEP_NAMES, "report", "announce"]
        schema = {name: param.schema for name, param in dag.params.items()}
        values = {name: param.value for name, param in dag.params.items()}
        assert schema["primary"]["enum"] == ["A", "B"] and schema["dr"]["enum"] == ["A", "B"]
        assert (values["primary"], values["dr"]) == ("A", "B")
        assert schema["mode"]["enum"] == ["planned", "unplanned"]
        assert schema["dry_run"]["type"] == "boolean" and values["dry_run"] is True
        assert schema["fence"]["enum"] == ["none", "acl", "command"]
        assert schema["redirect"]["enum"] == ["none", "topic", "file", "command", "webhook"]
        assert schema["fence_principals"]["type"] == "array"
        assert schema["max_lag_records"]["type"] == ["null", "integer"]
        assert schema["max_lag_seconds"]["type"] == ["null", "number"]
        assert schema["groups"]["type"] == ["null", "string"]


@pytest.mark.integration
@pytest.mark.parametrize(
    "conf",
    [
        {"mode": "sideways"},
        {"primary": "Z"},
        {"dry_run": "yes"},
        {"fence": "wall"},
        {"redirect": "carrier-pigeon"},
        {"max_lag_records": -1},
        {"fence_principals": ["no-type"]},
    ],
)
def test_invalid_form_values_are_rejected_on_trigger(
    airflow_db: None, tmp_path: Path, dag_bag: Callable[..., Any], conf: dict[str, Any]
) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    dag = dag_bag(offline_config(tmp_path)).dags["mirrorflow_failover"]
    with pytest.raises(ParamValidationError):
        dag.test(run_conf=conf)


@pytest.mark.integration
def test_primary_equal_to_dr_fails_the_first_task_with_the_reason(
    airflow_db: None, tmp_path: Path, dag_bag: Callable[..., Any], state_root: Path
) -> None:
    params = {"primary": "A", "dr": "A", "mode": "planned", "dry_run": True}
    with pytest.raises(UsageError, match="--primary and --dr are both 'A'"):
        options_from_params(params, config_path="x", direction="failover", state_dir=tmp_path)
    dag_run = dag_bag(offline_config(tmp_path)).dags["mirrorflow_failover"].test(run_conf={"dr": "A"})
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    assert dag_run.state == "failed" and states["preflight"] == "failed", states
    assert {states[name] for name in STEP_NAMES[1:]} == {"upstream_failed"}


# ---- the pause marker ----------------------------------------------------------------------------------------
@pytest.mark.integration
def test_a_paused_flow_skips_every_task_of_its_dag(
    airflow_db: None, tmp_path: Path, dag_bag: Callable[..., Any], state_root: Path
) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    from mirrorflow.airflow import tasks

    config = offline_config(tmp_path)
    write_pause_marker(state_root / "failover-A-B-test", "A->B", "failover A->B")
    with pytest.raises(AirflowSkipException, match="flow A->B is paused by a failover A->B"):
        tasks.discover(str(config), "A->B")
    dag_run = dag_bag(config).dags["mirrorflow__A__B"].test()  # the clusters are unreachable: only a skip passes
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    assert set(states.values()) == {"skipped"}, states


def test_mirrorflow_run_skips_a_paused_flow_with_one_line(tmp_path: Path, state_root: Path) -> None:
    config = offline_config(tmp_path)
    write_pause_marker(state_root / "failover-A-B-test", "A->B", "failover A->B")
    # The clusters are unreachable: any attempt to run the flow would fail the command.
    for mode in (["--once"], ["--for", "0.5"]):
        result = subprocess.run(
            [sys.executable, "-m", "mirrorflow", "run", str(config), "--flow", "A->B", "--no-copy", *mode],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "MIRRORFLOW_STATE_DIR": str(state_root)},
        )
        assert result.returncode == 0, result.stderr
        lines = [line for line in result.stderr.splitlines() if "paused" in line]
        assert len(lines) == 1 and lines[0].startswith("skipped: flow A->B is paused"), result.stderr


def test_run_loop_drops_a_flow_paused_while_it_runs(tmp_path: Path) -> None:
    from mirrorflow.config.loader import load_config
    from mirrorflow.replication.flow_cycle import run_loop

    flow = load_config(offline_config(tmp_path)).flow("A->B")
    said: list[str] = []
    ran: list[Any] = []
    run_loop(
        [flow], seconds=5, on_report=ran.append, paused=lambda f, _clients: f"{f.name} paused", on_paused=said.append
    )
    assert said == ["A->B paused"] and ran == []


def test_run_loop_skips_a_cycle_when_the_pause_cannot_be_told(tmp_path: Path) -> None:
    """Review: an unreadable target id counted as "not paused"; now the cycle's steps are skipped, said once per
    cycle, and the flow is checked again at its next cycle (not dropped)."""
    from mirrorflow.config.loader import load_config
    from mirrorflow.replication.flow_cycle import run_loop
    from mirrorflow.replication.pause_markers import PauseUnknown

    flow = load_config(offline_config(tmp_path)).flow("A->B")
    said: list[str] = []
    ran: list[Any] = []
    asked: list[str] = []

    def unknown(f: Any, _clients: Any) -> str | None:
        asked.append(f.name)
        raise PauseUnknown("'B' did not answer")

    run_loop([flow], seconds=0.2, on_report=ran.append, paused=unknown, on_skipped=said.append)
    assert ran == [] and said == ["skipped this cycle: 'B' did not answer"] * len(asked) and asked


# ---- against the session's clusters ---------------------------------------------------------------------------
def _copied_flow(live_flow: Any) -> tuple[Path, str, str]:
    """A->B with 30 records copied (checkpoints and all), 10 more on A, and a group part-way on A."""
    from mirrorflow.config.loader import load_config
    from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
    from mirrorflow.replication.copy_range import copy_range
    from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane

    topic = live_flow.source_topic("fodag")
    prefix = f"fodag-{uuid.uuid4().hex[:8]}-"
    path = live_flow.tmp_path / "mm2.properties"
    path.write_text(
        live_flow.config_text("admin.timeout.ms = 30000\n")
        + f"A->B.enabled = true\nA->B.topics = {topic}\nA->B.groups = {prefix}.*\n"
        "A->B.heartbeats.replication.enabled = false\nA->B.mirrorflow.copy.mode = interval\n"
        "mirrorflow.schedule = 1h\n"
    )
    flow = load_config(path).flow("A->B")
    producer = live_flow.producer("A")
    for i in range(40):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
        if i == 29:
            assert producer.flush(30) == 0
            run_control_plane(flow, steps={TOPICS})
            tasks = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", 2)], interval=True)
            assert sum(copy_range(t).records for t in tasks) == 30
    assert producer.flush(30) == 0
    group = prefix + "g1"
    offsets = [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 12)]
    deadline = time.monotonic() + 30
    while True:
        try:
            live_flow.admin("A").alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])[
                group
            ].result()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    return path, topic, group


def _snapshot(kafka_admin: Callable[..., AdminClient], group: str, topic: str) -> dict[str, Any]:
    from mirrorflow.kafka.acls import describe_topic_acls
    from mirrorflow.kafka.group_coordinator import committed_offsets

    a, b = kafka_admin("A"), kafka_admin("B")
    return {
        "acls_a": sorted(map(repr, describe_topic_acls(a, "A", 10))),
        "acls_b": sorted(map(repr, describe_topic_acls(b, "B", 10))),
        "topics_b": sorted(t for t in b.list_topics(timeout=10).topics if topic in t or "bootstrap" in t),
        "groups_b": sorted(g.group_id for g in b.list_consumer_groups().result(timeout=10).valid),
        "group_b": committed_offsets(b, "B", group, 10),
        "group_a": committed_offsets(a, "A", group, 10),
    }


@pytest.mark.integration
def test_a_dry_run_from_the_dag_succeeds_and_changes_nothing(
    airflow_db: None, live_flow: Any, state_root: Path
) -> None:
    config, topic, group = _copied_flow(live_flow)
    before = _snapshot(live_flow.admin, group, topic)
    dag = live_flow.dag(config, "mirrorflow_failover")
    conf = {"primary": "A", "dr": "B", "groups": group, "dry_run": True, "fence": "acl"}
    dag_run = dag.test(run_conf={**conf, "fence_principals": ["User:dry"], "redirect": "topic"})
    assert dag_run.state == "success", live_flow.states(dag_run)
    assert _snapshot(live_flow.admin, group, topic) == before
    assert paused_flows(state_root) == {}
    pointer = live_flow.return_value(dag_run, "report")
    assert set(pointer) >= {"report", "dry_run", "completed", "groups", "partitions"}
    assert pointer["dry_run"] is True and pointer["completed"] is False and pointer["groups"] == 1
    report = json.loads(Path(pointer["report"]).read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert [s["name"] for s in report["steps"]] == list(STEP_NAMES)
    assert {s["status"] for s in report["steps"]} <= {"planned", "skipped"}
    assert sum(steps["drain"]["detail"]["would_copy"].values()) == 10, "read from the preflight task's results"
    assert {r["group"] for r in steps["commit_offsets"]["detail"]["offsets"]} == {group}
    assert report["fence"]["status"] == "would fence"
    assert "offsets" not in json.dumps(pointer)
    # A rehearsal is no failover: DAGs scheduled on the runbook asset must not start.
    assert live_flow.states(dag_run)["announce"] == "skipped"
    assert live_flow.asset_events(dag_run, "mirrorflow://runbook/failover") == []


@pytest.mark.integration
def test_dag_test_still_fails_a_run_that_has_a_deadline_alert(
    airflow_db: None, live_flow: Any, state_root: Path
) -> None:
    """Why DeadlineAlerts are opt-in (airflow/alerts.deadline_alert): Airflow 3.3's `dag.test()` fails the run of
    any DAG that has one. At the run's end it looks each alert up by what the freshly serialized DAG holds (the
    alert's serialized form) instead of the id the DAG processor stores, and SQLAlchemy refuses a dict as a UUID.
    Under a scheduler the same DAG works (tests/airflow/test_scheduler_postgres.py). When this canary fails,
    Airflow fixed it: give the flow and runbook DAGs their deadlines by default and delete it."""
    config, _topic, group = _copied_flow(live_flow)
    config.write_text(config.read_text() + "A->B.mirrorflow.runbook.rto.target.seconds = 600\n")
    dag = live_flow.dag(config, "mirrorflow_failover")
    with pytest.raises(Exception, match="has no attribute 'hex'"):
        dag.test(run_conf={"primary": "A", "dr": "B", "groups": group, "dry_run": True, "fence": "none"})


@pytest.mark.integration
def test_a_planned_failover_from_the_dag_commits_the_translated_offsets(
    airflow_db: None, live_flow: Any, state_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    from mirrorflow.airflow import tasks
    from mirrorflow.config.loader import load_config
    from mirrorflow.kafka.group_coordinator import committed_offsets
    from mirrorflow.replication.remote_cluster_utils import translate_group

    kafka_clusters: LocalClusters = live_flow.clusters
    config, topic, group = _copied_flow(live_flow)
    expected = translate_group(load_config(config), group, "A", "B", live=True)
    # B's address only in an Airflow connection, as the flow DAGs take credentials: the runbook must merge it.
    text = config.read_text().replace(kafka_clusters.bootstrap("B"), UNREACHABLE["B"])
    config.write_text(text + "B.mirrorflow.connection = fo_dag_b\n")
    extra = {"bootstrap.servers": kafka_clusters.bootstrap("B")}
    monkeypatch.setenv("AIRFLOW_CONN_FO_DAG_B", json.dumps({"conn_type": "kafka", "extra": extra}))
    dag = live_flow.dag(config, "mirrorflow_failover")
    conf = {"primary": "A", "dr": "B", "groups": group, "dry_run": False, "fence": "none", "max_lag_records": 1000}
    dag_run = dag.test(run_conf=conf)
    states = live_flow.states(dag_run)
    assert dag_run.state == "success", states
    assert set(states.values()) == {"success"}, states

    assert {(t.topic, t.partition) for t in expected} == {(f"A.{topic}", 0), (f"A.{topic}", 1)}
    on_b = committed_offsets(live_flow.admin("B"), "B", group, 10)
    assert {(t.topic, t.partition): t.offset for t in expected} == {tp: o.offset for tp, o in on_b.items()}

    pointer = live_flow.return_value(dag_run, "report")
    report = json.loads(Path(pointer["report"]).read_text())
    assert pointer["completed"] is True and report["completed"] and pointer["fence"] == "unfenced"
    assert Path(pointer["report_md"]).read_text().startswith("# Failover A -> B (planned)")
    [event] = live_flow.asset_events(dag_run, "mirrorflow://runbook/failover")
    assert event["primary"] == "A" and event["dr"] == "B" and event["groups"] == 1, event
    # The flow is paused by the runbook: its DAG's tasks skip from now on (the marker root is the state root).
    assert list(paused_flows(state_root)) == ["A->B"]
    with pytest.raises(AirflowSkipException, match="paused"):
        tasks.sync_topics(str(config), "A->B")


@pytest.mark.integration
def test_a_refused_task_resumes_exactly_there_when_run_again(tmp_path: Path, live_flow: Any, state_root: Path) -> None:
    """The task callables as Airflow runs them (same run id = same state): the lag gate refuses preflight; once
    the lag is gone, running that task again (a clear) passes and the later tasks each run their step once."""
    from mirrorflow.airflow.failover_dag import REPORT_TASK, report_step, run_step
    from mirrorflow.config.loader import load_config
    from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
    from mirrorflow.replication.copy_range import copy_range
    from mirrorflow.replication.failover.runbook import FailoverFailed
    from mirrorflow.replication.failover.state import StateStore

    config, topic, group = _copied_flow(live_flow)
    params = {"primary": "A", "dr": "B", "groups": group, "dry_run": False, "fence": "none", "max_lag_records": 0}
    common = {"config_path": str(config), "direction": "failover", "repo": str(tmp_path), "run_id": "manual__t1"}
    with pytest.raises(FailoverFailed, match=r"'preflight' refused: replication lag 5 records > --max-lag-records 0"):
        run_step(index=0, params=params, **common)
    flow = load_config(config).flow("A->B")
    rest = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", 2)], interval=True)
    assert sum(copy_range(t).records for t in rest) == 10
    for index, name in enumerate(STEP_NAMES):
        assert run_step(index=index, params=params, **common)["step"] == name
    pointer = report_step(params=params, **common)
    assert pointer["completed"] is True and REPORT_TASK == "report"
    [state_dir] = [p for p in state_root.iterdir() if p.is_dir()]
    assert state_dir.name == "failover-A-B-manual__t1"
    state = StateStore(state_dir).load()
    assert state is not None and state.completed()
    assert {s.name: s.attempts for s in state.steps.values()} == {
        name: 2 if name == "preflight" else 1 for name in STEP_NAMES
    }


@pytest.fixture
def airflow_api(airflow_db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Airflow's own API server app (the session's database) on a loopback port, with a user `admin` whose
    password is set here, and the connection `mirrorflow_airflow_api` pointing at it as an operator defines it."""
    from airflow.api_fastapi.app import create_app

    from mirrorflow.airflow.native_pause import AIRFLOW_API_CONN_ID

    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({"admin": "api-test-password"}))
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(passwords))
    with serving(create_app()) as url:
        conn = {"conn_type": "http", "host": url, "login": "admin", "password": "api-test-password"}
        monkeypatch.setenv(f"AIRFLOW_CONN_{AIRFLOW_API_CONN_ID.upper()}", json.dumps(conn))
        yield url


def dag_paused(url: str, dag_id: str) -> bool:
    from mirrorflow.airflow.native_pause import api_from_connection

    api = api_from_connection()
    assert api is not None
    request = urllib.request.Request(f"{url}/api/v2/dags/{dag_id}", headers={"Authorization": f"Bearer {api.token()}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return bool(json.load(response)["is_paused"])


@pytest.mark.integration
def test_failover_pauses_the_flow_dag_in_airflow_and_failback_unpauses_it(
    live_flow: Any,
    state_root: Path,
    airflow_api: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through Airflow's REST API as the runbook's tasks reach it: after `pause_flow` the flow's DAG is paused in
    Airflow (not only fenced in Kafka), the reverse flow's DAG (paused here first) runs again once the failover
    completes; a failback pauses the reverse flow's DAG and unpauses the original one.

    Review (issue 22): a DAG unpaused in Airflow must also be free of its pause marker, or every run of it skips
    and ends green, the state the native pause exists to end: the original flow after a failback stayed fenced by
    the failover's marker, and the way back after a second failover by the first failback's. And an API server
    that refused the pause at `pause_flow` (the run goes on: the Kafka fence holds) left the DAG unpaused for
    good; the run's `announce` pauses it again."""
    from mirrorflow.airflow.native_pause import AirflowApi, ApiError, set_dags_paused
    from mirrorflow.airflow.tasks import load_flow, pause_check

    def fenced(flow: str) -> str | None:
        return pause_check(load_flow(str(config), flow))

    config, _topic, group = _copied_flow(live_flow)
    config.write_text(config.read_text() + "B->A.enabled = true\nB->A.heartbeats.replication.enabled = false\n")
    failover = live_flow.dag(config, "mirrorflow_failover")  # the whole dags/ folder: both flow DAGs too
    base = {"primary": "A", "dr": "B", "groups": group, "dry_run": False, "fence": "none", "max_lag_records": 1000}
    write_pause_marker(state_root / "failback-A-B-earlier", "B->A", "failback B->A")  # an earlier failback's
    assert fenced("B->A") is not None
    # The API server refuses the first pause (a blip at `pause_flow`): the run goes on, its end pauses again.
    refused: list[str] = []
    real_set_paused = AirflowApi.set_paused

    def blip_once(api: AirflowApi, dag_id: str, paused: bool) -> bool:
        if not refused:
            refused.append(dag_id)
            raise ApiError(f"PATCH {dag_id}: HTTP 503 Service Unavailable (injected)")
        return real_set_paused(api, dag_id, paused)

    monkeypatch.setattr(AirflowApi, "set_paused", blip_once)

    run = failover.test(run_conf=base)
    assert run.state == "success", live_flow.states(run)
    assert refused == ["mirrorflow__A__B"]
    assert live_flow.return_value(run, "pause_flow")["airflow"]["mirrorflow__A__B"].startswith("not paused: ")
    assert dag_paused(airflow_api, "mirrorflow__A__B")  # paused again by the run's `announce`
    assert live_flow.return_value(run, "announce")["airflow"] == {
        "mirrorflow__A__B": "paused",
        "mirrorflow__B__A": "unpaused",
    }
    assert not dag_paused(airflow_api, "mirrorflow__B__A")
    assert fenced("B->A") is None, "the way back is unpaused in Airflow, so it must copy, not skip green"
    assert fenced("A->B") is not None

    set_dags_paused(["mirrorflow__B__A"], True, "test")  # as if paused by an earlier failback
    assert dag_paused(airflow_api, "mirrorflow__B__A")
    back = live_flow.dag(config, "mirrorflow_failback").test(run_conf=base)
    assert back.state == "success", live_flow.states(back)
    assert dag_paused(airflow_api, "mirrorflow__B__A")  # the failback's own flow, fenced in Kafka and Airflow
    assert not dag_paused(airflow_api, "mirrorflow__A__B")  # home again: the original flow runs
    assert live_flow.return_value(back, "announce")["airflow"] == {
        "mirrorflow__B__A": "paused",
        "mirrorflow__A__B": "unpaused",
    }
    assert fenced("A->B") is None, "home again: the original flow's DAG runs, so its marker must be gone"
    assert fenced("B->A") is not None
    assert "api-test-password" not in caplog.text


@pytest.mark.integration
def test_native_pause_without_the_connection_or_with_a_wrong_password_reports_and_never_raises(
    airflow_api: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The Kafka fence already holds: a pause Airflow refuses is an error in the log and the XCom, not a failed
    runbook; the password never shows."""
    from mirrorflow.airflow.native_pause import AIRFLOW_API_CONN_ID, AirflowApi, set_dags_paused

    wrong = AirflowApi(airflow_api, "admin", "not-the-password-123")
    refused = set_dags_paused(["mirrorflow__A__B"], True, "test", api=wrong)
    assert refused["mirrorflow__A__B"].startswith("not paused: POST ") and "HTTP 401" in refused["mirrorflow__A__B"]
    monkeypatch.delenv(f"AIRFLOW_CONN_{AIRFLOW_API_CONN_ID.upper()}")
    assert set_dags_paused(["mirrorflow__A__B"], False, "test") == {
        "mirrorflow__A__B": f"not unpaused: no connection {AIRFLOW_API_CONN_ID}"
    }
    assert "not-the-password-123" not in caplog.text and "not-the-password-123" not in repr(wrong)


def test_a_way_back_whose_cluster_does_not_answer_is_said_and_left_as_it_is(tmp_path: Path, state_root: Path) -> None:
    """After an unplanned failover the old primary (the way back's target) may be down: its markers cannot be
    deleted then, so its DAG is not unpaused (it would skip every run) and the task says what to run later; it
    does not fail, so the runbook's asset event still goes out."""
    from mirrorflow.airflow.failover_dag import announce_step

    config = offline_config(tmp_path)
    config.write_text(config.read_text() + "B->A.enabled = true\nadmin.timeout.ms = 2000\n")

    class Report:
        @staticmethod
        def xcom_pull(task_ids: str) -> dict[str, Any]:
            return {"dry_run": False, "completed": True, "groups": 1}

    extra = announce_step("failover", str(config), str(tmp_path), {"primary": "A", "dr": "B"}, Report())
    assert (
        extra["resumed"].startswith("not resumed: ") and f"mirrorflow unpause {config} --flow B->A" in extra["resumed"]
    ), extra
    assert "mirrorflow__B__A" not in extra["airflow"], extra  # not unpaused (the flow clients left: paused)
    gc.collect()  # the failed attempt's clients (in the caught error's frames) stop dialling the closed ports

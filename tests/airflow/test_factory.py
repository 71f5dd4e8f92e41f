"""The DAG factory through Airflow's own DagBag over the real `dags/` folder (no Kafka: parsing never calls it)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mirrorflow.core.errors import MirrorflowError

REPO = Path(__file__).resolve().parents[2]
DAG_FILE = REPO / "dags" / "mirrorflow_flows.py"
TWO_CLUSTERS = "clusters = A, B\nA.bootstrap.servers = 127.0.0.1:19092\nB.bootstrap.servers = 127.0.0.1:29092\n"
FLOW_TASKS = {"discover", "sync_topics", "sync_configs", "sync_acls", "copy"}
INTERVAL_TASKS = FLOW_TASKS | {"emit_checkpoints", "sync_group_offsets", "heartbeats"}
CONTINUOUS_TASKS = FLOW_TASKS | {"loops"}  # heartbeats, checkpoints and group sync: one worker slot
SECRETS = ("s3cret-jaas-pw", "k3y-pw", "tru5t-pw")


def line_of(path: Path, key: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.split("=")[0].strip() == key:
            return number
    raise AssertionError(f"{key} not in {path}")


def downstream(dag: Any, task_id: str) -> set[str]:
    return set(dag.get_task(task_id).downstream_task_ids)


def import_error(bag: Any) -> str:
    assert list(bag.import_errors) == [str(DAG_FILE)], bag.import_errors
    return str(bag.import_errors[str(DAG_FILE)])


def test_one_dag_per_enabled_flow_with_the_design_task_graph(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(
        TWO_CLUSTERS + "A->B.enabled = true\n"
        "B->A.enabled = true\n"
        "B->A.mirrorflow.copy.mode = interval\n"
        "B->A.mirrorflow.schedule = */10 * * * *\n"
    )
    bag = dag_bag(config)
    assert bag.import_errors == {}
    assert set(bag.dags) == {"mirrorflow__A__B", "mirrorflow__B__A"}

    continuous, interval = bag.dags["mirrorflow__A__B"], bag.dags["mirrorflow__B__A"]
    assert {t.task_id for t in continuous.tasks} == CONTINUOUS_TASKS
    assert {t.task_id for t in interval.tasks} == INTERVAL_TASKS
    assert downstream(continuous, "sync_topics") == {"sync_configs", "sync_acls"}
    assert downstream(interval, "sync_topics") == {"sync_configs", "sync_acls", "heartbeats"}
    assert (continuous.max_active_runs, interval.max_active_runs) == (2, 1)  # continuous runs overlap (below)
    for dag in (continuous, interval):
        assert downstream(dag, "discover") == {"sync_topics"}
        assert dag.catchup is False
        copy = dag.get_task("copy")
        assert copy.application == str(REPO / "spark_jobs" / "mirrorflow_copy.py")
        assert copy.retries == 3
        assert copy.retry_exponential_backoff == 2.0
        assert copy.max_retry_delay == timedelta(minutes=10)
        discover = dag.get_task("discover")
        assert set(discover.op_kwargs) == {"config_path", "flow_name", "clusters"}
        assert discover.op_kwargs["config_path"] == str(config)

    assert set(continuous.tags) == {"mirrorflow", "source:A", "target:B"}
    assert type(continuous.timetable).__name__ == "DeltaTriggerTimetable"  # @continuous, overlapping (below)
    for upstream in ("sync_configs", "sync_acls"):
        assert downstream(continuous, upstream) == {"copy", "loops"}
    assert downstream(continuous, "copy") == set()
    assert continuous.get_task("copy").application_args == [
        str(config), "--flow", "A->B", "--mode", "continuous", "--run-seconds", "300"
    ]  # fmt: skip

    assert set(interval.tags) == {"mirrorflow", "source:B", "target:A"}
    assert type(interval.timetable).__name__ == "CronTriggerTimetable"
    assert downstream(interval, "sync_configs") == {"copy"}
    assert downstream(interval, "copy") == {"emit_checkpoints"}
    assert downstream(interval, "emit_checkpoints") == {"sync_group_offsets"}
    assert interval.get_task("copy").application_args == [str(config), "--flow", "B->A", "--mode", "interval"]


@pytest.mark.parametrize(
    ("settings", "overlap"),
    [
        ("", timedelta(seconds=240)),  # the defaults: run.seconds 300, handover.seconds 60
        ("A->B.mirrorflow.copy.run.seconds = 120\nA->B.mirrorflow.copy.handover.seconds = 45\n", timedelta(seconds=75)),
        ("A->B.mirrorflow.delivery = at-least-once\n", None),  # no fence: two copies of a partition could skip
        ("A->B.mirrorflow.copy.handover.seconds = 0\n", None),
        ("A->B.mirrorflow.copy.handover.seconds = 300\n", None),  # not below run.seconds
        ("A->B.mirrorflow.schedule = 10m\n", None),  # the operator's own schedule
        ("A->B.mirrorflow.copy.mode = interval\n", None),
    ],
)
def test_continuous_exactly_once_runs_overlap_by_the_handover(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any], settings: str, overlap: timedelta | None
) -> None:
    """An exactly-once continuous flow left at `@continuous` starts a run every run.seconds - handover.seconds
    with two runs allowed at once, so the next copy fences the current one instead of waiting for its end
    (`airflow.schedule.overlapping_runs`); anything else keeps its schedule and one run at a time."""
    bag = dag_bag(write_config(TWO_CLUSTERS + "A->B.enabled = true\n" + settings))
    assert bag.import_errors == {}
    dag = bag.dags["mirrorflow__A__B"]
    if overlap is None:
        assert dag.max_active_runs == 1
        assert getattr(dag.timetable, "delta", None) != timedelta(seconds=240)
    else:
        assert (dag.max_active_runs, dag.timetable.delta) == (2, overlap)


def test_intervals_become_delta_timetables(write_config: Callable[..., Path], dag_bag: Callable[..., Any]) -> None:
    config = write_config(TWO_CLUSTERS + "A->B.enabled = true\nB->A.enabled = true\nmirrorflow.schedule = 5m\n")
    config_iso = config.read_text() + "B->A.mirrorflow.schedule = PT30S\n"
    config.write_text(config_iso)
    bag = dag_bag(config)
    assert bag.import_errors == {}
    assert bag.dags["mirrorflow__A__B"].timetable.delta == timedelta(minutes=5)
    assert bag.dags["mirrorflow__B__A"].timetable.delta == timedelta(seconds=30)


def test_a_heartbeat_only_pair_gets_a_task_in_its_targets_heartbeats_dag(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(TWO_CLUSTERS + "A->B.enabled = true\n")
    bag = dag_bag(config)
    assert bag.import_errors == {}
    assert set(bag.dags) == {"mirrorflow__A__B", "mirrorflow__heartbeats__A"}
    beats = bag.dags["mirrorflow__heartbeats__A"]
    assert [t.task_id for t in beats.tasks] == ["from__B"]
    assert beats.get_task("from__B").op_kwargs["flow_name"] == "B->A"
    assert set(beats.tags) == {"mirrorflow", "source:B", "target:A", "mirrorflow:heartbeats"}

    config.write_text(config.read_text() + "B->A.emit.heartbeats.enabled = false\n")
    assert set(dag_bag(config).dags) == {"mirrorflow__A__B"}


def test_pairs_into_one_target_share_its_dag_and_keep_their_own_retries(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(
        "clusters = A, B, C\n"
        + "".join(f"{c}.bootstrap.servers = 127.0.0.1:{port}\n" for c, port in (("A", 1), ("B", 2), ("C", 3)))
        + "A->B.enabled = true\nB->C.enabled = true\nC->B.mirrorflow.airflow.retries = 7\n"
    )
    bag = dag_bag(config)
    assert bag.import_errors == {}
    beats = {d for d in bag.dags if d.startswith("mirrorflow__heartbeats__")}
    assert beats == {"mirrorflow__heartbeats__A", "mirrorflow__heartbeats__B", "mirrorflow__heartbeats__C"}
    into_a = bag.dags["mirrorflow__heartbeats__A"]
    assert {t.task_id: t.op_kwargs["flow_name"] for t in into_a.tasks} == {"from__B": "B->A", "from__C": "C->A"}
    assert all(not t.upstream_task_ids and not t.downstream_task_ids for t in into_a.tasks)
    into_b = bag.dags["mirrorflow__heartbeats__B"]
    assert {t.task_id: t.retries for t in into_b.tasks} == {"from__C": 7}

    config.write_text(config.read_text() + "C->A.mirrorflow.schedule = 5m\n")
    broken = dag_bag(config).dags["mirrorflow__heartbeats__A"]
    assert "mirrorflow:broken" in broken.tags
    assert "C->A.mirrorflow.schedule" in broken.doc_md and "same mirrorflow.schedule" in broken.doc_md


def test_docs_and_serialized_dags_never_show_secrets(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    config = write_config(
        TWO_CLUSTERS + "A->B.enabled = true\n"
        "A.security.protocol = SASL_SSL\n"
        "A.sasl.mechanism = PLAIN\n"
        'A.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
        'password="s3cret-jaas-pw";\n'
        "A.ssl.key.password = k3y-pw\n"
        "B.ssl.truststore.password = tru5t-pw\n"
        "B.mirrorflow.connection = kafka_b\n"
    )
    bag = dag_bag(config)
    assert bag.import_errors == {}
    for dag in bag.dags.values():
        text = dag.doc_md + json.dumps(DagSerialization.to_dict(dag), default=str)
        for secret in SECRETS:
            assert secret not in text, f"{secret} leaked in {dag.dag_id}"
    doc = bag.dags["mirrorflow__A__B"].doc_md
    assert "source.cluster.sasl.jaas.config = ***" in doc
    assert "target.cluster.ssl.truststore.password = ***" in doc
    assert "target `kafka_b`" in doc


def test_a_broken_config_is_one_import_error_naming_file_line_and_key(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(TWO_CLUSTERS + "A->B.enabled = true\nA->B.replication.factor = zero\n")
    bag = dag_bag(config)
    assert bag.dags == {}
    error = import_error(bag)
    assert f"{config}:{line_of(config, 'A->B.replication.factor')}: A->B.replication.factor" in error
    assert "MIRRORFLOW_CONFIG" in error


def test_a_missing_config_file_is_an_import_error(tmp_path: Path, dag_bag: Callable[..., Any]) -> None:
    error = import_error(dag_bag(tmp_path / "nowhere.properties"))
    assert f"{tmp_path / 'nowhere.properties'}: file not found" in error


def test_a_broken_flow_becomes_a_placeholder_and_the_others_run(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(
        TWO_CLUSTERS + "A->B.enabled = true\nB->A.enabled = true\nB->A.mirrorflow.schedule = every tuesday\n"
    )
    bag = dag_bag(config)
    assert bag.import_errors == {}
    assert {t.task_id for t in bag.dags["mirrorflow__A__B"].tasks} == CONTINUOUS_TASKS
    broken = bag.dags["mirrorflow__B__A"]
    assert "mirrorflow:broken" in broken.tags
    assert type(broken.timetable).__name__ == "NullTimetable"
    assert [t.task_id for t in broken.tasks] == ["config_error"]
    where = f"{config}:{line_of(config, 'B->A.mirrorflow.schedule')}: B->A.mirrorflow.schedule"
    assert where in broken.doc_md
    task = broken.get_task("config_error")
    with pytest.raises(MirrorflowError, match="'every tuesday' is neither a cron string nor an interval"):
        task.python_callable(**task.op_kwargs)


def test_a_bad_cron_at_top_level_breaks_every_flow_at_that_line(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(TWO_CLUSTERS + "A->B.enabled = true\nB->A.enabled = true\nmirrorflow.schedule = 61 * * * *\n")
    bag = dag_bag(config)
    assert bag.import_errors == {}
    where = f"{config}:{line_of(config, 'mirrorflow.schedule')}: mirrorflow.schedule"
    for dag_id in ("mirrorflow__A__B", "mirrorflow__B__A"):
        assert "mirrorflow:broken" in bag.dags[dag_id].tags
        assert where in bag.dags[dag_id].doc_md
        assert "'61 * * * *' is not a valid cron string" in bag.dags[dag_id].doc_md


def test_strict_mode_turns_a_broken_flow_into_an_import_error(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(
        TWO_CLUSTERS + "A->B.enabled = true\nB->A.enabled = true\nB->A.mirrorflow.schedule = every tuesday\n"
    )
    bag = dag_bag(config, MIRRORFLOW_STRICT="1")
    assert bag.dags == {}
    error = import_error(bag)
    assert "MIRRORFLOW_STRICT is set and 1 flow(s) cannot be built" in error
    assert f"{config}:{line_of(config, 'B->A.mirrorflow.schedule')}: B->A.mirrorflow.schedule" in error


def test_aliases_are_sanitised_and_a_clash_is_reported(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(
        "clusters = eu$west, eu_west, us\n"
        "eu$west.bootstrap.servers = 127.0.0.1:1\neu_west.bootstrap.servers = 127.0.0.1:2\n"
        "us.bootstrap.servers = 127.0.0.1:3\n"
        "eu$west->us.enabled = true\neu_west->us.enabled = true\nus->eu$west.enabled = true\n"
        "emit.heartbeats.enabled = false\n"
    )
    bag = dag_bag(config)
    assert bag.import_errors == {}
    assert set(bag.dags) == {"mirrorflow__eu_west__us", "mirrorflow__us__eu_west"}
    assert "target:eu$west" in bag.dags["mirrorflow__us__eu_west"].tags
    clash = bag.dags["mirrorflow__eu_west__us"]
    assert "mirrorflow:broken" in clash.tags
    assert "flows eu$west->us and eu_west->us both map to DAG id 'mirrorflow__eu_west__us'" in clash.doc_md


def test_the_clusters_subset_keeps_flows_into_those_clusters(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(
        "clusters = A, B, C\n"
        + "".join(f"{c}.bootstrap.servers = 127.0.0.1:{port}\n" for c, port in (("A", 1), ("B", 2), ("C", 3)))
        + "A->B.enabled = true\nB->C.enabled = true\nC->A.enabled = true\n"
    )
    flows_only = {"mirrorflow__A__B", "mirrorflow__B__C", "mirrorflow__C__A"}
    everything = set(dag_bag(config).dags)
    assert flows_only < everything
    into_b = set(dag_bag(config, MIRRORFLOW_CLUSTERS="B").dags)
    assert into_b == {"mirrorflow__A__B", "mirrorflow__heartbeats__B"}
    into_a_c = set(dag_bag(config, MIRRORFLOW_CLUSTERS="A, C").dags)
    assert into_a_c & flows_only == {"mirrorflow__B__C", "mirrorflow__C__A"}
    assert all(dag_id.endswith(("__A", "__C")) for dag_id in into_a_c)
    assert dag_bag(config, MIRRORFLOW_CLUSTERS="A C").dags.keys() == set(into_a_c)
    copy = dag_bag(config, MIRRORFLOW_CLUSTERS="B").dags["mirrorflow__A__B"].get_task("copy")
    assert copy.application_args[-2:] == ["--clusters", "B"]


def test_a_worker_parse_builds_only_its_dag(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(TWO_CLUSTERS + "A->B.enabled = true\nB->A.enabled = true\n")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "mirrorflow__B__A")
    assert set(dag_bag(config).dags) == {"mirrorflow__B__A"}


def test_parsing_twelve_flows(write_config: Callable[..., Path], dag_bag: Callable[..., Any]) -> None:
    """Prints the parse time of a 12-flow file (asserted elsewhere: never on wall-clock time)."""
    aliases = ["dc1", "dc2", "dc3", "dc4"]
    text = f"clusters = {', '.join(aliases)}\n"
    text += "".join(f"{a}.bootstrap.servers = 127.0.0.1:{9000 + i}\n" for i, a in enumerate(aliases))
    text += "".join(f"{s}->{t}.enabled = true\n" for s in aliases for t in aliases if s != t)
    config = write_config(text)
    dag_bag(config)  # warm: the first parse in a process imports the providers
    started = time.perf_counter()
    bag = dag_bag(config)
    elapsed = time.perf_counter() - started
    assert bag.import_errors == {}
    assert len(bag.dags) == 12
    [stat] = bag.dagbag_stats  # the bag holds the flows file alone
    print(f"\n12 flows: DagBag {elapsed * 1000:.0f} ms, file parse {stat.duration.total_seconds() * 1000:.0f} ms")


def test_an_unexpected_build_failure_is_contained_to_its_flow(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(
        TWO_CLUSTERS + "A->B.enabled = true\nB->A.enabled = true\nB->A.mirrorflow.copy.run.seconds = 99999999999999\n"
    )
    bag = dag_bag(config)
    assert bag.import_errors == {}
    assert {t.task_id for t in bag.dags["mirrorflow__A__B"].tasks} == CONTINUOUS_TASKS
    broken = bag.dags["mirrorflow__B__A"]
    assert [t.task_id for t in broken.tasks] == ["config_error"]
    assert f"{config}: flow B->A: OverflowError" in broken.doc_md


def test_retries_delay_and_timeout_come_from_the_flow(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(
        TWO_CLUSTERS + "A->B.enabled = true\nB->A.enabled = true\n"
        "A->B.mirrorflow.airflow.retries = 0\n"
        "A->B.mirrorflow.airflow.retry.delay.seconds = 5\n"
        "A->B.mirrorflow.airflow.execution.timeout.seconds = 120\n"
    )
    bag = dag_bag(config)
    assert bag.import_errors == {}
    tuned, default = bag.dags["mirrorflow__A__B"], bag.dags["mirrorflow__B__A"]
    assert {t.retries for t in tuned.tasks} == {0}
    assert {t.retry_delay for t in tuned.tasks} == {timedelta(seconds=5)}
    assert tuned.get_task("discover").execution_timeout == timedelta(seconds=120)
    assert {t.retries for t in default.tasks} == {3}
    assert {t.retry_delay for t in default.tasks} == {timedelta(seconds=30)}
    assert default.get_task("sync_topics").execution_timeout == timedelta(minutes=15)


def test_a_flow_dag_run_gets_a_deadline_alert_when_its_key_is_set(
    write_config: Callable[..., Path],
    dag_bag: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Measured from when the run was queued; the scheduler raising it is tests/airflow/test_scheduler_postgres.py.
    Opt-in (airflow/alerts.deadline_alert; tests/airflow/test_deadline_canary.py)."""
    import logging

    from mirrorflow.airflow.alerts import log_deadline_miss

    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("mirrorflow.airflow.alerts")
    monkeypatch.setattr(logger, "disabled", False)  # Airflow's and the CLI's logging setups vary by what ran
    monkeypatch.setattr(logger, "handlers", [handler])
    config = write_config(
        TWO_CLUSTERS + "A->B.enabled = true\nB->A.enabled = true\n"
        "A->B.mirrorflow.airflow.deadline.seconds = 600\n"
        "A->B.mirrorflow.airflow.deadline.notifier = tests.airflow.notify_probe.record_deadline\n"
        "B->A.mirrorflow.airflow.deadline.seconds = 4500\n"
    )
    bag = dag_bag(config)
    assert bag.import_errors == {}
    [tuned], [default] = bag.dags["mirrorflow__A__B"].deadline, bag.dags["mirrorflow__B__A"].deadline
    assert tuned.interval == timedelta(seconds=600)
    assert tuned.callback.path == "tests.airflow.notify_probe.record_deadline"
    assert tuned.callback.kwargs == {"flow": "A->B"}
    assert type(tuned.reference).__name__ == type(default.reference).__name__ == "DagRunQueuedAtDeadline"
    assert default.interval == timedelta(seconds=4500)
    assert default.callback.path == "mirrorflow.airflow.alerts.log_deadline_miss"
    log_deadline_miss(context={"dag_run": {"run_id": "manual__1"}}, flow="B->A")
    assert any("flow B->A: DAG run manual__1 is still running past its deadline" in line for line in lines), lines
    unset = dag_bag(write_config(TWO_CLUSTERS + "A->B.enabled = true\n")).dags["mirrorflow__A__B"]
    assert not unset.deadline


def test_continuous_loops_can_have_a_pool_of_their_own(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(
        TWO_CLUSTERS
        + "A->B.enabled = true\nB->A.enabled = true\nA->B.mirrorflow.airflow.loop.pool = mirrorflow_loops\n"
    )
    bag = dag_bag(config)
    assert bag.import_errors == {}
    pooled, default = bag.dags["mirrorflow__A__B"], bag.dags["mirrorflow__B__A"]
    assert {t.task_id for t in pooled.tasks if t.pool == "mirrorflow_loops"} == {"loops"}
    assert {t.pool for t in default.tasks} == {"default_pool"}


def test_a_negative_retry_count_is_refused_with_its_line(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(TWO_CLUSTERS + "A->B.enabled = true\nA->B.mirrorflow.airflow.retries = -1\n")
    error = import_error(dag_bag(config))
    key = "A->B.mirrorflow.airflow.retries"
    assert f"{config}:{line_of(config, key)}: {key}: -1 is not a number of retries" in error


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("tests.airflow.no_such_module.record", "'tests.airflow.no_such_module.record' cannot be loaded"),
        ("tests.airflow.notify_probe.NOT_CALLABLE", "'tests.airflow.notify_probe.NOT_CALLABLE' is not a callable"),
    ],
)
def test_a_failure_notifier_that_cannot_be_used_breaks_its_flow_at_its_line(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any], path: str, problem: str
) -> None:
    key = "B->A.mirrorflow.airflow.failure.notifier"
    config = write_config(TWO_CLUSTERS + f"A->B.enabled = true\nB->A.enabled = true\n{key} = {path}\n")
    bag = dag_bag(config)
    assert bag.import_errors == {}
    assert "mirrorflow:broken" not in bag.dags["mirrorflow__A__B"].tags
    broken = bag.dags["mirrorflow__B__A"]
    assert "mirrorflow:broken" in broken.tags
    assert f"{config}:{line_of(config, key)}: {key}: {problem}" in broken.doc_md


def test_the_copy_task_goes_to_the_flows_queue_and_the_others_to_the_default(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    config = write_config(
        TWO_CLUSTERS + "A->B.enabled = true\nB->A.enabled = true\nA->B.mirrorflow.airflow.copy.queue = spark\n"
    )
    bag = dag_bag(config)
    assert bag.import_errors == {}
    tuned, default = bag.dags["mirrorflow__A__B"], bag.dags["mirrorflow__B__A"]
    assert tuned.get_task("copy").queue == "spark"
    assert {t.queue for t in tuned.tasks if t.task_id != "copy"} == {"default"}
    assert {t.queue for t in default.tasks} == {"default"}


def test_an_empty_copy_queue_is_refused_with_its_line(
    write_config: Callable[..., Path], dag_bag: Callable[..., Any]
) -> None:
    key = "A->B.mirrorflow.airflow.copy.queue"
    config = write_config(TWO_CLUSTERS + f"A->B.enabled = true\n{key} =  \n")
    error = import_error(dag_bag(config))
    assert f"{config}:{line_of(config, key)}: {key}: an empty queue name" in error

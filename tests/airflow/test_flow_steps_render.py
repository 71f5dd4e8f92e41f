"""One flow, one step graph (`replication/flow_steps.py`), rendered by the three shells: the CLI cycle with the
Spark copy job as its copy step (`mirrorflow run --once`), and the Airflow DAG in both copy modes. Each must show
the same steps in the same order: the CLI's run order is the plan's, and the plan's order is a topological order
of the DAG's tasks (a task's upstream tasks belong to earlier steps, and each step's own tasks are present)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from tests.kafka_helpers import commit_when_ready

from mirrorflow.config.loader import load_config
from mirrorflow.replication.flow_steps import COPY, ORDER, flow_steps

pytestmark = pytest.mark.integration


def _config_text(live_flow: Any, topic: str) -> str:
    """A->B in interval mode, B->A (the same steps) in continuous mode: one DagBag renders both."""
    return live_flow.config_text(
        "".join(
            f"{f}.enabled = true\n{f}.topics = {topic}\n{f}.groups = {topic}-.*\n"
            f"{f}.heartbeats.replication.enabled = false\n{f}.sync.group.offsets.enabled = true\n"
            f"{f}.mirrorflow.copy.mode = {mode}\n{f}.mirrorflow.spark.master = local[2]\n"
            for f, mode in (("A->B", "interval"), ("B->A", "continuous"))
        )
    )


def _steps_of_tasks(flow: Any, dag: Any) -> dict[str, str]:
    """task id -> step name; the continuous `loops` task stands for the steps that run beside the copy."""
    owner = {task_id: s.name for s in flow_steps(flow) for task_id in s.tasks}
    return {t.task_id: owner.get(t.task_id, "loops") for t in dag.tasks}


def _assert_plan_order_fits(flow: Any, dag: Any) -> list[str]:
    """The plan's order is a topological order of the DAG; returns the steps the DAG renders, in plan order."""
    step_of = _steps_of_tasks(flow, dag)
    beside = [s.name for s in flow_steps(flow) if s.beside_copy]
    rank = {name: i for i, name in enumerate(ORDER)}
    rank["loops"] = rank[COPY]  # the loop runs beside the copy: after what the copy waits for
    for task in dag.tasks:
        for upstream in task.upstream_task_ids:
            assert rank[step_of[upstream]] <= rank[step_of[task.task_id]], (upstream, task.task_id)
    rendered = {step_of[t.task_id] for t in dag.tasks}
    if "loops" in rendered:
        rendered = (rendered - {"loops"}) | set(beside)
    return [name for name in ORDER if name in rendered]


def test_the_cli_the_spark_job_and_both_dags_render_the_same_steps_in_the_same_order(
    live_flow: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mirrorflow.replication.flow_cycle import ALL_STEPS, run_control_plane
    from mirrorflow.spark.copy_job import CopyStep

    topic = live_flow.source_topic("render")
    producer = live_flow.producer("A")
    for i in range(10):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    commit_when_ready(
        {"bootstrap.servers": live_flow.clusters.bootstrap("A")}, f"{topic}-g", TopicPartition(topic, 0, 3)
    )
    config = live_flow.tmp_path / "interval.properties"
    config.write_text(_config_text(live_flow, topic))
    flow = load_config(config).flow("A->B")
    plan = [s.name for s in flow_steps(flow)]
    assert plan == list(ORDER)

    # The in-process session sets PYSPARK_PYTHON for its executors: undone after the test, not left to others.
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    copy = CopyStep(master="local[2]")  # the Spark copy job, as `mirrorflow run` calls it
    try:
        report = run_control_plane(flow, steps=ALL_STEPS, copy=copy)
    finally:
        copy.close()
    assert list(report.steps) == plan
    assert report.copy["records"] == 10 and report.checkpoints is not None

    bag = live_flow.dag_bag(config)
    assert not bag.import_errors, bag.import_errors
    assert _assert_plan_order_fits(flow, bag.dags["mirrorflow__A__B"]) == plan
    continuous = bag.dags["mirrorflow__B__A"]
    assert {t.task_id for t in continuous.tasks} >= {"copy", "loops"}
    assert _assert_plan_order_fits(load_config(config).flow("B->A"), continuous) == plan

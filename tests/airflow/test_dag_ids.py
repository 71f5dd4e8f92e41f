"""DAG ids and tags derived from cluster aliases."""

from __future__ import annotations

from mirrorflow.airflow.dag_ids import flow_dag_id, flow_tags, heartbeat_dag_id, heartbeat_task_id, sanitise


def test_ids_follow_the_design_and_keep_airflow_safe_characters() -> None:
    assert flow_dag_id("A", "B") == "mirrorflow__A__B"
    assert flow_dag_id("us-east.1", "eu_west") == "mirrorflow__us-east.1__eu_west"
    assert heartbeat_dag_id("A") == "mirrorflow__heartbeats__A"  # every heartbeat-only pair into A
    assert heartbeat_dag_id("eu west") == "mirrorflow__heartbeats__eu_west"
    assert heartbeat_task_id("us-east.1") == "from__us-east.1"


def test_characters_airflow_refuses_become_underscores() -> None:
    assert sanitise("eu west/2") == "eu_west_2"
    assert sanitise("zürich") == "z_rich"
    assert sanitise("") == "_"


def test_tags_keep_the_real_alias_within_airflows_length() -> None:
    assert flow_tags("eu west", "B") == ["mirrorflow", "source:eu west", "target:B"]
    assert all(len(tag) <= 100 for tag in flow_tags("x" * 300, "B"))

"""The seed's multi-data-centre file through the real dags folder: one DAG per flow MM2 would run, for the whole
file and for each data centre's `MIRRORFLOW_CLUSTERS` subset (MM2's `--clusters`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mirrorflow.airflow.dag_ids import flow_dag_id, heartbeat_dag_id
from mirrorflow.config.loader import load_config

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "configs" / "seed001_multi_dc.properties"


@pytest.mark.parametrize("clusters", [None, "west-1 west-2", "east-1,east-2", "north-1 north-2"])
def test_one_dag_per_flow_mm2_would_run(dag_bag: Callable[..., Any], clusters: str | None) -> None:
    subset = clusters.replace(",", " ").split() if clusters else None
    expected = {flow_dag_id(f.source, f.target) for f in load_config(SEED, clusters=subset, environ={}).flows}
    assert expected, "the seed enables flows"

    bag = dag_bag(SEED, **({"MIRRORFLOW_CLUSTERS": clusters} if clusters else {}))

    assert bag.import_errors == {}
    flow_dags = {dag_id for dag_id, dag in bag.dags.items() if "mirrorflow:heartbeats" not in dag.tags}
    assert flow_dags == expected


def test_heartbeat_only_pairs_share_one_dag_per_target(dag_bag: Callable[..., Any]) -> None:
    """30 pairs of the 6-cluster file run a herder, 12 of them flows: the 18 heartbeat-only pairs make one
    heartbeats DAG per target cluster (the cluster their heartbeats are written to), one task per source."""
    config = load_config(SEED, environ={})
    enabled = {f.name for f in config.flows}
    pairs = [f for f in config.heartbeat_flows if f.name not in enabled and f.emit_heartbeats_enabled]
    assert len(config.flows) == 12 and len(pairs) == 18

    bag = dag_bag(SEED)

    assert bag.import_errors == {}
    beats = {dag_id: dag for dag_id, dag in bag.dags.items() if "mirrorflow:heartbeats" in dag.tags}
    assert len(bag.dags) - len(beats) == 12
    targets = {f.target for f in pairs}
    assert set(beats) == {heartbeat_dag_id(t) for t in targets}
    for target in targets:
        dag = beats[heartbeat_dag_id(target)]
        expected = {f.name for f in pairs if f.target == target}
        assert {t.op_kwargs["flow_name"] for t in dag.tasks} == expected
        assert len(dag.tasks) == len(expected)
        assert all(not t.upstream_task_ids for t in dag.tasks), "a down source cluster fails only its own task"

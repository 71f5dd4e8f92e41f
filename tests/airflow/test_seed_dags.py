"""The seed's multi-data-centre file through the real dags folder: one DAG per flow MM2 would run, for the whole
file and for each data centre's `MIRRORFLOW_CLUSTERS` subset (MM2's `--clusters`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mirrorflow.airflow.dag_ids import flow_dag_id
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

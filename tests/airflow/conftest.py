"""Airflow fixtures: a migrated metadata DB once per session, configs on disk, and DagBags of the real `dags/`.

The root conftest has already pointed AIRFLOW_HOME, the dags folder and the SQLite DB at a temporary home.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """Create every metadata table once (dag.test() cannot run on an empty SQLite file)."""
    from airflow.utils import db

    db.resetdb()


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """`write_config(text, name="mm2.properties")` -> the path of a config file with that text."""

    def write(text: str, name: str = "mm2.properties") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


@pytest.fixture
def dag_bag(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """`dag_bag(config, MIRRORFLOW_STRICT="1", ...)` -> a DagBag of the real flows DAG file reading `config`."""

    def load(config: Path, **env: str) -> Any:
        from airflow.dag_processing.dagbag import DagBag

        monkeypatch.setenv("MIRRORFLOW_CONFIG", str(config))
        for name in ("MIRRORFLOW_CLUSTERS", "MIRRORFLOW_STRICT"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        # Only the flows file: the runbook DAGs beside it have tests of their own (test_failover_dag.py).
        return DagBag(dag_folder=str(DAGS / "mirrorflow_flows.py"))

    yield load

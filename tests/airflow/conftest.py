"""Airflow fixtures: a migrated metadata DB once per session, configs on disk, DagBags of the real `dags/`, and
`live_flow` for the `dag.test()` runs against the session's real clusters.

The root conftest has already pointed AIRFLOW_HOME, the dags folder and the SQLite DB at a temporary home.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy import select

from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text

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


@dataclass(frozen=True)
class LiveFlow:
    """The session's clusters A and B, this test's tmp dir and DagBag loader, with the steps every `dag.test()`
    test against them repeats: one object instead of six fixtures and copies of the same XCom queries."""

    tmp_path: Path
    clusters: LocalClusters
    admin: Callable[..., AdminClient]
    producer: Callable[..., Producer]
    unique_topic: Callable[..., str]
    dag_bag: Callable[..., Any]

    def source_topic(self, prefix: str, partitions: int = 2, config: Mapping[str, str] | None = None) -> str:
        """A new topic at A (replication factor 1), created before this returns."""
        topic = self.unique_topic(prefix)
        new = NewTopic(topic, partitions, 1, config=dict(config)) if config else NewTopic(topic, partitions, 1)
        self.admin("A").create_topics([new])[topic].result()
        return topic

    def config_text(self, body: str = "") -> str:
        """mm2.properties text for the session's A and B, followed by `body`."""
        return mm2_config_text({alias: self.clusters.bootstrap(alias) for alias in ("A", "B")}, body)

    def dag(self, config: Path, dag_id: str = "mirrorflow__A__B") -> Any:
        """DAG `dag_id` of a DagBag reading `config`; the bag must have parsed without import errors."""
        bag = self.dag_bag(config)
        assert bag.import_errors == {}
        return bag.dags[dag_id]

    @staticmethod
    def states(dag_run: Any) -> dict[str, Any]:
        """Each task's final state by task id: what a failed assertion on a run should print."""
        return {ti.task_id: ti.state for ti in dag_run.get_task_instances()}

    @staticmethod
    def xcoms(dag_run: Any, key: str | None = "return_value") -> dict[str, Any]:
        """The run's XCom values of `key` (every key when None) by task id."""
        return {task_id: value for task_id, value in _xcom_rows(dag_run, key)}

    @staticmethod
    def return_value(dag_run: Any, task_id: str) -> dict[str, Any]:
        """The one return value of task `task_id` in the run: each task under test here returns a dict."""
        [(_, value)] = _xcom_rows(dag_run, "return_value", task_id)
        assert isinstance(value, dict), value
        return value

    @staticmethod
    def asset_events(dag_run: Any, uri: str) -> list[dict[str, Any]]:
        """The extras of the asset events the run's tasks emitted for asset `uri`, as Airflow stored them."""
        from airflow.models.asset import AssetEvent, AssetModel
        from airflow.utils.session import create_session

        with create_session() as session:
            query = (
                select(AssetEvent)
                .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                .where(AssetModel.uri == uri, AssetEvent.source_run_id == dag_run.run_id)
            )
            return [dict(event.extra or {}) for event in session.scalars(query).all()]


def _xcom_rows(dag_run: Any, key: str | None, task_ids: str | None = None) -> list[tuple[str, Any]]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = XComModel.get_many(run_id=dag_run.run_id, dag_ids=dag_run.dag_id, key=key, task_ids=task_ids)
        return [(row.task_id, XComModel.deserialize_value(row)) for row in session.scalars(query).all()]


@pytest.fixture
def live_flow(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
    dag_bag: Callable[..., Any],
) -> LiveFlow:
    """A `LiveFlow` for this test (a module's own `dag_bag` fixture takes the place of this conftest's); tests
    that call `dag.test()` also request `airflow_db`."""
    return LiveFlow(tmp_path, kafka_clusters, kafka_admin, kafka_producer, unique_topic, dag_bag)

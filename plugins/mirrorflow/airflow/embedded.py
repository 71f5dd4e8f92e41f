"""Airflow on the embedded default: a private AIRFLOW_HOME on SQLite, the real `dags/` folder, and each flow DAG
run once with `dag.test()` (no scheduler, no web server). `make demo` uses it; `make airflow` starts the real
`airflow standalone` on the same settings instead.

Airflow reads its configuration when first imported, so `prepare_home` must run before anything imports
airflow in this process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirrorflow.core.errors import MirrorflowError

REPO = Path(__file__).resolve().parents[3]
"""The checkout this package runs from (plugins/mirrorflow/airflow/ -> the root): `dags/`, `spark_jobs/`,
`config/`. The one place that counts the levels."""
DAGS = REPO / "dags"
PLUGINS = REPO / "plugins"


def airflow_environment(home: Path, config: Path, *, parallelism: int = 4) -> dict[str, str]:
    """The settings of an embedded Airflow for `config`; small parallelism suits a 2-core laptop."""
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS),
        "AIRFLOW__CORE__PARALLELISM": str(parallelism),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "MIRRORFLOW_CONFIG": str(config),
        # spark-submit and the Spark workers must come from this environment.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
    }


def prepare_home(home: Path, config: Path) -> None:
    """Point this process's Airflow at `home` and migrate its SQLite database."""
    if "airflow" in sys.modules:
        raise MirrorflowError("Airflow was imported before its home was prepared; call prepare_home first")
    home = home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ.update(airflow_environment(home, config.resolve()))
    from airflow.utils import db

    db.resetdb()


@dataclass
class DagRunResult:
    dag_id: str
    state: str
    task_states: dict[str, str]
    results: dict[str, Any] = field(default_factory=dict)


def run_flow_dags(only: Mapping[str, str] | None = None) -> list[DagRunResult]:
    """Run every DAG of `dags/` once with `dag.test()` (or only the ids in `only`), in dependency-free order."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    if bag.import_errors:
        first = next(iter(bag.import_errors.values()))
        raise MirrorflowError(f"the flow DAGs did not load: {first}")
    results = []
    for dag_id in sorted(bag.dags):
        if only is not None and dag_id not in only:
            continue
        dag_run = bag.dags[dag_id].test()
        states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
        results.append(DagRunResult(dag_id, str(dag_run.state), states, _xcoms(dag_run)))
    return results


def _xcoms(dag_run: Any) -> dict[str, Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows: Any = session.scalars(
            XComModel.get_many(run_id=dag_run.run_id, dag_ids=dag_run.dag_id, key="return_value")
        ).all()
        return {row.task_id: XComModel.deserialize_value(row) for row in rows}

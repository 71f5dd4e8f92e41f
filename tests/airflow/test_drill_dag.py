"""The DR drill (`mirrorflow_drill`, `mirrorflow drill`) on the session's real clusters: a drill whose reverse flow
is not armed fails its task loudly with its report kept; once B->A is enabled it passes; the kept history stays
within `mirrorflow.drill.history`."""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.airflow.test_failover_dag import _copied_flow, dag_bag  # noqa: F401  (the whole dags/ folder)

from mirrorflow.replication.failover.drill import history, run_drill

pytestmark = pytest.mark.integration
DRILL_KEYS = (
    "mirrorflow.drill.schedule = @daily\n"
    "mirrorflow.drill.fence = command\n"
    "mirrorflow.drill.fence.command = true --fence\n"
    "mirrorflow.drill.history = 2\n"
)


def checks(report: dict[str, Any]) -> dict[str, bool]:
    return {c["name"]: c["passed"] for c in report["checks"]}


def test_a_drill_fails_loudly_keeps_its_report_then_passes_once_failback_is_armed(
    airflow_db: None, live_flow: Any
) -> None:
    config, _topic, group = _copied_flow(live_flow)
    config.write_text(config.read_text() + DRILL_KEYS)
    dag = live_flow.dag(config, "mirrorflow_drill")
    assert [t.task_id for t in dag.tasks] == ["drill__A__B"]
    started_ms = int(time.time() * 1000)
    dag_run = dag.test()
    assert live_flow.states(dag_run) == {"drill__A__B": "failed"}
    # The newest kept drill (other tests on the shared clusters may have drilled the pair A->B before)
    kept = history(str(config), "A->B")[-1]
    assert kept["at_ms"] >= started_ms, kept
    assert kept["passed"] is False
    assert checks(kept) == {"groups": True, "fence": True, "reverse": False}, kept
    assert group in next(c["detail"] for c in kept["checks"] if c["name"] == "groups")

    config.write_text(config.read_text() + "B->A.enabled = true\nB->A.topics = drill-nothing-here\n")
    for _ in range(2):
        report = run_drill(str(config), "A->B")
        assert report["passed"] is True and checks(report) == {"groups": True, "fence": True, "reverse": True}
    kept_now = history(str(config), "A->B")
    seqs = [r["seq"] for r in kept_now]  # slots of other tests' larger `mirrorflow.drill.history` are deleted
    assert seqs == [kept["seq"] + 1, kept["seq"] + 2], "two slots: oldest overwritten"
    # The dashboard's card for the flow carries the newest drill.
    from mirrorflow.airflow.dashboard import flow_summary
    from mirrorflow.config.loader import load_config

    card = flow_summary(load_config(config).flow("A->B"), 30.0)
    assert card["last_drill"]["passed"] is True and card["last_drill"]["at_ms"] == kept_now[-1]["at_ms"], card


def test_without_a_usable_fence_the_drill_fails(airflow_db: None, live_flow: Any) -> None:
    config, _topic, _group = _copied_flow(live_flow)
    config.write_text(config.read_text() + DRILL_KEYS.replace("true --fence", "no-such-fence-tool"))
    report = run_drill(str(config), "A->B")
    assert report["passed"] is False and checks(report)["fence"] is False
    assert "no-such-fence-tool" in next(c["detail"] for c in report["checks"] if c["name"] == "fence")

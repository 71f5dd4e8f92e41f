"""Review of the DR drill (issue 20): a drill the runbook's dry run refuses is a failed drill, and its evidence
must be kept like any other failed drill's.

Here the preflight refuses because the group the failover would move is already consuming on B (the DR side).
`run_drill` lets the runbook's `FailoverFailed` out, so no report is kept: `mirrorflow drill --history` and the
dashboard's "last drill" card keep showing the previous drill (a PASS, if there was one) while every drill
since fails. An auditor sees a green drill that never happened.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer
from tests.airflow.test_failover_dag import _copied_flow, dag_bag  # noqa: F401  (the whole dags/ folder)

from mirrorflow.replication.failover.drill import history, run_drill
from mirrorflow.replication.failover.runbook import FailoverFailed

pytestmark = pytest.mark.integration
DRILL_KEYS = (
    "mirrorflow.drill.schedule = @daily\n"
    "mirrorflow.drill.fence = command\n"
    "mirrorflow.drill.fence.command = true --fence\n"
    "B->A.enabled = true\nB->A.topics = drill-nothing-here\n"
)


def test_a_drill_the_dry_run_refuses_is_kept_as_a_failed_drill(live_flow: Any) -> None:
    config, topic, group = _copied_flow(live_flow)
    config.write_text(config.read_text() + DRILL_KEYS)
    first = run_drill(str(config), "A->B")
    assert first["passed"] is True, first

    consumer = Consumer(
        {
            "bootstrap.servers": live_flow.clusters.bootstrap("B"),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "log_level": "0",
        }
    )
    try:
        consumer.subscribe([f"A.{topic}"])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment(), "the group joined on B"
        try:
            report: dict[str, Any] | None = run_drill(str(config), "A->B")
        except FailoverFailed:
            report = None
        kept = history(str(config), "A->B")
    finally:
        consumer.close()
    assert kept[-1]["seq"] > first["seq"], (
        "the refused drill left no report: the newest kept drill is still the earlier PASS "
        f"(seq {kept[-1]['seq']}, passed={kept[-1]['passed']})"
    )
    assert kept[-1]["passed"] is False
    assert report is None or report["passed"] is False

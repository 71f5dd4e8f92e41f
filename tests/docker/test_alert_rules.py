"""docker/prometheus/alerts.yml evaluated by Prometheus' own rule engine: `promtool test rules` runs
tests/docker/alerts_test.yml, which feeds a breached `mirrorflow_flow_slo_breached` series and expects the
MirrorflowReplicationSloBreached alert to fire (and to stay silent before `for:` and after recovery).

promtool comes from Debian's `prometheus` package (`make promtool`, part of `make test`); without it the test fails
with that instruction, as the dashboard's browser test does without Chromium.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is not installed: run `make promtool` (Debian's prometheus package; needs root)"
    return found


def test_promtool_checks_the_rule_file() -> None:
    rules = HERE.parents[1] / "docker" / "prometheus" / "alerts.yml"
    done = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_slo_alert_fires_on_a_breached_series() -> None:
    done = subprocess.run(
        [promtool(), "test", "rules", "alerts_test.yml"], cwd=HERE, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout

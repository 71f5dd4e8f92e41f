"""docker/'s Prometheus scrape config, alert rules and Grafana dashboard, checked by construction (no network).

Metric names are not listed by hand: they come from the registry `mirrorflow metrics serve` builds
(`FlowCollector`), fed one synthetic partition and flow so that every family has a sample with its labels.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"
PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool"}
PROMETHEUS_OWN = {"up": ("job", "instance")}  # series Prometheus itself records for every target
SCRAPE_LABELS = {"job", "instance", "deployment"}


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    """The compose services as written (volumes and ports of these services use no variables)."""
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Metric name -> label names, from the registry `mirrorflow metrics serve` serves."""
    from prometheus_client.registry import CollectorRegistry

    from mirrorflow.cli import metrics_cmd
    from mirrorflow.replication.flow_health import FlowHealth
    from mirrorflow.replication.metrics import SOURCE_METRICS, PartitionView
    from mirrorflow.replication.slo import FlowSlo

    view = PartitionView("A", "B", "A.t", 0, "t", 5, 9, 4, 1.5, 1, dict.fromkeys(SOURCE_METRICS, 1.0))
    health = FlowHealth("A", "B", heartbeat_ms=1, checkpoint_ms=1, now_ms=2)
    # Both targets set and breached, so every SLO family has a sample.
    slo = FlowSlo("A->B", "A", "B", 30.0, 100, 45.0, 120, True, True, 1_700_000_000_000)
    mp = pytest.MonkeyPatch()
    mp.setattr(metrics_cmd, "flow_views", lambda flow, **_wait: [view])
    mp.setattr(metrics_cmd, "flow_health", lambda flow, **_wait: health)
    mp.setattr(metrics_cmd, "flow_slo", lambda flow, views, **_wait: slo)
    try:
        registry = CollectorRegistry()
        registry.register(metrics_cmd.FlowCollector([SimpleNamespace(name="A->B")]))  # type: ignore[list-item]
        families = list(registry.collect())
    finally:
        mp.undo()
    names = {s.name: set(s.labels) for f in families for s in f.samples}
    assert all(f.samples for f in families), "a family without a sample: its labels are unknown"
    return names


def promql_metrics(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers outside label matchers, label lists and function calls."""
    stripped = re.sub(r'"[^"]*"', "", expr)
    stripped = re.sub(r"\{[^}]*\}", " ", stripped)
    stripped = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", stripped)
    stripped = re.sub(r"\[[^\]]*\]", " ", stripped)
    tokens = re.findall(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()", stripped)
    return {t for t in tokens if t not in PROMQL_WORDS}


def promql_grouping_labels(expr: str) -> set[str]:
    lists = re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr)
    return {label.strip() for group in lists for label in group.split(",") if label.strip()}


def check_expr(expr: str, exported: dict[str, set[str]], where: str) -> set[str]:
    metrics = promql_metrics(expr)
    assert metrics, f"{where}: no metric in {expr!r}"
    known = {**exported, **{k: set(v) for k, v in PROMETHEUS_OWN.items()}}
    unknown = metrics - set(known)
    assert not unknown, f"{where}: {sorted(unknown)} not exported by `mirrorflow metrics serve`"
    labels = set().union(*(known[m] for m in metrics)) | SCRAPE_LABELS
    assert promql_grouping_labels(expr) <= labels, f"{where}: groups by a label the metrics do not carry"
    return metrics


def test_prometheus_scrapes_the_metrics_service(services: dict[str, dict[str, Any]]) -> None:
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["prometheus"]["volumes"]}
    for rule_file in config["rule_files"]:
        assert rule_file in mounts and (DOCKER / mounts[rule_file]).is_file()
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert len(jobs) == len(config["scrape_configs"])
    [target] = [t for c in jobs["mirrorflow"]["static_configs"] for t in c["targets"]]
    host, port = target.split(":")
    assert host == "metrics" and f"--port {port}" in " ".join(services["metrics"]["command"])
    assert config["global"]["scrape_timeout"] <= config["global"]["scrape_interval"]


def test_alert_rules_cover_the_four_conditions_on_exported_metrics(exported: dict[str, set[str]]) -> None:
    rules = yaml.safe_load((DOCKER / "prometheus" / "alerts.yml").read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    names = [rule["alert"] for rule in alerts]
    assert len(names) == len(set(names))
    used: set[str] = set()
    for rule in alerts:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]) and rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        used |= check_expr(rule["expr"], exported, rule["alert"])
        templated = set(re.findall(r"\$labels\.(\w+)", json.dumps(rule["annotations"])))
        kept = promql_grouping_labels(rule["expr"]) or set().union(*(exported.get(m, set()) for m in used))
        assert templated <= kept, f"{rule['alert']}: annotations use labels the expression drops"
    for wanted in (
        "mirrorflow_replication_lag_seconds",
        "mirrorflow_heartbeat_age_seconds",
        "mirrorflow_checkpoint_age_seconds",
        "mirrorflow_metrics_flow_up",
        "kafka_connect_mirror_mirrorsourceconnector_record_rate",
        "mirrorflow_flow_slo_breached",
    ):
        assert wanted in used, wanted


def test_grafana_dashboard_queries_exported_metrics(exported: dict[str, set[str]], services: dict[str, Any]) -> None:
    provisioning = DOCKER / "grafana" / "provisioning"
    [datasource] = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert datasource["url"] == "http://prometheus:9090" and "prometheus" in services
    [provider] = yaml.safe_load((provisioning / "dashboards" / "mirrorflow.yaml").read_text())["providers"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["grafana"]["volumes"]}
    assert mounts[provider["options"]["path"]] == "./grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "mirrorflow.json").read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"]
    used: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == datasource["uid"], panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used |= check_expr(target["expr"], exported, panel["title"])
    slo_metrics = {name for name in exported if name.startswith("mirrorflow_flow_") and "target" not in name}
    slo_metrics -= {"mirrorflow_flow_lag_records"}  # the per-partition sum already has a panel
    assert slo_metrics <= used, sorted(slo_metrics - used)
    assert "mirrorflow_flow_rpo_target_seconds" in used
    for variable in dashboard["templating"]["list"]:
        metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["query"]["query"]).groups()  # type: ignore[union-attr]
        assert label in exported[metric], variable["name"]

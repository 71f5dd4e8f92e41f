"""`mirrorflow metrics serve CONFIG [--port 9464]` (Prometheus) and `mirrorflow metrics show CONFIG [--json]`.

Both read what the copy tasks published on each flow's target (`mirrorflow-metrics.<source>.internal`) and compute
lag live, so they may run anywhere that reaches the clusters. Names follow the JMX exporter's convention for MM2's
MBeans (`kafka.connect.mirror:type=MirrorSourceConnector,...` -> `kafka_connect_mirror_mirrorsourceconnector_*`);
see docs/metrics.md.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated

import typer
from prometheus_client import start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from mirrorflow.cli.plan_cmd import ClustersOption, FlowOption, select_flows, setup_logging
from mirrorflow.config.model import Flow
from mirrorflow.replication.flow_health import FlowHealth, flow_health
from mirrorflow.replication.metrics import LAG_METRICS, SOURCE_METRICS, PartitionView, flow_views, prometheus_name

log = logging.getLogger(__name__)
metrics_app = typer.Typer(help="Replication metrics with MM2's names: Prometheus endpoint or a table.")
LAG_HELP = {
    "replication-lag-records": "Source end offset minus the next offset to copy.",
    "replication-lag-seconds": "Age of the oldest record not yet copied (0 when caught up).",
}

HEALTH_METRICS = (
    ("mirrorflow_heartbeat_age_seconds", "Age of the pair's newest heartbeat on the target.", "heartbeat_age_s"),
    ("mirrorflow_checkpoint_age_seconds", "Age of the flow's newest checkpoint on the target.", "checkpoint_age_s"),
)


def register(app: typer.Typer) -> None:
    app.add_typer(metrics_app, name="metrics")


SCRAPE_WAIT_S = 5.0
"""How long a scrape waits for an open transaction on a state topic before it reports the flow down
(`mirrorflow_metrics_flow_up 0`, the error logged): below Prometheus' default 10 s scrape timeout."""


def lag_name(metric: str) -> str:
    return "mirrorflow_" + metric.replace("-", "_")


def gather(flows: Sequence[Flow]) -> list[PartitionView]:
    views: list[PartitionView] = []
    for flow in flows:
        views.extend(flow_views(flow))
    return views


class FlowCollector(Collector):
    """Reads the clusters on every scrape; a flow whose clusters are unreachable is logged and left out."""

    def __init__(self, flows: Sequence[Flow]) -> None:
        self.flows = list(flows)
        self.lock = threading.Lock()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self.lock:
            views: list[PartitionView] = []
            up = GaugeMetricFamily(
                "mirrorflow_metrics_flow_up", "1 when the flow's clusters were read.", labels=["flow"]
            )
            healths: list[FlowHealth] = []
            for flow in self.flows:
                try:
                    flow_partitions = flow_views(flow, wait_s=SCRAPE_WAIT_S)
                    health = flow_health(flow, wait_s=SCRAPE_WAIT_S)
                    views.extend(flow_partitions)
                    healths.append(health)
                    up.add_metric([flow.name], 1)
                except Exception as err:
                    log.warning("metrics: flow %s: %s", flow.name, err)
                    up.add_metric([flow.name], 0)
        labels = ["source", "target", "topic", "partition"]
        for metric in SOURCE_METRICS:
            family = GaugeMetricFamily(prometheus_name(metric), f"MM2 MirrorSourceConnector {metric}", labels=labels)
            for v in views:
                family.add_metric(list(v.tags().values()), v.values[metric])
            yield family
        for metric in LAG_METRICS:
            family = GaugeMetricFamily(lag_name(metric), LAG_HELP[metric], labels=labels)
            for v in views:
                family.add_metric(
                    list(v.tags().values()), v.lag_records if metric.endswith("records") else v.lag_seconds
                )
            yield family
        for name, help_text, attr in HEALTH_METRICS:
            family = GaugeMetricFamily(name, help_text, labels=["source", "target"])
            for h in healths:
                age = getattr(h, attr)
                if age is not None:  # never written: no sample rather than a made-up age
                    family.add_metric([h.source, h.target], age)
            yield family
        yield up


@metrics_app.command("serve", context_settings={"allow_extra_args": True})
def serve(
    ctx: typer.Context,
    config: Annotated[Path, typer.Argument(help="The mm2.properties file.", show_default=False)],
    port: Annotated[int, typer.Option("--port", help="HTTP port of the /metrics endpoint.")] = 9464,
    address: Annotated[str, typer.Option("--address", help="Address to listen on.")] = "0.0.0.0",
    flow: FlowOption = None,
    clusters: ClustersOption = None,
) -> None:
    """Serve the metrics for Prometheus; the clusters are read on every scrape."""
    setup_logging(False)
    _, flows, _ = select_flows(ctx, config, clusters, flow)
    registry = CollectorRegistry()
    registry.register(FlowCollector(flows))
    start_http_server(port, addr=address, registry=registry)
    typer.echo(f"serving metrics of {len(flows)} flow(s) on http://{address}:{port}/metrics", err=True)
    while True:
        time.sleep(3600)


@metrics_app.command("show", context_settings={"allow_extra_args": True})
def show(
    ctx: typer.Context,
    config: Annotated[Path, typer.Argument(help="The mm2.properties file.", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per partition.")] = False,
    flow: FlowOption = None,
    clusters: ClustersOption = None,
) -> None:
    """Print lag and MM2's metrics per remote partition."""
    setup_logging(False)
    _, flows, _ = select_flows(ctx, config, clusters, flow)
    views = gather(flows)
    if as_json:
        rows = [
            {
                **v.tags(),
                "partition": v.partition,
                "source_topic": v.source_topic,
                "next_upstream": v.next_upstream,
                "source_end": v.source_end,
                "lag_records": v.lag_records,
                "lag_seconds": v.lag_seconds,
                "updated_ms": v.updated_ms,
                "metrics": v.values,
            }
            for v in views
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    for line in table(views):
        typer.echo(line)


def table(views: Sequence[PartitionView]) -> list[str]:
    header = ("FLOW", "TOPIC", "PART", "LAG", "LAG-S", "RECORDS", "BYTES", "REC/S", "LAT-AVG-MS", "LAT-MAX-MS")
    rows = [header]
    for v in views:
        m = v.values
        rows.append(
            (
                f"{v.source}->{v.target}",
                v.topic,
                str(v.partition),
                str(v.lag_records),
                f"{v.lag_seconds:.1f}",
                str(int(m["record-count"])),
                str(int(m["byte-count"])),
                f"{m['record-rate']:.1f}",
                f"{m['replication-latency-ms-avg']:.0f}",
                f"{m['replication-latency-ms-max']:.0f}",
            )
        )
    if len(rows) == 1:
        return ["no copied partitions yet"]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]

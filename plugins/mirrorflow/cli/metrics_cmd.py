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
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated

import typer
from prometheus_client import start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry
from rich.console import Console
from rich.text import Text

from mirrorflow.cli.plan_cmd import ClustersOption, ConfigArgument, FlowOption, select_flows, setup_logging
from mirrorflow.config.model import Flow
from mirrorflow.replication.flow_health import FlowHealth, flow_health
from mirrorflow.replication.metrics import LAG_METRICS, SOURCE_METRICS, PartitionView, flow_views, prometheus_name
from mirrorflow.replication.slo import FlowSlo, flow_slo, format_since

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


SLO_METRICS: tuple[tuple[str, str, Callable[[FlowSlo], float | None]], ...] = (
    ("mirrorflow_flow_rpo_seconds", "Age of the flow's oldest record not yet copied (max over partitions).",
     lambda s: s.rpo_s),
    ("mirrorflow_flow_lag_records", "Records of the flow not yet copied (sum over partitions).",
     lambda s: s.lag_records),
    ("mirrorflow_flow_rpo_target_seconds", "The flow's RPO target (mirrorflow.rpo.target.seconds).",
     lambda s: s.rpo_target_s),
    ("mirrorflow_flow_lag_target_records", "The flow's lag target (mirrorflow.lag.target.records).",
     lambda s: s.lag_target_records),
    ("mirrorflow_flow_slo_breached", "1 while the flow is outside its RPO or lag target, 0 within them.",
     lambda s: float(s.breached) if s.has_slo else None),
    ("mirrorflow_flow_slo_breached_since_timestamp_seconds", "When the flow's current SLO breach began (Unix s).",
     lambda s: s.since_ms / 1000 if s.since_ms is not None else None),
)  # fmt: skip
"""Per-flow SLO gauges (labels flow, source, target); a target or state that does not apply has no sample."""
EXIT_SLO_BREACHED = 3
"""`metrics show` exit status when a flow is outside its SLO (1 is an error, 2 a usage error)."""


def register(app: typer.Typer) -> None:
    app.add_typer(metrics_app, name="metrics")


SCRAPE_WAIT_S = 5.0
"""How long a scrape waits for an open transaction on a state topic before it reports the flow down
(`mirrorflow_metrics_flow_up 0`, the error logged): below Prometheus' default 10 s scrape timeout."""


def lag_name(metric: str) -> str:
    return "mirrorflow_" + metric.replace("-", "_")


def gather(flows: Sequence[Flow]) -> tuple[list[PartitionView], list[FlowSlo]]:
    """Every flow's partitions and SLO (which also keeps the SLO's since-when on the target)."""
    views: list[PartitionView] = []
    slos: list[FlowSlo] = []
    for flow in flows:
        flow_partitions = flow_views(flow)
        views.extend(flow_partitions)
        slos.append(flow_slo(flow, flow_partitions))
    return views, slos


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
            slos: list[FlowSlo] = []
            for flow in self.flows:
                try:
                    flow_partitions = flow_views(flow, wait_s=SCRAPE_WAIT_S)
                    health = flow_health(flow, wait_s=SCRAPE_WAIT_S)
                    slo = flow_slo(flow, flow_partitions, timeout_s=SCRAPE_WAIT_S)
                    views.extend(flow_partitions)
                    healths.append(health)
                    slos.append(slo)
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
        yield from slo_families(slos)
        yield up


def slo_families(slos: Sequence[FlowSlo]) -> Iterator[GaugeMetricFamily]:
    for name, help_text, value_of in SLO_METRICS:
        family = GaugeMetricFamily(name, help_text, labels=["flow", "source", "target"])
        for slo in slos:
            value = value_of(slo)
            if value is not None:
                family.add_metric([slo.flow, slo.source, slo.target], value)
        yield family


@metrics_app.command("serve", context_settings={"allow_extra_args": True})
def serve(
    ctx: typer.Context,
    config: ConfigArgument,
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
    config: ConfigArgument,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per partition.")] = False,
    flow: FlowOption = None,
    clusters: ClustersOption = None,
) -> None:
    """Print lag and MM2's metrics per remote partition, and each flow's SLO; exit 3 when one is breached."""
    setup_logging(False)
    _, flows, _ = select_flows(ctx, config, clusters, flow)
    views, slos = gather(flows)
    # The JSON on stdout stays a list of partitions; the SLO lines then go to stderr.
    console = Console(highlight=False, soft_wrap=True, stderr=as_json)
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
    else:
        for line in table(views):
            typer.echo(line)
    now_ms = int(time.time() * 1000)
    for slo in slos:
        if slo.has_slo:
            console.print(slo_line(slo, now_ms))
    if any(slo.breached for slo in slos):
        raise typer.Exit(EXIT_SLO_BREACHED)


def slo_line(slo: FlowSlo, now_ms: int) -> Text:
    """`A->B is outside its SLO since 12:04:05 UTC (3 min ago): RPO 45.2 s > target 30 s`, in red."""
    if slo.breached and slo.since_ms is not None:
        since = format_since(slo.since_ms, now_ms)
        return Text(f"{slo.flow} is outside its SLO since {since}: {slo.describe()}", style="bold red")
    return Text(f"{slo.flow} is within its SLO: {slo.describe()}", style="green")


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

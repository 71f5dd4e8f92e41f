"""`mirrorflow local up|down|status|jars|registry`: real Kafka clusters (and a schema registry) on loopback for the
demo, tests, benchmarks."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.local.cluster import STATE_FILE, LocalClusters
from mirrorflow.local.maven import KAFKA_VERSION
from mirrorflow.local.registry import APICURIO_VERSION, RegistryServer, ensure_registry
from mirrorflow.local.runtime import kafka_runtime

DEFAULT_DIR = Path("var/local")
DEFAULT_CLUSTERS = "primary,backup"

DirOption = Annotated[
    Path, typer.Option("--dir", help="Directory holding the clusters' data, logs and contract files.")
]

local_app = typer.Typer(
    name="local",
    help=f"Single-node Apache Kafka {KAFKA_VERSION} (KRaft) clusters on 127.0.0.1, from Maven Central jars.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(local_app, name="local")


@local_app.command("up")
def up(
    clusters: Annotated[str, typer.Option("--clusters", help="Comma-separated cluster aliases.")] = DEFAULT_CLUSTERS,
    directory: DirOption = DEFAULT_DIR,
    base_port: Annotated[
        int | None,
        typer.Option(
            "--base-port",
            help="Fixed ports for new clusters: the Nth gets BASE+2N (broker) and BASE+2N+1 (controller). "
            "Default: free ports picked at random.",
        ),
    ] = None,
    heap: Annotated[str, typer.Option("--heap", help="Maximum JVM heap of each broker.")] = "512m",
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the brokers.")] = 120.0,
    security_kind: Annotated[
        str | None,
        typer.Option(
            "--security",
            help="Secure the broker listeners of new clusters: sasl (SCRAM-SHA-512), tls (mutual TLS) or sasl_ssl. "
            "Passwords and certificates go to --dir/security/; mm2.properties reads them with ${file:...}.",
        ),
    ] = None,
) -> None:
    """Start the clusters (or keep them running) and write clusters.json and mm2.properties into --dir."""
    aliases = [alias.strip() for alias in clusters.split(",") if alias.strip()]
    if not aliases:
        raise UsageError("--clusters is empty; give aliases such as --clusters primary,backup")
    started = time.monotonic()
    local = LocalClusters.up(
        aliases, directory, base_port=base_port, heap_max=heap, timeout_s=timeout, security_kind=security_kind
    )
    elapsed = time.monotonic() - started
    _print_status(local)
    typer.echo(f"ready in {elapsed:.1f}s; contract files: {local.clusters_file} and {local.mm2_properties_file}")
    if local.security is not None:
        typer.echo(f"listeners: {local.security.protocol}; client settings in {local.mm2_properties_file}")
    typer.echo(f"stop with: mirrorflow local down --dir {local.directory}")


@local_app.command("down")
def down(
    directory: DirOption = DEFAULT_DIR,
    purge: Annotated[bool, typer.Option("--purge", help="Also delete the clusters' data and files.")] = False,
) -> None:
    """Stop every cluster of --dir (SIGTERM, then SIGKILL after 30 s)."""
    local = LocalClusters.open(directory)
    if not local.aliases:
        typer.echo(f"no local clusters in {local.directory}; nothing to stop")
        return
    aliases = local.aliases
    local.down(purge=purge)
    suffix = " and deleted their data" if purge else ""
    typer.echo(f"stopped {', '.join(aliases)} in {local.directory}{suffix}")


@local_app.command("status")
def status(
    directory: DirOption = DEFAULT_DIR,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show each cluster of --dir: up/down, bootstrap servers, PID."""
    local = LocalClusters.open(directory)
    if not (local.directory / STATE_FILE).exists():
        raise MirrorflowError(
            f"no local clusters in {local.directory}; start them with `mirrorflow local up --dir {directory}`"
        )
    if as_json:
        typer.echo(json.dumps(local.status(), indent=2))
    else:
        _print_status(local)


@local_app.command("jars")
def jars() -> None:
    """Resolve Kafka's jars from Maven Central (cached) and print their directory."""
    typer.echo(str(kafka_runtime().lib_dir))


@local_app.command("registry")
def registry(
    port: Annotated[int, typer.Option("--port", help="Loopback port of its HTTP API (0: a free one).")] = 0,
    directory: Annotated[Path, typer.Option("--dir", help="Where its log goes.")] = DEFAULT_DIR / "registry",
    fetch_only: Annotated[
        bool, typer.Option("--fetch-only", help="Only fetch it into the cache (Maven Central) and print its jar.")
    ] = False,
) -> None:
    """Run Apicurio Registry (in memory) until Ctrl-C and print its Confluent-compatible URL, for
    `A->B.schema.registry.source.url`/`.target.url` (docs/schema-registry.md)."""
    if fetch_only:
        typer.echo(str(ensure_registry()))
        return
    server = RegistryServer(directory, port=port).start(tie_to_parent=True)
    typer.echo(f"Apicurio Registry {APICURIO_VERSION}: {server.url} (log: {server.log}); Ctrl-C stops it")
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def _print_status(local: LocalClusters) -> None:
    for alias, info in local.status().items():
        pid = f"pid {info['pid']}" if info["pid"] else ""
        typer.echo(f"{alias:<16} {info['status']:<12} {info['bootstrap.servers']:<22} {pid}".rstrip())

"""One single-node KRaft cluster: a combined broker+controller JVM with its own directory and two ports.

Layout of `<home>` (one per alias): `server.properties`, `data/` (log.dirs and the KRaft metadata log),
`server.log` (Log4j2) and `stdout.log` (the JVM's own output: crashes, OutOfMemoryError).
"""

from __future__ import annotations

import base64
import re
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.kafka.admin import wait_until_ready
from mirrorflow.local import process, properties
from mirrorflow.local.files import FileIn
from mirrorflow.local.runtime import BROKER_MAIN, STORAGE_TOOL_MAIN, TOOL_JVM_OPTIONS, KafkaRuntime
from mirrorflow.local.security import LocalSecurity, server_properties

# Aliases become directory names and the `<alias>.` prefix of mm2.properties keys, so no dots or slashes.
_ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_FORMAT_TIMEOUT_S = 120.0


class BrokerStartError(MirrorflowError):
    """A broker JVM exited or never became ready; `port_conflict` when it could not bind its ports."""

    def __init__(self, message: str, *, port_conflict: bool = False) -> None:
        super().__init__(message)
        self.port_conflict = port_conflict


def validate_alias(alias: str) -> str:
    if not _ALIAS_RE.match(alias):
        raise UsageError(
            f"invalid cluster alias {alias!r}: use letters, digits, '_' or '-' (no dots; at most 64 "
            "characters), e.g. primary,backup"
        )
    return alias


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in unpadded URL-safe base64, never starting with '-' (as Kafka's)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass(frozen=True)
class BrokerSpec:
    alias: str
    home: Path
    broker_port: int
    controller_port: int
    cluster_id: str
    # Where the broker listens and what wraps its JVM's command, e.g. `ip netns exec NS` (local/netns.py).
    host: str = process.LOOPBACK
    launch_prefix: tuple[str, ...] = ()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.broker_port}"

    data_dir = FileIn("home", "data")
    config_path = FileIn("home", "server.properties")
    log_file = FileIn("home", "server.log")
    stdout_file = FileIn("home", "stdout.log")

    @property
    def marker(self) -> str:
        """What the JVM's command line must contain for a PID to be this broker (main class + its config)."""
        return f"{BROKER_MAIN} {self.config_path}"

    def is_formatted(self) -> bool:
        return (self.data_dir / "meta.properties").exists()


def write_config(
    spec: BrokerSpec, extra: Mapping[str, str] | None = None, security: LocalSecurity | None = None
) -> None:
    props = properties.server_properties(
        broker_port=spec.broker_port,
        controller_port=spec.controller_port,
        data_dir=spec.data_dir,
        extra=extra,
        host=spec.host,
    )
    if security is not None:  # the PLAINTEXT broker listener becomes SASL_PLAINTEXT, SSL or SASL_SSL
        props = server_properties(props, security)
    header = f"Cluster {spec.alias!r} of `mirrorflow local` (single KRaft node, broker+controller)."
    properties.write_atomically(spec.config_path, properties.render(props, header))


def check_ports_free(spec: BrokerSpec, *, fresh: bool) -> None:
    """Fail early, naming the port, instead of letting the JVM die with a BindException."""
    if spec.launch_prefix:  # its own network namespace: ports on our loopback say nothing about it
        return
    for role, port in (("broker", spec.broker_port), ("controller", spec.controller_port)):
        if not process.port_in_use(port):
            continue
        if fresh:
            what_to_do = "Stop whatever listens there or choose another --base-port."
        else:
            what_to_do = (
                "The cluster keeps its ports across restarts so that its bootstrap address stays valid: "
                "stop whatever listens there, or delete the cluster with "
                f"`mirrorflow local down --purge --dir {spec.home.parent}` and start it afresh on new ports."
            )
        raise BrokerStartError(
            f"port {port} ({role} listener of local cluster {spec.alias!r}) is already in use on "
            f"{process.LOOPBACK}. {what_to_do}",
            port_conflict=True,
        )


def format_storage(runtime: KafkaRuntime, specs: Sequence[BrokerSpec], extra_args: Sequence[str] = ()) -> None:
    """Format the data directories that are not formatted yet, all storage-tool JVMs in parallel.

    `extra_args` go to `kafka-storage format`, e.g. `--add-scram` to create SCRAM users.
    """
    running: list[tuple[BrokerSpec, subprocess.Popen[str]]] = []
    for spec in specs:
        if spec.is_formatted():
            continue
        spec.data_dir.mkdir(parents=True, exist_ok=True)
        command = runtime.command(
            STORAGE_TOOL_MAIN,
            ["format", "-t", spec.cluster_id, "-c", str(spec.config_path), *extra_args],
            heap_min="32m",
            heap_max="256m",
            jvm_options=TOOL_JVM_OPTIONS,
            log_file=spec.home / "storage-tool.log",
        )
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        running.append((spec, proc))
    failures: list[str] = []
    for spec, proc in running:  # wait for every tool before reporting, so none is left running
        try:
            output, _ = proc.communicate(timeout=_FORMAT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        if proc.returncode != 0 or not spec.is_formatted():
            lines = "\n".join(f"  | {line}" for line in output.strip().splitlines()[-30:])
            failures.append(
                f"formatting the storage of local cluster {spec.alias!r} in {spec.data_dir} failed "
                f"(exit code {proc.returncode}):\n{lines}"
            )
    if failures:
        raise BrokerStartError("\n".join(failures))


def launch(
    runtime: KafkaRuntime,
    spec: BrokerSpec,
    *,
    heap_max: str = "512m",
    tie_to_parent: bool = False,
) -> int:
    """Start the broker JVM in the background and return its PID (not waiting for it to be ready)."""
    command = [
        *spec.launch_prefix,
        *runtime.command(BROKER_MAIN, [str(spec.config_path)], log_file=spec.log_file, heap_max=heap_max),
    ]
    if spec.log_file.exists():  # server.log holds the current run only, so failures are read from it alone
        spec.log_file.replace(spec.log_file.with_name(spec.log_file.name + ".previous"))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with spec.stdout_file.open("a") as out:
        out.write(f"--- {stamp} mirrorflow local: starting {' '.join(command)}\n")
    return process.start_detached(command, cwd=spec.home, output=spec.stdout_file, tie_to_parent=tie_to_parent)


def wait_ready(spec: BrokerSpec, pid: int, deadline: float, client_config: Mapping[str, str] | None = None) -> None:
    """Block until the broker serves metadata; a JVM that dies or a timeout raises with the logs' tail.

    `client_config` holds the librdkafka security settings a client of a secured listener needs.
    """
    while True:
        if not process.is_alive(pid, spec.marker):
            raise _failure(spec, pid, "exited during start-up")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _failure(spec, pid, "did not become ready in time")
        if process.port_accepts(spec.broker_port, host=spec.host):
            try:
                wait_until_ready(spec.bootstrap, min(remaining, 5.0), client_config)
                return
            except MirrorflowError:
                continue
        time.sleep(0.1)


def _failure(spec: BrokerSpec, pid: int, what: str) -> BrokerStartError:
    code = process.exit_code(pid)
    errors = process.error_lines(spec.log_file)
    stdout = process.tail(spec.stdout_file, 10)
    conflict = any("Address already in use" in line or "BindException" in line for line in [*errors, stdout])
    hint = (
        "a port it needs is taken; stop whatever listens there, or let `mirrorflow local up` pick new ports"
        if conflict
        else "see the log lines below"
    )
    status = f" (exit code {code})" if code is not None else ""
    first_errors = "\n".join(f"  | {line}" for line in errors[:8]) or "  | (none)"
    return BrokerStartError(
        f"local Kafka cluster {spec.alias!r} (pid {pid}, {spec.bootstrap}) {what}{status}: {hint}.\n"
        f"First errors in {spec.log_file}:\n{first_errors}\n"
        f"{spec.log_file} ends with:\n{process.tail(spec.log_file, 12)}\n"
        f"{spec.stdout_file} ends with:\n{stdout}",
        port_conflict=conflict,
    )

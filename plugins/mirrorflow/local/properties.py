"""The files of a local cluster set: each broker's `server.properties` and the shared `mm2.properties`.

Pure functions so that the exact keys are unit-tested without starting a JVM.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

# Every replication factor MM2 and Connect use; a single-broker cluster cannot satisfy the default of 3.
MM2_REPLICATION_FACTOR_KEYS: tuple[str, ...] = (
    "replication.factor",
    "checkpoints.topic.replication.factor",
    "heartbeats.topic.replication.factor",
    "offset-syncs.topic.replication.factor",
    "offset.storage.replication.factor",
    "status.storage.replication.factor",
    "config.storage.replication.factor",
)


def server_properties(
    *,
    broker_port: int,
    controller_port: int,
    data_dir: Path,
    extra: Mapping[str, str] | None = None,
    host: str = "127.0.0.1",
) -> dict[str, str]:
    """A combined broker+controller (KRaft, node 1) on `host` (loopback), PLAINTEXT, with ACL APIs enabled.

    StandardAuthorizer with `User:ANONYMOUS` as super user keeps every client allowed while Create/Describe/
    DeleteAcls work, so ACL sync can be exercised. Internal topics get one replica and fewer partitions than
    Kafka's 50, which only costs start-up time on a test machine.
    """
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{broker_port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "10",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # The cleaner's dedupe map is allocated on the heap at start-up (128 MB by default).
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    props.update(extra or {})
    return props


def mm2_properties(bootstraps: Mapping[str, str]) -> dict[str, str]:
    """`clusters`, each `<alias>.bootstrap.servers`, and replication factors of 1; no flow is enabled."""
    props = {"clusters": ", ".join(bootstraps)}
    props.update({f"{alias}.bootstrap.servers": servers for alias, servers in bootstraps.items()})
    props.update(dict.fromkeys(MM2_REPLICATION_FACTOR_KEYS, "1"))
    return props


def mm2_config_text(bootstraps: Mapping[str, str], body: str = "") -> str:
    """The mm2.properties text `local up` writes for these clusters, followed by `body` (flows, overrides)."""
    return render(mm2_properties(bootstraps)) + body


def render(props: Mapping[str, str], header: str = "") -> str:
    """Java properties text; our keys and values never hold characters that need escaping except `\\`."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for key, value in props.items():
        lines.append(f"{_escape(key, is_key=True)} = {_escape(value, is_key=False)}")
    return "\n".join(lines) + "\n"


def _escape(text: str, *, is_key: bool) -> str:
    text = text.replace("\\", "\\\\")
    if is_key:
        for char in (" ", "=", ":"):
            text = text.replace(char, "\\" + char)
    return text


MM2_HEADER = """\
Local clusters started by `mirrorflow local up`; `mirrorflow local down` stops them.
No replication flow is enabled: add e.g. `<source>-><target>.enabled = true`
and `<source>-><target>.topics = .*`.
"""


def write_atomically(path: Path, text: str) -> None:
    """Readers (other processes polling these files) never see a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

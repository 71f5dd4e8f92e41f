"""The client side of the `topic` redirect method of a failover: where should my consumer group connect now?

A failover (or failback) writes one record to the compacted topic `mirrorflow.bootstrap` on both clusters:
key = the group pattern (a regex the group id must fully match, UTF-8), value = UTF-8 JSON
`{"version": 1, "bootstrap.servers": "...", "cluster": "B", "previous": "A", "reason": "failover",
"epoch_ms": 1700000000000}`. Being compacted, the topic keeps the latest record per pattern.

A client reads the whole topic at start-up (from either cluster it can reach), decodes each record with
`decode_redirect`, and calls `resolve(redirects, group_id)`: the newest redirect whose pattern matches the group
wins. With none, the client keeps its configured bootstrap. Standard library only, so any client can vendor it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

BOOTSTRAP_TOPIC = "mirrorflow.bootstrap"
VERSION = 1


@dataclass(frozen=True)
class BootstrapRedirect:
    """Groups matching `pattern` should connect to `bootstrap_servers` (the cluster `cluster`) from `epoch_ms`."""

    pattern: str
    bootstrap_servers: str
    cluster: str
    previous: str
    reason: str
    epoch_ms: int

    def matches(self, group: str) -> bool:
        return re.fullmatch(self.pattern, group) is not None


def encode_redirect(redirect: BootstrapRedirect) -> tuple[bytes, bytes]:
    """The (key, value) of the record the runbook writes."""
    value = {
        "version": VERSION,
        "bootstrap.servers": redirect.bootstrap_servers,
        "cluster": redirect.cluster,
        "previous": redirect.previous,
        "reason": redirect.reason,
        "epoch_ms": redirect.epoch_ms,
    }
    return redirect.pattern.encode(), json.dumps(value, sort_keys=True).encode()


def decode_redirect(key: bytes | None, value: bytes | None) -> BootstrapRedirect | None:
    """One record of `mirrorflow.bootstrap`; None for a tombstone (the redirect was withdrawn).

    Raises ValueError for a record this version cannot read, so a client never follows a misread address.
    """
    if key is None or value is None:
        return None
    data = json.loads(value.decode())
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError(f"unsupported {BOOTSTRAP_TOPIC} record (version {data.get('version')!r})")
    servers = data.get("bootstrap.servers")
    if not isinstance(servers, str) or not servers:
        raise ValueError(f"{BOOTSTRAP_TOPIC} record without bootstrap.servers")
    return BootstrapRedirect(
        pattern=key.decode(),
        bootstrap_servers=servers,
        cluster=str(data.get("cluster", "")),
        previous=str(data.get("previous", "")),
        reason=str(data.get("reason", "")),
        epoch_ms=int(data.get("epoch_ms", 0)),
    )


def resolve(redirects: Iterable[BootstrapRedirect | None], group: str) -> BootstrapRedirect | None:
    """The newest redirect that applies to `group`, or None (keep the configured bootstrap)."""
    found = [r for r in redirects if r is not None and r.matches(group)]
    return max(found, key=lambda r: r.epoch_ms, default=None)

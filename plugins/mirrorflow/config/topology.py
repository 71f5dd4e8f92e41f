"""Loops in the flow graph (docs/design.md §1.6): a cycle of identity-named flows would copy records round forever.

With DefaultReplicationPolicy a record's path is in the topic name (`A.B.orders`) and MM2 refuses cycles by
name. IdentityReplicationPolicy keeps names, so nothing stops `A->B->A` from copying the same records back:
every identity flow on a cycle must carry provenance headers (`mirrorflow.provenance.headers = true`), which
let the copy drop records that started on its target. The whole file is checked, not just the `--clusters`
subset, because a loop spanning data centres is a loop all the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mirrorflow.config.issues import IssueLog
from mirrorflow.config.precedence import connector_settings, herder_pairs
from mirrorflow.core.errors import UsageError
from mirrorflow.core.replication_policy import load_replication_policy


def enabled_pairs(raw: Mapping[str, str], aliases: Sequence[str]) -> list[tuple[str, str]]:
    """Pairs whose flow MM2 would run on some node: a herder exists and `enabled` is true."""
    return [(s, t) for s, t in herder_pairs(raw, aliases) if raw.get(f"{s}->{t}.enabled", "").strip().lower() == "true"]


def _keeps_names(raw: Mapping[str, str], source: str, target: str) -> tuple[bool, bool]:
    """(the flow's policy keeps topic names, the flow has provenance headers) — from the raw values."""
    settings = {k: v for k, (v, _) in connector_settings(raw, source, target).items()}
    class_name = settings.get("replication.policy.class", "org.apache.kafka.connect.mirror.DefaultReplicationPolicy")
    try:
        policy = load_replication_policy(class_name, settings)
        identity = policy.format_remote_topic(source, "orders") == "orders"
    except (UsageError, ValueError, TypeError):
        identity = False  # a broken policy is reported by the flow's own checks
    provenance = settings.get("mirrorflow.provenance.headers", "false").strip().lower() == "true"
    return identity, provenance


def _reaches(edges: Mapping[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        for nxt in edges.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def check_identity_cycles(raw: Mapping[str, str], aliases: Sequence[str], log: IssueLog) -> None:
    """Error on every identity flow that lies on a cycle and lacks provenance headers."""
    pairs = enabled_pairs(raw, aliases)
    edges: dict[str, set[str]] = {}
    for source, target in pairs:
        edges.setdefault(source, set()).add(target)
    for source, target in pairs:
        if not _reaches(edges, target, source):
            continue
        identity, provenance = _keeps_names(raw, source, target)
        if identity and not provenance:
            log.error(
                f"{source}->{target}.enabled",
                f"flow {source}->{target} keeps topic names (IdentityReplicationPolicy) and is part of a "
                f"cycle ({target} replicates back to {source}), so records would be copied round forever",
                f"set {source}->{target}.mirrorflow.provenance.headers = true on every flow of the cycle, "
                "or use DefaultReplicationPolicy",
            )

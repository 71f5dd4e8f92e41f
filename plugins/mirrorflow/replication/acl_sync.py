"""Topic ACL sync (docs/mm2-reference.md §4.4): copy the source's LITERAL topic ACLs of replicated topics to the remote
topics, never `ALLOW WRITE` (only the replicator writes remote topics), `ALLOW ALL` narrowed to `ALLOW READ`.

Additive only: nothing is deleted on the target, and bindings the target has already are not sent again.
A cluster without an authorizer has no ACLs: the step is skipped, says so once in the log (MM2 logs its
"consider disabling topic ACL syncing" hint once, too) and sets `security_disabled` in its report.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from mirrorflow.config.model import Flow
from mirrorflow.core.acl_rules import AclBinding, should_replicate_acl, transform_acl
from mirrorflow.kafka.acls import SecurityDisabled, create_acls, describe_topic_acls
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_rules import FlowRules

log = logging.getLogger(__name__)
_hinted: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class AclSyncReport:
    flow: str
    enabled: bool
    dry_run: bool
    added: tuple[AclBinding, ...]
    """Bindings created on the target (in a dry run: that would be)."""
    security_disabled: bool = False
    """A cluster had no authorizer, so nothing was read or written."""
    security_disabled_cluster: str | None = None


def acls_to_add(source: Iterable[AclBinding], target: Iterable[AclBinding], rules: FlowRules) -> tuple[AclBinding, ...]:
    """The target bindings the source's ACLs call for that the target does not have yet."""
    existing = set(target)
    wanted = {
        transform_acl(b, source_alias=rules.source, policy=rules.policy)
        for b in source
        if should_replicate_acl(b, rules.should_replicate_topic)
    }
    return tuple(sorted(wanted - existing, key=_sort_key))


def _sort_key(b: AclBinding) -> tuple[str, ...]:
    return (b.resource_name, b.principal, b.host, b.permission_type, b.operation)


def sync_acls(
    flow: Flow, clients: FlowClients, *, dry_run: bool = False, rules: FlowRules | None = None
) -> AclSyncReport:
    if not flow.sync_topic_acls_enabled:
        return AclSyncReport(flow.name, False, dry_run, ())
    rules = rules or FlowRules.of(flow)
    side = "source"
    try:
        source = describe_topic_acls(clients.source_admin, flow.source, clients.timeout_s)
        side = "target"
        candidates = acls_to_add(source, [], rules)
        if not candidates:
            return AclSyncReport(flow.name, True, dry_run, ())
        added = acls_to_add(source, describe_topic_acls(clients.target_admin, flow.target, clients.timeout_s), rules)
        if not dry_run:
            create_acls(clients.target_admin, flow.target, added, clients.timeout_s)
    except SecurityDisabled:
        cluster = clients.alias(side)
        _hint_once(flow.name, cluster)
        return AclSyncReport(flow.name, True, dry_run, (), True, cluster)
    return AclSyncReport(flow.name, True, dry_run, added)


def _hint_once(flow: str, cluster: str) -> None:
    message = (
        "%s: topic ACL sync skipped: cluster '%s' has no authorizer (security disabled). "
        "Consider disabling topic ACL syncing: %s.sync.topic.acls.enabled = false"
    )
    if (flow, cluster) in _hinted:
        log.debug(message, flow, cluster, flow)
    else:
        _hinted.add((flow, cluster))
        log.info(message, flow, cluster, flow)

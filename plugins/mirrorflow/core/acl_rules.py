"""Which topic ACLs MM2 copies and how (`MirrorSourceConnector.shouldReplicateAcl`/`targetAclBinding`, §4.4).

Rules:
* Only LITERAL TOPIC bindings whose topic is replicated; never ALLOW WRITE (only MM2 writes remote topics).
* The copy names the remote topic (LITERAL); ALLOW ALL becomes ALLOW READ; anything else (DENY ALL, DENY
  WRITE, principal, host) is kept. PREFIXED/MATCH patterns and non-topic ACLs are never copied, and a literal
  `*` becomes the literal topic `A.*` (an MM2 quirk we keep). ACL sync only adds, never deletes.
Fields hold Kafka's upper-case enum names ("TOPIC", "LITERAL", "READ", "ALLOW"), as in Java's enums.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from mirrorflow.core.replication_policy import ReplicationPolicy

TOPIC = "TOPIC"
LITERAL = "LITERAL"
ALLOW = "ALLOW"
DENY = "DENY"
ALL = "ALL"
READ = "READ"
WRITE = "WRITE"


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission_type: str


def should_replicate_acl(binding: AclBinding, should_replicate_topic: Callable[[str], bool]) -> bool:
    return (
        binding.resource_type == TOPIC
        and binding.pattern_type == LITERAL
        and not (binding.permission_type == ALLOW and binding.operation == WRITE)
        and should_replicate_topic(binding.resource_name)
    )


def transform_acl(binding: AclBinding, *, source_alias: str, policy: ReplicationPolicy) -> AclBinding:
    """The binding to create on the target for a binding `should_replicate_acl` accepted."""
    operation = READ if binding.permission_type == ALLOW and binding.operation == ALL else binding.operation
    return dataclasses.replace(
        binding,
        resource_type=TOPIC,
        resource_name=policy.format_remote_topic(source_alias, binding.resource_name),
        pattern_type=LITERAL,
        operation=operation,
    )

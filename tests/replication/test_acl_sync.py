"""Which ACLs the target gets (MirrorSourceConnectorTest.testAclFiltering/testAclTransformation, §4.4), given
both clusters' bindings."""

from __future__ import annotations

from mirrorflow.config.model import Flow
from mirrorflow.core.acl_rules import AclBinding
from mirrorflow.replication.acl_sync import acls_to_add
from mirrorflow.replication.flow_rules import FlowRules

RULES = FlowRules.of(Flow(source="A", target="B", name="A->B", topics=("orders", "B\\.x")))


def acl(topic: str, operation: str, permission: str = "ALLOW", pattern: str = "LITERAL") -> AclBinding:
    return AclBinding("TOPIC", topic, pattern, "User:alice", "*", operation, permission)


def test_allow_all_becomes_read_and_allow_write_is_never_copied() -> None:
    source = [acl("orders", "ALL"), acl("orders", "WRITE"), acl("orders", "DESCRIBE")]
    assert acls_to_add(source, [], RULES) == (acl("A.orders", "DESCRIBE"), acl("A.orders", "READ"))


def test_deny_is_copied_unchanged() -> None:
    source = [acl("orders", "ALL", "DENY"), acl("orders", "WRITE", "DENY")]
    assert acls_to_add(source, [], RULES) == (acl("A.orders", "ALL", "DENY"), acl("A.orders", "WRITE", "DENY"))


def test_only_literal_acls_of_replicated_topics() -> None:
    source = [
        acl("orders", "READ", pattern="PREFIXED"),
        acl("payments", "READ"),  # not selected by the filter
        acl("B.x", "READ"),  # a cycle: came from the target
        AclBinding("GROUP", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
    ]
    assert acls_to_add(source, [], RULES) == ()


def test_bindings_the_target_has_are_not_sent_again() -> None:
    source = [acl("orders", "ALL"), acl("orders", "DESCRIBE")]
    assert acls_to_add(source, [acl("A.orders", "READ")], RULES) == (acl("A.orders", "DESCRIBE"),)

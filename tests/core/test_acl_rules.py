"""MirrorSourceConnectorTest.testAclFiltering / testAclTransformation and the other §4.4 rules."""

from __future__ import annotations

from mirrorflow.core.acl_rules import AclBinding, should_replicate_acl, transform_acl
from mirrorflow.core.replication_policy import DefaultReplicationPolicy


def binding(operation: str, permission: str, *, pattern: str = "LITERAL", resource: str = "TOPIC") -> AclBinding:
    return AclBinding(resource, "test_topic", pattern, "kafka", "", operation, permission)


def everything(topic: str) -> bool:
    return True


def test_acl_filtering() -> None:  # MirrorSourceConnectorTest.testAclFiltering
    assert not should_replicate_acl(binding("WRITE", "ALLOW"), everything)
    assert should_replicate_acl(binding("ALL", "ALLOW"), everything)


def test_only_literal_topic_acls_of_replicated_topics() -> None:
    assert not should_replicate_acl(binding("READ", "ALLOW", pattern="PREFIXED"), everything)
    assert not should_replicate_acl(binding("READ", "ALLOW", resource="GROUP"), everything)
    assert not should_replicate_acl(binding("READ", "ALLOW"), lambda topic: topic != "test_topic")
    assert should_replicate_acl(binding("WRITE", "DENY"), everything)


def test_acl_transformation() -> None:  # MirrorSourceConnectorTest.testAclTransformation
    policy = DefaultReplicationPolicy()
    allow_all = transform_acl(binding("ALL", "ALLOW"), source_alias="source", policy=policy)
    assert allow_all.resource_name == "source.test_topic"
    assert (allow_all.operation, allow_all.permission_type) == ("READ", "ALLOW")
    assert (allow_all.resource_type, allow_all.pattern_type) == ("TOPIC", "LITERAL")
    assert (allow_all.principal, allow_all.host) == ("kafka", "")
    deny_all = transform_acl(binding("ALL", "DENY"), source_alias="source", policy=policy)
    assert (deny_all.operation, deny_all.permission_type) == ("ALL", "DENY")
    describe = transform_acl(binding("DESCRIBE", "ALLOW"), source_alias="source", policy=policy)
    assert describe == binding("DESCRIBE", "ALLOW").__class__(
        "TOPIC", "source.test_topic", "LITERAL", "kafka", "", "DESCRIBE", "ALLOW"
    )


def test_literal_wildcard_becomes_a_literal_remote_name() -> None:  # MM2 quirk, kept
    wildcard = AclBinding("TOPIC", "*", "LITERAL", "User:app", "*", "READ", "ALLOW")
    assert transform_acl(wildcard, source_alias="A", policy=DefaultReplicationPolicy()).resource_name == "A.*"

"""Topic ACL sync on real brokers (StandardAuthorizer, super.users=User:ANONYMOUS): source ACLs arrive on the
remote topic renamed, ALLOW ALL narrowed to READ, ALLOW WRITE never copied, nothing sent twice."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from mirrorflow.config.loader import load_config
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.flow_cycle import ACLS, run_control_plane

pytestmark = pytest.mark.integration


def binding(topic: str, principal: str, operation: AclOperation, permission: AclPermissionType) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", operation, permission)


def topic_acls(admin: Any, topic: str) -> set[tuple[str, str, str, str]]:
    acl_filter = AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    found = admin.describe_acls(acl_filter, request_timeout=30).result()
    return {(b.principal, b.operation.name, b.permission_type.name, b.resource_pattern_type.name) for b in found}


def test_topic_acls_arrive_renamed_narrowed_and_without_write(
    write_config: Any, topics: Any, unique_topic: Any, eventually: Any
) -> None:
    name = unique_topic("acl")
    remote = f"A.{name}"
    flow = write_config(f"A->B.enabled = true\nA->B.topics = {name}\n").flow("A->B")
    source = topics.admin("A")
    prefixed = AclBinding(
        ResourceType.TOPIC,
        name,
        ResourcePatternType.PREFIXED,
        "User:carol",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    created = [
        binding(name, "User:alice", AclOperation.ALL, AclPermissionType.ALLOW),
        binding(name, "User:bob", AclOperation.WRITE, AclPermissionType.ALLOW),
        binding(name, "User:dave", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        binding(name, "User:eve", AclOperation.READ, AclPermissionType.DENY),
        prefixed,
    ]
    for future in source.create_acls(created, request_timeout=30).values():
        future.result()
    eventually(lambda: _equal(len(topic_acls(source, name)), 5))

    report = run_control_plane(flow, steps={ACLS})

    expected = {
        ("User:alice", "READ", "ALLOW", "LITERAL"),
        ("User:dave", "DESCRIBE", "ALLOW", "LITERAL"),
        ("User:eve", "READ", "DENY", "LITERAL"),
    }
    assert report.acls is not None and not report.acls.security_disabled
    assert {(b.principal, b.operation, b.permission_type, b.pattern_type) for b in report.acls.added} == expected
    assert {b.resource_name for b in report.acls.added} == {remote}
    eventually(lambda: _equal(topic_acls(topics.admin("B"), remote), expected))

    again = run_control_plane(flow, steps={ACLS})
    assert again.acls is not None and again.acls.added == ()


def _equal(actual: object, expected: object) -> None:
    assert actual == expected, actual


@pytest.fixture(scope="module")
def no_authorizer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusters]:
    """One more single-node cluster, `N`, started without an authorizer (ACL APIs answer SECURITY_DISABLED)."""
    clusters = LocalClusters(
        tmp_path_factory.mktemp("no-authorizer"),
        broker_config={"authorizer.class.name": "", "super.users": ""},
        tie_to_parent=True,
    )
    try:
        clusters.start("N")
        yield clusters
    finally:
        clusters.down()


def test_a_source_without_authorizer_skips_acl_sync_with_one_log_line(
    no_authorizer: LocalClusters,
    kafka_clusters: LocalClusters,
    tmp_path: Path,
    unique_topic: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tmp_path / "mm2.properties"
    config.write_text(
        "clusters = N, B\n"
        f"N.bootstrap.servers = {no_authorizer.bootstrap('N')}\n"
        f"B.bootstrap.servers = {kafka_clusters.bootstrap('B')}\n"
        f"N->B.enabled = true\nN->B.topics = {unique_topic('acl')}\nadmin.timeout.ms = 30000\n"
    )
    flow = load_config(config).flow("N->B")

    with caplog.at_level(logging.DEBUG, logger="mirrorflow.replication.acl_sync"):
        reports = [run_control_plane(flow, steps={ACLS}) for _ in range(3)]

    for report in reports:
        assert report.acls is not None
        assert report.acls.security_disabled and report.acls.security_disabled_cluster == "N"
        assert report.acls.added == ()
    infos = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(infos) == 1, [r.getMessage() for r in infos]
    message = infos[0].getMessage()
    assert "cluster 'N' has no authorizer" in message and "N->B.sync.topic.acls.enabled = false" in message

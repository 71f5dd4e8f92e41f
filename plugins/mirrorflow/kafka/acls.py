"""Topic ACL admin calls, speaking `mirrorflow.core.acl_rules.AclBinding` (Kafka's enum names as strings)."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBinding as _KafkaAclBinding
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from mirrorflow.core.acl_rules import AclBinding
from mirrorflow.kafka.operation_error import KafkaOperationError, error_code


class SecurityDisabled(Exception):
    """The cluster has no authorizer, so there are no ACLs to read or write."""


def describe_topic_acls(admin: AdminClient, cluster: str, timeout_s: float) -> list[AclBinding]:
    """All topic ACL bindings, of every pattern type; raises SecurityDisabled without an authorizer."""
    acl_filter = AclBindingFilter(
        ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    try:
        found = admin.describe_acls(acl_filter, request_timeout=timeout_s).result()
    except KafkaException as err:
        if error_code(err) == KafkaError.SECURITY_DISABLED:
            raise SecurityDisabled(cluster) from err
        raise KafkaOperationError(cluster, "describing topic ACLs", err) from err
    if not found and not _has_authorizer(admin, timeout_s):
        raise SecurityDisabled(cluster)
    return [_from_kafka(b) for b in found]


# A binding nobody creates: deleting it changes nothing, but the answer says whether an authorizer exists.
_PROBE = AclBindingFilter(
    ResourceType.TOPIC,
    "mirrorflow-authorizer-probe",
    ResourcePatternType.LITERAL,
    "User:mirrorflow-authorizer-probe",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)


def _has_authorizer(admin: AdminClient, timeout_s: float) -> bool:
    """librdkafka (2.16) answers DescribeAcls on a cluster without authorizer with an empty list instead of
    SECURITY_DISABLED; a DeleteAcls that can match nothing does report it. Any other failure (e.g. no ALTER
    permission on the cluster) means an authorizer is there."""
    try:
        for future in admin.delete_acls([_PROBE], request_timeout=timeout_s).values():
            future.result()
    except KafkaException as err:
        return bool(error_code(err) != KafkaError.SECURITY_DISABLED)
    return True


def create_acls(admin: AdminClient, cluster: str, bindings: Sequence[AclBinding], timeout_s: float) -> None:
    if not bindings:
        return
    futures = admin.create_acls([_to_kafka(b) for b in bindings], request_timeout=timeout_s)
    for binding, future in futures.items():
        try:
            future.result()
        except KafkaException as err:
            if error_code(err) == KafkaError.SECURITY_DISABLED:
                raise SecurityDisabled(cluster) from err
            raise KafkaOperationError(cluster, f"creating ACL on '{binding.name}'", err) from err


def delete_acls(admin: AdminClient, cluster: str, bindings: Sequence[AclBinding], timeout_s: float) -> int:
    """Delete exactly these bindings (each used as a filter that matches only itself); returns how many went."""
    if not bindings:
        return 0
    filters = [
        AclBindingFilter(
            ResourceType[b.resource_type],
            b.resource_name,
            ResourcePatternType[b.pattern_type],
            b.principal,
            b.host,
            AclOperation[b.operation],
            AclPermissionType[b.permission_type],
        )
        for b in bindings
    ]
    deleted = 0
    for binding, future in admin.delete_acls(filters, request_timeout=timeout_s).items():
        try:
            deleted += len(future.result())
        except KafkaException as err:
            if error_code(err) == KafkaError.SECURITY_DISABLED:
                raise SecurityDisabled(cluster) from err
            raise KafkaOperationError(cluster, f"deleting ACL on '{binding.name}'", err) from err
    return deleted


def _from_kafka(b: _KafkaAclBinding) -> AclBinding:
    return AclBinding(
        resource_type=b.restype.name,
        resource_name=b.name,
        pattern_type=b.resource_pattern_type.name,
        principal=b.principal,
        host=b.host,
        operation=b.operation.name,
        permission_type=b.permission_type.name,
    )


def _to_kafka(b: AclBinding) -> _KafkaAclBinding:
    return _KafkaAclBinding(
        ResourceType[b.resource_type],
        b.resource_name,
        ResourcePatternType[b.pattern_type],
        b.principal,
        b.host,
        AclOperation[b.operation],
        AclPermissionType[b.permission_type],
    )

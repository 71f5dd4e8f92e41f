"""MM2's `MirrorClient` / `RemoteClusterUtils` topology queries against a live cluster (docs/mm2-reference.md §7).

Each query lists the cluster's topics afresh (as MirrorClient does) and applies `mirrorflow.core.remote_topology`
to the names: what a cluster knows about its upstreams is written in the names of its heartbeat topics.
Offset translation (`translateOffsets`) is not here: it reads checkpoints and belongs to the checkpoint work.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType

from mirrorflow.config.model import ClusterConfig
from mirrorflow.core import remote_topology as names
from mirrorflow.core.replication_policy import ReplicationPolicy
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.topics import list_topic_partitions
from mirrorflow.replication.flow_clients import LIBRDKAFKA_LOG, Admin


class MirrorClient:
    def __init__(
        self, cluster: str, admin_conf: Mapping[str, str], policy: ReplicationPolicy, timeout_s: float = 30.0
    ) -> None:
        self.cluster = cluster
        self.policy = policy
        self.timeout_s = timeout_s
        self._admin: Admin = admin_client(admin_conf, logger=LIBRDKAFKA_LOG)

    @classmethod
    def for_cluster(
        cls, cluster: ClusterConfig, *, source_alias: str | None = None, timeout_s: float = 30.0
    ) -> MirrorClient:
        """From a loaded cluster (MM2's `MirrorMakerConfig.clientConfig(alias)`); `source_alias` is what
        IdentityReplicationPolicy needs as `source.cluster.alias`."""
        return cls(cluster.alias, cluster.admin.librdkafka(), cluster.policy(source_alias), timeout_s)

    def topics(self) -> set[str]:
        return set(list_topic_partitions(self._admin, self.cluster, self.timeout_s))

    def heartbeat_topics(self) -> set[str]:
        return names.heartbeat_topics(self.topics(), self.policy)

    def checkpoint_topics(self) -> set[str]:
        return names.checkpoint_topics(self.topics(), self.policy)

    def upstream_clusters(self) -> set[str]:
        return names.upstream_clusters(self.topics(), self.policy)

    def replication_hops(self, upstream_alias: str) -> int:
        """Hops from `upstream_alias` to this cluster along heartbeat topics; -1 if it is not upstream."""
        return names.replication_hops(self.topics(), upstream_alias, self.policy)

    def remote_topics(self, source: str | None = None) -> set[str]:
        """Topics replicated into this cluster (only directly from `source`, if given)."""
        return names.remote_topics(self.topics(), self.policy, source)

    def close(self) -> None:
        self._admin = None

    def __enter__(self) -> MirrorClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

"""MM2's `RemoteClusterUtils.translateOffsets` (docs/mm2-reference.md §7), plus exact live translation and bulk queries.

Two ways to answer "where does group G resume on the target cluster":
* from checkpoints (what Java's RemoteClusterUtils does): read `<source>.checkpoints.internal` on the target
  and take the last checkpoint of each downstream partition. Works with nothing but the target cluster, and
  reads MM2's own checkpoints as well as ours;
* live: apply the flow's offset maps to the group's current committed offsets on the source. Needs both
  clusters; it is what the next checkpoint would say, without waiting for it.
Either way the answer names the target side: remote topics, downstream offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mirrorflow.config.model import ClusterConfig, Flow, MirrorConfig
from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.core.patterns import PatternError, compile_patterns, matches
from mirrorflow.core.replication_policy import ReplicationPolicy
from mirrorflow.core.topic_selection import rename_topic_partition
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.consumer_groups import list_committed_offsets
from mirrorflow.kafka.group_coordinator import CommittedOffset, list_group_ids
from mirrorflow.replication.checkpoint_store import CheckpointStore
from mirrorflow.replication.flow_clients import LIBRDKAFKA_LOG
from mirrorflow.replication.flow_rules import FlowRules
from mirrorflow.replication.mirror_client import MirrorClient
from mirrorflow.replication.offset_translation import (
    TranslatedOffset,
    checkpoints_as_offsets,
    learn_leading_gaps,
    load_offset_maps,
)

DEFAULT_TIMEOUT_S = 60.0


def translate_offsets(
    cluster: ClusterConfig, remote_cluster_alias: str, consumer_group_id: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[tuple[str, int], CommittedOffset]:
    """Java's `RemoteClusterUtils.translateOffsets(props, remoteClusterAlias, group, timeout)`: `cluster` is
    where the group resumes (it holds `<remoteClusterAlias>.checkpoints.internal`); last checkpoint wins."""
    topic = cluster.policy(remote_cluster_alias).checkpoints_topic(remote_cluster_alias)
    store = CheckpointStore.load(
        cluster.alias,
        cluster.consumer.librdkafka(),
        topic,
        timeout_s=timeout_s,
        group_matches=lambda g: g == consumer_group_id,
    )
    return {
        tp: CommittedOffset(c.downstream_offset, c.metadata)
        for tp, c in store.group_checkpoints(consumer_group_id).items()
    }


@dataclass(frozen=True)
class _Route:
    """What a translation between two aliases needs; `flow` only when the source->target flow is configured."""

    source: str
    target: str
    cluster: ClusterConfig | None
    flow: Flow | None
    timeout_s: float

    def policy(self) -> ReplicationPolicy:
        if self.flow is not None:
            return self.flow.policy()
        assert self.cluster is not None
        return self.cluster.policy(self.source)

    def checkpoints_topic(self) -> str:
        return self.policy().checkpoints_topic(self.source)

    def target_consumer(self) -> dict[str, str]:
        if self.flow is not None:
            return self.flow.target_consumer.librdkafka()
        assert self.cluster is not None
        return self.cluster.consumer.librdkafka()

    def target_admin(self) -> dict[str, str]:
        if self.flow is not None:
            return self.flow.target_admin.librdkafka()
        assert self.cluster is not None
        return self.cluster.admin.librdkafka()


def _route(where: Flow | MirrorConfig, source: str, target: str, timeout_s: float | None) -> _Route:
    if source == target:
        raise UsageError(f"--source and --target are both '{source}': name two different cluster aliases")
    if isinstance(where, Flow):
        if (where.source, where.target) != (source, target):
            raise UsageError(f"flow {where.name} cannot translate {source}->{target}")
        return _Route(source, target, None, where, timeout_s or where.admin_timeout_ms / 1000)
    for alias in (source, target):
        if alias not in where.clusters:
            known = ", ".join(sorted(where.clusters))
            raise UsageError(f"{where.path}: unknown cluster alias '{alias}' (clusters: {known})")
    name = f"{source}->{target}"
    flow = next((f for f in (*where.flows, *where.heartbeat_flows) if f.name == name), None)
    timeout = timeout_s or (flow.admin_timeout_ms / 1000 if flow is not None else DEFAULT_TIMEOUT_S)
    return _Route(source, target, where.clusters[target], flow, timeout)


def _live_flow(route: _Route, config_path: str) -> Flow:
    if route.flow is None:
        raise UsageError(
            f"{config_path}: live translation needs the flow {route.source}->{route.target} configured "
            f"(`{route.source}->{route.target}.enabled = true`); without --live the checkpoints are read"
        )
    return route.flow


def _checkpointed(route: _Route, group_matches: Callable[[str], bool]) -> CheckpointStore:
    topic = route.checkpoints_topic()
    with MirrorClient(route.target, route.target_admin(), route.policy(), route.timeout_s) as target:
        present = target.checkpoint_topics()
    if topic not in present:
        raise MirrorflowError(
            f"cluster '{route.target}' has no checkpoints topic '{topic}': the flow {route.source}->{route.target} "
            "has not emitted checkpoints yet (run it, e.g. `mirrorflow run CONFIG --once`), or use --live"
        )
    return CheckpointStore.load(
        route.target, route.target_consumer(), topic, timeout_s=route.timeout_s, group_matches=group_matches
    )


def _live(flow: Flow, groups: list[str], timeout_s: float) -> dict[str, list[TranslatedOffset]]:
    """Translate the groups' current source offsets with the offset maps (the next checkpoint's answer)."""
    rules = FlowRules.of(flow)
    admin = admin_client(flow.source_admin.librdkafka(), logger=LIBRDKAFKA_LOG)
    offsets = list_committed_offsets(admin, flow.source, groups, timeout_s, rules.topic_filter.should_replicate_topic)
    topics = {t for o in offsets.values() for t, _ in o}
    maps = load_offset_maps(flow, topics=topics, timeout_s=timeout_s)
    positions = [(t, p, o.offset) for group in offsets.values() for (t, p), o in group.items() if t in topics]
    learn_leading_gaps(flow, maps, positions, admin, timeout_s)
    result: dict[str, list[TranslatedOffset]] = {}
    for group in groups:
        translated = []
        for (topic, partition), committed in sorted(offsets.get(group, {}).items()):
            if topic not in topics:
                continue
            translation = maps.translate(topic, partition, committed.offset)
            if translation.offset is None:
                continue
            remote = rename_topic_partition(
                topic, policy=rules.policy, source_alias=flow.source, target_alias=flow.target
            )
            translated.append(
                TranslatedOffset(remote, partition, translation.offset, committed.offset, committed.metadata)
            )
        result[group] = sorted(translated, key=lambda t: (t.topic, t.partition))
    return result


def _config_path(where: Flow | MirrorConfig) -> str:
    return where.path if isinstance(where, MirrorConfig) else where.name


def translate_group(
    where: Flow | MirrorConfig,
    group: str,
    source: str,
    target: str,
    *,
    live: bool = False,
    timeout_s: float | None = None,
) -> list[TranslatedOffset]:
    """Where `group` (a group of `source`) resumes on `target`, sorted by remote topic and partition;
    partitions without a translation are left out."""
    route = _route(where, source, target, timeout_s)
    if live:
        flow = _live_flow(route, _config_path(where))
        return _live(flow, [group], route.timeout_s)[group]
    store = _checkpointed(route, lambda g: g == group)
    return checkpoints_as_offsets(store.group_checkpoints(group))


def translate_groups(
    where: Flow | MirrorConfig,
    pattern: str,
    source: str,
    target: str,
    *,
    live: bool = False,
    timeout_s: float | None = None,
) -> dict[str, list[TranslatedOffset]]:
    """`translate_group` for every group whose name fully matches the (Java) regex `pattern`; from
    checkpoints: the groups that have checkpoints; live: the source's groups with committed offsets."""
    try:
        regex = compile_patterns([pattern], key="--groups")
    except PatternError as err:
        raise UsageError(str(err)) from err

    def selected(group: str) -> bool:
        return matches(regex, group)

    route = _route(where, source, target, timeout_s)
    if live:
        flow = _live_flow(route, _config_path(where))
        admin = admin_client(flow.source_admin.librdkafka(), logger=LIBRDKAFKA_LOG)
        groups = [g for g in list_group_ids(admin, flow.source, route.timeout_s) if selected(g)]
        found = _live(flow, groups, route.timeout_s)
        return {g: offsets for g, offsets in sorted(found.items()) if offsets}
    store = _checkpointed(route, selected)
    return {g: checkpoints_as_offsets(store.group_checkpoints(g)) for g in store.groups()}


def to_json(offsets: list[TranslatedOffset]) -> list[dict[str, str | int]]:
    return [o.to_json() for o in offsets]


def bulk_to_json(groups: Mapping[str, list[TranslatedOffset]]) -> dict[str, list[dict[str, str | int]]]:
    return {g: to_json(offsets) for g, offsets in sorted(groups.items())}

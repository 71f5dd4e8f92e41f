"""What `topic_reset.reset_topic` checks before it changes anything, and the checkpoints it restarts.

* A remote topic whose name does not say it is a copy of the flow's source (IdentityReplicationPolicy: the
  target's `x` may be the target's own topic, written by its applications) is never deleted.
* An at-least-once copy writes without a transactional id, so the reset cannot fence it: a copy still running
  would write progress and map segments the reset does not see. Such a flow is reset only while a pause marker
  stops it (`flow_cycle.flow_paused`, what every runner checks), or with `force` (a warning is logged).
* Partitions whose progress records the topic IDs the clusters report now were not re-created: nothing to
  reset. A second run, or a reset of the wrong topic, would otherwise copy the whole topic again (duplicates on
  the target). They are kept unless `force` is given.
* With the remote topic deleted, its partitions restart at offset 0, below the old topic's checkpoints. MM2's
  "more recent" rule (core/checkpoint.py) would then keep the old, higher checkpoint against every new one, and
  group sync would write it into the idle target groups: a failover would skip records. The reset therefore
  writes, per group and reset partition that had a checkpoint, a checkpoint at the new copy's start (upstream:
  where the new copy starts; downstream 0). It is a real checkpoint record, not a tombstone, so MM2's Java readers
  (`RemoteClusterUtils`, MirrorCheckpointTask's store) and ours read it as the latest value of the key; any later
  checkpoint with a downstream offset above 0 is "more recent" than it. A group that has a checkpoint there and is
  active on the target refuses the reset (its offsets on the deleted topic would be reused by its members).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

from mirrorflow.config.model import Flow
from mirrorflow.core.checkpoint import Checkpoint
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.progress import Progress
from mirrorflow.core.replication_policy import SOURCE_CLUSTER_ALIAS_KEY, load_replication_policy
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.consumer_groups import describe_group_states
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.replication.checkpoint_store import CheckpointStore
from mirrorflow.replication.checkpoints import CHECKPOINTS_PARTITION
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import flow_paused, state_root_override
from mirrorflow.replication.group_sync import IDLE_STATES

log = logging.getLogger(__name__)


def refuse_foreign_remote(flow: Flow, remote: str) -> None:
    """Refuse to delete a remote topic whose name does not identify it as a copy of the flow's source."""
    settings = {k: v for k, v in flow.policy_settings().items() if k != SOURCE_CLUSTER_ALIAS_KEY}
    by_name = load_replication_policy(flow.replication_policy_class, settings)
    if by_name.topic_source(remote) != flow.source:
        raise MirrorflowError(
            f"flow {flow.name}: refusing --delete-remote-topic: the name of '{remote}' on '{flow.target}' does not "
            f"name it a copy of '{flow.source}' (replication policy {flow.replication_policy_class}), so it may be "
            f"'{flow.target}'s own topic with its own records. Reset without --delete-remote-topic (the new copy "
            "continues after the topic's current end), or delete the topic yourself if you are sure."
        )


def refuse_unfenced_copy(flow: Flow, *, force: bool) -> None:
    """An at-least-once copy cannot be fenced: reset it only while the flow is paused, or with `force`."""
    if flow.delivery != "at-least-once":
        return
    with FlowClients(flow) as clients:
        paused = flow_paused(flow, clients, state_root_override())
    if paused is not None:
        return
    if not force:
        raise MirrorflowError(
            f"flow {flow.name}: the reset cannot fence an at-least-once copy (it has no transactional id), and no "
            "pause marker stops the flow: a copy still running would write state the reset does not see. Stop every "
            "run of the flow (pause its Airflow DAG, stop `mirrorflow run`), then run the reset with --force."
        )
    log.warning("flow %s: resetting an at-least-once copy that is not paused (--force)", flow.name)


def unchanged_partitions(
    recorded: Mapping[int, Progress], current: tuple[str, str], partitions: Collection[int]
) -> list[int]:
    """The partitions whose progress records the topic IDs the clusters report now: not re-created."""
    source_id, remote_id = current
    return sorted(
        p
        for p in partitions
        if p in recorded
        and source_id
        and recorded[p].source_topic_id == source_id
        and recorded[p].remote_topic_id == remote_id
    )


def old_checkpoints(flow: Flow, remote: str, partitions: Collection[int], timeout_s: float) -> list[Checkpoint]:
    """The checkpoints of `remote`'s `partitions` (any group); refuses if one of their groups is active."""
    store = CheckpointStore.for_flow(flow, timeout_s=timeout_s)
    found = [
        c
        for group in store.groups()
        for (topic, partition), c in store.group_checkpoints(group).items()
        if topic == remote and partition in partitions
    ]
    groups = sorted({c.consumer_group_id for c in found})
    states = describe_group_states(admin_client(flow.target_admin.librdkafka()), flow.target, groups, timeout_s)
    active = sorted(g for g, s in states.items() if s.state not in IDLE_STATES)
    if active:
        raise MirrorflowError(
            f"flow {flow.name}: refusing --delete-remote-topic: consumer groups active on '{flow.target}' read "
            f"'{remote}': {', '.join(active[:5])}. Stop them first: their positions on the deleted topic would "
            "skip records of the new copy."
        )
    return found


def restart_checkpoints(
    flow: Flow, checkpoints: list[Checkpoint], starts: Mapping[int, tuple[int, int]], timeout_s: float
) -> int:
    """Supersede `checkpoints` by checkpoints at the new copy's start of their partition (module docstring)."""
    fresh = [
        Checkpoint(c.consumer_group_id, c.topic, c.partition, starts[c.partition][0], starts[c.partition][1])
        for c in checkpoints
        if c.partition in starts
    ]
    if not fresh:
        return 0
    writer = TargetWriter(flow.target, flow.target_producer.librdkafka(), transactional_id=None, timeout_s=timeout_s)
    try:
        name = flow.policy().checkpoints_topic(flow.source)
        for c in fresh:
            writer.produce(name, CHECKPOINTS_PARTITION, c.record_key(), c.record_value())
        writer.commit()
    finally:
        writer.close()
    return len(fresh)

"""A flow's steps, their order, cadence and dependencies: the one description the CLI loop, the Airflow factory
and the Spark job are rendered from.

MM2 runs a flow as three connectors: MirrorSourceConnector (topic refresh, config and ACL sync, the record copy
and its offset syncs), MirrorCheckpointConnector (checkpoints, then group offset sync) and
MirrorHeartbeatConnector. Mirrorflow keeps those concerns as steps:

  topics -> configs, acls -> copy -> checkpoints -> groups;   topics -> heartbeat

`topics` (discover, create remote topics, create internal topics) comes first: configs, ACLs and the copy need
the remote topics, heartbeats need the `heartbeats` topic. Checkpoints translate what the copy committed, and
group sync reads those checkpoints. Each step repeats at its MM2 cadence in a loop (`mirrorflow run`, a
continuous DAG run); a disabled one (`*.enabled = false`) never runs, and a disabled topic refresh runs once.

How the shells render it:
* `mirrorflow run` / `plan` (`flow_cycle.run_control_plane`, `FlowSchedule`): the steps in this order, each when
  due at `every_s`;
* Airflow (`airflow/factory.py`): one task per step (`topics` is two: discover, then sync_topics) wired by
  `after`; in continuous mode the steps marked `beside_copy` share one `loops` task that runs beside the copy;
* Spark (`spark/copy_job.py`): the `copy` step only.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorflow.config.model import Flow

TOPICS = "topics"
CONFIGS = "configs"
ACLS = "acls"
HEARTBEAT = "heartbeat"
COPY = "copy"
CHECKPOINTS = "checkpoints"
GROUPS = "groups"
ORDER = (TOPICS, CONFIGS, ACLS, HEARTBEAT, COPY, CHECKPOINTS, GROUPS)
"""One cycle, in the order a single thread runs it (a topological order of `after`)."""


@dataclass(frozen=True)
class FlowStep:
    """One step of a flow's cycle."""

    name: str
    tasks: tuple[str, ...]
    """Its Airflow task ids, in order."""
    after: tuple[str, ...]
    """Steps that must be done first within one cycle."""
    every_s: float | None
    """Its cadence in a loop; None: once (a disabled topic refresh, which MM2 still runs at start)."""
    enabled: bool
    switch: str
    """The key that turns it off (or '' when none does)."""
    beside_copy: bool = False
    """In a continuous run, repeated beside the copy for the copy's run time (the `loops` task)."""


def flow_steps(flow: Flow) -> tuple[FlowStep, ...]:
    """The steps of `flow`, in `ORDER`."""
    return (
        FlowStep(
            TOPICS,
            ("discover", "sync_topics"),
            (),
            float(flow.refresh_topics_interval_seconds) if flow.refresh_topics_enabled else None,
            True,
            "refresh.topics.enabled",
        ),
        FlowStep(
            CONFIGS,
            ("sync_configs",),
            (TOPICS,),
            float(flow.sync_topic_configs_interval_seconds),
            flow.sync_topic_configs_enabled,
            "sync.topic.configs.enabled",
        ),
        FlowStep(
            ACLS,
            ("sync_acls",),
            (TOPICS,),
            float(flow.sync_topic_acls_interval_seconds),
            flow.sync_topic_acls_enabled,
            "sync.topic.acls.enabled",
        ),
        FlowStep(
            HEARTBEAT,
            ("heartbeats",),
            (TOPICS,),
            float(flow.emit_heartbeats_interval_seconds),
            flow.emit_heartbeats_enabled,
            "emit.heartbeats.enabled",
            beside_copy=True,
        ),
        FlowStep(COPY, ("copy",), (CONFIGS, ACLS), 0.0, True, ""),
        FlowStep(
            CHECKPOINTS,
            ("emit_checkpoints",),
            (COPY,),
            float(flow.emit_checkpoints_interval_seconds),
            flow.emit_checkpoints_enabled,
            "emit.checkpoints.enabled",
            beside_copy=True,
        ),
        FlowStep(
            GROUPS,
            ("sync_group_offsets",),
            (CHECKPOINTS,),
            float(flow.sync_group_offsets_interval_seconds),
            flow.sync_group_offsets_enabled,
            "sync.group.offsets.enabled",
            beside_copy=True,
        ),
    )


def step(flow: Flow, name: str) -> FlowStep:
    """The step called `name` of `flow`."""
    return next(s for s in flow_steps(flow) if s.name == name)

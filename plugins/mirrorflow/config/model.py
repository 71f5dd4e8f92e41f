"""The loaded configuration: immutable, JSON-serialisable models handed to every other layer.

A `Flow` carries everything one `source->target` replication needs, already composed with MM2's precedence.
No Flow crosses a process boundary: each Airflow task gets the config path, flow name and `--clusters` subset
and loads the flow again; the Spark driver loads the file too (Airflow connection credentials come in the
`MIRRORFLOW_CLUSTER_SETTINGS` environment variable); executors receive `CopyTask`s, plain dataclasses Spark
pickles, built by `replication.copy_plan.plan_copy` with revealed client settings. `to_json(reveal_secrets=True)`
and `Flow.from_json` round-trip a Flow (tests use them); otherwise secrets stay masked:
`model_dump(mode="json")` shows `***`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SecretStr, SerializationInfo, field_serializer

from mirrorflow.config.client_config import MASK, ClientConfig
from mirrorflow.config.issues import Issue
from mirrorflow.config.keys import (
    DEFAULT_CONFIG_PROPERTIES_EXCLUDE,
    DEFAULT_GROUPS_EXCLUDE,
    DEFAULT_POLICY,
    DEFAULT_TOPICS_EXCLUDE,
    is_secret_key,
)
from mirrorflow.core.errors import UsageError
from mirrorflow.core.group_filter import JAVA_DEFAULT_GROUP_FILTER, GroupFilter, load_group_filter
from mirrorflow.core.patterns import parse_list
from mirrorflow.core.replication_policy import ReplicationPolicy, load_replication_policy
from mirrorflow.core.topic_filter import JAVA_DEFAULT_TOPIC_FILTER, TopicFilter, load_topic_filter
from mirrorflow.core.transforms import ChainSpec

_FROZEN = ConfigDict(frozen=True)

TYPED_FIELDS: dict[str, str] = {
    # Flow field -> the MM2 (or mirrorflow.*) key it is read from.
    "enabled": "enabled",
    "topics": "topics",
    "topics_exclude": "topics.exclude",
    "groups": "groups",
    "groups_exclude": "groups.exclude",
    "config_properties_exclude": "config.properties.exclude",
    "use_defaults_from": "use.defaults.from",
    "topic_filter_class": "topic.filter.class",
    "group_filter_class": "group.filter.class",
    "replication_policy_class": "replication.policy.class",
    "replication_policy_separator": "replication.policy.separator",
    "internal_topic_separator_enabled": "replication.policy.internal.topic.separator.enabled",
    "replication_factor": "replication.factor",
    "offset_syncs_topic_replication_factor": "offset-syncs.topic.replication.factor",
    "checkpoints_topic_replication_factor": "checkpoints.topic.replication.factor",
    "heartbeats_topic_replication_factor": "heartbeats.topic.replication.factor",
    "offset_syncs_topic_location": "offset-syncs.topic.location",
    "emit_offset_syncs_enabled": "emit.offset-syncs.enabled",
    "offset_lag_max": "offset.lag.max",
    "refresh_topics_enabled": "refresh.topics.enabled",
    "refresh_topics_interval_seconds": "refresh.topics.interval.seconds",
    "sync_topic_configs_enabled": "sync.topic.configs.enabled",
    "sync_topic_configs_interval_seconds": "sync.topic.configs.interval.seconds",
    "sync_topic_acls_enabled": "sync.topic.acls.enabled",
    "sync_topic_acls_interval_seconds": "sync.topic.acls.interval.seconds",
    "refresh_groups_enabled": "refresh.groups.enabled",
    "refresh_groups_interval_seconds": "refresh.groups.interval.seconds",
    "emit_checkpoints_enabled": "emit.checkpoints.enabled",
    "emit_checkpoints_interval_seconds": "emit.checkpoints.interval.seconds",
    "sync_group_offsets_enabled": "sync.group.offsets.enabled",
    "sync_group_offsets_interval_seconds": "sync.group.offsets.interval.seconds",
    "emit_heartbeats_enabled": "emit.heartbeats.enabled",
    "emit_heartbeats_interval_seconds": "emit.heartbeats.interval.seconds",
    "heartbeats_replication_enabled": "heartbeats.replication.enabled",
    "admin_timeout_ms": "admin.timeout.ms",
    "consumer_poll_timeout_ms": "consumer.poll.timeout.ms",
    "delivery": "mirrorflow.delivery",
    "copy_mode": "mirrorflow.copy.mode",
    "copy_run_seconds": "mirrorflow.copy.run.seconds",
    "copy_handover_seconds": "mirrorflow.copy.handover.seconds",
    "copy_round_seconds": "mirrorflow.copy.round.seconds",
    "copy_transaction_max_ms": "mirrorflow.copy.transaction.max.ms",
    "copy_transaction_min_ms": "mirrorflow.copy.transaction.min.ms",
    "copy_transaction_min_records": "mirrorflow.copy.transaction.min.records",
    "copy_partitions_per_task": "mirrorflow.copy.partitions.per.task",
    "state_partitions_max": "mirrorflow.state.partitions.max",
    "schedule": "mirrorflow.schedule",
    "provenance_headers": "mirrorflow.provenance.headers",
    "spark_master": "mirrorflow.spark.master",
    "spark_total_executor_cores": "mirrorflow.spark.total.executor.cores",
    "spark_executor_memory": "mirrorflow.spark.executor.memory",
    "spark_driver_memory": "mirrorflow.spark.driver.memory",
    "copy_interval_timeout_seconds": "mirrorflow.copy.interval.timeout.seconds",
    "airflow_retries": "mirrorflow.airflow.retries",
    "airflow_retry_delay_seconds": "mirrorflow.airflow.retry.delay.seconds",
    "airflow_execution_timeout_seconds": "mirrorflow.airflow.execution.timeout.seconds",
    "runbook_step_timeout_seconds": "mirrorflow.runbook.step.timeout.seconds",
    "runbook_rto_target_seconds": "mirrorflow.runbook.rto.target.seconds",
    "drill_schedule": "mirrorflow.drill.schedule",
    "drill_fence": "mirrorflow.drill.fence",
    "drill_fence_command": "mirrorflow.drill.fence.command",
    "drill_history": "mirrorflow.drill.history",
    "airflow_failure_notifier": "mirrorflow.airflow.failure.notifier",
    "airflow_deadline_seconds": "mirrorflow.airflow.deadline.seconds",
    "airflow_deadline_notifier": "mirrorflow.airflow.deadline.notifier",
    "airflow_loop_pool": "mirrorflow.airflow.loop.pool",
    "airflow_copy_queue": "mirrorflow.airflow.copy.queue",
    "rpo_target_seconds": "mirrorflow.rpo.target.seconds",
    "lag_target_records": "mirrorflow.lag.target.records",
}


class ClusterConfig(BaseModel):
    """One cluster alias: how to reach it (MM2's `clientConfig(alias)`), and its Airflow connection id."""

    model_config = _FROZEN

    alias: str
    bootstrap_servers: str | None = None
    connection: str | None = None
    replication_policy_class: str = DEFAULT_POLICY
    replication_policy_separator: str = "."
    internal_topic_separator_enabled: bool = True
    consumer: ClientConfig = ClientConfig()
    producer: ClientConfig = ClientConfig()
    admin: ClientConfig = ClientConfig()

    def policy(self, source_alias: str | None = None) -> ReplicationPolicy:
        """The naming policy as RemoteClusterUtils sees it from this cluster (`source_alias` for Identity)."""
        settings = {
            "replication.policy.separator": self.replication_policy_separator,
            "replication.policy.internal.topic.separator.enabled": str(self.internal_topic_separator_enabled).lower(),
        }
        if source_alias is not None:
            settings["source.cluster.alias"] = source_alias
        return load_replication_policy(self.replication_policy_class, settings)


class Flow(BaseModel):
    """One `source->target` flow with its effective settings (MM2 key names) and typed values."""

    model_config = _FROZEN

    source: str
    target: str
    name: str
    enabled: bool = True

    # Filters (MirrorSourceConfig, MirrorCheckpointConfig, DefaultConfigPropertyFilter), split as LISTs.
    topics: tuple[str, ...] = (".*",)
    topics_exclude: tuple[str, ...] = parse_list(DEFAULT_TOPICS_EXCLUDE)
    groups: tuple[str, ...] = (".*",)
    groups_exclude: tuple[str, ...] = parse_list(DEFAULT_GROUPS_EXCLUDE)
    config_properties_exclude: tuple[str, ...] = parse_list(DEFAULT_CONFIG_PROPERTIES_EXCLUDE)
    use_defaults_from: Literal["source", "target"] = "target"
    topic_filter_class: str = JAVA_DEFAULT_TOPIC_FILTER
    """MM2's name of the built-in filter (`topics`, `topics.exclude`), or the Python path of the user's class."""
    group_filter_class: str = JAVA_DEFAULT_GROUP_FILTER

    # Naming.
    replication_policy_class: str = DEFAULT_POLICY
    replication_policy_separator: str = "."
    internal_topic_separator_enabled: bool = True

    # Topics Mirrorflow creates.
    replication_factor: int = 2
    offset_syncs_topic_replication_factor: int = 3
    checkpoints_topic_replication_factor: int = 3
    heartbeats_topic_replication_factor: int = 3
    offset_syncs_topic_location: Literal["source", "target"] = "source"
    emit_offset_syncs_enabled: bool = True
    offset_lag_max: int = 100

    # Periodic work.
    refresh_topics_enabled: bool = True
    refresh_topics_interval_seconds: int = 600
    sync_topic_configs_enabled: bool = True
    sync_topic_configs_interval_seconds: int = 600
    sync_topic_acls_enabled: bool = True
    sync_topic_acls_interval_seconds: int = 600
    refresh_groups_enabled: bool = True
    refresh_groups_interval_seconds: int = 600
    emit_checkpoints_enabled: bool = True
    emit_checkpoints_interval_seconds: int = 60
    sync_group_offsets_enabled: bool = False
    sync_group_offsets_interval_seconds: int = 60
    emit_heartbeats_enabled: bool = True
    emit_heartbeats_interval_seconds: int = 1
    heartbeats_replication_enabled: bool = True
    admin_timeout_ms: int = 60000
    consumer_poll_timeout_ms: int = 1000

    # Mirrorflow's own keys (`mirrorflow.*`).
    delivery: Literal["exactly-once", "at-least-once"] = "exactly-once"
    copy_mode: Literal["continuous", "interval"] = "continuous"
    copy_run_seconds: int = 300
    copy_handover_seconds: int = 60
    """How long before a continuous run's copy ends the next run starts (`airflow.schedule.overlapping_runs`)."""
    copy_round_seconds: int = 0
    """Continuous exactly-once copies: how often the running Spark application plans its copy again (new topics
    and partitions, quiet partitions regrouped) and hands only the changed Spark tasks over inside the same
    application (`spark.copy_rounds`); 0 (or not below `copy_run_seconds`): one plan per application."""
    copy_transaction_max_ms: int = 500
    """The longest a copy transaction stays open: what a record waits at most before it is committed."""
    copy_transaction_min_ms: int = 100
    """Continuous copies: the shortest a transaction holding fewer than `copy_transaction_min_records` records stays
    open (capped by the longest), so a caught-up light partition (below ~320 records/s at the defaults) commits at
    most about 10 times a second, as Kafka Streams' exactly-once `commit.interval.ms` (100 ms) does. 0: commit as
    soon as the copy has caught up."""
    copy_transaction_min_records: int = 32
    """Continuous copies: a caught-up transaction holding this many records commits whatever its age (holding a
    loaded partition's transaction open stalled the copy, docs/copy.md). 0: the minimum time applies to all."""
    copy_partitions_per_task: int = 8
    """The most source partitions one Spark task copies (in threads) when partitions outnumber Spark's slots."""
    state_partitions_max: int = 4096
    """The most partitions each of the flow's three state topics grows to (a power of two; `core.state_slots`). A
    copy task reads the slots of its partitions at start, so below the cap its start-up state bytes stay flat as
    the flow grows; past it (8 x the cap source partitions) they grow with the flow again. docs/scaling.md item 1
    weighs a higher cap (more partitions, and metadata that grows with them)."""
    schedule: str = "@continuous"
    provenance_headers: bool = False
    spark_master: str = "local[*]"
    spark_conf: dict[str, SecretStr] = {}
    """`mirrorflow.spark.conf.<key>` values by Spark key, references resolved; `SecretStr` as any of them may be a
    credential (`spark.hadoop.fs.s3a.secret.key`): `spark_submit_conf()` reveals them for spark-submit."""
    spark_total_executor_cores: int | None = None
    """`spark.cores.max` of the copy on a standalone master; None: one core per Spark task the copy needs."""
    spark_executor_memory: str | None = None
    spark_driver_memory: str | None = None
    copy_interval_timeout_seconds: int = 3600
    """The longest an interval copy may run before Airflow stops it (its `execution_timeout`). One hour: a run
    that long is starved of cores or catching up a backlog, and either is better reported than left holding the
    flow's only active run; the retry resumes from the positions already committed, so nothing is copied twice."""
    airflow_retries: int = 3
    """Airflow retries of a flow DAG's tasks (with exponential backoff); operator errors are never retried."""
    airflow_retry_delay_seconds: int = 30
    airflow_execution_timeout_seconds: int = 900
    """The longest a one-shot control-plane task (discover, topic/config/ACL sync) may run."""
    runbook_step_timeout_seconds: int = 1800
    runbook_rto_target_seconds: int | None = None
    """The recovery time objective: a failover/failback DAG run still going this long after it was queued
    raises a DeadlineAlert (the strictest value of the flows; `mirrorflow.airflow.deadline.notifier` or a log
    line). None: no deadline (opt-in, see airflow/alerts.deadline_alert)."""
    drill_schedule: str | None = None
    """When `mirrorflow_drill` rehearses this flow's failover (an Airflow schedule); None: no drill DAG."""
    drill_fence: str = "acl"
    drill_fence_command: str | None = None
    drill_history: int = 20
    """Drill reports kept per pair (rotating keys of the runbook topic)."""
    """The longest one task of the failover/failback DAG may run (its `execution_timeout`): a step blocked on an
    unreachable cluster fails, to be cleared and resumed, instead of holding the runbook; the DAG takes the
    longest of its flows' values."""
    airflow_failure_notifier: str | None = None
    """Dotted path of the callable Airflow calls when a task failed for good (airflow/alerts.py); None: a log line."""
    airflow_deadline_seconds: int | None = None
    """A flow DAG run still running this long after it was queued raises Airflow's DeadlineAlert; None: no
    deadline (opt-in: airflow/alerts.deadline_alert says why)."""
    airflow_deadline_notifier: str | None = None
    """Dotted path of the deadline callback (called with `context` and `flow`); None: an ERROR log line."""
    airflow_loop_pool: str | None = None
    """The Airflow pool of a continuous flow's loop tasks (checkpoints, group sync, heartbeats); None: Airflow's
    default pool. The pool must exist (`airflow pools set NAME SLOTS DESCRIPTION`)."""
    airflow_copy_queue: str = "default"
    """The executor queue of the copy task: with Celery, the worker consuming it runs spark-submit and so the
    client-mode Spark driver, which needs that worker's memory and a hostname the Spark executors reach."""
    rpo_target_seconds: float | None = None
    """Replication SLO: the oldest uncopied source record may be at most this old (None: no RPO objective)."""
    lag_target_records: int | None = None
    """Replication SLO: at most this many source records may wait to be copied (None: no lag objective)."""
    source_connection: str | None = None
    target_connection: str | None = None
    transforms: ChainSpec = ChainSpec()
    """The records' transform chain: Connect's `transforms`, `predicates`, `errors.*` (config/transform_specs.py)."""

    settings: dict[str, str] = {}
    """The connector config MM2 would build (provider references unresolved, secret keys shown as `***`)."""

    source_consumer: ClientConfig = ClientConfig()
    source_producer: ClientConfig = ClientConfig()
    source_admin: ClientConfig = ClientConfig()
    target_consumer: ClientConfig = ClientConfig()
    target_producer: ClientConfig = ClientConfig()
    target_admin: ClientConfig = ClientConfig()

    @field_serializer("transforms")
    def _transforms(self, chain: ChainSpec, info: SerializationInfo) -> dict[str, Any]:
        """Transform settings that look secret are masked unless revealed, like client secrets."""
        data = dataclasses.asdict(chain)
        if not (isinstance(info.context, dict) and info.context.get("reveal_secrets")):
            for step in (*data["transforms"], *data["predicates"]):
                step["settings"] = {k: MASK if is_secret_key(k) else v for k, v in step["settings"].items()}
        return data

    @field_serializer("spark_conf")
    def _spark_conf(self, conf: dict[str, SecretStr], info: SerializationInfo) -> dict[str, str]:
        """Secret-looking Spark settings are masked unless revealed; the others show, as in `settings`."""
        reveal = isinstance(info.context, dict) and bool(info.context.get("reveal_secrets"))
        return {k: v.get_secret_value() if reveal or not is_secret_key(k) else MASK for k, v in conf.items()}

    def spark_submit_conf(self) -> dict[str, str]:
        """`mirrorflow.spark.conf.*` in clear, for spark-submit's `--conf`: never print or store it."""
        return {k: v.get_secret_value() for k, v in self.spark_conf.items()}

    def __hash__(self) -> int:  # the dict fields are unhashable; equal flows share their name
        return hash(self.name)

    def policy(self) -> ReplicationPolicy:
        """The flow's replication policy, configured as MM2 configures it (with `source.cluster.alias`)."""
        return load_replication_policy(self.replication_policy_class, self.policy_settings())

    def policy_settings(self) -> dict[str, str]:
        return {
            "replication.policy.class": self.replication_policy_class,
            "replication.policy.separator": self.replication_policy_separator,
            "replication.policy.internal.topic.separator.enabled": str(self.internal_topic_separator_enabled).lower(),
            "source.cluster.alias": self.source,
            "target.cluster.alias": self.target,
        }

    def topic_filter(self) -> TopicFilter:
        """The flow's topic filter (`topic.filter.class`), configured with `plugin_settings` as MM2 configures it."""
        return load_topic_filter(self.topic_filter_class, self.plugin_settings())

    def group_filter(self) -> GroupFilter:
        """The flow's group filter (`group.filter.class`), configured with `plugin_settings`."""
        return load_group_filter(self.group_filter_class, self.plugin_settings())

    def plugin_settings(self) -> dict[str, str]:
        """What a pluggable class is configured with (MM2's `configure(props)`): the flow's settings with every
        typed key at the value in force (references resolved, defaults filled in; secrets stay masked) and the
        two cluster aliases."""
        settings = dict(self.settings)
        for field_name, key in TYPED_FIELDS.items():
            value = getattr(self, field_name)
            if value is not None:
                settings[key] = _as_text(value)
        settings["source.cluster.alias"] = self.source
        settings["target.cluster.alias"] = self.target
        return settings

    def to_json(self, reveal_secrets: bool = False) -> str:
        """The Flow as JSON (secrets as `***`); with `reveal_secrets` a `from_json` copy can build real clients."""
        return self.model_dump_json(context={"reveal_secrets": reveal_secrets})

    @classmethod
    def from_json(cls, data: str | bytes) -> Flow:
        return cls.model_validate_json(data)

    def effective_settings(self) -> dict[str, str]:
        """`settings` plus the value in force for every typed key the file leaves unset (MM2 key names)."""
        effective = dict(self.settings)
        for field_name, key in TYPED_FIELDS.items():
            value = getattr(self, field_name)
            if key not in effective and value is not None:
                effective[key] = _as_text(value)
        return dict(sorted(effective.items()))


def _as_text(value: object) -> str:
    """A typed value as the properties file would write it (booleans lower-case, lists comma-separated)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ", ".join(value)
    return str(value)


class UnknownFlowError(UsageError, KeyError):
    """A flow was named (`--flow A->B`) that the file does not enable."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class MirrorConfig(BaseModel):
    """A validated mm2.properties: the flows this node runs and what the operator should know."""

    model_config = _FROZEN

    path: str
    clusters: dict[str, ClusterConfig]
    flows: tuple[Flow, ...]
    """Enabled flows whose target is in the `--clusters` subset (all targets when no subset is given)."""
    heartbeat_pairs: tuple[tuple[str, str], ...]
    """Pairs MM2 runs a herder for (flow enabled, or heartbeats on for the pair), after the subset."""
    heartbeat_flows: tuple[Flow, ...] = ()
    """A `Flow` for each heartbeat pair, enabled or not: heartbeats need its target clients and intervals."""
    ignored_keys: tuple[str, ...] = ()
    warnings: tuple[Issue, ...] = ()

    def flow(self, name: str) -> Flow:
        """The enabled flow named `A->B`; `UnknownFlowError` (a UsageError and a KeyError) if it does not run."""
        for flow in self.flows:
            if flow.name == name:
                return flow
        enabled = ", ".join(f.name for f in self.flows) or "none"
        raise UnknownFlowError(
            f"{self.path}: flow '{name}' is not enabled (enabled flows: {enabled}); "
            f"set '{name}.enabled = true' or pick one of those"
        )

"""Keys an mm2.properties file may hold: MM2 4.x names, types, defaults, and what Mirrorflow does with each.

`implemented` keys change what Mirrorflow does; `ignored` keys are accepted (MM2 defines them) but have no
effect here, and `mirrorflow validate` lists them. The connector keys form MM2's `allConfigNames()` union,
which decides which top-level keys reach a flow (docs/mm2-reference.md §1.7 step 1).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from mirrorflow.core import config_property_filter, group_filter, topic_filter

KeyType = Literal["bool", "int", "long", "short", "double", "list", "string", "class", "enum", "password"]
Status = Literal["implemented", "ignored"]


@dataclass(frozen=True)
class KeySpec:
    name: str
    type: KeyType
    default: str | None
    status: Status = "implemented"
    choices: tuple[str, ...] = ()
    case_insensitive: bool = False
    why: str = ""


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
# MM2's filter defaults, as the Kafka release we run (4.3.1) defines them; core is the one source of truth.
DEFAULT_TOPICS_EXCLUDE = topic_filter.DEFAULT_TOPICS_EXCLUDE
DEFAULT_GROUPS_EXCLUDE = group_filter.DEFAULT_GROUPS_EXCLUDE
DEFAULT_CONFIG_PROPERTIES_EXCLUDE = config_property_filter.DEFAULT_CONFIG_PROPERTIES_EXCLUDE

_CONNECT = "a Kafka Connect setting; Mirrorflow runs no Connect worker"
_JAVA = "names a Java class, which cannot run here"


# Connect's ConnectorConfig keys, part of every MM2 connector's ConfigDef.
_CONNECTOR_FRAMEWORK = [
    KeySpec("name", "string", None, status="ignored", why="MM2 names its connectors itself"),
    KeySpec("connector.class", "class", None, status="ignored", why=_CONNECT),
    KeySpec(
        "tasks.max",
        "int",
        "1",
        status="ignored",
        why="Spark decides the parallelism (one task per partition)",
    ),
    KeySpec("tasks.max.enforce", "bool", "true", status="ignored", why=_CONNECT),
    KeySpec("key.converter", "class", None, status="ignored", why="records are copied as raw bytes"),
    KeySpec("value.converter", "class", None, status="ignored", why="records are copied as raw bytes"),
    KeySpec("header.converter", "class", None, status="ignored", why="records are copied as raw bytes"),
    KeySpec("transforms", "list", ""),  # the chain itself: config/transform_specs.py
    KeySpec("predicates", "list", ""),
    KeySpec("config.action.reload", "string", "restart", status="ignored", why=_CONNECT),
    KeySpec("errors.retry.timeout", "long", "0", status="ignored", why=_CONNECT),
    KeySpec("errors.retry.delay.max.ms", "long", "60000", status="ignored", why=_CONNECT),
    KeySpec("errors.tolerance", "enum", "none", choices=("none", "all"), case_insensitive=True),
    # Connect defines these for sink connectors only; here they name the transforms' dead-letter topic.
    KeySpec("errors.deadletterqueue.topic.name", "string", None),
    KeySpec("errors.deadletterqueue.topic.replication.factor", "short", "-1"),
    KeySpec("errors.log.enable", "bool", "false", status="ignored", why=_CONNECT),
    KeySpec("errors.log.include.messages", "bool", "false", status="ignored", why=_CONNECT),
]


def _scheduled(task: str, *, enabled: str, interval_s: str) -> tuple[KeySpec, KeySpec]:
    """MM2's pair for a periodic task: `<task>.enabled` and `<task>.interval.seconds`."""
    return KeySpec(f"{task}.enabled", "bool", enabled), KeySpec(f"{task}.interval.seconds", "long", interval_s)


# MirrorConnectorConfig, MirrorSourceConfig, MirrorCheckpointConfig, MirrorHeartbeatConfig (MM2 4.0).
_MIRROR = [
    KeySpec("enabled", "bool", "true"),
    KeySpec("source.cluster.alias", "string", None),
    KeySpec("target.cluster.alias", "string", "target"),
    KeySpec("admin.timeout.ms", "long", "60000"),
    KeySpec("replication.policy.class", "class", DEFAULT_POLICY),
    KeySpec("replication.policy.separator", "string", "."),
    KeySpec("replication.policy.internal.topic.separator.enabled", "bool", "true"),
    KeySpec(
        "forwarding.admin.class",
        "class",
        "org.apache.kafka.clients.admin.ForwardingAdmin",
        status="ignored",
        why=_JAVA,
    ),
    KeySpec(
        "metric.reporters",
        "list",
        "org.apache.kafka.common.metrics.JmxReporter",
        status="ignored",
        why="metrics are exposed for Prometheus (`mirrorflow metrics serve`)",
    ),
    KeySpec("topic.filter.class", "class", topic_filter.JAVA_DEFAULT_TOPIC_FILTER),
    KeySpec("group.filter.class", "class", group_filter.JAVA_DEFAULT_GROUP_FILTER),
    KeySpec(
        "config.property.filter.class",
        "class",
        "org.apache.kafka.connect.mirror.DefaultConfigPropertyFilter",
        status="ignored",
        why=_JAVA + "; the default filter's rules apply",
    ),
    KeySpec("topics", "list", ".*"),
    KeySpec("topics.exclude", "list", DEFAULT_TOPICS_EXCLUDE),
    KeySpec("config.properties.exclude", "list", DEFAULT_CONFIG_PROPERTIES_EXCLUDE),
    KeySpec("consumer.poll.timeout.ms", "long", "1000"),
    *_scheduled("refresh.topics", enabled="true", interval_s="600"),
    *_scheduled("sync.topic.configs", enabled="true", interval_s="600"),
    *_scheduled("sync.topic.acls", enabled="true", interval_s="600"),
    KeySpec("replication.factor", "int", "2"),
    KeySpec("offset-syncs.topic.replication.factor", "short", "3"),
    KeySpec("offset.lag.max", "long", "100"),
    KeySpec("offset-syncs.topic.location", "enum", "source", choices=("source", "target")),
    KeySpec("emit.offset-syncs.enabled", "bool", "true"),
    KeySpec("heartbeats.replication.enabled", "bool", "true"),
    KeySpec("groups", "list", ".*"),
    KeySpec("groups.exclude", "list", DEFAULT_GROUPS_EXCLUDE),
    *_scheduled("refresh.groups", enabled="true", interval_s="600"),
    *_scheduled("emit.checkpoints", enabled="true", interval_s="60"),
    *_scheduled("sync.group.offsets", enabled="false", interval_s="60"),
    KeySpec("checkpoints.topic.replication.factor", "short", "3"),
    *_scheduled("emit.heartbeats", enabled="true", interval_s="1"),
    KeySpec("heartbeats.topic.replication.factor", "short", "3"),
]

# Client connection keys (MirrorClientConfig.CLIENT_CONFIG_DEF): bootstrap, security, client SSL/SASL keys.
_SSL_KEYS = [
    "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.keystore.type",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.truststore.certificates", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation",
    "ssl.engine.factory.class",
]  # fmt: skip
_SASL_KEYS = [
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.min.time.before.relogin",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds", "sasl.mechanism",
    "sasl.jaas.config", "sasl.client.callback.handler.class", "sasl.login.callback.handler.class",
    "sasl.login.class", "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms",
    "sasl.login.retry.backoff.max.ms", "sasl.login.retry.backoff.ms", "sasl.oauthbearer.scope.claim.name",
    "sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
    "sasl.oauthbearer.clock.skew.seconds", "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer",
]  # fmt: skip
CLIENT_CONNECTION_KEYS: frozenset[str] = frozenset(["bootstrap.servers", "security.protocol", *_SSL_KEYS, *_SASL_KEYS])

# librdkafka's own names for the same settings; accepted wherever MM2's connection keys are, so a cluster can
# hold e.g. `A.ssl.ca.location` (MM2 does not know these keys and ignores them).
LIBRDKAFKA_CONNECTION_KEYS: frozenset[str] = frozenset(
    [
        "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem",
        "ssl.key.location", "ssl.key.pem", "ssl.crl.location", "enable.ssl.certificate.verification",
        "sasl.username", "sasl.password", "sasl.oauthbearer.method", "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope", "sasl.oauthbearer.config",
        "sasl.kerberos.keytab", "sasl.kerberos.principal",
    ]
)  # fmt: skip
CONNECTION_KEYS = CLIENT_CONNECTION_KEYS | LIBRDKAFKA_CONNECTION_KEYS

_SECURITY = [
    KeySpec("security.protocol", "enum", "PLAINTEXT", choices=SECURITY_PROTOCOLS, case_insensitive=True),
    *(KeySpec(k, "password" if "password" in k else "string", None) for k in [*_SSL_KEYS, *_SASL_KEYS]),
]

CONNECTOR_KEYS: dict[str, KeySpec] = {s.name: s for s in [*_CONNECTOR_FRAMEWORK, *_MIRROR, *_SECURITY]}
"""MM2's `allConfigNames()`: the only top-level keys that reach a flow's connector config."""

SCHEMA_REGISTRY_PREFIX = "schema.registry."
_REGISTRY_SIDE_KEYS: tuple[tuple[str, KeyType], ...] = (
    ("url", "string"),
    ("basic.auth.user.info", "password"),
    ("bearer.auth.token", "password"),
)
# Keys a flow (`A->B.<key>`) may set although they are not in the union above.
FLOW_ONLY_KEYS: dict[str, KeySpec] = {
    s.name: s
    for s in [
        KeySpec("use.defaults.from", "enum", "target", choices=("source", "target")),
        KeySpec(
            "exactly.once.support",
            "string",
            "requested",
            status="ignored",
            why="delivery is set by mirrorflow.delivery (exactly-once by default)",
        ),
        KeySpec("transaction.boundary", "string", "poll", status="ignored", why=_CONNECT),
        KeySpec("offsets.storage.topic", "string", None, status="ignored", why=_CONNECT),
        KeySpec("topic.creation.groups", "list", "", status="ignored", why=_CONNECT),
        # Schema-ID translation (config/schema_registry.py): a flow's two registries.
        *(
            KeySpec(f"{SCHEMA_REGISTRY_PREFIX}{side}.{key}", kind, None)
            for side in ("source", "target")
            for key, kind in _REGISTRY_SIDE_KEYS
        ),
        KeySpec(f"{SCHEMA_REGISTRY_PREFIX}translate", "list", "key,value"),
        KeySpec(f"{SCHEMA_REGISTRY_PREFIX}subject.name.strategy", "string", "TopicNameStrategy"),
        KeySpec(f"{SCHEMA_REGISTRY_PREFIX}request.timeout.ms", "long", "30000"),
    ]
}
TRANSFORM_PREFIXES = ("transforms.", "predicates.")
"""`transforms.<name>.*` and `predicates.<name>.*`: read per flow or from the top level (config/transform_specs.py)."""
FLOW_ONLY_PREFIXES = {
    "topic.creation.": _CONNECT,
    "consumer.override.": _CONNECT,
    "admin.override.": _CONNECT,
}

LEGACY_ALIASES = {
    "topics.blacklist": "topics.exclude",
    "groups.blacklist": "groups.exclude",
    "config.properties.blacklist": "config.properties.exclude",
}
REGEX_LIST_KEYS = ("topics", "topics.exclude", "groups", "groups.exclude", "config.properties.exclude")

# Our own keys; a flow inherits them from the top level, `A->B.mirrorflow.x` overrides.
MIRRORFLOW_FLOW_KEYS: dict[str, KeySpec] = {
    s.name: s
    for s in [
        KeySpec(
            "mirrorflow.delivery",
            "enum",
            "exactly-once",
            choices=("exactly-once", "at-least-once"),
            case_insensitive=True,
        ),
        KeySpec(
            "mirrorflow.copy.mode",
            "enum",
            "continuous",
            choices=("continuous", "interval"),
            case_insensitive=True,
        ),
        KeySpec("mirrorflow.copy.run.seconds", "long", "300"),
        KeySpec("mirrorflow.copy.handover.seconds", "long", "60"),
        KeySpec("mirrorflow.copy.round.seconds", "long", "0"),
        KeySpec("mirrorflow.copy.transaction.max.ms", "long", "500"),
        KeySpec("mirrorflow.copy.transaction.min.ms", "long", "100"),
        KeySpec("mirrorflow.copy.transaction.min.records", "int", "32"),
        KeySpec("mirrorflow.copy.partitions.per.task", "int", "8"),
        KeySpec("mirrorflow.state.partitions.max", "int", "4096"),
        KeySpec("mirrorflow.schedule", "string", "@continuous"),
        KeySpec("mirrorflow.provenance.headers", "bool", "false"),
        KeySpec("mirrorflow.spark.master", "string", "local[*]"),
        # Spark sizing per flow (config/spark_conf.py; `mirrorflow.spark.conf.*` is a prefix, see there).
        KeySpec("mirrorflow.spark.total.executor.cores", "int", None),
        KeySpec("mirrorflow.spark.executor.memory", "string", None),
        KeySpec("mirrorflow.spark.driver.memory", "string", None),
        KeySpec("mirrorflow.copy.interval.timeout.seconds", "long", "3600"),
        KeySpec("mirrorflow.airflow.retries", "int", "3"),
        KeySpec("mirrorflow.airflow.retry.delay.seconds", "long", "30"),
        KeySpec("mirrorflow.airflow.execution.timeout.seconds", "long", "900"),
        KeySpec("mirrorflow.airflow.failure.notifier", "string", None),
        KeySpec("mirrorflow.airflow.deadline.seconds", "long", None),
        KeySpec("mirrorflow.airflow.deadline.notifier", "string", None),
        KeySpec("mirrorflow.airflow.loop.pool", "string", None),
        # The Celery/Kubernetes queue of the copy task, whose worker hosts the Spark driver (docs/deploy.md).
        KeySpec("mirrorflow.airflow.copy.queue", "string", "default"),
        KeySpec("mirrorflow.runbook.step.timeout.seconds", "long", "1800"),
        KeySpec("mirrorflow.runbook.rto.target.seconds", "long", None),
        # DR drills (replication/failover/drill.py): no schedule, no drill DAG.
        KeySpec("mirrorflow.drill.schedule", "string", None),
        KeySpec("mirrorflow.drill.fence", "enum", "acl", choices=("acl", "command", "none"), case_insensitive=True),
        KeySpec("mirrorflow.drill.fence.command", "string", None),
        KeySpec("mirrorflow.drill.history", "int", "20"),
        # Replication SLOs (replication/slo.py): unset means the flow has no such objective.
        KeySpec("mirrorflow.rpo.target.seconds", "double", None),
        KeySpec("mirrorflow.lag.target.records", "long", None),
    ]
}
MIRRORFLOW_CLUSTER_KEYS = {"mirrorflow.connection": KeySpec("mirrorflow.connection", "string", None)}

# Top-level keys of MirrorMakerConfig itself and of the dedicated-mode Connect workers.
TOP_LEVEL_KEYS: dict[str, KeySpec] = {
    s.name: s
    for s in [
        KeySpec("clusters", "list", None),
        KeySpec("config.providers", "list", ""),
        KeySpec(
            "dedicated.mode.enable.internal.rest",
            "bool",
            "false",
            status="ignored",
            why="no Connect REST server: Airflow coordinates the workers",
        ),
        KeySpec("listeners", "list", None, status="ignored", why=_CONNECT),
        KeySpec("admin.listeners", "list", None, status="ignored", why=_CONNECT),
    ]
}
WORKER_PREFIXES = (
    "offset.storage", "config.storage", "status.storage", "key.converter", "value.converter",
    "header.converter", "task", "worker", "rest.", "offset.flush", "exactly.once.source.support",
    "group.id", "client.id", "scheduled.rebalance", "connect.protocol", "inter.worker", "plugin.path",
    "connector.client.config.override.policy", "access.control.", "response.http.headers",
    "topic.creation.enable",
    "session.timeout.ms", "heartbeat.interval.ms", "rebalance.timeout.ms", "metadata.max.age.ms",
    "request.timeout.ms", "listeners", "admin.listeners", "metrics.",
)  # fmt: skip
"""Connect worker keys (dedicated mode builds a worker per flow from `<target>.<key>` and top-level keys)."""

CLIENT_PREFIXES = ("producer.", "consumer.", "admin.")


def is_worker_key(key: str) -> bool:
    return key.startswith(WORKER_PREFIXES)


def is_secret_key(key: str) -> bool:
    """Keys whose values are credentials or key material, shown as `***` everywhere."""
    lowered = key.lower()
    return (
        "password" in lowered
        or "secret" in lowered
        or "jaas.config" in lowered
        or "oauthbearer.config" in lowered
        or lowered.endswith((".pem", ".key", "keystore.key", "user.info", "auth.token"))
    )


def flow_key_spec(key: str) -> KeySpec | None:
    """The spec of a key a flow's settings may carry (connector, flow-only or mirrorflow key)."""
    return CONNECTOR_KEYS.get(key) or FLOW_ONLY_KEYS.get(key) or MIRRORFLOW_FLOW_KEYS.get(key)


def suggest(key: str, candidates: Iterable[str]) -> str | None:
    """Closest known name for a misspelt key (`sync.group.offsets` → `sync.group.offsets.enabled`)."""
    matches = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.75)
    if matches:
        return matches[0]
    longer = sorted(c for c in candidates if c.startswith(key + "."))
    return longer[0] if len(longer) == 1 else None

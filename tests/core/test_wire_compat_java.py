"""mirrorflow.core against MirrorMaker 2's own Java classes (the jars `mirrorflow.local.maven` resolves).

tests/fixtures/java/WireCompat.java is compiled once per session and kept running; each request is one line
(see its header). Byte formats must match both ways, and the naming/filter rules must agree name by name,
because operators switch between MM2 and Mirrorflow on the same clusters.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirrorflow.core.checkpoint import Checkpoint
from mirrorflow.core.config_property_filter import DEFAULT_CONFIG_PROPERTIES_EXCLUDE
from mirrorflow.core.group_filter import DEFAULT_GROUPS_EXCLUDE
from mirrorflow.core.heartbeat import Heartbeat
from mirrorflow.core.offset_sync import OffsetSync
from mirrorflow.core.patterns import PatternError
from mirrorflow.core.replication_policy import (
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    ReplicationPolicy,
)
from mirrorflow.core.topic_filter import DEFAULT_TOPICS_EXCLUDE, DefaultTopicFilter, TopicFilter
from mirrorflow.core.topic_selection import rename_topic_partition, should_replicate_topic
from mirrorflow.core.wire import WireFormatError
from mirrorflow.local.maven import ensure_kafka_jars

pytestmark = pytest.mark.integration

SOURCE = Path(__file__).parents[1] / "fixtures" / "java" / "WireCompat.java"
NULL = "-"


def h(text: str | None) -> str:
    return NULL if text is None else text.encode("utf-8").hex()


def unh(field: str) -> str | None:
    return None if field == NULL else bytes.fromhex(field).decode("utf-8")


class Mm2Java:
    """A running WireCompat JVM: `ask` sends one request and returns the reply's fields."""

    def __init__(self, classpath: str) -> None:
        self._process = subprocess.Popen(
            ["java", "-cp", classpath, "WireCompat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
        )

    def ask(self, *fields: str) -> list[str]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write("\t".join(fields) + "\n")
        self._process.stdin.flush()
        reply = self._process.stdout.readline()
        assert reply, f"WireCompat exited (code {self._process.poll()}) on {fields[0]}"
        return reply.rstrip("\n").split("\t")

    def close(self) -> None:
        if self._process.stdin:
            self._process.stdin.close()
        self._process.wait(timeout=30)


@pytest.fixture(scope="session")
def java(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mm2Java]:
    javac = shutil.which("javac")
    assert javac, "javac (JDK 17+) must be on PATH for the MM2 compatibility tests"
    jars = ensure_kafka_jars()
    classes = tmp_path_factory.mktemp("wirecompat")
    classpath_jars = f"{jars}/*"
    subprocess.run([javac, "-d", str(classes), "-cp", classpath_jars, str(SOURCE)], check=True)
    mm2 = Mm2Java(f"{classes}:{classpath_jars}")
    yield mm2
    mm2.close()


# ---- wire formats: docs/mm2-reference.md §2 examples, encoded by Java ----


def test_java_encodes_the_documented_examples_as_we_do(java: Mm2Java) -> None:
    heartbeat = Heartbeat("primary", "backup", 1_700_000_000_000)
    assert java.ask("hb-enc", h("primary"), h("backup"), "1700000000000") == [
        heartbeat.record_key().hex(),
        heartbeat.record_value().hex(),
    ]
    checkpoint = Checkpoint("my-group", "primary.orders", 3, 1234, 1200, "")
    assert java.ask("cp-enc", h("my-group"), h("primary.orders"), "3", "1234", "1200", h("")) == [
        checkpoint.record_key().hex(),
        checkpoint.record_value().hex(),
    ]
    offset_sync = OffsetSync("orders", 3, 1234, 1199)
    assert java.ask("os-enc", h("orders"), "3", "1234", "1199") == [
        offset_sync.record_key().hex(),
        offset_sync.record_value().hex(),
    ]


names = st.text(max_size=40)
int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)
int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
java_settings = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@java_settings
@given(source=names, target=names, timestamp=int64s)
def test_heartbeat_bytes_match_java_both_ways(java: Mm2Java, source: str, target: str, timestamp: int) -> None:
    ours = Heartbeat(source, target, timestamp)
    key_hex, value_hex = java.ask("hb-enc", h(source), h(target), str(timestamp))
    assert (key_hex, value_hex) == (ours.record_key().hex(), ours.record_value().hex())
    assert Heartbeat.from_record(bytes.fromhex(key_hex), bytes.fromhex(value_hex)) == ours
    decoded = java.ask("hb-dec", ours.record_key().hex(), ours.record_value().hex())
    assert (unh(decoded[0]), unh(decoded[1]), int(decoded[2])) == (source, target, timestamp)


@java_settings
@given(group=names, topic=names, partition=int32s, upstream=int64s, downstream=int64s, metadata=names)
def test_checkpoint_bytes_match_java_both_ways(
    java: Mm2Java, group: str, topic: str, partition: int, upstream: int, downstream: int, metadata: str
) -> None:
    ours = Checkpoint(group, topic, partition, upstream, downstream, metadata)
    fields = (h(group), h(topic), str(partition), str(upstream), str(downstream), h(metadata))
    key_hex, value_hex = java.ask("cp-enc", *fields)
    assert (key_hex, value_hex) == (ours.record_key().hex(), ours.record_value().hex())
    assert Checkpoint.from_record(bytes.fromhex(key_hex), bytes.fromhex(value_hex)) == ours
    assert tuple(java.ask("cp-dec", ours.record_key().hex(), ours.record_value().hex())) == fields


@java_settings
@given(topic=names, partition=int32s, upstream=int64s, downstream=int64s)
def test_offset_sync_bytes_match_java_both_ways(
    java: Mm2Java, topic: str, partition: int, upstream: int, downstream: int
) -> None:
    ours = OffsetSync(topic, partition, upstream, downstream)
    fields = (h(topic), str(partition), str(upstream), str(downstream))
    key_hex, value_hex = java.ask("os-enc", *fields)
    assert (key_hex, value_hex) == (ours.record_key().hex(), ours.record_value().hex())
    assert OffsetSync.from_record(bytes.fromhex(key_hex), bytes.fromhex(value_hex)) == ours
    assert tuple(java.ask("os-dec", ours.record_key().hex(), ours.record_value().hex())) == fields


@pytest.mark.parametrize(
    ("kind", "decoder", "key", "value"),
    [
        ("hb-dec", Heartbeat.from_record, "0007707269", "00000000018bcfe56800"),  # key string cut short
        (
            "hb-dec",
            Heartbeat.from_record,
            "00077072696d61727900066261636b7570",
            "000000000001",
        ),  # short INT64
        ("cp-dec", Checkpoint.from_record, "00086d792d67726f7570", "0000"),  # key without topic
        ("cp-dec", Checkpoint.from_record, "0001610001620000", "00000000000000000001"),  # INT32 cut short
        ("os-dec", OffsetSync.from_record, "ffff", "00"),  # negative string length
        (
            "os-dec",
            OffsetSync.from_record,
            "0001610000000100",
            "0000000000000001",
        ),  # value missing downstream
    ],
)
def test_truncated_records_are_rejected_by_java_and_by_us(
    java: Mm2Java, kind: str, decoder: Callable[[bytes, bytes], object], key: str, value: str
) -> None:
    assert java.ask(kind, key, value)[0] == "ERR"
    with pytest.raises(WireFormatError):
        decoder(bytes.fromhex(key), bytes.fromhex(value))


def test_trailing_bytes_are_ignored_by_java_and_by_us(java: Mm2Java) -> None:
    offset_sync = OffsetSync("orders", 3, 1234, 1199)
    key, value = offset_sync.record_key() + b"\x01\x02", offset_sync.record_value() + b"\xff"
    assert java.ask("os-dec", key.hex(), value.hex()) == [h("orders"), "3", "1234", "1199"]
    assert OffsetSync.from_record(key, value) == offset_sync


# ---- names and topic selection: the pinned MM2 decides ----

TOPICS = [
    "topic1",
    "heartbeats",
    "us-west.heartbeats",
    "source1.heartbeats",
    "source2.source1.heartbeats",
    "source1heartbeats",
    "source1-heartbeats",
    "heartbeats!",
    "!heartbeats",
    "source.topic1",
    "target.topic1",
    "target.source.topic1",
    "source.target.topic1",
    "target.heartbeats",
    "source.target.heartbeats",
    "othersource.heartbeats",
    "__consumer_offsets",
    ".hiddentopic",
    "mm2-offsets.CLUSTER.internal",
    "mm2-offsets-CLUSTER-internal",
    "mm2-offsets_CLUSTER_internal",
    "orders.internal",
    "orders-internal",
    "A.checkpoints.internal",
    "checkpoints.internal",
    "A__checkpoints__internal",
    "mm2-offset-syncs__A__internal",
    "x__internal",
    "a__b__c",
    "a_b",
    "",
    ".",
    "a.",
    ".b",
    "a..b",
    "a.b.",
    "__",
    "x.replica",
]
POLICY_SETTINGS: list[tuple[str, dict[str, str]]] = [
    ("Default", {}),
    ("Default", {"replication.policy.separator": "__"}),
    (
        "Default",
        {
            "replication.policy.separator": "__",
            "replication.policy.internal.topic.separator.enabled": "false",
        },
    ),
    ("Default", {"replication.policy.separator": "_"}),
    ("Identity", {"source.cluster.alias": "source"}),
    ("Identity", {}),
]


def _our_policy(kind: str, config: dict[str, str]) -> ReplicationPolicy:
    if kind == "Identity":
        return IdentityReplicationPolicy.from_settings(config)
    return DefaultReplicationPolicy.from_settings(config)


def _configure_java(java: Mm2Java, kind: str, config: dict[str, str]) -> None:
    lines = "\n".join(f"{k}={v}" for k, v in config.items())
    assert java.ask("policy", kind, h(lines)) == ["OK"]


@pytest.mark.parametrize(("kind", "config"), POLICY_SETTINGS)
def test_replication_policy_agrees_with_java_on_every_topic(java: Mm2Java, kind: str, config: dict[str, str]) -> None:
    _configure_java(java, kind, config)
    policy = _our_policy(kind, config)
    for topic in TOPICS:
        ours = [
            h(policy.topic_source(topic)),
            h(policy.upstream_topic(topic)),
            h(policy.original_topic(topic)),
            str(int(policy.is_heartbeats_topic(topic))),
            str(int(policy.is_checkpoints_topic(topic))),
            str(int(policy.is_mm2_internal_topic(topic))),
            str(int(policy.is_internal_topic(topic))),
        ]
        assert java.ask("topic", h(topic)) == ours, topic
    for alias in ("A", "CLUSTER", "us-west"):
        assert java.ask("names", h(alias), h("heartbeats")) == [
            h(policy.heartbeats_topic()),
            h(policy.offset_syncs_topic(alias)),
            h(policy.checkpoints_topic(alias)),
            h(policy.format_remote_topic(alias, "heartbeats")),
        ]


class _Everything:
    def should_replicate_topic(self, topic: str) -> bool:
        return True


class _Nothing:
    def should_replicate_topic(self, topic: str) -> bool:
        return False


@pytest.mark.parametrize(("kind", "config"), POLICY_SETTINGS)
@pytest.mark.parametrize("heartbeats_enabled", [True, False])
def test_should_replicate_topic_and_checkpoint_renaming_agree_with_java(
    java: Mm2Java, kind: str, config: dict[str, str], heartbeats_enabled: bool
) -> None:
    _configure_java(java, kind, config)
    policy = _our_policy(kind, config)
    filters: dict[str, TopicFilter] = {
        "all": _Everything(),
        "none": _Nothing(),
        "default": DefaultTopicFilter(),
    }
    for mode, topic_filter in filters.items():
        for topic in TOPICS:
            ours = should_replicate_topic(
                topic,
                policy=policy,
                topic_filter=topic_filter,
                target_alias="target",
                heartbeats_replication_enabled=heartbeats_enabled,
            )
            asked = java.ask("replicate", h("source"), h("target"), str(int(heartbeats_enabled)), mode, h(topic))
            assert asked == [str(int(ours))], (mode, topic)
    for topic in [*TOPICS, "target2.topic3", "source6.topic7", "target2.source1.x"]:
        renamed = rename_topic_partition(topic, policy=policy, source_alias="source1", target_alias="target2")
        assert java.ask("rename", h("source1"), h("target2"), h(topic)) == [h(renamed)], topic


def test_default_exclude_lists_are_those_of_the_pinned_mm2(java: Mm2Java) -> None:
    assert java.ask("defaults") == [
        h(DEFAULT_TOPICS_EXCLUDE),
        h(DEFAULT_GROUPS_EXCLUDE),
        h(DEFAULT_CONFIG_PROPERTIES_EXCLUDE),
    ]


# ---- Java regex dialect: same verdict as DefaultTopicFilter, or a PatternError ----

REGEX_CASES = [
    ("topic1", "topic1"),
    ("topic1, topic2", "topic2"),
    ("topic1,topic2", "topic3"),
    ("", ""),
    (".*", ""),
    ("a|(?i)b|c", "C"),
    ("(x(?i)y|z)", "Z"),
    ("(x(?i)y|z)w", "zW"),
    ("(?i)a(?-i)b", "AB"),
    ("(?i)a(?-i)b", "Ab"),
    ("(a|(?i)b)|c", "C"),
    ("(?i)orders", "ORDERS"),
    ("(?i)\u00e9", "\u00c9"),
    ("[]a]", "]"),
    ("[^]a]", "b"),
    ("(?<name>a)\\k<name>", "aa"),
    ("\\0377", "\u00ff"),
    ("[\\Qa-z\\E]", "-"),
    ("[\\Qa-z\\E]", "b"),
    ("\\Qa.b", "a.b"),
    ("\\Qa.b", "axb"),
    ("\\d", "\u0663"),
    ("\\w+", "caf\u00e9"),
    ("a++", "aa"),
    ("(?>a+)b", "aab"),
    ("\\x{41}", "A"),
    ("\\e", "\x1b"),
    ("\\cA", "\x01"),
    ("a\\z", "a"),
    ("a\\Z", "a"),
    ("\\N{LATIN SMALL LETTER A}", "a"),
    ("[a-]", "-"),
    ("[\\w-]+", "a-b"),
    ("x}", "x}"),
    ("a{2}", "aa"),
    ("(?s).", "\n"),
    (".", "\n"),
    ("a$", "a"),
    ("[a|b]", "|"),
    ("\\-", "-"),
    ("orders\\..*", "orders.x"),
    ("mm2.*\\.internal", "mm2-offsets.A.internal"),
    ("(?d).", "\r"),
    ("a{1,3}", "aa"),  # split by the LIST parser: both reject
    ("{foo}", "{foo}"),
    ("a{,3}", "aa"),
    ("(?#c)a", "a"),
    ("(?P<n>a)", "a"),
    ("a**", "aa"),
    ("a\\E", "a"),
    ("\\y", "y"),
    ("[\\b]", "\b"),
    ("[a-\\d]", "a"),
    ("(a", "a"),
    ("(a, b)", "a|b"),
]
NO_PYTHON_EQUIVALENT = ["\\p{L}", "\\v", "\\h", "\\R", "[a&&b]", "[a[b]]", "(?U)\\d", "(?u)(?i)x", "(?x) a"]


@pytest.mark.parametrize(("topics", "name"), REGEX_CASES)
def test_topic_regexes_match_like_java(java: Mm2Java, topics: str, name: str) -> None:
    answer = java.ask("filter", h(topics), h(""), h(name))
    if answer[0] == "ERR":
        with pytest.raises(PatternError):
            DefaultTopicFilter(topics, "")
    else:
        assert DefaultTopicFilter(topics, "").should_replicate_topic(name) == (answer == ["1"])


@pytest.mark.parametrize("topics", NO_PYTHON_EQUIVALENT)
def test_java_only_regex_features_are_refused_not_mismatched(java: Mm2Java, topics: str) -> None:
    assert java.ask("filter", h(topics), h(""), h("x"))[0] in ("0", "1")  # valid for MM2 ...
    with pytest.raises(PatternError, match="cannot match exactly"):  # ... but refused by us
        DefaultTopicFilter(topics, "")

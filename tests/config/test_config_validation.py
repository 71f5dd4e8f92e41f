"""Every validation error names file, line and key, and all of them are reported at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mirrorflow.config.issues import ConfigError, Issue
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import MirrorConfig
from mirrorflow.replication.internal_topics import flow_internal_topics

Load = Callable[..., MirrorConfig]
Errors = Callable[..., list[Issue]]

BASE = """
clusters = a, b
a.bootstrap.servers = a:9092
b.bootstrap.servers = b:9092
a->b.enabled = true
"""


def _where(issues: list[Issue]) -> list[tuple[int | None, str]]:
    return [(i.line, i.key) for i in issues]


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.properties"
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.exit_code == 2
    assert str(caught.value) == f"{path}: file not found. Check the path of the mm2.properties file."


def test_no_clusters(config_errors: Errors) -> None:
    [issue] = config_errors("topics = .*\n")
    assert issue.key == "clusters"
    assert "clusters = primary, backup" in issue.fix


def test_flow_naming_an_unknown_alias(config_errors: Errors) -> None:
    issues = config_errors(BASE + "a->c.enabled = true\nprimray->b.topics = x\n")
    assert _where(issues) == [(5, "a->c.enabled"), (6, "primray->b.topics")]
    assert "'c', which is not in clusters" in issues[0].problem


def test_flow_into_itself(config_errors: Errors) -> None:
    issues = config_errors(BASE + "a->a.enabled = true\n")
    assert _where(issues) == [(5, "a->a.enabled")]
    assert "into itself" in issues[0].problem


def test_cluster_without_bootstrap_servers(config_errors: Errors) -> None:
    issues = config_errors("clusters = a, b\na.bootstrap.servers = a:9092\na->b.enabled = true\n")
    assert _where(issues) == [(1, "b.bootstrap.servers")]
    assert "b.bootstrap.servers = host1:9092" in issues[0].fix


def test_unused_cluster_needs_no_bootstrap_servers(load: Load) -> None:
    config = load(BASE.replace("clusters = a, b", "clusters = a, b, c") + "emit.heartbeats.enabled = false\n")
    assert [f.name for f in config.flows] == ["a->b"]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("a->b.enabled = yes", "expected true or false, found 'yes'"),
        ("a->b.enabled", "expected true or false, found an empty value"),
        ("sync.topic.acls.enabled = maybe", "expected true or false, found 'maybe'"),
        ("a->b.emit.checkpoints.enabled = 1", "expected true or false, found '1'"),
    ],
)
def test_bad_booleans(config_errors: Errors, line: str, problem: str) -> None:
    issues = config_errors(BASE + line + "\n")
    assert [(i.line, i.problem) for i in issues if i.line == 5] == [(5, problem)]


def test_boolean_case_is_ignored(load: Load) -> None:
    config = load(BASE.replace("a->b.enabled = true", "a->b.enabled = TRUE") + "sync.group.offsets.enabled = True\n")
    assert config.flow("a->b").sync_group_offsets_enabled is True


def test_inline_comment_gets_a_hint(config_errors: Errors) -> None:
    [issue] = config_errors(BASE + "b->a.enabled = false // one-way only\n")
    assert issue.line == 5
    assert "no end-of-line comments" in issue.fix


@pytest.mark.parametrize(
    "line",
    [
        "refresh.topics.interval.seconds = ten",
        "a->b.replication.factor = 3x",
        "offset.lag.max = 1.5",
        "a->b.heartbeats.topic.replication.factor = 40000",
    ],
)
def test_bad_integers(config_errors: Errors, line: str) -> None:
    issues = config_errors(BASE + line + "\n")
    assert _where(issues) == [(5, line.split(" = ")[0])]


def test_zero_interval_and_replication_factor(config_errors: Errors) -> None:
    issues = config_errors(BASE + "emit.checkpoints.interval.seconds = 0\nreplication.factor = 0\n")
    assert _where(issues) == [(5, "emit.checkpoints.interval.seconds"), (6, "replication.factor")]
    assert "emit.checkpoints.enabled = false" in issues[0].fix


def test_commit_interval_keys_take_zero_but_not_negatives(load: Load, config_errors: Errors) -> None:
    """`mirrorflow.copy.transaction.min.ms` / `.min.records` 0 turn the interval / its record exemption off."""
    zero = "a->b.mirrorflow.copy.transaction.min.ms = 0\na->b.mirrorflow.copy.transaction.min.records = 0\n"
    flow = load(BASE + zero).flow("a->b")
    assert (flow.copy_transaction_min_ms, flow.copy_transaction_min_records) == (0, 0)
    assert load(BASE).flow("a->b").copy_transaction_min_records == 32
    issues = config_errors(BASE + "a->b.mirrorflow.copy.transaction.min.records = -1\n")
    assert _where(issues) == [(5, "a->b.mirrorflow.copy.transaction.min.records")]


def test_the_state_partitions_cap_is_a_power_of_two_and_sizes_the_state_topics(
    load: Load, config_errors: Errors
) -> None:
    """`mirrorflow.state.partitions.max` caps the state topics' partitions, which grow only by doubling."""
    flow = load(BASE).flow("a->b")
    assert flow.state_partitions_max == 4096
    counts = {t.purpose: t.partitions for t in flow_internal_topics(flow, source_partitions=1_000_000)}
    assert (counts["progress"], counts["offset-map"], counts["metrics"]) == (4096, 4096, 4096)
    raised = load(BASE + "a->b.mirrorflow.state.partitions.max = 16384\n").flow("a->b")
    counts = {t.purpose: t.partitions for t in flow_internal_topics(raised, source_partitions=1_000_000)}
    assert counts["progress"] == 16384
    issues = config_errors(BASE + "a->b.mirrorflow.state.partitions.max = 5000\n")
    assert _where(issues) == [(5, "a->b.mirrorflow.state.partitions.max")]
    assert "power of two" in issues[0].problem


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("a->b.topics = orders(", "not a valid"),
        ("groups.exclude = [abc", "not a valid"),
        ("a->b.config.properties.exclude = a{1,3}", "cut into"),
        ("topics.exclude = \\\\p{Alpha}+", "cannot match exactly"),
    ],
)
def test_invalid_regexes(config_errors: Errors, line: str, fragment: str) -> None:
    issues = config_errors(BASE + line + "\n")
    assert _where(issues) == [(5, line.split(" = ")[0])]
    assert fragment in issues[0].problem


def test_unknown_replication_policy(config_errors: Errors) -> None:
    issues = config_errors(BASE + "replication.policy.class = com.example.NoSuchPolicy\n")
    assert _where(issues) == [(5, "replication.policy.class")]
    assert "com.example.NoSuchPolicy" in issues[0].problem


@pytest.mark.parametrize("key", ["topic.filter.class", "group.filter.class"])
def test_bad_filter_class_names_key_and_line(config_errors: Errors, key: str) -> None:
    issues = config_errors(BASE + "topics = .*\n" + f"a->b.{key} = com.example.NoSuchFilter\n")
    assert _where(issues) == [(6, f"a->b.{key}")]
    assert "com.example.NoSuchFilter" in issues[0].problem
    assert "cannot import module 'com.example'" in issues[0].problem


def test_filter_class_without_the_method_names_key_and_line(config_errors: Errors) -> None:
    issues = config_errors(BASE + "group.filter.class = mirrorflow.core.topic_filter.DefaultTopicFilter\n")
    assert _where(issues) == [(5, "group.filter.class")]
    assert "DefaultTopicFilter lacks GroupFilter methods" in issues[0].problem


def test_an_unknown_key_beside_a_python_filter_class_is_said_to_reach_it(load: Load) -> None:
    config = load(
        BASE + "a->b.topic.filter.class = mirrorflow.core.topic_filter.DefaultTopicFilter\na->b.my.prefix = x\n"
    )
    [warning] = [w for w in config.warnings if w.key == "a->b.my.prefix"]
    assert "passes it only to your Python filter or policy class" in warning.problem
    assert warning.fix.startswith("if your class does not read it")
    plain = load(BASE + "a->b.my.prefix = x\n")
    [warning] = [w for w in plain.warnings if w.key == "a->b.my.prefix"]
    assert "MM2 ignores it and so does Mirrorflow" in warning.problem


def test_mm2_default_filter_classes_load(load: Load) -> None:
    config = load(
        BASE
        + "topic.filter.class = org.apache.kafka.connect.mirror.DefaultTopicFilter\n"
        + "a->b.group.filter.class = org.apache.kafka.connect.mirror.DefaultGroupFilter\n"
    )
    assert [i.key for i in config.warnings if "filter" in i.key] == []  # once reported as ignored keys


def test_unresolvable_env_reference(config_errors: Errors) -> None:
    issues = config_errors(
        BASE
        + "a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        + '   username="u" password="${env:A_PASSWORD}";\n'
        + "b.ssl.key.password = ${env:B_KEY}\n",
        environ={"B_KEY": "very-secret-value"},
    )
    assert _where(issues) == [(5, "a.sasl.jaas.config")]
    assert "${env:A_PASSWORD}: environment variable A_PASSWORD is not set" in issues[0].problem
    assert all("very-secret-value" not in i.render() for i in issues)


@pytest.mark.parametrize(
    "line",
    [
        "offset-syncs.topic.location = middle",
        "a->b.offset-syncs.topic.location = TARGET",
        "a->b.use.defaults.from = both",
        "mirrorflow.delivery = maybe-once",
        "a->b.mirrorflow.copy.mode = sometimes",
    ],
)
def test_invalid_enums(config_errors: Errors, line: str) -> None:
    issues = config_errors(BASE + line + "\n")
    assert _where(issues) == [(5, line.split(" = ")[0])]
    assert "is not one of" in issues[0].problem


def test_enum_values_are_read(load: Load) -> None:
    config = load(
        BASE
        + "a->b.offset-syncs.topic.location = target\n"
        + "a->b.use.defaults.from = source\n"
        + "mirrorflow.delivery = AT-LEAST-ONCE\n"
        + "a->b.mirrorflow.copy.mode = interval\n"
    )
    flow = config.flow("a->b")
    assert (flow.offset_syncs_topic_location, flow.use_defaults_from) == ("target", "source")
    assert (flow.delivery, flow.copy_mode) == ("at-least-once", "interval")


def test_clusters_argument_must_name_known_aliases(config_errors: Errors) -> None:
    issues = config_errors(BASE, clusters=["b", "z"])
    assert [(i.key, i.line) for i in issues] == [("--clusters", None)]
    assert "'z' is not in clusters" in issues[0].problem


def test_no_enabled_flow(config_errors: Errors) -> None:
    issues = config_errors(BASE.replace("a->b.enabled = true", "a->b.enabled = false"))
    assert [i.problem for i in issues] == ["No source->target replication flows"]


def test_no_enabled_flow_in_the_subset(config_errors: Errors) -> None:
    issues = config_errors(BASE, clusters=["a"])
    assert [i.problem for i in issues] == ["No source->target replication flows targeting a"]


def test_a_file_without_flows_can_be_accepted(write_config: Callable[[str], Path]) -> None:
    config = load_config(write_config(BASE.replace("a->b.enabled = true", "")), require_flows=False)
    assert config.flows == ()
    assert config.heartbeat_pairs == (("a", "b"), ("b", "a"))


IDENTITY_CYCLE = (
    BASE
    + """b->a.enabled = true
replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
"""
)


def test_identity_cycle_without_provenance_headers(config_errors: Errors) -> None:
    issues = config_errors(IDENTITY_CYCLE)
    assert _where(issues) == [(4, "a->b.enabled"), (5, "b->a.enabled")]
    assert "mirrorflow.provenance.headers = true" in issues[0].fix


def test_identity_cycle_with_provenance_headers(load: Load) -> None:
    config = load(IDENTITY_CYCLE + "mirrorflow.provenance.headers = true\n")
    assert {f.name: f.provenance_headers for f in config.flows} == {"a->b": True, "b->a": True}


def test_identity_cycle_spanning_data_centres_is_checked_under_a_subset(config_errors: Errors) -> None:
    issues = config_errors(IDENTITY_CYCLE + "a->b.mirrorflow.provenance.headers = true\n", clusters=["b"])
    assert _where(issues) == [(5, "b->a.enabled")]


def test_cycles_are_fine_with_the_default_policy_or_without_a_loop(load: Load) -> None:
    assert len(load(BASE + "b->a.enabled = true\n").flows) == 2
    one_way = load(BASE + "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n")
    assert [f.name for f in one_way.flows] == ["a->b"]


def test_all_errors_are_reported_together_in_line_order(config_errors: Errors) -> None:
    issues = config_errors(
        BASE
        + "refresh.topics.enabled = sometimes\na->b.topics = (\n"
        + "a->c.enabled = true\nsecurity.protocol = TLS\n"
    )
    assert _where(issues) == [
        (5, "refresh.topics.enabled"),
        (6, "a->b.topics"),
        (7, "a->c.enabled"),
        (8, "security.protocol"),
    ]


def test_slo_targets_are_read(load: Load) -> None:
    config = load(BASE + "a->b.mirrorflow.rpo.target.seconds = 30\nmirrorflow.lag.target.records = 1000\n")
    flow = config.flow("a->b")
    assert (flow.rpo_target_seconds, flow.lag_target_records) == (30.0, 1000)
    assert load(BASE + "a->b.mirrorflow.rpo.target.seconds = 0.5\n").flow("a->b").rpo_target_seconds == 0.5
    unset = load(BASE).flow("a->b")
    assert (unset.rpo_target_seconds, unset.lag_target_records) == (None, None)


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("a->b.mirrorflow.rpo.target.seconds = thirty", "expected a number"),
        ("a->b.mirrorflow.rpo.target.seconds = 30s", "expected a number"),
        ("a->b.mirrorflow.rpo.target.seconds = NaN", "expected a number"),
        ("a->b.mirrorflow.rpo.target.seconds = 0", "greater than 0"),
        ("a->b.mirrorflow.lag.target.records = 1.5", "whole number"),
        ("mirrorflow.lag.target.records = many", "whole number"),
        ("a->b.mirrorflow.lag.target.records = -1", "not a number of records"),
    ],
)
def test_bad_slo_targets(config_errors: Errors, line: str, fragment: str) -> None:
    issues = config_errors(BASE + line + "\n")
    assert _where(issues) == [(5, line.split(" = ")[0])]
    assert fragment in issues[0].problem

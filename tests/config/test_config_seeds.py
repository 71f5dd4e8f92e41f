"""The seed documents' mm2.properties examples: exactly the flows MM2 would run, and the same mistakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorflow.config.issues import ConfigError
from mirrorflow.config.loader import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"


def _flows(name: str, clusters: list[str] | None = None) -> list[str]:
    return sorted(f.name for f in load_config(CONFIGS / name, clusters=clusters, environ={}).flows)


SEED001_ALL = [
    "east-1->east-2", "east-1->north-1", "east-1->west-1", "east-2->east-1",
    "north-1->east-1", "north-1->north-2", "north-1->west-1", "north-2->north-1",
    "west-1->east-1", "west-1->north-1", "west-1->west-2", "west-2->west-1",
]  # fmt: skip


@pytest.mark.parametrize(
    ("clusters", "expected"),
    [
        (None, SEED001_ALL),
        (["west-1", "west-2"], ["east-1->west-1", "north-1->west-1", "west-1->west-2", "west-2->west-1"]),
        (["east-1,east-2"], ["east-1->east-2", "east-2->east-1", "north-1->east-1", "west-1->east-1"]),
        (
            ["north-1", "north-2"],
            ["east-1->north-1", "north-1->north-2", "north-2->north-1", "west-1->north-1"],
        ),
    ],
)
def test_seed001_multi_data_centre(clusters: list[str] | None, expected: list[str]) -> None:
    assert _flows("seed001_multi_dc.properties", clusters) == expected


def test_seed001_heartbeat_pairs_per_data_centre() -> None:
    config = load_config(CONFIGS / "seed001_multi_dc.properties", clusters=["west-1", "west-2"], environ={})
    assert len(config.heartbeat_pairs) == 10  # five sources for each of the two local targets
    assert {t for _, t in config.heartbeat_pairs} == {"west-1", "west-2"}


@pytest.mark.parametrize(
    ("clusters", "expected"),
    [
        (["north-primary", "north-backup"],
         ["east-primary->north-primary", "north-primary->north-backup", "west-primary->north-primary"]),
        (["west-primary", "west-backup"],
         ["east-primary->west-primary", "north-primary->west-primary", "west-primary->west-backup"]),
    ],
)  # fmt: skip
def test_seed000_multi_data_centre(clusters: list[str], expected: list[str]) -> None:
    assert len(_flows("seed000_multi_dc.properties")) == 9
    assert _flows("seed000_multi_dc.properties", clusters) == expected


def test_seed000_quickstart() -> None:
    config = load_config(CONFIGS / "seed000_quickstart.properties", environ={})
    flow = config.flow("us-west->us-east")
    assert [f.name for f in config.flows] == ["us-west->us-east"]
    assert flow.groups == ("group1", "group2")
    assert flow.emit_checkpoints_interval_seconds == 10
    assert flow.emit_heartbeats_enabled is True  # the misspelt key changes nothing
    assert config.ignored_keys == ("us-west.offset.storage.topic",)
    [hint] = [w for w in config.warnings if w.key == "us-west->us-east.emit.heartbeats"]
    assert hint.fix == "did you mean us-west->us-east.emit.heartbeats.enabled?"


def test_seed000_bare_enabled_keys_are_errors() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(CONFIGS / "seed000_nearby_bare_keys.properties", environ={})
    assert [(i.line, i.key) for i in caught.value.issues] == [
        (7, "primary->backup.enabled"),
        (8, "backup->primary.enabled"),
    ]


def test_seed001_per_connector_overrides() -> None:
    config = load_config(CONFIGS / "seed001_per_connector.properties", environ={})
    flow = config.flow("primary->backup")
    assert [f.name for f in config.flows] == ["primary->backup"]
    assert flow.topics_exclude == ("topics_to_blacklist",)
    assert flow.emit_heartbeats_enabled is False
    assert flow.sync_group_offsets_enabled is False
    assert flow.source_consumer.get("isolation.level") == "read_committed"
    assert flow.source_admin.get("bootstrap.servers") == "localhost:9092"
    assert flow.source_consumer.get("bootstrap.servers") == "primary-1:9092,primary-2:9092"
    assert flow.target_producer.get("compression.type") == "gzip"
    assert flow.target_producer.get("security.protocol") == "SSL"
    assert "buffer.memory" not in flow.target_producer.librdkafka()
    [hint] = [w for w in config.warnings if w.key == "primary->backup.sync.group.offsets"]
    assert hint.line == 15
    assert hint.fix == "did you mean primary->backup.sync.group.offsets.enabled?"


def test_seed001_trailing_comments_are_errors() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(CONFIGS / "seed001_trailing_comments.properties", environ={})
    issues = caught.value.issues
    assert [(i.line, i.key) for i in issues] == [
        (6, "backup.security.protocol"),
        (8, "backup->primary.enabled"),
    ]
    assert all("end-of-line comments" in i.fix for i in issues)


def test_seed004_basic_sasl() -> None:
    config = load_config(CONFIGS / "seed004_basic_sasl.properties", environ={})
    flow = config.flow("source->target")
    assert [f.name for f in config.flows] == ["source->target"]
    assert (flow.replication_factor, flow.refresh_topics_interval_seconds) == (3, 30)
    assert flow.sync_group_offsets_enabled is True
    assert flow.source_consumer.librdkafka()["sasl.username"] == "mm2-source"
    assert flow.target_producer.librdkafka()["sasl.password"] == "Tgt-Secret-0815"
    assert "Secret" not in flow.to_json()
    assert config.ignored_keys == ("tasks.max",)


def test_seed004_active_passive() -> None:
    config = load_config(CONFIGS / "seed004_active_passive.properties", environ={})
    flow = config.flow("primary->dr")
    assert [f.name for f in config.flows] == ["primary->dr"]
    assert config.heartbeat_pairs == (("primary", "dr"), ("dr", "primary"))
    assert flow.topics == ("^(?!__.*).*",)
    assert (flow.sync_group_offsets_interval_seconds, flow.emit_checkpoints_interval_seconds) == (10, 10)
    assert "max.poll.records" not in flow.source_consumer.masked()
    dropped = {w.key for w in config.warnings if "no effect" in w.problem}
    assert dropped == {"consumer.max.poll.records", "producer.batch.size", "producer.linger.ms"}


def test_seed004_active_active() -> None:
    config = load_config(CONFIGS / "seed004_active_active.properties", environ={})
    assert sorted(f.name for f in config.flows) == ["eu-west->us-east", "us-east->eu-west"]
    flow = config.flow("us-east->eu-west")
    assert flow.topics == ("^(?!__.*)(?!.*.internal).*",)  # what MM2 reads, backslash gone
    assert flow.topics_exclude == ("^eu-west..*",)
    assert flow.offset_syncs_topic_location == "target"
    lost = sorted(w.line for w in config.warnings if "drops the backslash" in w.problem)
    assert lost == [10, 11, 12, 13]


def test_seed004_filtering() -> None:
    config = load_config(CONFIGS / "seed004_filtering.properties", environ={})
    flow = config.flow("source->target")
    assert flow.topics == ("prod-.*|orders.*",)
    assert flow.topics_exclude == (".*.internal|test-.*|__.*",)
    assert [w.line for w in config.warnings] == [8]


def test_seed004_transforms_are_applied() -> None:
    config = load_config(CONFIGS / "seed004_transforms.properties", environ={})
    assert [f.name for f in config.flows] == ["source->target"]
    assert config.ignored_keys == ()
    assert config.warnings == ()
    chain = config.flows[0].transforms
    assert [(t.name, t.predicate, t.negate) for t in chain.transforms] == [
        ("addHeaders", "isProduction", True),
        ("maskPII", None, False),
    ]

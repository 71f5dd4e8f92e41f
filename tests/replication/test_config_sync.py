"""MM2's `targetConfig` and incremental config sync (MirrorSourceConnectorTest.testConfigPropertyFiltering*,
testNewTopicConfigs; docs/mm2-reference.md §4.3), over described configs as the broker reports them."""

from __future__ import annotations

from mirrorflow.core.config_property_filter import DefaultConfigPropertyFilter
from mirrorflow.kafka.topics import ConfigValue
from mirrorflow.replication.config_sync import (
    DELETE,
    SET,
    ConfigDiff,
    config_changes,
    new_topic_configs,
    target_config,
)


def entry(name: str, value: str | None, source: str = "DYNAMIC_TOPIC_CONFIG", **flags: bool) -> ConfigValue:
    return ConfigValue(
        name=name,
        value=value,
        source=source,
        is_default=source == "DEFAULT_CONFIG",
        read_only=flags.get("read_only", False),
        sensitive=flags.get("sensitive", False),
    )


SOURCE = {
    c.name: c
    for c in [
        entry("name-1", "value-1"),
        entry("name-2", "value-2", "DEFAULT_CONFIG"),
        entry("min.insync.replicas", "2"),
        entry("retention.ms", "1000", "DYNAMIC_BROKER_CONFIG"),
        entry("segment.bytes", "4096", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        entry("log.static", "x", "STATIC_BROKER_CONFIG"),
        entry("ro", "x", read_only=True),
        entry("secret", "x", sensitive=True),
    ]
}
TARGET_DEFAULTS = DefaultConfigPropertyFilter()
SOURCE_DEFAULTS = DefaultConfigPropertyFilter(use_defaults_from="source")


def test_incremental_keeps_defaults_and_drops_excluded() -> None:  # testConfigPropertyFiltering
    kept = target_config(SOURCE, TARGET_DEFAULTS, incremental=True)
    assert set(kept) == {"name-1", "name-2", "retention.ms", "segment.bytes"}


def test_non_incremental_drops_defaults_with_target_defaults() -> None:  # ...WithAlterConfigs
    kept = target_config(SOURCE, TARGET_DEFAULTS, incremental=False)
    assert set(kept) == {"name-1", "retention.ms", "segment.bytes"}


def test_non_incremental_keeps_defaults_with_source_defaults() -> None:  # ...WithAlterConfigsAndSourceDefault
    kept = target_config(SOURCE, SOURCE_DEFAULTS, incremental=False)
    assert set(kept) == {"name-1", "name-2", "retention.ms", "segment.bytes"}


def test_read_only_sensitive_and_static_broker_values_are_never_copied() -> None:
    for prop_filter in (TARGET_DEFAULTS, SOURCE_DEFAULTS):
        for incremental in (True, False):
            kept = target_config(SOURCE, prop_filter, incremental=incremental)
            assert not {"ro", "secret", "log.static"} & set(kept)


def test_new_topic_configs_use_custom_exclusions() -> None:  # testNewTopicConfigs
    prop_filter = DefaultConfigPropertyFilter(config_properties_exclude="name-.*, retention\\.ms")
    assert new_topic_configs(SOURCE, prop_filter) == {"min.insync.replicas": "2", "segment.bytes": "4096"}


def test_drift_sets_source_values_and_deletes_target_overrides_of_source_defaults() -> None:
    target = {
        "name-1": entry("name-1", "old"),
        "name-2": entry("name-2", "target-override"),
        "retention.ms": entry("retention.ms", "5", "DEFAULT_CONFIG"),
        "segment.bytes": entry("segment.bytes", "4096"),
        "min.insync.replicas": entry("min.insync.replicas", "1"),
    }
    assert config_changes(SOURCE, target, TARGET_DEFAULTS) == (
        ConfigDiff("name-1", SET, "old", "value-1"),
        ConfigDiff("name-2", DELETE, "target-override", None),
        ConfigDiff("retention.ms", SET, "5", "1000"),
    ), "segment.bytes is already that override; min.insync.replicas is excluded and keeps the target's value"


def test_delete_only_when_the_target_has_an_override() -> None:
    target = {"name-2": entry("name-2", "value-2", "DEFAULT_CONFIG")}
    assert all(c.key != "name-2" for c in config_changes(SOURCE, target, TARGET_DEFAULTS))


def test_a_target_default_equal_to_the_source_value_still_becomes_an_override() -> None:
    target = {"name-1": entry("name-1", "value-1", "DEFAULT_CONFIG")}
    assert ConfigDiff("name-1", SET, "value-1", "value-1") in config_changes(SOURCE, target, TARGET_DEFAULTS)


def test_use_defaults_from_source_writes_source_defaults_explicitly() -> None:  # testReplicateSourceDefault
    target = {"name-2": entry("name-2", "target-override")}
    assert ConfigDiff("name-2", SET, "target-override", "value-2") in config_changes(SOURCE, target, SOURCE_DEFAULTS)


def test_in_sync_means_no_changes() -> None:
    target = {
        name: entry(name, e.value) for name, e in target_config(SOURCE, TARGET_DEFAULTS, incremental=False).items()
    }
    assert config_changes(SOURCE, target, TARGET_DEFAULTS) == ()

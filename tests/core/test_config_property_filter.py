"""DefaultConfigPropertyFilter: MirrorSourceConfigTest.testConfigPropertyMatching, use.defaults.from."""

from __future__ import annotations

import pytest

from mirrorflow.core.config_property_filter import (
    DEFAULT_CONFIG_PROPERTIES_EXCLUDE,
    ConfigPropertyFilter,
    DefaultConfigPropertyFilter,
)
from mirrorflow.core.errors import UsageError
from mirrorflow.core.patterns import parse_list


def test_config_property_matching() -> None:  # MirrorSourceConfigTest.testConfigPropertyMatching
    config_filter = DefaultConfigPropertyFilter.from_settings({"config.properties.exclude": "prop2"})
    assert config_filter.should_replicate_config_property("prop1")
    assert not config_filter.should_replicate_config_property("prop2")


def test_default_excludes() -> None:  # MirrorSourceConnectorTest.testConfigPropertyFiltering (the filter part)
    config_filter = DefaultConfigPropertyFilter()
    assert isinstance(config_filter, ConfigPropertyFilter)
    for name in parse_list(DEFAULT_CONFIG_PROPERTIES_EXCLUDE):
        assert not config_filter.should_replicate_config_property(name), name
    assert "min.insync.replicas" in parse_list(DEFAULT_CONFIG_PROPERTIES_EXCLUDE)
    assert config_filter.should_replicate_config_property("cleanup.policy")
    assert config_filter.should_replicate_config_property("retention.bytes")


def test_use_defaults_from() -> None:
    assert not DefaultConfigPropertyFilter().should_replicate_source_default("retention.ms")
    source = DefaultConfigPropertyFilter.from_settings({"use.defaults.from": "source"})
    assert source.should_replicate_source_default("retention.ms")
    assert source.should_replicate_source_default("min.insync.replicas")  # MM2: true for every property


def test_unknown_use_defaults_from_is_refused() -> None:
    with pytest.raises(UsageError, match=r"use\.defaults\.from='sorce'"):
        DefaultConfigPropertyFilter.from_settings({"use.defaults.from": "sorce"})


def test_empty_exclude_syncs_everything() -> None:
    assert DefaultConfigPropertyFilter("").should_replicate_config_property("min.insync.replicas")

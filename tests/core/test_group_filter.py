"""DefaultGroupFilter: MirrorCheckpointConfigTest.testGroupMatching and the default excludes."""

from __future__ import annotations

from mirrorflow.core.group_filter import DEFAULT_GROUPS_EXCLUDE, DefaultGroupFilter, GroupFilter


def test_group_matching() -> None:  # MirrorCheckpointConfigTest.testGroupMatching
    group_filter = DefaultGroupFilter.from_settings({"groups": "group1"})
    assert group_filter.should_replicate_group("group1")
    assert not group_filter.should_replicate_group("group2")


def test_default_excludes() -> None:
    assert DEFAULT_GROUPS_EXCLUDE == "console-consumer-.*, connect-.*, __.*"
    group_filter = DefaultGroupFilter()
    assert isinstance(group_filter, GroupFilter)
    for group in ("console-consumer-123", "connect-mirror", "__private"):
        assert not group_filter.should_replicate_group(group), group
    assert group_filter.should_replicate_group("payments-app")


def test_no_groups() -> None:
    assert not DefaultGroupFilter("", "").should_replicate_group("group1")

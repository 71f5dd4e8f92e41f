"""MM2's `GroupFilter` / `DefaultGroupFilter`: which consumer groups a flow checkpoints.

Rule: checkpoint = matches `groups` AND NOT matches `groups.exclude` (full-match Java regex LISTs, see
`mirrorflow.core.patterns`). `groups=` (empty) selects no group.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from mirrorflow.core.patterns import IncludeExclude
from mirrorflow.core.plugin_class import load_filter

FILTER_CLASS_KEY = "group.filter.class"
JAVA_DEFAULT_GROUP_FILTER = "org.apache.kafka.connect.mirror.DefaultGroupFilter"
DEFAULT_GROUPS_EXCLUDE = "console-consumer-.*, connect-.*, __.*"


@runtime_checkable
class GroupFilter(Protocol):
    def should_replicate_group(self, group: str) -> bool: ...


class DefaultGroupFilter(IncludeExclude):
    """`groups` and `groups.exclude`, given as the raw MM2 setting strings (None: MM2's default)."""

    INCLUDE_KEY, EXCLUDE_KEY, DEFAULT_EXCLUDE = "groups", "groups.exclude", DEFAULT_GROUPS_EXCLUDE

    def should_replicate_group(self, group: str) -> bool:
        return self(group)


def load_group_filter(class_name: str, settings: Mapping[str, str]) -> GroupFilter:
    """The filter `group.filter.class` names, configured with the flow's settings (`plugin_class.load_filter`)."""
    default = (JAVA_DEFAULT_GROUP_FILTER, DefaultGroupFilter.from_settings)
    return load_filter(FILTER_CLASS_KEY, class_name, settings, GroupFilter, default)  # type: ignore[type-abstract]

"""MM2's `GroupFilter` / `DefaultGroupFilter`: which consumer groups a flow checkpoints.

Rule: checkpoint = matches `groups` AND NOT matches `groups.exclude` (full-match Java regex LISTs, see
`mirrorflow.core.patterns`). `groups=` (empty) selects no group.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from mirrorflow.core.patterns import compile_patterns, matches, parse_list

GROUPS_KEY = "groups"
GROUPS_EXCLUDE_KEY = "groups.exclude"
DEFAULT_GROUPS = ".*"
DEFAULT_GROUPS_EXCLUDE = "console-consumer-.*, connect-.*, __.*"


@runtime_checkable
class GroupFilter(Protocol):
    def should_replicate_group(self, group: str) -> bool: ...


class DefaultGroupFilter:
    """Include and exclude regex LISTs, given as the raw MM2 setting strings."""

    def __init__(self, groups: str = DEFAULT_GROUPS, groups_exclude: str = DEFAULT_GROUPS_EXCLUDE) -> None:
        self._include = compile_patterns(parse_list(groups), key=GROUPS_KEY)
        self._exclude = compile_patterns(parse_list(groups_exclude), key=GROUPS_EXCLUDE_KEY)

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> DefaultGroupFilter:
        return cls(settings.get(GROUPS_KEY, DEFAULT_GROUPS), settings.get(GROUPS_EXCLUDE_KEY, DEFAULT_GROUPS_EXCLUDE))

    def should_replicate_group(self, group: str) -> bool:
        return matches(self._include, group) and not matches(self._exclude, group)

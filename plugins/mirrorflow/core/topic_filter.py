"""MM2's `TopicFilter` / `DefaultTopicFilter`: which source topics a flow replicates (and checkpoints).

Rule: replicate = matches `topics` AND NOT matches `topics.exclude` (full-match Java regex LISTs, see
`mirrorflow.core.patterns`). `topics=` (empty) replicates nothing; `topics.exclude=` excludes nothing.
Defaults are those of the MM2 release Mirrorflow pins (Kafka 4.3.1); MM2 4.0 excluded `.*[\\-\\.]internal`
instead of `mm2.*\\.internal`, which only matters where the filter is used without `is_internal_topic`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from mirrorflow.core.patterns import IncludeExclude
from mirrorflow.core.plugin_class import load_filter

FILTER_CLASS_KEY = "topic.filter.class"
JAVA_DEFAULT_TOPIC_FILTER = "org.apache.kafka.connect.mirror.DefaultTopicFilter"
DEFAULT_TOPICS_EXCLUDE = r"mm2.*\.internal, .*\.replica, __.*"


@runtime_checkable
class TopicFilter(Protocol):
    def should_replicate_topic(self, topic: str) -> bool: ...


class DefaultTopicFilter(IncludeExclude):
    """`topics` and `topics.exclude`, given as the raw MM2 setting strings (None: MM2's default)."""

    INCLUDE_KEY, EXCLUDE_KEY, DEFAULT_EXCLUDE = "topics", "topics.exclude", DEFAULT_TOPICS_EXCLUDE

    def should_replicate_topic(self, topic: str) -> bool:
        return self(topic)


def load_topic_filter(class_name: str, settings: Mapping[str, str]) -> TopicFilter:
    """The filter `topic.filter.class` names, configured with the flow's settings (`plugin_class.load_filter`)."""
    default = (JAVA_DEFAULT_TOPIC_FILTER, DefaultTopicFilter.from_settings)
    return load_filter(FILTER_CLASS_KEY, class_name, settings, TopicFilter, default)  # type: ignore[type-abstract]

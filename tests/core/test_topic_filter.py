"""DefaultTopicFilter: MirrorSourceConfigTest topic matching cases and the default excludes."""

from __future__ import annotations

import pytest

from mirrorflow.core.patterns import PatternError
from mirrorflow.core.topic_filter import DEFAULT_TOPICS_EXCLUDE, DefaultTopicFilter, TopicFilter


def test_topic_matching() -> None:  # MirrorSourceConfigTest.testTopicMatching
    topic_filter = DefaultTopicFilter.from_settings({"topics": "topic1"})
    assert topic_filter.should_replicate_topic("topic1")
    assert not topic_filter.should_replicate_topic("topic2")


def test_no_topics() -> None:  # MirrorSourceConfigTest.testNoTopics
    topic_filter = DefaultTopicFilter.from_settings({"topics": ""})
    assert not topic_filter.should_replicate_topic("topic1")
    assert not topic_filter.should_replicate_topic("topic2")
    assert not topic_filter.should_replicate_topic("")


def test_all_topics() -> None:  # MirrorSourceConfigTest.testAllTopics
    topic_filter = DefaultTopicFilter.from_settings({"topics": ".*"})
    assert topic_filter.should_replicate_topic("topic1")
    assert topic_filter.should_replicate_topic("topic2")


def test_list_of_topics() -> None:  # MirrorSourceConfigTest.testListOfTopics
    topic_filter = DefaultTopicFilter.from_settings({"topics": "topic1, topic2"})
    assert topic_filter.should_replicate_topic("topic1")
    assert topic_filter.should_replicate_topic("topic2")
    assert not topic_filter.should_replicate_topic("topic3")


def test_exclude_wins_over_include() -> None:
    topic_filter = DefaultTopicFilter("orders.*", "orders\\.tmp.*")
    assert topic_filter.should_replicate_topic("orders.eu")
    assert not topic_filter.should_replicate_topic("orders.tmp1")


def test_default_excludes() -> None:
    assert DEFAULT_TOPICS_EXCLUDE == r"mm2.*\.internal, .*\.replica, __.*"
    topic_filter = DefaultTopicFilter()
    assert isinstance(topic_filter, TopicFilter)
    for topic in ("mm2-offsets.A.internal", "orders.replica", "__consumer_offsets"):
        assert not topic_filter.should_replicate_topic(topic), topic
    for topic in ("orders", "orders.internal", "orders-internal", "A.orders"):
        assert topic_filter.should_replicate_topic(topic), topic


def test_empty_exclude_excludes_nothing() -> None:
    assert DefaultTopicFilter(".*", "").should_replicate_topic("__consumer_offsets")


def test_invalid_regex_names_the_key() -> None:
    with pytest.raises(PatternError, match=r"topics\.exclude"):
        DefaultTopicFilter.from_settings({"topics.exclude": "a{1,3}"})

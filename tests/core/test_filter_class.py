"""`topic.filter.class` and `group.filter.class` (issue 21): MM2's default class names keep meaning the built-in
filters, a Python path loads the user's class configured with the flow's settings, and every bad class is a
UsageError that starts with the key and the value (the config loader puts it on that line)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mirrorflow.config.model import Flow
from mirrorflow.core.errors import UsageError
from mirrorflow.core.group_filter import JAVA_DEFAULT_GROUP_FILTER, DefaultGroupFilter, load_group_filter
from mirrorflow.core.topic_filter import JAVA_DEFAULT_TOPIC_FILTER, DefaultTopicFilter, load_topic_filter
from mirrorflow.replication.checkpoints import group_filter
from mirrorflow.replication.flow_rules import FlowRules


@pytest.fixture
def filter_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "custom_filters_for_test.py").write_text(
        textwrap.dedent(
            """
            class Suffix:
                def __init__(self, settings):
                    self.suffix = settings["custom.suffix"]
                    self.source = settings["source.cluster.alias"]

                def should_replicate_topic(self, topic):
                    return topic.endswith(self.suffix)

                def should_replicate_group(self, group):
                    return group.endswith(self.suffix)

            class FromSettings:
                @classmethod
                def from_settings(cls, settings):
                    made = cls()
                    made.topics = settings["topics"]
                    return made

                def should_replicate_topic(self, topic):
                    return topic == "only"

            class Broken:
                def __init__(self, settings):
                    raise RuntimeError("boom")

            class NoMethods:
                pass

            not_a_class = 42
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "custom_filters_for_test"


def flow(**fields: object) -> Flow:
    return Flow(source="A", target="B", name="A->B", **fields)  # type: ignore[arg-type]


def test_mm2_default_class_names_are_the_built_in_filters() -> None:
    topics = load_topic_filter(JAVA_DEFAULT_TOPIC_FILTER, {"topics": "orders.*", "topics.exclude": "orders-x"})
    assert isinstance(topics, DefaultTopicFilter)
    assert [topics.should_replicate_topic(t) for t in ("orders-1", "orders-x", "other")] == [True, False, False]
    groups = load_group_filter(f" {JAVA_DEFAULT_GROUP_FILTER} ", {})
    assert isinstance(groups, DefaultGroupFilter)
    assert groups.should_replicate_group("app") and not groups.should_replicate_group("console-consumer-1")


def test_flow_without_the_keys_keeps_its_topics_and_groups_lists() -> None:
    rules = FlowRules.of(flow(topics=("orders",), groups=("app-.*",), groups_exclude=("app-x",)))
    assert rules.topic_filter.should_replicate_topic("orders")
    assert not rules.topic_filter.should_replicate_topic("payments")
    wanted = group_filter(flow(groups=("app-.*",), groups_exclude=("app-x",)))
    assert [wanted.should_replicate_group(g) for g in ("app-1", "app-x", "other")] == [True, False, False]


def test_custom_filters_are_configured_with_the_flows_settings(filter_module: str) -> None:
    custom = flow(
        topic_filter_class=f"{filter_module}.Suffix",
        group_filter_class=f"{filter_module}.Suffix",
        settings={"custom.suffix": "-mine"},
    )
    rules = FlowRules.of(custom)
    assert rules.topic_filter.should_replicate_topic("orders-mine")
    assert not rules.topic_filter.should_replicate_topic("orders")  # the default `topics = .*` would take it
    assert group_filter(custom).should_replicate_group("app-mine")
    assert not group_filter(custom).should_replicate_group("app")
    assert custom.topic_filter().source == "A"  # type: ignore[attr-defined]
    typed = flow(topic_filter_class=f"{filter_module}.FromSettings", topics=("a", "b"))
    assert typed.topic_filter().topics == "a, b"  # type: ignore[attr-defined]


@pytest.mark.parametrize("load", [load_topic_filter, load_group_filter])
@pytest.mark.parametrize(
    ("class_name", "message"),
    [
        ("com.acme.kafka.MyFilter", "cannot import module 'com.acme.kafka'.*port it to Python"),
        ("NoDots", "expected a Python class path"),
        ("{module}.Missing", "has no attribute 'Missing'"),
        ("{module}.not_a_class", "is not a class"),
        ("{module}.Broken", "constructing it failed: RuntimeError: boom"),
        ("{module}.NoMethods", "NoMethods lacks (Topic|Group)Filter methods; give the class a method should_repl"),
    ],
)
def test_bad_filter_class_is_a_usage_error_naming_the_key(
    filter_module: str, load: object, class_name: str, message: str
) -> None:
    name = class_name.format(module=filter_module)
    key = "topic.filter.class" if load is load_topic_filter else "group.filter.class"
    with pytest.raises(UsageError, match=message) as caught:
        load(name, {})  # type: ignore[operator]
    assert str(caught.value).startswith(f"{key}={name!r}: ")

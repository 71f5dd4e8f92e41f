"""The process-wide cache of schema-ID translation stays bounded and drops the least recently used entry; the
subject-name strategies accept exactly the subjects Confluent's serialisers would use for a topic and side."""

from __future__ import annotations

import pytest

from mirrorflow.core.predicates import ConfigProblem
from mirrorflow.core.schema_cache import CACHE_ENTRIES, ID_SUBJECTS, TARGET_IDS, Lru
from mirrorflow.core.subject_strategy import matches, parse_strategy


def test_the_cache_keeps_at_most_its_size_and_drops_the_least_recently_used() -> None:
    cache: Lru[int, str] = Lru(3)
    for i in range(3):
        cache.put(i, f"v{i}")
    assert cache.get(0) == "v0"  # 0 is now the most recently used: 1 goes first
    cache.put(3, "v3")
    assert len(cache) == 3 and cache.get(1) is None
    assert [cache.get(i) for i in (0, 2, 3)] == ["v0", "v2", "v3"]


def test_the_process_caches_are_bounded_by_the_documented_size() -> None:
    assert ID_SUBJECTS.size == TARGET_IDS.size == CACHE_ENTRIES == 10_000
    with pytest.raises(ValueError, match="at least one entry"):
        Lru(0)


@pytest.mark.parametrize(
    ("strategy", "part", "subjects", "expected"),
    [
        ("TopicNameStrategy", "value", {"orders-value"}, True),
        ("TopicNameStrategy", "key", {"orders-value"}, False),
        ("TopicNameStrategy", "value", {"orders2-value", "payments-value"}, False),
        ("TopicRecordNameStrategy", "key", {"orders-com.acme.Order"}, True),
        ("TopicRecordNameStrategy", "value", {"payments-com.acme.Order", "orders-"}, False),
        ("RecordNameStrategy", "value", {"com.acme.Order"}, True),
        ("RecordNameStrategy", "value", set(), False),
    ],
)
def test_a_strategy_accepts_only_its_subjects_for_the_topic(
    strategy: str, part: str, subjects: set[str], expected: bool
) -> None:
    assert matches(strategy, "orders", part, frozenset(subjects)) is expected


def test_strategies_are_named_as_confluent_names_them() -> None:
    assert parse_strategy("io.confluent.kafka.serializers.subject.TopicNameStrategy") == "TopicNameStrategy"
    with pytest.raises(ConfigProblem) as err:
        parse_strategy("TopicNamestrategy")
    assert err.value.setting == "subject.name.strategy" and "RecordNameStrategy" in err.value.fix

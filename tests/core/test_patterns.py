"""MM2 LIST parsing and Java-regex matching (ConfigDef LIST, MirrorUtils.compilePatternList)."""

from __future__ import annotations

import pytest

from mirrorflow.core.errors import UsageError
from mirrorflow.core.patterns import PatternError, compile_patterns, matches, parse_list


@pytest.mark.parametrize(
    ("value", "items"),
    [
        ("", ()),
        ("  \t ", ()),
        (".*", (".*",)),
        ("topic1, topic2", ("topic1", "topic2")),
        (" a ,b\t,\nc ", ("a", "b", "c")),
        ("a,,b", ("a", "", "b")),
        ("a,", ("a", "")),  # Java keeps trailing empty items (split with limit -1)
        ("a{1,3}", ("a{1", "3}")),
        ("\u00a0a", ("\u00a0a",)),  # Java's trim only removes characters <= U+0020
    ],
)
def test_parse_list_like_kafka_configdef(value: str, items: tuple[str, ...]) -> None:
    assert parse_list(value) == items


def test_empty_list_has_no_pattern() -> None:
    assert compile_patterns(()) is None
    assert not matches(None, "anything")


def test_items_are_joined_and_fully_matched() -> None:
    pattern = compile_patterns(["topic1", "orders-.*"])
    assert matches(pattern, "topic1")
    assert matches(pattern, "orders-eu")
    assert not matches(pattern, "topic10")
    assert not matches(pattern, "xorders-eu")


def test_an_empty_item_matches_the_empty_name() -> None:
    pattern = compile_patterns(parse_list("a,"))
    assert matches(pattern, "")
    assert not matches(pattern, "b")


def test_inline_flag_spans_the_rest_of_its_group_like_java() -> None:
    pattern = compile_patterns(["a", "(?i)b", "c"])  # joined: a|(?i)b|c: Java's (?i) also covers c
    assert matches(pattern, "B")
    assert matches(pattern, "C")
    assert not matches(pattern, "A")


def test_character_classes_are_ascii_like_java() -> None:
    assert not matches(compile_patterns([r"\d+"]), "\u0663")
    assert not matches(compile_patterns(["(?i)\u00e9"]), "\u00c9")


def test_java_quoting_and_named_groups_are_translated() -> None:
    assert matches(compile_patterns([r"\Qorders.v1\E"]), "orders.v1")
    assert not matches(compile_patterns([r"\Qorders.v1\E"]), "ordersXv1")
    assert matches(compile_patterns([r"(?<x>ab)\k<x>"]), "abab")


def test_pattern_error_is_a_usage_error_naming_key_and_item() -> None:
    with pytest.raises(PatternError) as caught:
        compile_patterns(["good", "bad{"], key="topics.exclude")
    assert isinstance(caught.value, UsageError)
    assert caught.value.exit_code == 2
    assert "topics.exclude" in str(caught.value)
    assert "'bad{'" in str(caught.value)


def test_comma_split_repetition_gets_a_hint() -> None:
    with pytest.raises(PatternError, match="split on commas"):
        compile_patterns(parse_list("a{1,3}"), key="topics")


@pytest.mark.parametrize(
    ("regex", "reason"),
    [
        (r"\p{Alpha}+", "Unicode/POSIX class"),
        (r"[a-z&&[^b]]", "nested character class|intersection"),
        ("[ab[cd]]", "nested character class"),
        (r"\h", "horizontal whitespace"),
        (r"\v", "vertical whitespace"),
        ("(?U)\\w", "inline flag"),
        ("(?x) a b", "inline flag"),
    ],
)
def test_java_features_python_cannot_match_are_refused(regex: str, reason: str) -> None:
    with pytest.raises(PatternError, match=reason):
        compile_patterns([regex], key="topics")


@pytest.mark.parametrize("regex", ["{foo}", "a{,3}", "(?P<n>a)", "(?#comment)a", r"\y", r"a\E", "[abc", "(a", "a**"])
def test_regexes_java_rejects_are_rejected(regex: str) -> None:
    with pytest.raises(PatternError, match="not a valid regex"):
        compile_patterns([regex], key="topics")


def test_possessive_and_atomic_constructs_work() -> None:
    assert matches(compile_patterns(["a*+b"]), "aab")
    assert not matches(compile_patterns(["(?>a+)a"]), "aaa")

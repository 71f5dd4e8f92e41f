"""Transform chains from mm2.properties: Connect's key shapes, top-level inheritance, and every mistake reported
with its line and key at load time."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mirrorflow.config.issues import ConfigError
from mirrorflow.config.model import Flow, MirrorConfig

Load = Callable[..., MirrorConfig]

TWO = """clusters = a, b
a.bootstrap.servers = a:9092
b.bootstrap.servers = b:9092
a->b.enabled = true
"""


def errors_of(load: Load, body: str) -> dict[str, tuple[int | None, str]]:
    with pytest.raises(ConfigError) as err:
        load(TWO + body)
    return {issue.key: (issue.line, issue.problem + " " + issue.fix) for issue in err.value.issues}


def test_flow_level_chain_in_connect_shapes(load: Load) -> None:
    config = load(
        TWO
        + "a->b.transforms = keep, mask\n"
        + "a->b.transforms.keep.type = org.apache.kafka.connect.transforms.Filter\n"
        + "a->b.transforms.keep.predicate = other\n"
        + "a->b.transforms.keep.negate = TRUE\n"
        + "a->b.transforms.mask.type = MaskFields\n"
        + "a->b.transforms.mask.fields = email\n"
        + "a->b.transforms.mask.keep.last = 4\n"
        + "a->b.predicates = other\n"
        + "a->b.predicates.other.type = TopicNameMatches\n"
        + "a->b.predicates.other.pattern = a\\\\.orders\n"
        + "a->b.errors.tolerance = ALL\n"
    )
    chain = config.flow("a->b").transforms
    assert [(t.name, t.predicate, t.negate) for t in chain.transforms] == [
        ("keep", "other", True),
        ("mask", None, False),
    ]
    assert chain.transforms[1].settings == {"fields": "email", "keep.last": "4"}
    assert chain.predicates[0].settings == {"pattern": "a\\.orders"}
    assert chain.errors_tolerance == "all"
    assert chain.dead_letter_topic == "mm2-dlq.a.internal"
    assert config.warnings == () and config.ignored_keys == ()
    assert Flow.from_json(config.flow("a->b").to_json()).transforms == chain, "the chain survives the JSON trip"


def test_top_level_chain_reaches_every_flow_and_a_flow_key_wins(load: Load) -> None:
    config = load(
        TWO
        + "b->a.enabled = true\n"
        + "transforms = h\n"
        + "transforms.h.type = InsertHeader\n"
        + "transforms.h.header = X\n"
        + "transforms.h.value.literal = top\n"
        + "b->a.transforms.h.value.literal = flow\n"
        + "errors.deadletterqueue.topic.name = dead\n"
    )
    a_b, b_a = config.flow("a->b").transforms, config.flow("b->a").transforms
    assert a_b.transforms[0].settings["value.literal"] == "top"
    assert b_a.transforms[0].settings["value.literal"] == "flow"
    assert a_b.dead_letter_topic == b_a.dead_letter_topic == "dead"
    assert config.warnings == ()


def test_no_transforms_is_an_empty_chain(load: Load) -> None:
    assert load(TWO).flow("a->b").transforms.empty


def test_unknown_type_is_reported_on_its_line(load: Load) -> None:
    found = errors_of(
        load, "a->b.transforms = r\na->b.transforms.r.type = org.apache.kafka.connect.transforms.RegexRouter\n"
    )
    line, text = found["a->b.transforms.r.type"]
    assert line == 6
    assert "RegexRouter" in text and "built-in" in text


def test_missing_type_and_missing_setting(load: Load) -> None:
    found = errors_of(
        load,
        "a->b.transforms = h, nothing\n"  # line 5
        "a->b.transforms.h.type = InsertHeader\n"
        "a->b.transforms.h.header = X\n",
    )
    assert found["a->b.transforms.h.type"][0] == 6, "a missing setting is reported on the transform's type line"
    assert "value.literal is required" in found["a->b.transforms.h.type"][1]
    assert found["a->b.transforms"][0] == 5
    assert "'nothing' has no type" in found["a->b.transforms"][1]
    assert "a->b.transforms.nothing.type" in found["a->b.transforms"][1]


def test_bad_regex_and_bad_setting_values_are_reported_on_their_own_line(load: Load) -> None:
    found = errors_of(
        load,
        "a->b.transforms = m\n"
        "a->b.transforms.m.type = MaskFields\n"
        "a->b.transforms.m.fields = a\n"
        "a->b.transforms.m.mask.char = ab\n"  # line 8
        "a->b.transforms.m.predicate = p\n"
        "a->b.predicates = p\n"
        "a->b.predicates.p.type = TopicNameMatches\n"
        "a->b.predicates.p.pattern = orders[\n",  # line 12
    )
    assert found["a->b.transforms.m.mask.char"][0] == 8
    assert found["a->b.predicates.p.pattern"][0] == 12


def test_undefined_predicate_and_bad_tolerance(load: Load) -> None:
    found = errors_of(
        load,
        "a->b.transforms = f\n"
        "a->b.transforms.f.type = Filter\n"
        "a->b.transforms.f.predicate = nope\n"  # line 7
        "a->b.errors.tolerance = some\n",
    )
    assert found["a->b.transforms.f.predicate"][0] == 7
    assert "'nope' is not listed in predicates" in found["a->b.transforms.f.predicate"][1]
    assert "none, all" in found["a->b.errors.tolerance"][1]


def test_unlisted_definitions_warn(load: Load) -> None:
    config = load(TWO + "a->b.transforms.x.type = Filter\n")
    assert config.flow("a->b").transforms.empty
    assert [w.key for w in config.warnings] == ["a->b.transforms.x.type"]


def test_secret_looking_settings_are_masked_unless_revealed(load: Load) -> None:
    config = load(
        TWO
        + "a->b.transforms = h\n"
        + "a->b.transforms.h.type = InsertHeader\n"
        + "a->b.transforms.h.header = X\n"
        + "a->b.transforms.h.value.literal = v\n"
        + "a->b.transforms.h.api.password = Hidden-Pass-77\n"
    )
    flow = config.flow("a->b")
    assert "Hidden-Pass-77" not in flow.to_json() and "Hidden-Pass-77" not in str(flow.model_dump(mode="json"))
    shipped = Flow.from_json(flow.to_json(reveal_secrets=True))
    assert shipped.transforms.transforms[0].settings["api.password"] == "Hidden-Pass-77"

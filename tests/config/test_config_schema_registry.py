"""`A->B.schema.registry.*`: the translation step added last to the flow's chain, nothing added without it,
credentials masked wherever the flow is shown, and each mistake reported on its line."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from mirrorflow.cli.validate_cmd import as_document
from mirrorflow.config.issues import ConfigError
from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.schema_translation import STEP_NAME, STEP_TYPE, SchemaIdTranslation
from mirrorflow.core.transforms import make_transform

Load = Callable[..., MirrorConfig]
TWO = """clusters = a, b
a.bootstrap.servers = a:9092
b.bootstrap.servers = b:9092
a->b.enabled = true
"""
REGISTRIES = """a->b.schema.registry.source.url = http://registry-a:8081
a->b.schema.registry.target.url = https://registry-b/apis/ccompat/v6
"""
USER_INFO = "mirror:registry-Pa55w0rd"
TOKEN = "eyJ-bearer-T0KEN"


def errors_of(load: Load, body: str) -> dict[str, tuple[int | None, str]]:
    with pytest.raises(ConfigError) as err:
        load(TWO + body)
    return {issue.key: (issue.line, issue.problem + " " + issue.fix) for issue in err.value.issues}


def test_no_registry_keys_add_nothing_to_the_chain(load: Load) -> None:
    chain = load(TWO).flow("a->b").transforms
    assert chain.empty, "the plain copy path: a flow without registries pays nothing"


def test_both_urls_add_the_step_last_with_the_flows_errors_tolerance(load: Load) -> None:
    config = load(
        TWO
        + REGISTRIES
        + "a->b.transforms = h\na->b.transforms.h.type = InsertHeader\na->b.transforms.h.header = x\n"
        + "a->b.transforms.h.value.literal = y\na->b.errors.tolerance = all\n"
        + "a->b.schema.registry.translate = value\n"
    )
    chain = config.flow("a->b").transforms
    assert [(t.name, t.type) for t in chain.transforms] == [("h", "InsertHeader"), (STEP_NAME, STEP_TYPE)]
    assert chain.transforms[1].settings == {
        "source.url": "http://registry-a:8081",
        "target.url": "https://registry-b/apis/ccompat/v6",
        "translate": "value",
    }
    assert chain.errors_tolerance == "all"
    assert config.warnings == ()


def test_credentials_are_masked_in_validate_and_json_but_reach_the_copy(load: Load) -> None:
    config = load(
        TWO
        + REGISTRIES
        + f"a->b.schema.registry.source.basic.auth.user.info = {USER_INFO}\n"
        + f"a->b.schema.registry.target.bearer.auth.token = {TOKEN}\n"
    )
    flow = config.flow("a->b")
    shown = json.dumps(as_document(config)) + flow.to_json() + repr(flow)
    assert USER_INFO not in shown and TOKEN not in shown
    assert "source.basic.auth.user.info=***" in json.dumps(as_document(config))
    revealed = Flow.from_json(flow.to_json(reveal_secrets=True)).transforms.transforms[0].settings
    assert revealed["source.basic.auth.user.info"] == USER_INFO and revealed["target.bearer.auth.token"] == TOKEN


def test_one_url_alone_is_an_error_on_its_line(load: Load) -> None:
    errors = errors_of(load, "a->b.schema.registry.source.url = http://r:8081\n")
    line, text = errors["a->b.schema.registry.source.url"]
    assert line == 5 and "target.url is not set" in text and "a->b.schema.registry.target.url" in text


@pytest.mark.parametrize(
    ("url", "words"),
    [("ftp://r", "not an http"), ("registry:8081", "not an http"), ("http://u:pw@r:8081", "holds credentials")],
)
def test_bad_urls_are_reported_without_echoing_them(load: Load, url: str, words: str) -> None:
    errors = errors_of(load, f"a->b.schema.registry.source.url = {url}\na->b.schema.registry.target.url = http://t\n")
    line, text = errors["a->b.schema.registry.source.url"]
    assert line == 5 and words in text and "pw" not in text


def test_bad_step_settings_point_at_their_key(load: Load) -> None:
    errors = errors_of(load, REGISTRIES + "a->b.schema.registry.translate = key, vale\n")
    assert errors["a->b.schema.registry.translate"][0] == 7 and "vale" in errors["a->b.schema.registry.translate"][1]
    config = load(TWO + REGISTRIES + "a->b.schema.registry.source.urls = http://x\n")
    (warning,) = config.warnings
    assert warning.key == "a->b.schema.registry.source.urls" and "schema.registry.source.url?" in warning.fix


def test_a_top_level_registry_key_is_flagged_as_reaching_no_flow(load: Load) -> None:
    config = load(TWO + "schema.registry.source.url = http://r\n")
    assert config.flow("a->b").transforms.empty
    assert any(w.key == "schema.registry.source.url" for w in config.warnings)


@pytest.mark.parametrize(
    ("written", "strategy"),
    [
        ("TopicNameStrategy", "TopicNameStrategy"),
        ("io.confluent.kafka.serializers.subject.RecordNameStrategy", "RecordNameStrategy"),
        (" TopicRecordNameStrategy ", "TopicRecordNameStrategy"),
    ],
)
def test_the_subject_name_strategy_takes_confluents_short_and_class_names(
    load: Load, written: str, strategy: str
) -> None:
    config = load(TWO + REGISTRIES + f"a->b.schema.registry.subject.name.strategy = {written}\n")
    (step,) = config.flow("a->b").transforms.transforms
    made = make_transform(step)
    assert isinstance(made, SchemaIdTranslation) and made.strategy == strategy
    assert config.warnings == ()


def test_the_default_subject_name_strategy_is_topic_name_strategy(load: Load) -> None:
    (step,) = load(TWO + REGISTRIES).flow("a->b").transforms.transforms
    made = make_transform(step)
    assert isinstance(made, SchemaIdTranslation) and made.strategy == "TopicNameStrategy"


def test_an_unknown_subject_name_strategy_is_an_error_on_its_line(load: Load) -> None:
    errors = errors_of(load, REGISTRIES + "a->b.schema.registry.subject.name.strategy = io.confluent.Nonsense\n")
    line, text = errors["a->b.schema.registry.subject.name.strategy"]
    assert line == 7 and "io.confluent.Nonsense" in text and "TopicRecordNameStrategy" in text

"""Built-in transforms, plug-in loading, the chain (predicates, negate, drops, failures) and dead-letter headers."""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping

import pytest

from mirrorflow.core.predicates import ConfigProblem, Record
from mirrorflow.core.transforms import (
    BUILTIN_TRANSFORMS,
    ChainSpec,
    DropHeaders,
    Filter,
    InsertHeader,
    MaskFields,
    MaskPII,
    PredicateSpec,
    Transformation,
    TransformChain,
    TransformError,
    TransformSpec,
    dead_letter_headers,
    default_dead_letter_topic,
    load_class,
)


def record(value: bytes | None = b"v", headers: list[tuple[str, bytes | None]] | None = None) -> Record:
    return Record("A.t", "t", 2, 41, 1000, b"k", value, list(headers or []))


def configured(cls: type[Transformation], settings: Mapping[str, str]) -> Transformation:
    transform = cls()
    transform.configure(settings)
    return transform


class Upper(Transformation):
    """A plug-in as an operator would write one (loaded by dotted path in the tests below)."""

    def configure(self, settings: Mapping[str, str]) -> None:
        self.suffix = settings.get("suffix", "").encode()

    def apply(self, record: Record) -> Record | None:
        if record.value == b"boom":
            raise RuntimeError("cannot upper boom")
        record.value = (record.value or b"").upper() + self.suffix
        return record


def test_insert_header_appends_the_literal() -> None:
    transform = configured(InsertHeader, {"header": "X-From", "value.literal": "source-cluster"})
    out = transform.apply(record(headers=[("a", b"1")]))
    assert out is not None and out.headers == [("a", b"1"), ("X-From", b"source-cluster")]
    with pytest.raises(ConfigProblem) as err:
        configured(InsertHeader, {"header": "X"})
    assert err.value.setting == "value.literal"
    with pytest.raises(ConfigProblem):
        configured(InsertHeader, {"value.literal": "x"})


def test_drop_headers_removes_every_named_header() -> None:
    transform = configured(DropHeaders, {"headers": "a, b"})
    out = transform.apply(record(headers=[("a", b"1"), ("c", None), ("b", b"2"), ("a", b"3")]))
    assert out is not None and out.headers == [("c", None)]
    with pytest.raises(ConfigProblem):
        configured(DropHeaders, {})


def test_filter_drops() -> None:
    assert configured(Filter, {}).apply(record()) is None


def test_mask_fields_keeps_first_and_last_characters() -> None:
    transform = configured(MaskFields, {"fields": "email,age,missing,nothing", "keep.first": "1", "keep.last": "3"})
    value = json.dumps({"email": "ann@example.com", "age": 42, "name": "Ann", "nothing": None}).encode()
    out = transform.apply(record(value))
    assert out is not None and out.value is not None
    assert json.loads(out.value) == {"email": "a***********com", "age": "**", "name": "Ann", "nothing": None}


def test_mask_fields_edge_cases() -> None:
    transform = configured(MaskFields, {"fields": "ssn", "mask.char": "#"})
    assert transform.apply(record(None)) is not None, "tombstones pass untouched"
    untouched = b'{"other": 1}'
    out = transform.apply(record(untouched))
    assert out is not None and out.value is untouched, "no masked field: the bytes are kept as they were"
    out = transform.apply(record(b'{"ssn": "123-45"}'))
    assert out is not None and out.value == b'{"ssn":"######"}'
    with pytest.raises(ValueError):
        transform.apply(record(b"[1, 2]"))
    with pytest.raises(ValueError):
        transform.apply(record(b"not json"))
    for bad in ({"fields": "a", "mask.char": "**"}, {"fields": "a", "keep.first": "-1"}, {"mask.char": "*"}):
        with pytest.raises(ConfigProblem):
            configured(MaskFields, bad)


def test_seed_004_mask_pii_keeps_two_characters_each_end() -> None:
    assert BUILTIN_TRANSFORMS["com.example.transforms.MaskPIITransform"] is MaskPII
    transform = configured(MaskPII, {"fields": "phone,ssn", "mask.char": "*"})
    out = transform.apply(record(b'{"phone": "5551234", "ssn": "1234"}'))
    assert out is not None and out.value is not None
    assert json.loads(out.value) == {"phone": "55***34", "ssn": "****"}


def test_load_class_built_ins_dotted_paths_and_refusals() -> None:
    assert load_class("org.apache.kafka.connect.transforms.InsertHeader", BUILTIN_TRANSFORMS, "apply") is InsertHeader
    assert load_class("Filter", BUILTIN_TRANSFORMS, "apply") is Filter
    assert load_class("mirrorflow.core.transforms.DropHeaders", BUILTIN_TRANSFORMS, "apply") is DropHeaders
    for bad in ("org.apache.kafka.connect.transforms.RegexRouter", "NoSuch", "json.JSONDecoder", "json.nope"):
        with pytest.raises(ConfigProblem) as err:
            load_class(bad, BUILTIN_TRANSFORMS, "apply")
        assert err.value.setting == "type"


def chain(*steps: TransformSpec, predicates: tuple[PredicateSpec, ...] = ()) -> TransformChain:
    return TransformChain(ChainSpec(transforms=steps, predicates=predicates))


def test_chain_runs_in_order_with_a_negated_predicate() -> None:
    tombstone = (PredicateSpec("isTombstone", "RecordIsTombstone"),)
    insert = TransformSpec("h", "InsertHeader", {"header": "X", "value.literal": "1"}, "isTombstone", negate=True)
    plugin = TransformSpec("up", f"{__name__}.Upper", {"suffix": "!"})
    c = chain(insert, plugin, predicates=tombstone)
    out = c.apply(record(b"abc"))
    assert out is not None and out.value == b"ABC!" and out.headers == [("X", b"1")]
    out = c.apply(record(None))
    assert out is not None and out.headers == [], "negate: the header goes on every record but tombstones"


def test_chain_drops_with_a_filter_and_counts() -> None:
    header = (PredicateSpec("skip", "HasHeaderKey", {"name": "skip"}),)
    c = chain(
        TransformSpec("f", "Filter", {}, "skip"),
        TransformSpec("h", "InsertHeader", {"header": "X", "value.literal": ""}),
        predicates=header,
    )
    assert c.apply(record(headers=[("skip", None)])) is None
    assert c.apply(record()) is not None
    assert c.dropped == 1


def test_chain_failure_names_the_transform_and_the_record() -> None:
    c = chain(TransformSpec("up", f"{__name__}.Upper"))
    with pytest.raises(TransformError) as err:
        c.apply(record(b"boom"))
    assert err.value.coordinates == ("t", 2, 41)
    assert "'up'" in str(err.value) and "t-2 offset 41" in str(err.value) and "errors.tolerance = all" in str(err.value)
    headers = dead_letter_headers([("orig", b"1")], "A->B", err.value)
    as_dict = dict(headers)
    assert headers[0] == ("orig", b"1")
    assert as_dict["__connect.errors.topic"] == b"t"
    assert as_dict["__connect.errors.partition"] == b"2"
    assert as_dict["__connect.errors.offset"] == b"41"
    assert as_dict["__connect.errors.exception.message"] == b"cannot upper boom"
    assert as_dict["mirrorflow.errors.transform"] == b"up"


class Router(Transformation):
    def apply(self, record: Record) -> Record | None:
        record.topic = "elsewhere"
        return record


def test_routing_is_refused() -> None:
    with pytest.raises(TransformError, match="routing"):
        chain(TransformSpec("r", f"{__name__}.Router")).apply(record())


def test_spec_is_plain_data_and_describes_itself() -> None:
    spec = ChainSpec(
        transforms=(TransformSpec("m", "com.example.transforms.MaskPIITransform", {"fields": "a"}, "p", True),),
        predicates=(PredicateSpec("p", "RecordIsTombstone"),),
        errors_tolerance="all",
        dead_letter_topic=default_dead_letter_topic("A"),
    )
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert spec.describe() == [
        "m: com.example.transforms.MaskPIITransform [built-in MaskPII] (fields=a) unless p",
        "on error: dead-letter to mm2-dlq.A.internal",
    ]
    assert ChainSpec().empty and not spec.empty

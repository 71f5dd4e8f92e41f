"""Origin headers (docs/design.md §1.6): identity flows A->B and B->A must not send a record back where it began."""

from __future__ import annotations

from mirrorflow.core.provenance import ORIGIN_HEADER, origin, should_drop, with_origin


def test_header_name_is_in_our_namespace() -> None:
    assert ORIGIN_HEADER == "mirrorflow.origin"


def test_a_record_without_origin_gets_the_source_alias_appended_after_its_headers() -> None:
    headers = [("trace", b"1"), ("empty", None)]
    assert with_origin(headers, "A") == [("trace", b"1"), ("empty", None), (ORIGIN_HEADER, b"A")]
    assert headers == [("trace", b"1"), ("empty", None)], "the input list must not be modified"


def test_a_record_without_any_headers_gets_only_the_origin() -> None:
    assert with_origin(None, "west-1") == [(ORIGIN_HEADER, b"west-1")]
    assert with_origin([], "A") == [(ORIGIN_HEADER, b"A")]


def test_an_existing_origin_is_kept_not_replaced() -> None:
    headers = [(ORIGIN_HEADER, b"A"), ("x", b"y")]
    assert with_origin(headers, "B") == headers


def test_drop_only_records_that_started_on_the_target() -> None:
    assert should_drop([(ORIGIN_HEADER, b"B")], "B")
    assert not should_drop([(ORIGIN_HEADER, b"A")], "B")
    assert not should_drop([("other", b"B")], "B")
    assert not should_drop(None, "B")
    assert not should_drop([(ORIGIN_HEADER, None)], "B")


def test_round_trip_a_to_b_to_a_is_dropped_and_a_to_b_to_c_is_not() -> None:
    at_b = with_origin([("k", b"v")], "A")  # copied A->B
    assert not should_drop(at_b, "C")
    at_c = with_origin(at_b, "B")  # copied B->C keeps origin A
    assert origin(at_c) == "A"
    assert should_drop(at_b, "A")  # B->A would bring it home


def test_non_ascii_aliases_round_trip_as_utf8() -> None:
    headers = with_origin(None, "zürich")
    assert headers == [(ORIGIN_HEADER, "zürich".encode())]
    assert should_drop(headers, "zürich")

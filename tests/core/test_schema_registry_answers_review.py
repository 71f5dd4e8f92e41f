"""Review of issue 20: a registry (or a proxy in front of it) that answers 200 with JSON that is not the API's.

Such an answer concerns every record, like an HTML login page does, so it must stop the copy
(`RegistryUnavailable`, a `FatalTransformError`), even with `errors.tolerance = all`. A KeyError from a missing
field would instead be taken as the record's own failure and send every record of the flow to the dead-letter
topic.
"""

from __future__ import annotations

import json

import pytest
from tests.core.test_schema_registry_client import Scripted, server, step, url

from mirrorflow.core.predicates import Record
from mirrorflow.core.registry_client import RegistryClient, RegistryUnavailable, Schema
from mirrorflow.core.schema_wire import frame
from mirrorflow.core.transforms import ChainSpec, TransformChain

__all__ = ["server"]  # the fixture, imported for its side effect


@pytest.mark.parametrize(
    "answer",
    [
        b"{}",  # a schema without "schema"
        json.dumps({"schema": '"string"', "references": [{"name": "x"}]}).encode(),  # a reference without subject
    ],
)
def test_a_schema_answer_that_is_not_the_apis_stops_the_copy_even_with_a_dead_letter_topic(
    server: Scripted, answer: bytes
) -> None:
    server.answer = (200, answer)
    chain = TransformChain(
        ChainSpec(transforms=(step(**{"source.url": url(server)}),), errors_tolerance="all", dead_letter_topic="d")
    )
    with pytest.raises(RegistryUnavailable, match="source schema registry"):
        chain.apply(Record("A.t", "t", 0, 5, 0, None, frame(3, b"x"), []))


def test_a_registration_answer_without_an_id_is_the_registrys_failure(server: Scripted) -> None:
    server.answer = (200, b'{"message": "ok"}')
    with pytest.raises(RegistryUnavailable):
        RegistryClient(url(server), "target schema registry").register("s", Schema('"string"'))


def test_a_target_registry_in_read_only_mode_stops_the_copy_even_with_a_dead_letter_topic(server: Scripted) -> None:
    """Confluent answers 422 with error code 42205 to every registration while a registry (or subject) is in
    READONLY mode, as DR registries often are: that is the registry's state, not one schema's fault, so it must
    not send every record of every new schema to the dead-letter topic."""
    server.answer = (422, json.dumps({"error_code": 42205, "message": "Subject s is in read-only mode"}).encode())
    with pytest.raises(RegistryUnavailable, match="read-only"):
        RegistryClient(url(server), "target schema registry").register("s", Schema('"string"'))

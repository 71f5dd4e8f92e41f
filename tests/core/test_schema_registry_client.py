"""The registry client's HTTP side: credentials in the Authorization header and nowhere else, and each failure
classed as the record's (not found, refused) or the copy's (unreachable, failing, credentials refused).

The server here is a few lines of `http.server` that answers what each test scripts: it checks our client's
requests and error handling, not registry behaviour (tests/replication/test_schema_registry_live.py does that
against a real registry)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mirrorflow.core.predicates import ConfigProblem, Record
from mirrorflow.core.registry_client import (
    RegistryClient,
    RegistryUnavailable,
    Schema,
    SchemaNotFound,
    SchemaRefused,
)
from mirrorflow.core.schema_translation import STEP_NAME, STEP_TYPE, SchemaIdTranslation
from mirrorflow.core.schema_wire import frame
from mirrorflow.core.transforms import ChainSpec, TransformChain, TransformSpec
from mirrorflow.local.process import free_ports

SECRET = "s3cr3t-Pa55"


class Scripted(ThreadingHTTPServer):
    answer: tuple[int, bytes] = (200, b"{}")
    seen: list[tuple[str, str, str | None, bytes]]


class Handler(BaseHTTPRequestHandler):
    server: Scripted

    def _reply(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        status, payload = self.server.answer
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _reply

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def server() -> Iterator[Scripted]:
    httpd = Scripted(("127.0.0.1", 0), Handler)
    httpd.seen = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url(server: Scripted) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/apis/ccompat/v6"


def test_basic_and_bearer_credentials_go_in_the_authorization_header(server: Scripted) -> None:
    server.answer = (200, json.dumps({"schema": '"string"', "references": []}).encode())
    RegistryClient(url(server), user_info=f"mirror:{SECRET}").schema_by_id(3)
    RegistryClient(url(server), bearer_token=SECRET).schema_by_id(4)
    RegistryClient(url(server)).schema_by_id(5)
    (_, path, basic, _), (_, _, bearer, _), (_, _, none, _) = server.seen
    assert path == "/apis/ccompat/v6/schemas/ids/3"
    assert basic == "Basic bWlycm9yOnMzY3IzdC1QYTU1"  # base64("mirror:s3cr3t-Pa55")
    assert bearer == f"Bearer {SECRET}" and none is None
    assert SECRET not in repr(RegistryClient(url(server), user_info=f"u:{SECRET}", bearer_token=SECRET))


def test_register_posts_type_and_references_and_quotes_the_subject(server: Scripted) -> None:
    server.answer = (200, b'{"id": 41}')
    schema = Schema("syntax = 'proto3';", "PROTOBUF")
    assert RegistryClient(url(server)).register("a/b c", schema) == 41
    method, path, _, body = server.seen[0]
    assert (method, path) == ("POST", "/apis/ccompat/v6/subjects/a%2Fb%20c/versions")
    assert json.loads(body) == {"schema": "syntax = 'proto3';", "schemaType": "PROTOBUF"}


@pytest.mark.parametrize(
    ("status", "kind", "words"),
    [
        (404, SchemaNotFound, "no such schema"),
        (409, SchemaRefused, "refused the schema"),
        (422, SchemaRefused, "refused the schema"),
        (401, RegistryUnavailable, "refused our credentials"),
        (403, RegistryUnavailable, "refused our credentials"),
        (500, RegistryUnavailable, "retried"),
    ],
)
def test_http_errors_are_classed_and_never_show_the_credentials(
    server: Scripted, status: int, kind: type[Exception], words: str
) -> None:
    server.answer = (status, json.dumps({"error_code": status * 100 + 1, "message": "the registry says no"}).encode())
    with pytest.raises(kind) as err:
        RegistryClient(url(server), "source schema registry", user_info=f"u:{SECRET}").schema_by_id(9)
    message = str(err.value)
    assert words in message and "the registry says no" in message and "/schemas/ids/9" in message
    assert SECRET not in message and "dTpzM2Ny" not in message


def test_unreachable_and_non_json_registries_stop_the_copy(server: Scripted) -> None:
    (port,) = free_ports(1)
    with pytest.raises(RegistryUnavailable, match="cannot be reached"):
        RegistryClient(f"http://127.0.0.1:{port}", bearer_token=SECRET, timeout_s=2).schema_by_id(1)
    server.answer = (200, b"<html>proxy login</html>")
    with pytest.raises(RegistryUnavailable, match="not JSON"):
        RegistryClient(url(server)).schema_by_id(1)
    server.answer = (200, b'["not", "a", "schema"]')
    with pytest.raises(RegistryUnavailable, match="gives an object"):
        RegistryClient(url(server)).schema_by_id(1)


def step(**settings: str) -> TransformSpec:
    return TransformSpec(STEP_NAME, STEP_TYPE, {"source.url": "http://s", "target.url": "http://t", **settings})


@pytest.mark.parametrize(
    ("settings", "setting"),
    [
        ({"translate": "key, vale"}, "translate"),
        ({"translate": ""}, "translate"),
        ({"request.timeout.ms": "0"}, "request.timeout.ms"),
        ({"source.basic.auth.user.info": "u:p", "source.bearer.auth.token": "t"}, "source.bearer.auth.token"),
        ({"target.basic.auth.user.info": "no-colon"}, "target.basic.auth.user.info"),
    ],
)
def test_bad_settings_name_their_key(settings: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigProblem) as err:
        SchemaIdTranslation().configure(step(**settings).settings)
    assert err.value.setting == setting


def test_an_unreachable_registry_stops_the_copy_even_with_a_dead_letter_topic() -> None:
    """`errors.tolerance = all` sends a record's own failure to the dead-letter topic, never a registry outage."""
    (port,) = free_ports(1)
    spec = step(**{"source.url": f"http://127.0.0.1:{port}", "request.timeout.ms": "2000"})
    chain = TransformChain(ChainSpec(transforms=(spec,), errors_tolerance="all", dead_letter_topic="dlq"))
    record = Record("A.t", "t", 0, 5, 0, None, frame(3, b"x"), [])
    with pytest.raises(RegistryUnavailable, match="cannot be reached"):
        chain.apply(record)
    plain = Record("A.t", "t", 0, 6, 0, b"\x01key", b"not framed", [])
    assert chain.apply(plain) is plain, "records not in the wire format never reach the registry"


def test_only_the_parts_named_in_translate_are_looked_at() -> None:
    (port,) = free_ports(1)
    translation = SchemaIdTranslation()
    translation.configure(step(**{"source.url": f"http://127.0.0.1:{port}", "translate": "value"}).settings)
    long_key = (5).to_bytes(8, "big")  # a LongSerializer key starts with byte 0 too
    record = Record("A.t", "t", 0, 5, 0, long_key, None, [])
    assert translation.apply(record) is record and record.key == long_key

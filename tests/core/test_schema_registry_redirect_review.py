"""Review of issue 20: the registry client's credentials must not follow a redirect to another host.

urllib's redirect handler copies every header of the original request, Authorization included, into the
redirected one, whatever the new host or scheme. A registry URL that answers 302 to another host (a moved
service, a load balancer's mistake, a hostile proxy, an https -> http downgrade) would hand that host the
registry's basic-auth user:password or bearer token.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mirrorflow.core.registry_client import RegistryClient

SECRET = "u53r:s3cr3t-Pa55"


class Recorder(ThreadingHTTPServer):
    seen: list[str | None]
    location: str = ""


class Redirecting(BaseHTTPRequestHandler):
    server: Recorder

    def do_GET(self) -> None:
        self.server.seen.append(self.headers.get("Authorization"))
        if self.server.location:
            self.send_response(302)
            self.send_header("Location", self.server.location + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b'{"schema": "\\"string\\""}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def _serve() -> Recorder:
    httpd = Recorder(("127.0.0.1", 0), Redirecting)
    httpd.seen = []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture
def two_hosts() -> Iterator[tuple[Recorder, Recorder]]:
    registry, elsewhere = _serve(), _serve()
    # "localhost" and "127.0.0.1" are different hosts to an HTTP client, as another name would be.
    registry.location = f"http://localhost:{elsewhere.server_address[1]}"
    yield registry, elsewhere
    for server in (registry, elsewhere):
        server.shutdown()
        server.server_close()


def test_credentials_do_not_follow_a_redirect_to_another_host(two_hosts: tuple[Recorder, Recorder]) -> None:
    registry, elsewhere = two_hosts
    client = RegistryClient(f"http://127.0.0.1:{registry.server_address[1]}", user_info=SECRET)
    with contextlib.suppress(Exception):  # refusing the redirect is a fine answer too
        client.schema_by_id(1)
    assert registry.seen and registry.seen[0] is not None, "the registry itself gets the credentials"
    assert elsewhere.seen in ([], [None]), f"the other host received Authorization: {elsewhere.seen}"

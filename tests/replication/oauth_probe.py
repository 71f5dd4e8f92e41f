"""An `oauth_cb` for the test brokers' OAUTHBEARER listener: an unsecured JWS (alg none) for the client user,
which Kafka's default OAUTHBEARER validator accepts. Each call is appended to the file in `OAUTH_CALLS_ENV`, so a
test can tell which processes asked for a token."""

from __future__ import annotations

import base64
import json
import os
import time

OAUTH_CALLS_ENV = "MF_TEST_OAUTH_CALLS"
SUBJECT = "mirrorflow"


def _part(claims: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()


def unsecured_token(_oauthbearer_config: str) -> tuple[str, float]:
    now = time.time()
    calls = os.environ.get(OAUTH_CALLS_ENV)
    if calls:
        with open(calls, "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()}\n")
    token = f"{_part({'alg': 'none'})}.{_part({'sub': SUBJECT, 'iat': int(now), 'exp': int(now) + 3600})}."
    return token, now + 3600


ERROR_CALLS_ENV = "MF_TEST_ERROR_CALLS"


def error_probe(error: object) -> None:
    """An `error_cb` a connection may name: appends each error's text to the file in `ERROR_CALLS_ENV`."""
    calls = os.environ.get(ERROR_CALLS_ENV)
    if calls:
        with open(calls, "a", encoding="utf-8") as out:
            out.write(f"{error}\n")

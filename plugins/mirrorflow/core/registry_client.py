"""A small client of Confluent's schema registry REST API (standard library only: urllib and json).

Only what schema-ID translation needs: a schema by ID, the subject versions that use it, whether a subject
exists, one subject version, registering a schema under a subject, and finding the version a schema has under a
subject. Apicurio Registry's
`/apis/ccompat/v6` and Karapace serve the same API.

Credentials (`basic.auth.user.info` = `user:password`, or a bearer token) go in the Authorization header only:
no message, log line or exception built here ever holds them, and the URL must not carry them either.

Failures are split by whose they are. `SchemaNotFound` and `SchemaRefused` concern one schema (an ID the source
registry does not know, a schema the target refuses as incompatible): the record can go to the dead-letter topic.
`RegistryUnavailable` (cannot connect, 5xx, 401/403, an answer that is not the API's) concerns every record, so
it stops the copy (`FatalTransformError`) and the run is retried, instead of dead-lettering a whole outage.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mirrorflow.core.transforms import FatalTransformError

T = TypeVar("T")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# The API's "not found" error codes (40401 subject, 40402 version, 40403 schema, ...). A 404 without one comes
# from a server or proxy that does not know the path: a wrong base URL, not an unknown schema.
NOT_FOUND_CODES = (40400, 40500)
# 422 with this code: the registry or subject is READONLY, which refuses every registration, not one schema.
READ_ONLY_CODE = 42205


class SchemaNotFound(LookupError):
    """The registry does not know the schema ID, subject or version asked for (HTTP 404)."""


class SchemaRefused(ValueError):
    """The registry refused to register a schema (HTTP 409 incompatible, 422 invalid)."""


class RegistryUnavailable(FatalTransformError):
    """The registry cannot be used at all now: unreachable, failing, refusing our credentials."""


@dataclass(frozen=True)
class Reference:
    """A schema's reference to another subject version, by the name its text uses for it."""

    name: str
    subject: str
    version: int

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class Schema:
    """A schema's text, type (AVRO, PROTOBUF, JSON) and references: what registering it again needs."""

    text: str
    type: str = "AVRO"
    references: tuple[Reference, ...] = ()

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"schema": self.text}
        if self.type != "AVRO":
            body["schemaType"] = self.type
        if self.references:
            body["references"] = [r.as_json() for r in self.references]
        return body


@dataclass(frozen=True)
class RegistryClient:
    """One registry: `url` is the API's base (…/apis/ccompat/v6 for Apicurio), `role` names it in errors."""

    url: str
    role: str = "schema registry"
    user_info: str = field(default="", repr=False)
    bearer_token: str = field(default="", repr=False)
    timeout_s: float = 30.0

    def schema_by_id(self, schema_id: int) -> Schema:
        return self._parse(_schema, self._call("GET", f"/schemas/ids/{schema_id}"))

    def subject_versions_of(self, schema_id: int) -> list[tuple[str, int]]:
        """The (subject, version) pairs registered with this schema ID."""
        found = self._call("GET", f"/schemas/ids/{schema_id}/versions")
        return self._parse(lambda v: [(str(i["subject"]), int(i["version"])) for i in _list(v, self.role)], found)

    def has_subject(self, subject: str) -> bool:
        """Whether `subject` has a version (HTTP 404 with the API's not-found code: it has none)."""
        try:
            self._call("GET", f"/subjects/{_quote(subject)}/versions")
        except SchemaNotFound:
            return False
        return True

    def subject_version(self, subject: str, version: int) -> Schema:
        return self._parse(_schema, self._call("GET", f"/subjects/{_quote(subject)}/versions/{version}"))

    def register(self, subject: str, schema: Schema) -> int:
        """The ID of `schema` under `subject`, registered now unless the registry has it already."""
        answer = self._call("POST", f"/subjects/{_quote(subject)}/versions", schema.as_json())
        return self._parse(lambda v: int(_dict(v)["id"]), answer)

    def version_of(self, subject: str, schema: Schema) -> int:
        """The version `schema` has under `subject` (SchemaNotFound if it is not registered there)."""
        return self._parse(
            lambda v: int(_dict(v)["version"]), self._call("POST", f"/subjects/{_quote(subject)}", schema.as_json())
        )

    def _parse(self, parse: Callable[[object], T], answer: object) -> T:
        """`parse(answer)`; a field missing or of the wrong type means the answer is not the API's, which concerns
        every record (like an HTML page would), so it stops the copy instead of failing one record."""
        try:
            return parse(answer)
        except (KeyError, TypeError, ValueError) as err:
            raise RegistryUnavailable(
                f"the {self.role} answered with JSON that is not the schema registry API's "
                f"({type(err).__name__}: {str(err)[:100]}); check the URL"
            ) from None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> object:
        request = urllib.request.Request(self.url.rstrip("/") + path, method=method)
        request.add_header("Accept", CONTENT_TYPE)
        if self.user_info:
            token = base64.b64encode(self.user_info.encode("utf-8")).decode("ascii")
            request.add_header("Authorization", f"Basic {token}")
        elif self.bearer_token:
            request.add_header("Authorization", f"Bearer {self.bearer_token}")
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            request.add_header("Content-Type", CONTENT_TYPE)
        where = f"{method} {self.url.rstrip('/')}{path}"
        try:
            with _OPENER.open(request, data, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as err:
            raise self._http_error(err, where) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise RegistryUnavailable(
                f"the {self.role} cannot be reached ({where}: {reason}); check that it runs and that the URL is "
                "right. The copy stops here and is retried"
            ) from None
        except ValueError as err:
            raise RegistryUnavailable(
                f"the {self.role} answered {where} with something that is not JSON ({err})"
            ) from None

    def _http_error(self, err: urllib.error.HTTPError, where: str) -> Exception:
        detail, code = _error_body(err)
        if err.code == 404 and NOT_FOUND_CODES[0] <= code < NOT_FOUND_CODES[1]:
            return SchemaNotFound(f"the {self.role} has no such schema ({where}: {detail})")
        if err.code == 404:  # no API error code: the path itself is unknown, for every record alike
            return RegistryUnavailable(
                f"the {self.role} does not serve the schema registry API at this URL ({where}: HTTP 404 {detail}); "
                "check the URL's base path (Apicurio Registry: .../apis/ccompat/v6)"
            )
        if err.code == 422 and code == READ_ONLY_CODE:
            return RegistryUnavailable(
                f"the {self.role} is in read-only mode ({where}: HTTP 422 {detail}); set its mode (or the subject's) "
                "to READWRITE or IMPORT. The copy stops here and is retried"
            )
        if err.code in (409, 422):
            return SchemaRefused(f"the {self.role} refused the schema ({where}: HTTP {err.code} {detail})")
        if err.code in (401, 403):
            return RegistryUnavailable(
                f"the {self.role} refused our credentials ({where}: HTTP {err.code} {detail}); check its "
                "basic.auth.user.info or bearer.auth.token setting"
            )
        return RegistryUnavailable(
            f"the {self.role} failed ({where}: HTTP {err.code} {detail}); the copy stops here and is retried"
        )


class _SameOriginCredentials(urllib.request.HTTPRedirectHandler):
    """Follows a redirect, but sends the Authorization header on only where it stays on the registry's scheme, host
    and port: urllib alone copies it to any host a redirect names (an https -> http downgrade included)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        moved = super().redirect_request(req, fp, code, msg, headers, newurl)
        before, after = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(newurl)
        if moved is not None and (before.scheme, before.netloc) != (after.scheme, after.netloc):
            moved.remove_header("Authorization")
        return moved


_OPENER = urllib.request.build_opener(_SameOriginCredentials)


def _error_body(err: urllib.error.HTTPError) -> tuple[str, int]:
    """The registry's own `message` (its error bodies are JSON), else the HTTP reason, bounded in length; and its
    `error_code` (0 when absent)."""
    try:
        body = json.loads(err.read() or b"{}")
    except (ValueError, OSError):
        body = {}
    if not isinstance(body, dict):
        body = {}
    message, code = body.get("message"), body.get("error_code")
    return str(message or err.reason)[:300], code if isinstance(code, int) else 0


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _dict(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RegistryUnavailable(f"a schema registry answered {type(value).__name__} where the API gives an object")
    return value


def _list(value: object, role: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise RegistryUnavailable(f"the {role} answered a version list that is not the API's list of objects")
    return value


def _schema(value: object) -> Schema:
    body = _dict(value)
    refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in body.get("references") or ())
    return Schema(str(body["schema"]), str(body.get("schemaType") or "AVRO"), refs)

"""The security part of `mirrorflow convert strimzi`: a Strimzi cluster's `authentication` as the client keys MM2
(Java) and Mirrorflow (librdkafka, through config/librdkafka.py) both run, and the output being written.

Secrets are never read: a password becomes a reference (`${env:...}`, or `${directory:...}` with a secrets
directory) and a file a path under the directory where the Kubernetes Secret is mounted.
* `tls` (mutual TLS): the Secret's PEM certificate and key as a PKCS12 keystore, which both clients read, with its
  password a reference. A KafkaUser's Secret already holds one (`user.p12`, `user.password`); for another Secret
  a comment gives the `openssl` command that makes it.
* `scram-sha-256`/`-512`, `plain`: `sasl.mechanism` and a JAAS line whose password is a reference.
* `oauth`: Apache Kafka's own OAUTHBEARER login (client credentials grant: client ID and secret against the
  token endpoint), which librdkafka's `oidc` method mirrors. Strimzi's clients use Strimzi's OAuth library, which
  plain MM2 does not ship; its other grants (refresh token, password, a fixed access token, client assertion)
  have no equivalent there and are refused, naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mirrorflow.core.errors import UsageError

DEFAULT_SECRETS_DIR = "/etc/mirrorflow/secrets"
SASL_MODULES = {
    "scram-sha-256": ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    "scram-sha-512": ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    "plain": ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
}


OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# Apache Kafka 3.4 and later (4.x included); 3.1-3.3 named it ...oauthbearer.secured.OAuthBearerLoginCallbackHandler,
# which 4.0 removed.
OAUTH_LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
OAUTH_ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
OAUTH_TIMEOUTS = (
    ("connectTimeoutSeconds", "sasl.login.connect.timeout.ms"),
    ("readTimeoutSeconds", "sasl.login.read.timeout.ms"),
)
OAUTH_OTHER_GRANTS = (
    "accessToken",
    "accessTokenLocation",
    "refreshToken",
    "passwordSecret",
    "clientAssertion",
    "clientAssertionLocation",
)
OAUTH_HANDLED = {"type", "clientId", "clientSecret", "tokenEndpointUri", "scope", *(f for f, _ in OAUTH_TIMEOUTS)}


@dataclass
class Output:
    """The properties being written, in order, with comments; `where` names the resource for messages."""

    where: str
    secrets_dir: str | None
    lines: list[str] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)
    providers: set[str] = field(default_factory=set)

    def set(self, key: str, value: object, path: str) -> None:
        text = text_of(value)
        if key in self.keys and self.keys[key] != text:
            raise UsageError(
                f"{self.where}: {path} sets {key} = {text!r}, but an earlier part of the resource set it to "
                f"{self.keys[key]!r}; mm2.properties can hold one value: make them agree"
            )
        if key not in self.keys:
            self.keys[key] = text
            self.lines.append(f"{key} = {text}")

    def comment(self, text: str) -> None:
        self.lines.append(f"# {text}")

    def secret(self, secret: str, key: str) -> str:
        if self.secrets_dir is not None:
            self.providers.add("directory")
            return "${directory:" + f"{self.secrets_dir}/{secret}:{key}" + "}"
        self.providers.add("env")
        return "${env:" + env_name(secret, key) + "}"

    def secret_file(self, secret: str, name: str) -> str:
        return f"{self.secrets_dir or DEFAULT_SECRETS_DIR}/{secret}/{name}"


def env_name(secret: str, key: str) -> str:
    """The environment variable a `${env:}` reference to Secret `secret`, key `key` reads."""
    return "MIRRORFLOW_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", f"{secret}_{key}").upper()


def text_of(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def mapping(value: object, path: str, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(f"{where}: {path} must be a mapping, found {type(value).__name__}")
    return value


def required(node: Mapping[str, Any], key: str, path: str, where: str) -> str:
    value = node.get(key)
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: {path}.{key} is missing (a non-empty string is required)")
    return value.strip()


def authentication(out: Output, alias: str, auth: Mapping[str, Any], kind: str, path: str) -> None:
    if kind == "tls":
        _client_certificate(out, alias, auth, path)
        return
    if kind in SASL_MODULES:
        mechanism, module = SASL_MODULES[kind]
        user = required(auth, "username", path, out.where)
        password = mapping(auth.get("passwordSecret"), f"{path}.passwordSecret", out.where)
        secret = required(password, "secretName", f"{path}.passwordSecret", out.where)
        key = required(password, "password", f"{path}.passwordSecret", out.where)
        out.set(f"{alias}.sasl.mechanism", mechanism, path)
        reference = out.secret(secret, key)
        out.set(f"{alias}.sasl.jaas.config", f'{module} required username="{user}" password="{reference}";', path)
        return
    if kind == "oauth":
        oauth_client_credentials(out, alias, auth, path)
        return
    raise UsageError(f"{out.where}: {path}.type {kind!r} is not one of tls, scram-sha-256, scram-sha-512, plain, oauth")


def _client_certificate(out: Output, alias: str, auth: Mapping[str, Any], path: str) -> None:
    """Mutual TLS: MM2 reads the client certificate from a keystore (`ssl.keystore.*`), not from librdkafka's
    `ssl.certificate.location`; a PKCS12 keystore is the form both clients read."""
    pair = mapping(auth.get("certificateAndKey"), f"{path}.certificateAndKey", out.where)
    secret = required(pair, "secretName", f"{path}.certificateAndKey", out.where)
    certificate = required(pair, "certificate", f"{path}.certificateAndKey", out.where)
    key = required(pair, "key", f"{path}.certificateAndKey", out.where)
    stem = certificate.rsplit(".", 1)[0] if "." in certificate else certificate
    store, password = f"{stem}.p12", f"{stem}.password"
    out.comment(
        f"{path} (tls): Secret {secret} holds the client certificate {certificate} and key {key} (PEM); MM2 and "
        f"Mirrorflow read them as a PKCS12 keystore, {store}, with its password under the Secret's key {password}."
    )
    out.comment(
        "A KafkaUser's Secret has both already (user.p12, user.password). For another Secret, make them and add "
        f"them to it: openssl pkcs12 -export -in {certificate} -inkey {key} -out {store} -passout file:{password}"
    )
    out.set(f"{alias}.ssl.keystore.type", "PKCS12", path)
    out.set(f"{alias}.ssl.keystore.location", out.secret_file(secret, store), path)
    out.set(f"{alias}.ssl.keystore.password", out.secret(secret, password), path)


def oauth_client_credentials(out: Output, alias: str, auth: Mapping[str, Any], path: str) -> None:
    """`oauth` as Apache Kafka's own OAUTHBEARER login with the client credentials grant; a UsageError names a
    grant it has no equivalent for."""
    other = [f for f in OAUTH_OTHER_GRANTS if auth.get(f) is not None]
    if other or auth.get("clientSecret") is None:
        given = f"{path}.{other[0]}" if other else f"{path} without clientSecret"
        raise UsageError(
            f"{out.where}: {given}: only the client credentials grant (clientId, clientSecret, tokenEndpointUri) "
            "has an equivalent in Apache Kafka's own OAUTHBEARER login, which MM2 runs (Strimzi's clients use "
            "Strimzi's OAuth library). Use a client ID and secret, or remove the authentication and write the "
            f"{alias}.sasl.* keys by hand (docs/security.md), then convert again"
        )
    client_id = required(auth, "clientId", path, out.where)
    endpoint = required(auth, "tokenEndpointUri", path, out.where)
    secret_ref = mapping(auth.get("clientSecret"), f"{path}.clientSecret", out.where)
    secret = required(secret_ref, "secretName", f"{path}.clientSecret", out.where)
    key = required(secret_ref, "key", f"{path}.clientSecret", out.where)
    options = [f'clientId="{client_id}"', f'clientSecret="{out.secret(secret, key)}"']
    if auth.get("scope") is not None:
        options.append(f'scope="{text_of(auth["scope"])}"')
    options += _token_endpoint_trust(out, auth, f"{path}.tlsTrustedCertificates")
    out.comment(
        f"{path} (oauth): client credentials against the token endpoint. Kafka 4.x clients call only the URLs "
        f"listed in the JVM's -D{OAUTH_ALLOWED_URLS}: add {endpoint} to it (KAFKA_OPTS) where MM2 runs"
    )
    out.set(f"{alias}.sasl.mechanism", "OAUTHBEARER", path)
    out.set(f"{alias}.sasl.login.callback.handler.class", OAUTH_LOGIN_HANDLER, path)
    out.set(f"{alias}.sasl.oauthbearer.token.endpoint.url", endpoint, f"{path}.tokenEndpointUri")
    out.set(f"{alias}.sasl.jaas.config", f"{OAUTH_LOGIN_MODULE} required {' '.join(options)};", path)
    for field_name, key_name in OAUTH_TIMEOUTS:
        if auth.get(field_name) is not None:
            out.set(f"{alias}.{key_name}", int(auth[field_name]) * 1000, f"{path}.{field_name}")
    for extra in sorted(set(auth) - OAUTH_HANDLED - {"tlsTrustedCertificates"}):
        out.comment(f"not converted: {path}.{extra} (no Apache Kafka client equivalent)")


def _token_endpoint_trust(out: Output, auth: Mapping[str, Any], path: str) -> list[str]:
    """The token endpoint's CA as the JAAS line's SSL options (Kafka's login handler reads them there)."""
    certificates = auth.get("tlsTrustedCertificates") or []
    if not isinstance(certificates, list):
        raise UsageError(f"{out.where}: {path} must be a list")
    if not certificates:
        return []
    first = mapping(certificates[0], f"{path}[0]", out.where)
    secret = required(first, "secretName", f"{path}[0]", out.where)
    if len(certificates) > 1 or "pattern" in first:
        out.comment(f"{path} names several certificates: put them all in one PEM file at the path below")
    location = out.secret_file(secret, str(first.get("certificate") or "ca.crt"))
    return ['ssl.truststore.type="PEM"', f'ssl.truststore.location="{location}"']

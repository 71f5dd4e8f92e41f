"""The security keys `mirrorflow convert strimzi` writes, run by MirrorMaker 2's own code (Kafka 4.3's
MirrorMakerConfig and admin client, through tests/fixtures/java/MirrorClientsProbe.java), not only by
Mirrorflow's loader: a PKCS12 keystore built from a Secret's PEM certificate and key loads with the password the
file refers to, and the OAuth client-credentials keys get as far as calling the token endpoint."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.replication.helpers import compile_java_probe

from mirrorflow.config.strimzi import convert
from mirrorflow.local.runtime import kafka_runtime

pytestmark = pytest.mark.integration
ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "java" / "MirrorClientsProbe.java"


def _secret(secrets: Path, name: str, files: dict[str, str]) -> Path:
    directory = secrets / name
    directory.mkdir(parents=True, exist_ok=True)
    for key, text in files.items():
        (directory / key).write_text(text)
    return directory


def _client_certificate(directory: Path, stem: str, password: str) -> None:
    """What the converted file's comment says to do with a Secret's PEM pair: a PKCS12 keystore, and its password."""
    crt, key = directory / f"{stem}.crt", directory / f"{stem}.key"
    openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={stem}"]
    subprocess.run([*openssl, "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True, timeout=60)
    (directory / f"{stem}.password").write_text(password)
    export = [
        "openssl",
        "pkcs12",
        "-export",
        "-in",
        str(crt),
        "-inkey",
        str(key),
        "-out",
        str(directory / f"{stem}.p12"),
    ]
    subprocess.run([*export, "-passout", f"file:{directory / f'{stem}.password'}"], check=True, timeout=60)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run_probe(tmp_path: Path, properties: str, aliases: str, token_url: str) -> dict[str, str]:
    path = tmp_path / "mm2.properties"
    path.write_text(properties)
    classpath = compile_java_probe(PROBE, tmp_path / "classes")
    # C1 only: the probe is short-lived, and MM2's config scans the whole classpath for plugins at start.
    jvm = [str(kafka_runtime().java), "-XX:TieredStopAtLevel=1", f"-D{ALLOWED_URLS}={token_url}", "-cp", classpath]
    done = subprocess.run([*jvm, "MirrorClientsProbe", str(path), aliases], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(line.split("\t", 1) for line in done.stdout.splitlines())


def _tls(secret: str) -> dict[str, object]:
    return {"type": "tls", "certificateAndKey": {"secretName": secret, "certificate": "user.crt", "key": "user.key"}}


def test_mm2_builds_the_clients_of_converted_tls_and_oauth_authentication(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    _client_certificate(_secret(secrets, "mm2-user", {}), "user", "p12-Pa55")
    _client_certificate(_secret(secrets, "mm2-other", {}), "user", "p12-Pa55")
    (secrets / "mm2-other" / "user.password").write_text("not-the-password")  # the probe can fail: this one does
    _secret(secrets, "mm2-oauth", {"client-secret": "0auth-s3cret"})
    token_url = f"https://127.0.0.1:{_free_port()}/realms/kafka/protocol/openid-connect/token"
    oauth = {
        "type": "oauth",
        "clientId": "mm2",
        "clientSecret": {"secretName": "mm2-oauth", "key": "client-secret"},
        "tokenEndpointUri": token_url,
        "scope": "kafka",
    }
    spec = {
        "clusters": [
            {"alias": "mtls", "bootstrapServers": "a:9093", "tls": {}, "authentication": _tls("mm2-user")},
            {"alias": "oidc", "bootstrapServers": "b:9093", "tls": {}, "authentication": oauth},
            {"alias": "wrong", "bootstrapServers": "c:9093", "tls": {}, "authentication": _tls("mm2-other")},
        ],
        "mirrors": [{"sourceCluster": "mtls", "targetCluster": "oidc", "sourceConnector": {}}],
    }
    resource = yaml.safe_dump({"apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaMirrorMaker2", "spec": spec})
    properties = convert(resource, secrets_dir=str(secrets))
    # Test speed only: the login retries an unreachable token endpoint for up to 10 s by default.
    properties += "oidc.sasl.login.retry.backoff.ms = 50\noidc.sasl.login.retry.backoff.max.ms = 100\n"

    results = _run_probe(tmp_path, properties, "mtls,oidc,wrong", token_url)

    assert results["mtls"] == "ok", results["mtls"]
    # Every key was accepted; the login then called the token endpoint, where nothing listens.
    assert results["oidc"].startswith("failed") and "ConnectException: Connection refused" in results["oidc"], results
    assert "keystore password was incorrect" in results["wrong"], results["wrong"]

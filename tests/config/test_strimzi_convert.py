"""`mirrorflow convert strimzi`: five KafkaMirrorMaker2 resources (seed 003's two complete examples, and v1beta2
and v1 resources written from Strimzi's schema) become mm2.properties that Mirrorflow's own loader accepts, with
the same flows, patterns and connector settings as the resource; secrets stay references; bad resources are
refused naming the field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from mirrorflow.cli.app import _register, app
from mirrorflow.config.loader import load_config
from mirrorflow.config.strimzi import convert, env_name
from mirrorflow.core.errors import UsageError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "strimzi"
RESOURCES = sorted(FIXTURES.glob("*.yaml"))
PATTERNS = {"topicsPattern": "topics", "groupsPattern": "groups"}


def mirrors_of(resource: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{"S->T": mirror} as the resource states it, in either API shape."""
    spec = resource["spec"]
    out = {}
    for mirror in spec["mirrors"]:
        if "target" in spec:
            out[f"{mirror['source']['alias']}->{spec['target']['alias']}"] = mirror
        else:
            out[f"{mirror['sourceCluster']}->{mirror['targetCluster']}"] = mirror
    return out


def secrets_of(resource: dict[str, Any]) -> list[tuple[str, str]]:
    spec = resource["spec"]
    clusters = list(spec.get("clusters", []))
    clusters += [spec["target"]] if "target" in spec else []
    clusters += [m["source"] for m in spec["mirrors"] if "source" in m]
    found = []
    for cluster in clusters:
        password = cluster.get("authentication", {}).get("passwordSecret")
        if password:
            found.append((password["secretName"], password["password"]))
        pair = cluster.get("authentication", {}).get("certificateAndKey")
        if pair:  # the keystore's password, next to the certificate: <stem>.password
            found.append((pair["secretName"], pair["certificate"].rsplit(".", 1)[0] + ".password"))
    return found


def test_there_are_five_different_resources() -> None:
    apis = {yaml.safe_load(p.read_text())["apiVersion"] for p in RESOURCES}
    assert len(RESOURCES) == 5 and apis == {
        "kafka.strimzi.io/v1alpha1",
        "kafka.strimzi.io/v1beta2",
        "kafka.strimzi.io/v1",
    }


@pytest.mark.parametrize("path", RESOURCES, ids=[p.stem for p in RESOURCES])
def test_the_converted_file_validates_and_holds_the_resources_flows(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resource = yaml.safe_load(path.read_text())
    for secret, key in secrets_of(resource):
        monkeypatch.setenv(env_name(secret, key), "not-the-real-one")
    properties = tmp_path / "mm2.properties"
    properties.write_text(convert(path.read_text(), where=path.name))
    config = load_config(properties)
    expected = mirrors_of(resource)
    assert {f.name for f in config.flows} == set(expected)
    for flow in config.flows:
        mirror = expected[flow.name]
        for field_name, key in PATTERNS.items():
            wanted = str(mirror.get(field_name, ".*"))
            assert flow.settings.get(key, ".*") == wanted, (flow.name, key)
        connectors = [mirror.get(c) or {} for c in ("sourceConnector", "checkpointConnector", "heartbeatConnector")]
        for connector in connectors:
            for key, value in (connector.get("config") or {}).items():
                text = str(value).lower() if isinstance(value, bool) else str(value)
                assert flow.settings[key] == text, (flow.name, key)
        assert flow.emit_checkpoints_enabled == ("checkpointConnector" in mirror)
        assert flow.emit_heartbeats_enabled == ("heartbeatConnector" in mirror)
    assert not [f for f in config.heartbeat_flows if f.emit_heartbeats_enabled and not f.enabled], (
        "Strimzi runs no heartbeat-only pairs"
    )


@pytest.mark.parametrize("path", RESOURCES, ids=[p.stem for p in RESOURCES])
def test_secrets_are_references_never_values(path: Path) -> None:
    text = convert(path.read_text())
    for secret, key in secrets_of(yaml.safe_load(path.read_text())):
        assert f"${{env:{env_name(secret, key)}}}" in text
    for line in text.splitlines():
        if "jaas.config" in line:
            assert 'password="${env:' in line, line


def test_a_secrets_directory_gives_directory_references_that_resolve(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    (secrets / "mm2-user-dc1").mkdir(parents=True)
    (secrets / "mm2-user-dc1" / "password").write_text("s3cret")
    source = (FIXTURES / "v1beta2-scram.yaml").read_text()
    properties = tmp_path / "mm2.properties"
    properties.write_text(convert(source, secrets_dir=str(secrets)))
    text = properties.read_text()
    assert "config.providers = directory" in text and "s3cret" not in text
    assert f"{secrets}/dc1-cluster-ca-cert/ca.crt" in text
    flow = load_config(properties).flow("dc1->dc2")
    assert flow.source_consumer.librdkafka()["sasl.password"] == "s3cret"


def test_the_converted_file_keeps_what_it_could_not_convert_as_comments() -> None:
    text = convert((FIXTURES / "v1beta2-scram.yaml").read_text())
    assert "# not converted: spec.mirrors[0].sourceConnector.tasksMax" in text
    assert "spec.metricsConfig, spec.replicas, spec.resources" in text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: KafkaMirrorMaker2\napiVersion: kafka.strimzi.io/v1beta2\nspec: [", "not valid YAML"),
        ("kind: Kafka\napiVersion: kafka.strimzi.io/v1beta2\n", "expected one KafkaMirrorMaker2"),
        ("kind: KafkaMirrorMaker2\napiVersion: v1\nspec: {}\n", "not a Strimzi API"),
        ("kind: KafkaMirrorMaker2\napiVersion: kafka.strimzi.io/v1beta2\nspec: {clusters: []}\n", "spec.mirrors"),
        (
            "kind: KafkaMirrorMaker2\napiVersion: kafka.strimzi.io/v1beta2\nspec:\n  clusters:\n  - alias: a\n"
            "  - {alias: b, bootstrapServers: 'x:1'}\n  mirrors:\n  - {sourceCluster: a, targetCluster: b}\n",
            "spec.clusters[0].bootstrapServers is missing",
        ),
        (
            "kind: KafkaMirrorMaker2\napiVersion: kafka.strimzi.io/v1beta2\nspec:\n  clusters:\n"
            "  - {alias: a, bootstrapServers: 'x:1'}\n  mirrors:\n  - {sourceCluster: a, targetCluster: b}\n",
            "spec.mirrors[0].targetCluster 'b' is not an alias",
        ),
    ],
)
def test_bad_resources_are_refused_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        convert(text)


def test_the_seeds_published_indentation_slip_is_named() -> None:
    """Seed 003 prints the target truststore's `secretName` one level out: YAML makes it a key of `tls`, so the
    certificate entry has no Secret. The error says which entry."""
    text = (FIXTURES / "seed-tls.yaml").read_text()
    slipped = text.replace(
        "      - certificate: ca.crt\n        secretName: my-cluster-target-cluster-ca-cert",
        "      - certificate: ca.crt\n      secretName: my-cluster-target-cluster-ca-cert",
    )
    assert slipped != text
    with pytest.raises(UsageError, match=r"spec\.clusters\[1\]\.tls\.trustedCertificates\[0\]\.secretName"):
        convert(slipped)


def test_cli_writes_the_file_or_fails_with_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _register()
    runner = CliRunner()
    out = tmp_path / "mm2.properties"
    done = runner.invoke(app, ["convert", "strimzi", str(FIXTURES / "seed-minimal.yaml"), "--output", str(out)])
    assert done.exit_code == 0, done.output
    assert "my-cluster-source->my-cluster-target.enabled = true" in out.read_text()
    printed = runner.invoke(app, ["convert", "strimzi", str(FIXTURES / "seed-minimal.yaml")])
    assert printed.exit_code == 0 and printed.stdout == out.read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Kafka\n")
    from mirrorflow.cli.app import main

    with pytest.raises(SystemExit) as exited:
        main(["convert", "strimzi", str(bad)])
    assert exited.value.code == 2


def _properties(text: str) -> dict[str, str]:
    rows = (line.split(" = ", 1) for line in text.splitlines() if " = " in line and not line.startswith("#"))
    return dict(rows)


def _validate(text: str, tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """`mirrorflow validate` on the converted file (exit 0), and the loaded config."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "mm2.properties"
    path.write_text(text)
    _register()
    done = CliRunner().invoke(app, ["validate", str(path)])
    assert done.exit_code == 0, done.output
    return load_config(path)


def test_tls_client_authentication_becomes_a_pkcs12_keystore_that_mm2_and_librdkafka_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Strimzi's `authentication.type: tls` names a Secret's PEM certificate and key. MM2 (Java) reads a client
    certificate only from `ssl.keystore.*`: librdkafka's `ssl.certificate.location`/`ssl.key.location` do nothing
    there, so mutual TLS would fail under MM2."""
    text = convert((FIXTURES / "seed-tls.yaml").read_text())
    props = _properties(text)
    alias, secret = "my-cluster-source", "my-user-source"
    assert props[f"{alias}.ssl.keystore.type"] == "PKCS12"
    assert props[f"{alias}.ssl.keystore.location"] == f"/etc/mirrorflow/secrets/{secret}/source.p12"
    assert props[f"{alias}.ssl.keystore.password"] == "${env:" + env_name(secret, "source.password") + "}"
    assert not [k for k in props if k.endswith((".ssl.certificate.location", ".ssl.key.location"))]
    assert "openssl pkcs12 -export -in source.crt -inkey source.key -out source.p12" in text
    config = _validate(
        text,
        tmp_path,
        {env_name(secret, "source.password"): "p12-pw", env_name("my-user-target", "target.password"): "p12-pw2"},
        monkeypatch,
    )
    client = config.flow("my-cluster-source->my-cluster-target").source_consumer.librdkafka()
    assert client["security.protocol"] == "SSL"
    assert client["ssl.keystore.location"] == f"/etc/mirrorflow/secrets/{secret}/source.p12"
    assert client["ssl.keystore.password"] == "p12-pw"


OAUTH = {
    "type": "oauth",
    "clientId": "mm2-client",
    "clientSecret": {"secretName": "mm2-oauth", "key": "client-secret"},
    "tokenEndpointUri": "https://sso.example/realms/kafka/protocol/openid-connect/token",
    "scope": "kafka",
    "connectTimeoutSeconds": 20,
    "tlsTrustedCertificates": [{"secretName": "sso-ca", "certificate": "ca.crt"}],
}


def _oauth_resource(auth: dict[str, Any]) -> str:
    spec = {
        "clusters": [
            {"alias": "src", "bootstrapServers": "src:9093", "tls": {}, "authentication": auth},
            {"alias": "tgt", "bootstrapServers": "tgt:9092"},
        ],
        "mirrors": [{"sourceCluster": "src", "targetCluster": "tgt", "sourceConnector": {}}],
    }
    return yaml.safe_dump({"apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaMirrorMaker2", "spec": spec})


def test_oauth_becomes_kafkas_own_client_credentials_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Strimzi's `authentication.type: oauth` with a client ID and secret: under MM2 it needs the OAUTHBEARER
    login module, Kafka's login callback handler and the token endpoint (a mechanism alone cannot log in)."""
    text = convert(_oauth_resource(OAUTH))
    props = _properties(text)
    reference = "${env:" + env_name("mm2-oauth", "client-secret") + "}"
    assert props["src.security.protocol"] == "SASL_SSL"
    assert props["src.sasl.mechanism"] == "OAUTHBEARER"
    assert (
        props["src.sasl.login.callback.handler.class"]
        == "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
    )
    assert props["src.sasl.oauthbearer.token.endpoint.url"] == OAUTH["tokenEndpointUri"]
    assert props["src.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'clientId="mm2-client" clientSecret="{reference}" scope="kafka" '
        'ssl.truststore.type="PEM" ssl.truststore.location="/etc/mirrorflow/secrets/sso-ca/ca.crt";'
    )
    assert props["src.sasl.login.connect.timeout.ms"] == "20000"
    assert f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls: add {OAUTH['tokenEndpointUri']}" in text
    config = _validate(text, tmp_path, {env_name("mm2-oauth", "client-secret"): "0auth-s3cret"}, monkeypatch)
    client = config.flow("src->tgt").source_consumer.librdkafka()
    assert {k: client.get(k) for k in ("sasl.mechanism", "sasl.oauthbearer.method", "https.ca.location")} == {
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "https.ca.location": "/etc/mirrorflow/secrets/sso-ca/ca.crt",
    }
    assert (client["sasl.oauthbearer.client.id"], client["sasl.oauthbearer.client.secret"]) == (
        "mm2-client",
        "0auth-s3cret",
    )
    assert client["sasl.oauthbearer.token.endpoint.url"] == OAUTH["tokenEndpointUri"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"refreshToken": {"secretName": "t", "key": "refresh"}}, "authentication.refreshToken"),
        ({"accessToken": {"secretName": "t", "key": "token"}}, "authentication.accessToken"),
        ({"clientSecret": None}, "authentication without clientSecret"),
    ],
)
def test_oauth_grants_kafka_has_no_login_for_are_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    auth = {k: v for k, v in {**OAUTH, **change}.items() if v is not None}
    with pytest.raises(UsageError, match=re.escape(f"spec.clusters[0].{field}")) as err:
        convert(_oauth_resource(auth))
    assert "client credentials grant" in str(err.value)

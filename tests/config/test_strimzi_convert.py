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

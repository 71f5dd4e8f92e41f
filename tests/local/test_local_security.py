"""Secured local clusters without a JVM: the server.properties rewrite, the SCRAM users given to the storage tool,
the client settings (librdkafka and Java/MM2), generated certificates, and secrets kept out of reprs and files."""

from __future__ import annotations

import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from mirrorflow.config.librdkafka import to_librdkafka
from mirrorflow.config.loader import load_config
from mirrorflow.core.errors import UsageError
from mirrorflow.kafka.clients import admin_client
from mirrorflow.local import security
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import server_properties

RunCli = Callable[..., subprocess.CompletedProcess[str]]


def base() -> dict[str, str]:
    return server_properties(broker_port=9092, controller_port=9093, data_dir=Path("/d"))


def test_sasl_rewrites_only_the_broker_listener(tmp_path: Path) -> None:
    sec = security.create("sasl", tmp_path)
    props = security.server_properties(base(), sec)
    assert props["listeners"] == "SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "SASL_PLAINTEXT://127.0.0.1:9092"
    assert props["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
    assert props["inter.broker.listener.name"] == "SASL_PLAINTEXT"
    assert props["sasl.enabled.mechanisms"] == props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    jaas = props["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"]
    assert 'username="admin"' in jaas and sec.users["admin"] in jaas
    assert props["super.users"] == "User:ANONYMOUS;User:admin;User:mirrorflow"
    assert "ssl.keystore.location" not in props
    args = security.storage_format_args(sec)
    assert args[0::2] == ["--add-scram", "--add-scram"]
    assert args[1] == f"SCRAM-SHA-512=[name=admin,password={sec.users['admin']}]"


def test_tls_needs_client_certificates_and_sasl_ssl_does_not(tmp_path: Path) -> None:
    tls = security.create("tls", tmp_path / "tls")
    props = security.server_properties(base(), tls)
    assert props["listeners"].startswith("SSL://127.0.0.1:9092,")
    assert props["ssl.client.auth"] == "required"
    assert props["ssl.keystore.type"] == props["ssl.truststore.type"] == "PEM"
    assert props["super.users"] == "User:ANONYMOUS;User:CN=localhost;User:CN=mirrorflow-client"
    assert security.storage_format_args(tls) == []
    both = security.create("sasl_ssl", tmp_path / "both")
    props = security.server_properties(base(), both)
    assert props["ssl.client.auth"] == "none" and "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config" in props
    assert security.client_config(both)["ssl.ca.location"] == str(both.ca_file)
    assert "ssl.key.location" not in security.client_config(both)


def test_certificates_verify_and_keys_are_encrypted_for_java(tmp_path: Path) -> None:
    sec = security.create("tls", tmp_path)
    for keystore in (sec.server_keystore, sec.client_keystore):
        text = keystore.read_text()
        assert "BEGIN ENCRYPTED PRIVATE KEY" in text and "BEGIN PRIVATE KEY" not in text
        assert stat.S_IMODE(keystore.stat().st_mode) == 0o600
        leaf = text[text.index("-----BEGIN CERTIFICATE-----") :]
        verify = subprocess.run(
            ["openssl", "verify", "-CAfile", str(sec.ca_file)], input=leaf, capture_output=True, text=True, check=False
        )
        assert verify.returncode == 0, verify.stderr
    san = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName"],
        input=sec.server_keystore.read_text().split("-----END ENCRYPTED PRIVATE KEY-----")[1],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "IP Address:127.0.0.1" in san.stdout and "DNS:localhost" in san.stdout
    assert [p.name for p in tmp_path.rglob("*.key")] == ["ca.key"], "no clear leaf key is left on disk"


def test_java_client_keys_translate_to_the_librdkafka_settings_of_the_client(tmp_path: Path) -> None:
    for kind in ("sasl", "tls", "sasl_ssl"):
        sec = security.create(kind, tmp_path / kind)
        conf, notes = to_librdkafka(security.java_client_properties(sec, inline_secrets=True))
        assert notes == []
        assert conf == security.client_config(sec), kind


def test_mm2_properties_reference_the_secrets_file_instead_of_holding_secrets(tmp_path: Path) -> None:
    sec = security.create("tls", tmp_path)
    props = security.mm2_properties(sec, ["A", "B"])
    assert props["config.providers"] == "file"
    assert props["A.ssl.key.password"] == f"${{file:{sec.secrets_file}:ssl.key.password}}"
    text = "\n".join(f"{k}={v}" for k, v in props.items())
    assert all(secret not in text for secret in security.secret_values(sec))
    assert f"ssl.key.password={sec.key_password}" in sec.secrets_file.read_text()
    assert stat.S_IMODE(sec.secrets_file.stat().st_mode) == 0o600


def test_reprs_hide_the_secrets(tmp_path: Path) -> None:
    sec = security.create("sasl_ssl", tmp_path)
    assert len(security.secret_values(sec)) == 3
    assert all(secret not in repr(sec) and secret not in str(sec) for secret in security.secret_values(sec))


def test_security_is_kept_for_the_directory_and_cannot_change(tmp_path: Path) -> None:
    first = LocalClusters(tmp_path, security_kind="sasl")
    assert first.security is not None
    again = LocalClusters.open(tmp_path)
    assert again.security == first.security
    with pytest.raises(UsageError, match="use SASL_PLAINTEXT; security cannot change"):
        LocalClusters(tmp_path, security_kind="tls")
    with pytest.raises(UsageError, match="--security 'kerberos' is not known"):
        LocalClusters(tmp_path / "other", security_kind="kerberos")


def with_a_flow(directory: Path) -> Path:
    """The generated mm2.properties plus the flow the loader insists on (to a cluster never contacted)."""
    text = (directory / "mm2.properties").read_text().replace("clusters = S\n", "clusters = S, T\n")
    path = directory / "with-flow.properties"
    path.write_text(text + "T.bootstrap.servers = 127.0.0.1:1\nS->T.enabled = true\n")
    return path


@pytest.mark.integration
def test_local_up_with_sasl_ssl_serves_the_mm2_client_settings_across_a_restart(
    mirrorflow_cli: RunCli, tmp_path: Path
) -> None:
    """`local up --security sasl_ssl`: only the generated mm2.properties (secrets via `${file:...}`) is needed to
    connect; a restart of the stopped cluster keeps its listener, users and certificates."""
    directory = tmp_path / "local"
    up = mirrorflow_cli("local", "up", "--clusters", "S", "--dir", str(directory), "--security", "sasl_ssl")
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        assert "listeners: SASL_SSL" in up.stdout
        sec = security.load(directory)
        assert sec is not None and sec.protocol == "SASL_SSL"
        assert all(secret not in up.stdout + up.stderr for secret in security.secret_values(sec))
        assert all(secret not in (directory / "mm2.properties").read_text() for secret in security.secret_values(sec))
        for attempt in ("first start", "restart"):
            admin_conf = load_config(with_a_flow(directory), environ={}).clusters["S"].admin.librdkafka()
            assert admin_conf["security.protocol"] == "SASL_SSL", attempt
            assert admin_client(admin_conf).list_topics(timeout=30).brokers, attempt
            if attempt == "first start":
                assert mirrorflow_cli("local", "down", "--dir", str(directory)).returncode == 0
                again = mirrorflow_cli("local", "up", "--clusters", "S", "--dir", str(directory))
                assert again.returncode == 0, again.stderr[-3000:]
    finally:
        mirrorflow_cli("local", "down", "--purge", "--dir", str(directory))
    assert not (directory / "security").exists(), "--purge deletes the secrets too"

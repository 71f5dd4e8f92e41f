"""Java client settings translated for confluent-kafka, and which keys count as secrets."""

from __future__ import annotations

import pytest

from mirrorflow.config.client_config import ClientConfig
from mirrorflow.config.keys import is_secret_key, suggest
from mirrorflow.config.librdkafka import parse_jaas, to_librdkafka


def test_parse_jaas_with_escaped_quotes() -> None:
    parsed = parse_jaas(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="a\\"b;c";'
    )
    assert parsed == (
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        {"username": "alice", "password": 'a"b;c'},
    )
    assert parse_jaas("") is None


def test_oauth_and_kerberos() -> None:
    oidc, _ = to_librdkafka(
        {
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
            "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
            'required clientId="mm2" clientSecret="s" scope="kafka";',
        }
    )
    assert oidc == {
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "mm2",
        "sasl.oauthbearer.client.secret": "s",
        "sasl.oauthbearer.scope": "kafka",
    }
    kerberos, notes = to_librdkafka(
        {
            "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
            'keyTab="/etc/mm2.keytab" principal="mm2@EXAMPLE.COM";',
            "sasl.kerberos.kinit.cmd": "/usr/bin/kinit",
        }
    )
    assert kerberos == {
        "sasl.kerberos.keytab": "/etc/mm2.keytab",
        "sasl.kerberos.principal": "mm2@EXAMPLE.COM",
    }
    assert [key for key, _ in notes] == ["sasl.kerberos.kinit.cmd"]


@pytest.mark.parametrize(
    ("java", "expected"),
    [
        ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12", "ssl.keystore.password": "p"},
         {"ssl.keystore.location": "/k.p12", "ssl.keystore.password": "p"}),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/k.pem", "ssl.key.password": "p"},
         {"ssl.key.location": "/k.pem", "ssl.certificate.location": "/k.pem", "ssl.key.password": "p"}),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "KEY", "ssl.keystore.certificate.chain": "CHAIN"},
         {"ssl.key.pem": "KEY", "ssl.certificate.pem": "CHAIN"}),
        ({"ssl.truststore.type": "pem", "ssl.truststore.certificates": "CA"}, {"ssl.ca.pem": "CA"}),
        ({"ssl.endpoint.identification.algorithm": ""}, {"ssl.endpoint.identification.algorithm": "none"}),
        ({"fetch.max.wait.ms": "100", "receive.buffer.bytes": "1"},
         {"fetch.wait.max.ms": "100", "socket.receive.buffer.bytes": "1"}),
        ({"auto.offset.reset": "none"}, {"auto.offset.reset": "error"}),
        ({"partition.assignment.strategy": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"},
         {"partition.assignment.strategy": "cooperative-sticky"}),
        ({"isolation.level": "read_committed", "linger.ms": "5"},
         {"isolation.level": "read_committed", "linger.ms": "5"}),
    ],
)  # fmt: skip
def test_translations(java: dict[str, str], expected: dict[str, str]) -> None:
    conf, notes = to_librdkafka(java)
    assert conf == expected
    assert notes == []


def test_java_only_keys_are_dropped_with_notes() -> None:
    conf, notes = to_librdkafka(
        {
            "ssl.keystore.location": "/k.jks",
            "ssl.truststore.location": "/t.jks",
            "value.serializer": "x",
            "sasl.login.refresh.window.factor": "0.8",
            "ssl.protocol": "TLSv1.3",
            "bootstrap.servers": "h:1",
        }
    )
    assert conf == {"bootstrap.servers": "h:1"}
    assert sorted(key for key, _ in notes) == [
        "sasl.login.refresh.window.factor",
        "ssl.keystore.location",
        "ssl.protocol",
        "ssl.truststore.location",
        "value.serializer",
    ]


def test_client_config_keeps_secrets_apart() -> None:
    client = ClientConfig.from_mapping({"bootstrap.servers": "h:1", "ssl.key.password": "pw", "sasl.jaas.config": "j"})
    assert client.settings == {"bootstrap.servers": "h:1"}
    assert client.masked() == {
        "bootstrap.servers": "h:1",
        "sasl.jaas.config": "***",
        "ssl.key.password": "***",
    }
    assert client.get("ssl.key.password") is None
    assert "pw" not in repr(client) + client.model_dump_json()
    assert client.model_dump(mode="json", context={"reveal_secrets": True})["secrets"]["ssl.key.password"] == "pw"


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("sasl.jaas.config", True),
        ("source.cluster.sasl.jaas.config", True),
        ("ssl.truststore.password", True),
        ("ssl.keystore.key", True),
        ("ssl.key.pem", True),
        ("sasl.oauthbearer.client.secret", True),
        ("ssl.truststore.location", False),
        ("bootstrap.servers", False),
        ("ssl.keystore.certificate.chain", False),
    ],
)
def test_secret_keys(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_suggestions() -> None:
    names = ["sync.group.offsets.enabled", "sync.group.offsets.interval.seconds", "emit.heartbeats.enabled"]
    assert suggest("sync.group.offsets", names) == "sync.group.offsets.enabled"
    assert suggest("emit.heartbeats", names) == "emit.heartbeats.enabled"
    assert suggest("completely.different", names) is None

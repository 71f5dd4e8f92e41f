"""Secrets stay masked in every rendering of the loaded config (repr, str, JSON, settings, warnings) and in the
copy's task objects; only the explicit `reveal_secrets` and `librdkafka()` paths show them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.replication.copy_task import CopyTask

SASL = "mfsaslsecret7f3a9c21"
KEY = "mfkeysecret0b8e44d2"
OAUTH = "mfoauthsecret93ac1e"
TRUST = "mftrustsecret51d0aa"


def config_text(secret_file: Path) -> str:
    return f"""
clusters = a, b
a.bootstrap.servers = a:9092
b.bootstrap.servers = b:9092
a->b.enabled = true
a.security.protocol = SASL_SSL
a.sasl.mechanism = SCRAM-SHA-512
a.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="{SASL}";
b.security.protocol = SSL
b.ssl.keystore.type = PEM
b.ssl.keystore.location = /k.pem
b.ssl.key.password = ${{file:{secret_file}:key}}
b.ssl.truststore.type = PEM
b.ssl.truststore.location = /ca.pem
b.ssl.truststore.password = {TRUST}
a->b.b.producer.sasl.oauthbearer.client.secret = {OAUTH}
a.consumer.sasl.login.refresh.window.factor = 0.8
"""


def test_no_rendering_of_the_config_or_a_copy_task_shows_a_secret(
    load: Callable[..., MirrorConfig], tmp_path: Path
) -> None:
    secret_file = tmp_path / "secrets.properties"
    secret_file.write_text(f"key={KEY}\n")
    config = load(config_text(secret_file))
    flow = config.flow("a->b")
    assert flow.source_consumer.librdkafka()["sasl.password"] == SASL, "the clients do get the secrets"
    assert flow.target_producer.librdkafka()["ssl.key.password"] == KEY
    shipped = Flow.from_json(flow.to_json(reveal_secrets=True))
    assert shipped.target_producer.librdkafka()["ssl.key.password"] == KEY

    task = CopyTask(
        *("a->b", "a", "b", "t", 0, "a.t", 10, None, True, False, "tx", "p", "m", None, False, 100, False, 30.0),
        source_consumer=flow.source_consumer.librdkafka(),
        target_producer=flow.target_producer.librdkafka(),
    )
    renderings = {
        "repr(config)": repr(config),
        "str(config)": str(config),
        "config json": config.model_dump_json(),
        "repr(flow)": repr(flow),
        "flow json": flow.to_json(),
        "flow dump": json.dumps(flow.model_dump(mode="json")),
        "effective settings": json.dumps(flow.effective_settings()),
        "masked clients": json.dumps([flow.source_consumer.masked(), flow.target_producer.masked()]),
        "notes": json.dumps(flow.source_consumer.librdkafka_notes() + flow.target_producer.librdkafka_notes()),
        "warnings": "\n".join(str(w) for w in config.warnings),
        "repr(shipped)": repr(shipped),
        "repr(task)": repr(task),
        "str(task)": str(task),
    }
    for secret in (SASL, KEY, OAUTH, TRUST):
        leaks = [name for name, text in renderings.items() if secret in text]
        assert not leaks, f"{secret} appears in {leaks}"
    assert "***" in renderings["masked clients"]

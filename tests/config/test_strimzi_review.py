"""Review of `mirrorflow convert strimzi` (issue 20) against the KafkaMirrorMaker2 resource's semantics.

* `tls` present turns TLS on in Strimzi whatever it holds (the operator checks that the field is set); `tls: {}`
  is how a resource asks for TLS with the JVM's public CAs. Read as "no TLS", it becomes PLAINTEXT (or
  SASL_PLAINTEXT) against a TLS listener.
* A connector whose `state` is `stopped` or `paused` (or the older `pause: true`) copies nothing under Strimzi. A
  mirror that lists no sourceConnector copies nothing either. Converted into an enabled flow that copies every
  matching topic, the file does more than the resource did; it must refuse, or keep the flow from copying.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mirrorflow.config.loader import load_config
from mirrorflow.config.strimzi import convert
from mirrorflow.core.errors import UsageError


def resource(source: dict[str, Any], mirror: dict[str, Any]) -> str:
    spec = {
        "connectCluster": "tgt",
        "clusters": [
            {"alias": "src", "bootstrapServers": "src:9093", **source},
            {"alias": "tgt", "bootstrapServers": "tgt:9092"},
        ],
        "mirrors": [{"sourceCluster": "src", "targetCluster": "tgt", "topicsPattern": "orders.*", **mirror}],
    }
    return yaml.safe_dump(
        {"apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaMirrorMaker2", "metadata": {"name": "m"}, "spec": spec}
    )


def properties(text: str) -> dict[str, str]:
    rows = (line.split(" = ", 1) for line in text.splitlines() if " = " in line and not line.startswith("#"))
    return {k: v for k, v in rows}


@pytest.mark.parametrize(
    ("source", "protocol"),
    [
        ({"tls": {}}, "SSL"),
        (
            {
                "tls": {},
                "authentication": {
                    "type": "scram-sha-512",
                    "username": "u",
                    "passwordSecret": {"secretName": "s", "password": "password"},
                },
            },
            "SASL_SSL",
        ),
    ],
    ids=["tls-only", "scram"],
)
def test_tls_given_as_an_empty_object_turns_tls_on(source: dict[str, Any], protocol: str) -> None:
    out = properties(convert(resource(source, {"sourceConnector": {}})))
    assert out.get("src.security.protocol") == protocol, out.get("src.security.protocol", "PLAINTEXT (unset)")


@pytest.mark.parametrize(
    "mirror",
    [
        {"sourceConnector": {"state": "stopped"}},
        {"sourceConnector": {"state": "paused"}},
        {"sourceConnector": {"pause": True}},
        {"heartbeatConnector": {}},
        {"checkpointConnector": {}},
    ],
    ids=["stopped", "paused", "pause-true", "heartbeat-only", "checkpoint-only"],
)
def test_a_mirror_whose_source_connector_copies_nothing_does_not_become_a_copying_flow(
    mirror: dict[str, Any], tmp_path: Path
) -> None:
    try:
        text = convert(resource({}, mirror))
    except UsageError as err:
        assert "spec.mirrors[0]" in str(err)  # refused, naming the field: acceptable
        return
    path = tmp_path / "mm2.properties"
    path.write_text(text)
    flows = {f.name: f for f in load_config(path, require_flows=False).flows}
    copying = "src->tgt" in flows and flows["src->tgt"].settings.get("topics", ".*") not in ("", None)
    assert not copying, (
        f"the resource copies no records for {mirror}, but the converted file enables src->tgt copying "
        f"topics {flows['src->tgt'].settings.get('topics')!r}"
    )

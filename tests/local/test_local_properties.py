"""The generated server.properties and mm2.properties, checked without starting a JVM."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from jproperties import Properties

from mirrorflow.core.errors import UsageError
from mirrorflow.local import properties
from mirrorflow.local.broker import new_cluster_id, validate_alias
from mirrorflow.local.runtime import parse_java_major


def parse(text: str) -> dict[str, str]:
    props = Properties()
    props.load(text, "utf-8")
    return {key: value.data for key, value in props.items()}


def test_mm2_properties_list_every_cluster_with_replication_factor_one_and_no_flow() -> None:
    bootstraps = {"primary": "127.0.0.1:41001", "backup": "127.0.0.1:41003", "dr-2": "127.0.0.1:41005"}

    parsed = parse(properties.render(properties.mm2_properties(bootstraps), properties.MM2_HEADER))

    assert [alias.strip() for alias in parsed.pop("clusters").split(",")] == ["primary", "backup", "dr-2"]
    for alias, servers in bootstraps.items():
        assert parsed.pop(f"{alias}.bootstrap.servers") == servers
    assert parsed == {
        "replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "config.storage.replication.factor": "1",
    }


def test_server_properties_describe_one_kraft_node_on_loopback_with_acls(tmp_path: Path) -> None:
    props = properties.server_properties(
        broker_port=41001, controller_port=41002, data_dir=tmp_path / "data", extra={"num.partitions": "3"}
    )

    parsed = parse(properties.render(props, "header\nsecond line"))

    assert parsed["process.roles"] == "broker,controller"
    assert parsed["controller.quorum.voters"] == "1@127.0.0.1:41002"
    assert parsed["listeners"] == "PLAINTEXT://127.0.0.1:41001,CONTROLLER://127.0.0.1:41002"
    assert parsed["advertised.listeners"] == "PLAINTEXT://127.0.0.1:41001"
    assert parsed["log.dirs"] == str(tmp_path / "data")
    assert parsed["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert parsed["super.users"] == "User:ANONYMOUS"
    assert parsed["offsets.topic.replication.factor"] == parsed["transaction.state.log.replication.factor"] == "1"
    assert parsed["num.partitions"] == "3"  # extra settings win over the defaults


def test_rendered_values_survive_java_properties_escaping() -> None:
    tricky = {"a key:with=separators": r"C:\dir\file", "regex": r"^(?!.*\.internal).*"}

    assert parse(properties.render(tricky)) == tricky


def test_write_atomically_replaces_the_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "clusters.json"
    properties.write_atomically(target, "first and longer\n")
    properties.write_atomically(target, "second\n")

    assert target.read_text() == "second\n"
    assert [p.name for p in target.parent.iterdir()] == ["clusters.json"]


@pytest.mark.parametrize("alias", ["primary", "A", "dr-2", "us_east_1"])
def test_valid_aliases(alias: str) -> None:
    assert validate_alias(alias) == alias


@pytest.mark.parametrize("alias", ["", "a.b", "../x", "a b", "-lead", "a->b", "x" * 65])
def test_aliases_that_cannot_be_directory_names_or_key_prefixes_are_refused(alias: str) -> None:
    with pytest.raises(UsageError, match="invalid cluster alias"):
        validate_alias(alias)


def test_cluster_ids_look_like_kafkas() -> None:
    ids = {new_cluster_id() for _ in range(200)}

    assert len(ids) == 200
    for cluster_id in ids:
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "11.0.2" 2019-01-15', 11),
        ("something else entirely", None),
    ],
)
def test_java_major_version_is_parsed_from_both_numbering_schemes(output: str, major: int | None) -> None:
    assert parse_java_major(output) == major

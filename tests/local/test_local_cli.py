"""`mirrorflow local up|status|down` through the installed console script, against real brokers."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from jproperties import Properties

from mirrorflow.kafka.clients import admin_client
from mirrorflow.local import process
from mirrorflow.local.properties import MM2_REPLICATION_FACTOR_KEYS

pytestmark = pytest.mark.integration

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # the `mirrorflow_cli` fixture


def status_of(mirrorflow_cli: RunCli, directory: Path) -> dict[str, dict[str, object]]:
    done = mirrorflow_cli("local", "status", "--dir", str(directory), "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, dict[str, object]] = json.loads(done.stdout)
    return result


def read_mm2_properties(path: Path) -> dict[str, str]:
    props = Properties()
    props.load(path.read_bytes(), "utf-8")
    return {key: value.data for key, value in props.items()}


def create_topic(bootstrap: str, name: str) -> None:
    # Clients live only inside these helpers, so none is left reconnecting to a stopped broker.
    admin = admin_client({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def topic_names(bootstrap: str) -> set[str]:
    return set(admin_client({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def test_up_writes_the_contract_files_status_reports_and_down_stops(mirrorflow_cli: RunCli, tmp_path: Path) -> None:
    directory = tmp_path / "local"
    up = mirrorflow_cli("local", "up", "--clusters", "east,west", "--dir", str(directory))
    assert up.returncode == 0, up.stderr
    try:
        clusters = json.loads((directory / "clusters.json").read_text())
        assert list(clusters) == ["east", "west"]
        assert all(list(entry) == ["bootstrap.servers"] for entry in clusters.values())
        bootstraps = {alias: entry["bootstrap.servers"] for alias, entry in clusters.items()}
        assert all(servers.startswith("127.0.0.1:") for servers in bootstraps.values())
        assert len(set(bootstraps.values())) == 2

        mm2 = read_mm2_properties(directory / "mm2.properties")
        assert [alias.strip() for alias in mm2["clusters"].split(",")] == ["east", "west"]
        assert {alias: mm2[f"{alias}.bootstrap.servers"] for alias in bootstraps} == bootstraps
        assert all(mm2[key] == "1" for key in MM2_REPLICATION_FACTOR_KEYS)
        assert not [key for key in mm2 if "->" in key], "no flow may be enabled"

        status = status_of(mirrorflow_cli, directory)
        assert {alias: (s["status"], s["bootstrap.servers"]) for alias, s in status.items()} == {
            alias: ("up", servers) for alias, servers in bootstraps.items()
        }
        pids = {alias: s["pid"] for alias, s in status.items()}

        again = mirrorflow_cli("local", "up", "--clusters", "east,west", "--dir", str(directory))
        assert again.returncode == 0, again.stderr
        assert {alias: s["pid"] for alias, s in status_of(mirrorflow_cli, directory).items()} == pids

        create_topic(bootstraps["east"], "survives-restart")
    finally:
        down = mirrorflow_cli("local", "down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert {s["status"] for s in status_of(mirrorflow_cli, directory).values()} == {"down"}
    for alias, pid in pids.items():
        assert not process.is_alive(int(str(pid)), str(directory / alias)), f"{alias} still runs"

    # A stopped cluster keeps its ports: if one is taken meanwhile, `up` says so instead of moving.
    east_port = int(bootstraps["east"].rsplit(":", 1)[1])
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # clients' connections linger
        squatter.bind(("127.0.0.1", east_port))
        squatter.listen()
        blocked = mirrorflow_cli("local", "up", "--clusters", "east,west", "--dir", str(directory))
    assert blocked.returncode == 1
    assert f"port {east_port} (broker listener of local cluster 'east') is already in use" in blocked.stderr
    assert "Traceback" not in blocked.stderr
    assert {s["status"] for s in status_of(mirrorflow_cli, directory).values()} == {"down"}

    restarted = mirrorflow_cli("local", "up", "--clusters", "east,west", "--dir", str(directory))
    try:
        assert restarted.returncode == 0, restarted.stderr
        assert json.loads((directory / "clusters.json").read_text()) == clusters
        assert "survives-restart" in topic_names(bootstraps["east"])
    finally:
        purged = mirrorflow_cli("local", "down", "--purge", "--dir", str(directory))
    assert purged.returncode == 0, purged.stderr
    assert sorted(p.name for p in directory.iterdir()) == []


def test_a_taken_base_port_is_named_in_the_error(mirrorflow_cli: RunCli, tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        done = mirrorflow_cli("local", "up", "--clusters", "solo", "--base-port", str(taken), "--dir", str(tmp_path))

    assert done.returncode == 1
    assert f"port {taken} (broker listener of local cluster 'solo') is already in use" in done.stderr
    assert "--base-port" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "clusters.json").exists()

"""A broker that cannot start: its log explains why, and nothing of that call is left running."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from mirrorflow.local import process
from mirrorflow.local.broker import BrokerStartError
from mirrorflow.local.cluster import LocalClusters

pytestmark = pytest.mark.integration


def test_a_port_taken_after_the_check_fails_fixed_ports_with_kafkas_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone binds the controller port between our check and the JVM's bind (simulated: no check)."""
    monkeypatch.setattr(process, "port_in_use", lambda port: False)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        controller_port = squatter.getsockname()[1]

        with pytest.raises(BrokerStartError) as failure:
            LocalClusters.up(["fixed"], tmp_path, base_port=controller_port - 1, tie_to_parent=True)

    message = str(failure.value)
    assert failure.value.port_conflict
    assert "local Kafka cluster 'fixed'" in message and "exited during start-up" in message
    assert f"127.0.0.1:{controller_port}: Address already in use" in message
    assert LocalClusters.open(tmp_path).aliases == []
    assert not (tmp_path / "clusters.json").exists()


def test_new_clusters_move_to_other_ports_when_theirs_were_taken_and_restart_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_free_ports = process.free_ports
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        handed_out: list[list[int]] = []

        def first_pick_is_taken(count: int) -> list[int]:
            ports = [taken, *real_free_ports(count - 1)] if not handed_out else real_free_ports(count)
            handed_out.append(ports)
            return ports

        monkeypatch.setattr(process, "free_ports", first_pick_is_taken)
        clusters = LocalClusters.up(["moved"], tmp_path, tie_to_parent=True)
    try:
        assert len(handed_out) == 2
        assert clusters.bootstrap("moved") == f"127.0.0.1:{handed_out[1][0]}"
        first_pid = clusters.pid("moved")

        clusters.restart("moved")

        assert clusters.pid("moved") != first_pid
        assert clusters.status()["moved"]["status"] == "up"
        assert clusters.bootstrap("moved") == f"127.0.0.1:{handed_out[1][0]}"
    finally:
        clusters.down()
    assert not clusters.is_up("moved")

"""Active/active A<->B on real brokers (MM2's testReplication topology, testNoCycles): with both flows running
their control plane repeatedly, each side gets the other's topics once and nothing is ever sent back."""

from __future__ import annotations

from typing import Any

import pytest

from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import run_control_plane
from mirrorflow.replication.mirror_client import MirrorClient

pytestmark = pytest.mark.integration


def test_active_active_never_creates_topics_that_went_round_the_loop(
    write_config: Any, topics: Any, unique_topic: Any
) -> None:
    tag = unique_topic("aa")
    # Both filters accept every name carrying the tag, remote ones too: only the cycle rule can stop them.
    config = write_config(
        f"A->B.enabled = true\nB->A.enabled = true\nA->B.topics = .*{tag}.*\nB->A.topics = .*{tag}.*\n"
    )
    topics.create("A", f"{tag}-a", 2)
    topics.create("B", f"{tag}-b", 3)
    flows = [config.flow("A->B"), config.flow("B->A")]
    clients = {f.name: FlowClients(f) for f in flows}
    try:
        for _ in range(3):
            for flow in flows:
                run_control_plane(flow, clients[flow.name])
    finally:
        for c in clients.values():
            c.close()

    on_a = {t for t in topics.names("A") if tag in t}
    on_b = {t for t in topics.names("B") if tag in t}
    assert on_a == {f"{tag}-a", f"B.{tag}-b"}
    assert on_b == {f"{tag}-b", f"A.{tag}-a"}
    assert topics.partitions("A", f"B.{tag}-b") == 3
    assert topics.partitions("B", f"A.{tag}-a") == 2
    for name in ("A.B.heartbeats", "B.A.heartbeats", "A.heartbeats"):
        assert name not in topics.names("A")
    for name in ("A.B.heartbeats", "B.A.heartbeats", "B.heartbeats"):
        assert name not in topics.names("B")
    assert "B.heartbeats" in topics.names("A") and "A.heartbeats" in topics.names("B")

    with MirrorClient.for_cluster(config.clusters["A"]) as a:
        assert f"B.{tag}-b" in a.remote_topics("B")
        assert a.replication_hops("B") == 1

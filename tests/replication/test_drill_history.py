"""The kept drill reports of a pair stay within `mirrorflow.drill.history` after it is lowered: the slots beyond it
are deleted (tombstoned) when the next report is written, and the newest reports are the ones kept; on the
session's real clusters."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mirrorflow.config.model import MirrorConfig
from mirrorflow.replication.failover.drill import history, keep
from mirrorflow.replication.flow_clients import FlowClients

pytestmark = pytest.mark.integration


def _drills(write_config: Callable[..., MirrorConfig], kept: int, reports: int) -> list[int]:
    """Keep `reports` drill reports of A->B under `mirrorflow.drill.history = kept`; the kept seqs, oldest first."""
    config = write_config(f"A->B.enabled = true\nA->B.topics = drill-none\nA->B.mirrorflow.drill.history = {kept}\n")
    flow = config.flow("A->B")
    with FlowClients(flow) as clients:
        for i in range(reports):
            keep(flow, clients, {"flow": flow.name, "at_ms": i, "passed": True, "checks": []})
    return [int(r["seq"]) for r in history(config.path, "A->B")]


def test_lowering_the_history_deletes_the_slots_beyond_it(write_config: Callable[..., MirrorConfig]) -> None:
    # Other tests of the session may have kept drills of the shared pair A->B, under other histories.
    five = _drills(write_config, 5, 5)
    assert len(five) == 5 and five == list(range(five[-1] - 4, five[-1] + 1)), five

    two = _drills(write_config, 2, 1)

    assert two == [five[-1], five[-1] + 1], f"slots beyond the history of 2 were kept: {two}"
    three = _drills(write_config, 3, 1)  # raised again: the two kept move to their slots under 3, none is lost
    assert three == [*two, two[-1] + 1], three

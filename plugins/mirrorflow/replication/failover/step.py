"""What every runbook step is: a name and a function from the `Context` to an `Outcome`, plus the helpers steps share.

Its own module, below the step modules and the runbook driver: the steps import these types, the driver imports
the steps, and nothing here imports either, so the failover package has no import cycle (an import-linter
contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.replication.discovery import FlowPlan, discover
from mirrorflow.replication.failover.options import FailoverOptions
from mirrorflow.replication.failover.state import DONE, SKIPPED, RunbookStore, RunState
from mirrorflow.replication.flow_clients import FlowClients

STEP_NAMES = (
    "preflight",
    "fence",
    "verify_fence",
    "drain",
    "pause_flow",
    "final_checkpoint",
    "commit_offsets",
    "redirect",
    "arm_reverse",
)
"""The steps in order (`steps.STEPS`, checked by a test): named here for the DAG and the report, which must not
import the steps and their Kafka calls."""


@dataclass
class Outcome:
    status: str
    result: dict[str, Any] = field(default_factory=dict)


def done(**result: Any) -> Outcome:
    return Outcome(DONE, result)


def skipped(reason: str, **result: Any) -> Outcome:
    return Outcome(SKIPPED, {"reason": reason, **result})


class Refused(MirrorflowError):
    """A step that will not go on (preflight gate, active groups, fence not holding); exit code 1."""


@dataclass
class Context:
    """What every step gets: the options, the loaded config, the flow clients move along, and the state."""

    options: FailoverOptions
    config: MirrorConfig
    flow: Flow
    state: RunState
    clients: FlowClients
    store: RunbookStore

    @property
    def state_dir(self) -> Path | None:
        """Local directory for report files and snippets: only with the `--state-dir` override."""
        return self.store.artifacts

    @property
    def dry_run(self) -> bool:
        return self.options.dry_run

    @property
    def timeout_s(self) -> float:
        return self.flow.admin_timeout_ms / 1000

    @property
    def source_reachable(self) -> bool:
        """What preflight found (unplanned runs go on without the old primary)."""
        return bool(self.state.result("preflight").get("source_reachable", True))

    def plan(self) -> FlowPlan:
        return discover(self.flow, self.clients)


TP = tuple[str, int]


def tp_key(topic: str, partition: int) -> str:
    """Offsets are keyed "topic-partition" strings in results: the state and the report are JSON."""
    return f"{topic}-{partition}"


def plan_partitions(plan: FlowPlan) -> list[TP]:
    return [(t.topic, p) for t in plan.topics for p in range(t.partitions)]


Step = tuple[str, Callable[[Context], Outcome]]

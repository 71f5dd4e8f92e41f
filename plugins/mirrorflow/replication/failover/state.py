"""The persisted state of a failover run: one JSON file per (direction, primary, DR), rewritten atomically after
every step, so a run that was killed or failed resumes after its last completed step.

The state holds what later steps and the report need (fenced end offsets, the ACLs created, translated offsets)
and never a secret. A dry run reads it but never writes it.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mirrorflow.core.errors import MirrorflowError, UsageError

STATE_FILE = "state.json"
PAUSE_MARKER = "paused-flow.json"
DEFAULT_ROOT = Path("var/failover")

PENDING = "pending"
DONE = "done"
FAILED = "failed"
SKIPPED = "skipped"
PLANNED = "planned"
"""A dry run's status for a step: what it would do is in its result."""


def default_state_dir(direction: str, primary: str, dr: str, root: Path = DEFAULT_ROOT) -> Path:
    return root / f"{direction}-{primary}-{dr}"


@dataclass
class StepState:
    name: str
    status: str = PENDING
    started_ms: int | None = None
    duration_ms: int = 0
    attempts: int = 0
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class RunState:
    """`key` names what was asked (direction, aliases, mode, groups, fence, redirect): a run resumes only the
    same failover, never a different one that happens to use the same directory."""

    key: dict[str, Any]
    steps: dict[str, StepState]
    created_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)

    def step(self, name: str) -> StepState:
        return self.steps[name]

    def result(self, name: str) -> dict[str, Any]:
        return self.steps[name].result if name in self.steps else {}

    def completed(self) -> bool:
        return all(s.status in (DONE, SKIPPED) for s in self.steps.values())

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "created_ms": self.created_ms, "steps": [asdict(s) for s in self.steps.values()]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunState:
        steps = {s["name"]: StepState(**s) for s in data["steps"]}
        return cls(key=data["key"], steps=steps, created_ms=int(data.get("created_ms", 0)))


class StateStore:
    """The state file under `directory`, with an exclusive lock so two runs never drive the same failover."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / STATE_FILE

    def load(self) -> RunState | None:
        if not self.path.exists():
            return None
        try:
            return RunState.from_json(json.loads(self.path.read_text()))
        except (ValueError, KeyError, TypeError) as err:
            raise UsageError(
                f"{self.path}: unreadable failover state ({err}); move it away or pass --restart to start over"
            ) from err

    def open(self, key: dict[str, Any], step_names: list[str], *, restart: bool) -> RunState:
        """The state to run with: the stored one when it is the same failover, else a fresh one."""
        stored = None if restart else self.load()
        if stored is not None:
            if stored.key != key:
                raise UsageError(
                    f"{self.path} holds a different failover ({_describe(stored.key)}), not {_describe(key)}: "
                    "finish that one, pass another --state-dir, or --restart to discard it"
                )
            for name in step_names:
                stored.steps.setdefault(name, StepState(name))
            return stored
        return RunState(key=key, steps={name: StepState(name) for name in step_names})

    def save(self, state: RunState) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)

    @contextmanager
    def locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / ".lock", "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise MirrorflowError(
                    f"another failover run holds {self.directory / '.lock'}; wait for it to finish"
                ) from None
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _describe(key: dict[str, Any]) -> str:
    return (
        f"{key.get('direction')} {key.get('primary')}->{key.get('dr')} ({key.get('mode')}, groups {key.get('groups')})"
    )


def write_pause_marker(directory: Path, flow: str, reason: str) -> Path:
    """Record that `flow` must not copy any more: the DAG factory and `mirrorflow run` can honour it through
    `paused_flows`; the operator also disables the flow in the config (the report says so)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / PAUSE_MARKER
    path.write_text(json.dumps({"flow": flow, "reason": reason, "since_ms": time.time_ns() // 1_000_000}) + "\n")
    return path


def paused_flows(root: Path = DEFAULT_ROOT) -> dict[str, Path]:
    """Flows paused by a failover under `root`: {flow name: marker file}. Delete the marker to resume the flow."""
    found: dict[str, Path] = {}
    for marker in sorted(root.glob(f"*/{PAUSE_MARKER}")):
        try:
            found[str(json.loads(marker.read_text())["flow"])] = marker
        except (ValueError, KeyError, TypeError):
            continue
    return found

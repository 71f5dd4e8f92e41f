"""The persisted state of a failover run, rewritten after every step, so a run that was killed or failed resumes
after its last completed step.

By default it lives in Kafka (`kafka_state.KafkaStateStore`, the runbook topic on the cluster the clients move
to), so every Airflow worker, `mirrorflow run` and the CLI see it. `StateStore` here is the explicit air-gapped
override (`--state-dir`, or `$MIRRORFLOW_STATE_DIR` set): one JSON file per runbook, written atomically, with a
lock, and pause markers beside it. Both hold what later steps and the report need (fenced end offsets, the ACLs
created, translated offsets) and never a secret. A dry run reads state but never writes it.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.replication.pause_markers import DEFAULT_ROOT, Clusters, write_pause_marker

STATE_FILE = "state.json"

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


class RunbookStore(Protocol):
    """Where a runbook keeps its state, report and pause marker: Kafka by default, a directory when asked."""

    where: str
    """Said in messages and in the report's `state_dir`."""
    artifacts: Path | None
    """A local directory for report files and config snippets: only the directory override has one."""

    def load(self) -> RunState | None: ...

    def open(self, key: dict[str, Any], step_names: list[str], *, restart: bool) -> RunState: ...

    def save(self, state: RunState) -> None: ...

    def locked(self) -> AbstractContextManager[None]: ...

    def pause(self, flow: str, reason: str) -> str: ...

    def save_report(self, report: dict[str, Any]) -> None: ...


class StateStore:
    """The state file under `directory`, with an exclusive lock so two runs never drive the same failover."""

    def __init__(self, directory: Path, clusters: Clusters | None = None) -> None:
        self.directory = directory
        self.path = directory / STATE_FILE
        self.where = str(directory)
        self.artifacts: Path | None = directory
        self.clusters = dict(clusters or {})

    def pause(self, flow: str, reason: str) -> str:
        return str(write_pause_marker(self.directory, flow, reason, self.clusters))

    def save_report(self, report: dict[str, Any]) -> None:
        """The report files are written into `artifacts` by the runbook (report.write_report)."""

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
        stored = None if restart else self.load()
        return open_state(stored, key, step_names, restart=restart, where=str(self.path))

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


def open_state(
    stored: RunState | None, key: dict[str, Any], step_names: list[str], *, restart: bool, where: str
) -> RunState:
    """The state to run with: the stored one when it is the same failover, else a fresh one."""
    if stored is not None and not restart:
        if stored.key != key:
            raise UsageError(
                f"{where} holds a different failover ({_describe(stored.key)}), not {_describe(key)}: "
                "finish that one, pass another --state-dir, or --restart to discard it"
            )
        for name in step_names:
            stored.steps.setdefault(name, StepState(name))
        return stored
    return RunState(key=key, steps={name: StepState(name) for name in step_names})


def _describe(key: dict[str, Any]) -> str:
    return (
        f"{key.get('direction')} {key.get('primary')}->{key.get('dr')} ({key.get('mode')}, groups {key.get('groups')})"
    )

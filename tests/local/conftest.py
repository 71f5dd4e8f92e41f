"""Fixtures of the `mirrorflow local` tests: the installed console script, run as an operator would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

MIRRORFLOW = Path(sys.executable).with_name("mirrorflow")

RunCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def mirrorflow_cli() -> RunCli:
    """`mirrorflow_cli("local", "up", ..., env=None)` -> the finished process (text stdout/stderr)."""

    def run(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(MIRRORFLOW), *args],
            capture_output=True,
            text=True,
            env=dict(env) if env is not None else None,
            timeout=300,
            check=False,
        )

    return run


@pytest.fixture
def path_without_java(tmp_path: Path) -> dict[str, str]:
    """The environment with PATH reduced to one empty directory and no JAVA_HOME (the script's shebang is
    absolute, so the CLI itself still starts)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env["PATH"] = str(empty)
    return env

"""Fixtures of the Spark driver trials."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from tests.spark.driver_helpers import kill_driver


@pytest.fixture
def reap() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Drivers a failing test leaves behind are killed at its end (frozen ones included)."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            kill_driver(proc)

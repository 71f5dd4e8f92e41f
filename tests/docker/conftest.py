"""Fixtures of tests/docker/: the compose file as written and as compose would run it."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from tests.docker.compose_model import DOCKER, env_example, interpolate


@pytest.fixture(scope="module")
def compose_text() -> str:
    return (DOCKER / "compose.yaml").read_text()


@pytest.fixture(scope="module")
def compose(compose_text: str) -> dict[str, Any]:
    """The model compose runs: .env.example's values, with its empty secrets filled in as a user must."""
    env = {k: v or f"test-{k.lower()}" for k, v in env_example().items()}
    return yaml.safe_load(interpolate(compose_text, env))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]  # type: ignore[no-any-return]

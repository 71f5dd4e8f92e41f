"""Fixtures for config tests: write a properties text to a temporary file, load it, or collect its errors."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from mirrorflow.config.issues import ConfigError, Issue
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import MirrorConfig


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], Path]:
    """`write_config(text)` -> path of an mm2.properties holding the dedented text."""

    def write(text: str) -> Path:
        path = tmp_path / "mm2.properties"
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return write


@pytest.fixture
def load(write_config: Callable[[str], Path]) -> Callable[..., MirrorConfig]:
    """`load(text, clusters=None, environ=None, **kw)` -> the MirrorConfig (empty environment by default)."""

    def run(
        text: str,
        clusters: Sequence[str] | None = None,
        environ: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> MirrorConfig:
        return load_config(write_config(text), clusters=clusters, environ=environ or {}, **kwargs)

    return run


@pytest.fixture
def config_errors(write_config: Callable[[str], Path]) -> Callable[..., list[Issue]]:
    """`config_errors(text, ...)` -> the issues of the ConfigError loading the text raises."""

    def run(text: str, clusters: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> list[Issue]:
        with pytest.raises(ConfigError) as caught:
            load_config(write_config(text), clusters=clusters, environ=environ or {})
        return caught.value.issues

    return run

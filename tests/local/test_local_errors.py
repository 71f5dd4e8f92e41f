"""Missing or wrong tools give one clear message, not a traceback."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.local.maven import ensure_kafka_jars
from mirrorflow.local.runtime import find_java

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # the `mirrorflow_cli` fixture


def test_local_up_without_java_on_path_says_what_to_install(
    mirrorflow_cli: RunCli, path_without_java: dict[str, str], tmp_path: Path
) -> None:
    done = mirrorflow_cli("local", "up", "--dir", str(tmp_path / "local"), env=path_without_java)

    assert done.returncode == 1
    assert "`java` is not on PATH" in done.stderr
    assert "Java 17" in done.stderr and "Install a JDK" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not (tmp_path / "local" / "clusters.json").exists()


def test_java_older_than_17_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.22\" 2024-01-16' >&2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(MirrorflowError, match=r"needs Java 17 or newer, but .*java is Java 11"):
        find_java()


def test_missing_maven_is_reported_before_anything_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    cache = tmp_path / "cache"

    with pytest.raises(MirrorflowError, match=r"Maven \(`mvn`\) is not on PATH.*Install Maven"):
        ensure_kafka_jars(cache)

    assert sorted(os.listdir(cache)) == ["kafka-4.3.1.lock"]  # no partial resolution left behind

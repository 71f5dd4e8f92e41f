"""`mirrorflow local registry --fetch-only`: Apicurio Registry's runnable build from Maven Central, cached once."""

from __future__ import annotations

import subprocess
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from mirrorflow.local.registry import APICURIO_VERSION, ensure_registry

pytestmark = pytest.mark.integration

RunCli = Callable[..., subprocess.CompletedProcess[str]]


def test_fetch_only_prints_the_cached_runner_jar_and_a_second_call_is_a_no_op(mirrorflow_cli: RunCli) -> None:
    done = mirrorflow_cli("local", "registry", "--fetch-only")
    assert done.returncode == 0, done.stderr
    jar = Path(done.stdout.strip())
    assert jar.name == f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar" and (jar.parent / "lib").is_dir()
    with zipfile.ZipFile(jar) as runner:
        manifest = runner.read("META-INF/MANIFEST.MF").decode()
    assert "Main-Class: io.quarkus" in manifest, "a Quarkus runner, started with java -jar"
    started = time.monotonic()
    assert ensure_registry() == jar
    assert time.monotonic() - started < 1.0, "cached: no Maven call"

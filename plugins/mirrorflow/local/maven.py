"""Kafka's jars from Maven Central, resolved once into a per-user cache shared by the CLI, tests, benchmarks.

Apache Kafka publishes no runnable bundle to Maven Central, only artifacts; `kafka-runtime.xml` (package data)
names the few we need and Maven pulls their runtime closure. The cache lives outside the repository so that
`git clean` never throws away ~55 MB of downloads, and a pytest run and a CLI call started at the same time
must not race each other: resolution happens in a private temp directory under a file lock and becomes
visible with one rename, after a marker says it is complete.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.file_lock import file_lock

KAFKA_VERSION = "4.3.1"
POM_RESOURCE = "kafka-runtime.xml"
MARKER = ".complete"
# Jars whose absence means Maven "succeeded" without giving us a runnable Kafka.
_REQUIRED_JAR_PREFIXES = ("kafka_2.13-", "kafka-clients-", "connect-mirror-", "kafka-tools-", "log4j-core-")
_MVN_TIMEOUT_S = 1800.0


def cache_root(cache_dir: Path | None = None) -> Path:
    """The cache directory: the argument, else `$MIRRORFLOW_CACHE`, else `~/.cache/mirrorflow`."""
    if cache_dir is not None:
        return cache_dir
    env = os.environ.get("MIRRORFLOW_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "mirrorflow"


def pom_text() -> str:
    return resources.files("mirrorflow.local").joinpath(POM_RESOURCE).read_text(encoding="utf-8")


def ensure_kafka_jars(cache_dir: Path | None = None, *, version: str = KAFKA_VERSION) -> Path:
    """The directory holding every jar of Kafka `version` (classpath `DIR/*`), resolved first if needed.

    A no-op (no subprocess, no lock) when a complete resolution of the same pom and version is cached.
    """
    home = cache_root(cache_dir) / f"kafka-{version}"
    lib = home / "lib"
    fingerprint = _fingerprint(version)
    if _is_complete(home, fingerprint):
        return lib
    home.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(home.parent / f"kafka-{version}.lock"):
        if _is_complete(home, fingerprint):  # another process finished while we waited for the lock
            return lib
        staging = Path(tempfile.mkdtemp(prefix=f"kafka-{version}.partial-", dir=home.parent))
        try:
            _resolve(staging, version)
            (staging / MARKER).write_text(fingerprint + "\n", encoding="utf-8")
            if home.exists():  # a stale or partial copy from an older pom: move it aside, then drop it
                trash = Path(tempfile.mkdtemp(prefix=f"kafka-{version}.stale-", dir=home.parent))
                home.rename(trash / "old")
                shutil.rmtree(trash, ignore_errors=True)
            staging.rename(home)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return lib


def _fingerprint(version: str) -> str:
    digest = hashlib.sha256(pom_text().encode("utf-8")).hexdigest()[:16]
    return f"kafka.version={version} pom.sha256={digest}"


def _is_complete(home: Path, fingerprint: str) -> bool:
    try:
        return (home / MARKER).read_text(encoding="utf-8").strip() == fingerprint
    except OSError:
        return False


def _resolve(staging: Path, version: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MirrorflowError(
            "Maven (`mvn`) is not on PATH; mirrorflow fetches Kafka's jars from Maven Central with it. "
            "Install Maven 3.6+ (e.g. `apt-get install maven` or `brew install maven`) and retry."
        )
    (staging / "pom.xml").write_text(pom_text(), encoding="utf-8")
    command = [
        mvn,
        "-q",
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(staging / "pom.xml"),
        f"-Dkafka.version={version}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging / 'lib'}",
    ]
    done = run_maven(command, staging, f"resolving Kafka {version}")
    if done.returncode != 0:
        raise MirrorflowError(
            f"Maven could not resolve Kafka {version} from Maven Central (exit code {done.returncode}).\n"
            f"Command: {' '.join(command)}\n"
            f"Last lines of its output:\n{_tail(done.stdout + done.stderr)}\n"
            "Check network access to Maven Central (or the mirror/proxy in ~/.m2/settings.xml) and that "
            f"Kafka {version} is published there."
        )
    jars = sorted(p.name for p in (staging / "lib").glob("*.jar"))
    missing = [prefix for prefix in _REQUIRED_JAR_PREFIXES if not any(j.startswith(prefix) for j in jars)]
    if missing:
        raise MirrorflowError(
            f"Maven resolved Kafka {version} but these jars are missing: {', '.join(missing)}*.jar "
            f"(got {len(jars)} jars in {staging / 'lib'}). The pom in mirrorflow/local/{POM_RESOURCE} "
            "may not match this Kafka release."
        )


_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def _tail(text: str, lines: int = 30) -> str:
    """The useful end of Maven's output: without colours and without its generic "re-run with -X" advice."""
    text = _ANSI_RE.sub("", text).split("[ERROR] To see the full stack trace", 1)[0]
    kept = [line for line in text.splitlines() if line.strip() and line.strip() != "[ERROR]"][-lines:]
    return "\n".join(f"  | {line}" for line in kept) if kept else "  | (no output)"


def run_maven(command: list[str], cwd: Path, what: str) -> subprocess.CompletedProcess[str]:
    """Run `mvn` (its output captured) within `_MVN_TIMEOUT_S`; a timeout is an error saying `what` did not
    finish and where to look (network access to Maven Central, or the mirror in ~/.m2/settings.xml)."""
    try:
        return subprocess.run(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_MVN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise MirrorflowError(
            f"Maven did not finish {what} within {_MVN_TIMEOUT_S:.0f}s; check network access to Maven Central "
            "(or your mirror in ~/.m2/settings.xml)."
        ) from err

"""A real Confluent-compatible schema registry on this machine: Apicurio Registry, from Maven Central.

The schema-ID translation is tested against a registry written by someone else, not against our idea of one.
Apicurio Registry 2.x publishes its runnable build on Maven Central as the `all` zip of
`io.apicurio:apicurio-registry-app` (a Quarkus runner jar with its `lib/`), and serves Confluent's REST API
under `/apis/ccompat/v6`, with in-memory (H2) storage by default. Like Kafka's jars (`maven.py`), the zip is
fetched with Maven once into the per-user cache, unpacked in a private directory under a lock and made visible
with one rename after a marker says it is complete.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.file_lock import file_lock
from mirrorflow.local.maven import _tail, cache_root, run_maven
from mirrorflow.local.process import (
    LOOPBACK,
    exit_code,
    free_ports,
    is_alive,
    start_detached,
    stop_processes,
    tail,
)
from mirrorflow.local.runtime import DEFAULT_JVM_OPTIONS, find_java

APICURIO_VERSION = "2.6.13.Final"
ARTIFACT = "io.apicurio:apicurio-registry-app:{version}:zip:all"
CCOMPAT_PATH = "/apis/ccompat/v6"
MARKER = ".complete"
# Quarkus starts in 10-40 s on a busy two-core machine.
START_TIMEOUT_S = 180.0


def ensure_registry(cache_dir: Path | None = None, *, version: str = APICURIO_VERSION) -> Path:
    """The runner jar of Apicurio Registry `version`, fetched and unpacked first if needed (no-op when cached)."""
    home = cache_root(cache_dir) / f"apicurio-registry-{version}"
    jar = home / f"apicurio-registry-app-{version}-runner.jar"
    if (home / MARKER).exists() and jar.exists():
        return jar
    home.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(home.parent / f"apicurio-registry-{version}.lock"):
        if (home / MARKER).exists() and jar.exists():
            return jar
        staging = Path(tempfile.mkdtemp(prefix=f"apicurio-registry-{version}.partial-", dir=home.parent))
        try:
            archive = _fetch(staging, version)
            with zipfile.ZipFile(archive) as zipped:
                zipped.extractall(staging / "app")
            archive.unlink()
            if not (staging / "app" / jar.name).exists():
                raise MirrorflowError(
                    f"the Apicurio Registry {version} archive from Maven Central holds no {jar.name}; "
                    "this release may be packaged differently: set APICURIO_VERSION to a 2.x .Final release"
                )
            (staging / "app" / MARKER).write_text(version + "\n", encoding="utf-8")
            if home.exists():
                shutil.rmtree(home, ignore_errors=True)
            (staging / "app").rename(home)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return jar


def _fetch(staging: Path, version: str) -> Path:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MirrorflowError(
            "Maven (`mvn`) is not on PATH; mirrorflow fetches Apicurio Registry from Maven Central with it. "
            "Install Maven 3.6+ (e.g. `apt-get install maven`) and retry."
        )
    artifact = ARTIFACT.format(version=version)
    command = [mvn, "-q", "-B", "-Dstyle.color=never", "dependency:copy", f"-Dartifact={artifact}"]
    command.append(f"-DoutputDirectory={staging}")
    done = run_maven(command, staging, f"fetching {artifact}")
    archives = list(staging.glob("*.zip"))
    if done.returncode != 0 or not archives:
        raise MirrorflowError(
            f"Maven could not fetch {artifact} from Maven Central (exit code {done.returncode}).\n"
            f"Command: {' '.join(command)}\nLast lines of its output:\n{_tail(done.stdout + done.stderr)}\n"
            "Check network access to Maven Central (or the mirror in ~/.m2/settings.xml)."
        )
    return archives[0]


@dataclass
class RegistryServer:
    """One Apicurio Registry process on loopback, with its own in-memory store; `url` is its Confluent API."""

    directory: Path
    port: int = 0
    pid: int | None = None
    jar: Path = field(default_factory=Path)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}{CCOMPAT_PATH}"

    @property
    def marker(self) -> str:
        return f"-Dquarkus.http.port={self.port} "

    def start(self, *, cache_dir: Path | None = None, tie_to_parent: bool = True) -> RegistryServer:
        """Start it and wait until its Confluent API answers; a clear error with its log if it does not."""
        self.launch(cache_dir=cache_dir, tie_to_parent=tie_to_parent)
        return self.wait_ready()

    @property
    def log(self) -> Path:
        return self.directory / f"registry-{self.port}.log"

    def launch(self, *, cache_dir: Path | None = None, tie_to_parent: bool = True) -> RegistryServer:
        """Start the JVM without waiting (start several, then `wait_ready` each: their start-ups overlap)."""
        java, _ = find_java()
        self.jar = ensure_registry(cache_dir)
        self.port = self.port or free_ports(1)[0]
        self.directory.mkdir(parents=True, exist_ok=True)
        log = self.log
        command = [str(java), "-Xms64m", "-Xmx256m", *DEFAULT_JVM_OPTIONS, "-XX:TieredStopAtLevel=1"]
        command += [f"-Dquarkus.http.port={self.port}", f"-Dquarkus.http.host={LOOPBACK}"]
        command += ["-Dquarkus.log.console.level=WARN", "-jar", str(self.jar)]
        self.pid = start_detached(command, cwd=self.directory, output=log, tie_to_parent=tie_to_parent)
        return self

    def wait_ready(self) -> RegistryServer:
        """Wait until the Confluent API answers; a clear error with the log when the JVM dies or is too slow."""
        log = self.log
        if self.pid is None:
            raise RuntimeError("RegistryServer.launch() first")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not is_alive(self.pid, self.marker):
                raise MirrorflowError(
                    f"Apicurio Registry on port {self.port} exited (code {exit_code(self.pid)}) while starting; "
                    f"its log {log}:\n{tail(log)}"
                )
            if _answers(self.url):
                return self
            time.sleep(0.5)
        self.stop()
        raise MirrorflowError(
            f"Apicurio Registry on port {self.port} did not answer within {START_TIMEOUT_S:.0f}s; "
            f"its log {log}:\n{tail(log)}"
        )

    def stop(self) -> None:
        if self.pid is not None:
            stop_processes([(self.pid, self.marker)], timeout_s=20.0)
            self.pid = None


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/subjects", timeout=2.0) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False

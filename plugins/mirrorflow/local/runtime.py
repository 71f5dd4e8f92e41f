"""A JVM plus Kafka's jars: the command lines of brokers, the storage tool, MirrorMaker 2 and Kafka's tools.

Brokers, real MM2 (`org.apache.kafka.connect.mirror.MirrorMaker`) and `ProducerPerformance` in the benchmarks
all start from `KafkaRuntime.command`, so they share one classpath, one logging setup and one Java check.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.local.maven import KAFKA_VERSION, cache_root, ensure_kafka_jars

MIN_JAVA = 17
BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"
MIRROR_MAKER_MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
PRODUCER_PERFORMANCE_MAIN = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERFORMANCE_MAIN = "org.apache.kafka.tools.ConsumerPerformance"
LOG4J_RESOURCE = "log4j2.properties"
# Small and predictable: several JVMs share two cores in tests; the serial collector needs no GC threads.
DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)
# Short-lived tools (storage format, ...): C1 alone starts faster and keeps the JIT off the other core.
TOOL_JVM_OPTIONS: tuple[str, ...] = (*DEFAULT_JVM_OPTIONS, "-XX:TieredStopAtLevel=1")

_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?')


def find_java() -> tuple[Path, int]:
    """The `java` on PATH and its major version; a clear error when it is missing or older than 17."""
    found = shutil.which("java")
    if found is None:
        raise MirrorflowError(
            f"`java` is not on PATH; local Kafka clusters need Java {MIN_JAVA} or newer. Install a JDK "
            "(e.g. `apt-get install openjdk-17-jre-headless` or `brew install openjdk@17`) and put its "
            "bin directory on PATH."
        )
    java = Path(found)
    try:
        done = subprocess.run(
            [str(java), "-version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise MirrorflowError(f"could not run `{java} -version`: {err}") from err
    major = parse_java_major(done.stderr + done.stdout)
    if major is None:
        output = (done.stderr + done.stdout).strip()
        raise MirrorflowError(
            f"could not tell the version of {java} from `java -version`:\n{output}\n"
            f"Install a JDK {MIN_JAVA}+ and put it first on PATH."
        )
    if major < MIN_JAVA:
        raise MirrorflowError(
            f"Kafka {KAFKA_VERSION} needs Java {MIN_JAVA} or newer, but {java} is Java {major}. "
            f"Install a JDK {MIN_JAVA}+ and put it first on PATH."
        )
    return java, major


def parse_java_major(version_output: str) -> int | None:
    """`openjdk version "17.0.15"` -> 17; the old `"1.8.0_392"` scheme -> 8."""
    match = _VERSION_RE.search(version_output)
    if match is None:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2) is not None:
        return int(match.group(2))
    return major


@dataclass(frozen=True)
class KafkaRuntime:
    """Where `java` and Kafka's jars are; builds `java ... -cp 'lib/*' <main> <args>` command lines."""

    java: Path
    lib_dir: Path
    version: str = KAFKA_VERSION

    @property
    def classpath(self) -> str:
        return str(self.lib_dir / "*")

    def command(
        self,
        main_class: str,
        args: Sequence[str] = (),
        *,
        log_file: Path | None = None,
        heap_min: str = "128m",
        heap_max: str = "512m",
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        system_properties: Mapping[str, str] | None = None,
    ) -> list[str]:
        """A full command line; with `log_file`, Log4j2 writes there (rolling at 20 MB) instead of nowhere."""
        command = [str(self.java), f"-Xms{heap_min}", f"-Xmx{heap_max}", *jvm_options]
        props = dict(system_properties or {})
        if log_file is not None:
            props.setdefault("log4j2.configurationFile", str(self.log4j_config()))
            props.setdefault("mirrorflow.log.file", str(log_file))
        command += [f"-D{key}={value}" for key, value in props.items()]
        command += ["-cp", self.classpath, main_class, *args]
        return command

    def log4j_config(self) -> Path:
        """The packaged Log4j2 file as a real path (copied into the cache when the package is zipped)."""
        resource = resources.files("mirrorflow.local").joinpath(LOG4J_RESOURCE)
        if isinstance(resource, Path):
            return resource
        copy = self.lib_dir.parent / LOG4J_RESOURCE
        text = resource.read_text(encoding="utf-8")
        if not copy.exists() or copy.read_text(encoding="utf-8") != text:
            copy.write_text(text, encoding="utf-8")
        return copy


def kafka_runtime(cache_dir: Path | None = None, *, version: str = KAFKA_VERSION) -> KafkaRuntime:
    """Check Java first (Maven needs it too), then resolve or reuse the cached jars."""
    java, _major = find_java()
    lib_dir = ensure_kafka_jars(cache_root(cache_dir), version=version)
    return KafkaRuntime(java=java, lib_dir=lib_dir, version=version)

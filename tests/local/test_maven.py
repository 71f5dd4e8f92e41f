"""Kafka's jars from Maven Central into a cache: concurrent callers, the cached no-op, a failed resolution."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.local.maven import KAFKA_VERSION, MARKER, ensure_kafka_jars

pytestmark = pytest.mark.integration

RESOLVE = (
    "import sys; from pathlib import Path; from mirrorflow.local.maven import ensure_kafka_jars; "
    "print(ensure_kafka_jars(Path(sys.argv[1])))"
)


def test_parallel_first_resolutions_share_one_complete_cache_then_need_no_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", RESOLVE, str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=600) for run in runs]

    assert [run.returncode for run in runs] == [0, 0], [err for _out, err in outputs]
    lib = cache / f"kafka-{KAFKA_VERSION}" / "lib"
    assert {out.strip() for out, _err in outputs} == {str(lib)}
    assert (lib.parent / MARKER).is_file()
    assert sorted(p.name for p in cache.iterdir()) == [
        f"kafka-{KAFKA_VERSION}",
        f"kafka-{KAFKA_VERSION}.lock",
    ]
    jars = {p.name for p in lib.glob("*.jar")}
    for jar in (
        f"kafka_2.13-{KAFKA_VERSION}.jar",
        f"connect-mirror-{KAFKA_VERSION}.jar",
        f"kafka-tools-{KAFKA_VERSION}.jar",
    ):
        assert jar in jars

    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))  # a cached result must not run Maven again
    started = time.monotonic()
    assert ensure_kafka_jars(cache) == lib
    assert time.monotonic() - started < 0.5


def test_a_failed_resolution_shows_mavens_reason_and_leaves_no_partial_cache(tmp_path: Path) -> None:
    with pytest.raises(MirrorflowError) as failure:
        ensure_kafka_jars(tmp_path, version="0.0.0-no-such-release")

    message = str(failure.value)
    assert "Maven could not resolve Kafka 0.0.0-no-such-release from Maven Central" in message
    assert "org.apache.kafka:kafka_2.13:jar:0.0.0-no-such-release" in message  # from Maven's own output
    assert "\x1b[" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kafka-0.0.0-no-such-release.lock"]

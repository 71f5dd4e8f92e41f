"""Helpers of the control-plane tests: configs written as mm2.properties and loaded through the real loader,
and a retry for the moment a single-node KRaft broker needs to see its own metadata."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka.admin import AdminClient
from tests.kafka_helpers import Topics, create_topic

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import MirrorConfig
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text

T = TypeVar("T")
WriteConfig = Callable[..., MirrorConfig]


def mm2_properties(clusters: LocalClusters, aliases: Sequence[str], body: str) -> str:
    """A single-broker mm2.properties (every replication factor 1) for `aliases`, then `body`."""
    return mm2_config_text({alias: clusters.bootstrap(alias) for alias in aliases}, "admin.timeout.ms = 30000\n" + body)


@pytest.fixture
def write_config(tmp_path: Path, kafka_clusters: LocalClusters) -> WriteConfig:
    """`write_config("A->B.enabled = true\\n...", aliases=("A", "B"))` -> the loaded MirrorConfig."""
    counter = iter(range(1000))

    def make(body: str, aliases: Sequence[str] = ("A", "B")) -> MirrorConfig:
        path = tmp_path / f"mm2-{next(counter)}.properties"
        path.write_text(mm2_properties(kafka_clusters, aliases, body))
        return load_config(path)

    return make


def retry_until_passes(check: Callable[[], T], timeout_s: float = 15.0) -> T:
    """`check()`'s result once it stops raising (an assertion, or a lookup of a topic not yet visible)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture
def eventually() -> Callable[..., Any]:
    """`eventually(lambda: ..., timeout_s=15)`: retry a check until it passes."""
    return retry_until_passes


@pytest.fixture
def topics(kafka_clusters: LocalClusters) -> Topics:
    return Topics(kafka_clusters)


@pytest.fixture
def source_topic(kafka_admin: Callable[..., AdminClient], unique_topic: Callable[..., str]) -> str:
    """A new one-partition topic on A, for one continuous copy."""
    topic = unique_topic("continuous")
    create_topic(kafka_admin("A"), topic, 1)
    return topic

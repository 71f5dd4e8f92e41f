"""Helpers of the control-plane tests: configs written as mm2.properties and loaded through the real loader,
and a retry for the moment a single-node KRaft broker needs to see its own metadata."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

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


class Topics:
    """Plain confluent-kafka admin calls for arranging and checking topics, independent of the code under test."""

    def __init__(self, clusters: LocalClusters) -> None:
        self._clusters = clusters
        self._admins: dict[str, AdminClient] = {}

    def admin(self, alias: str) -> AdminClient:
        if alias not in self._admins:
            self._admins[alias] = AdminClient({"bootstrap.servers": self._clusters.bootstrap(alias)})
        return self._admins[alias]

    def create(self, alias: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        futures = self.admin(alias).create_topics(
            [NewTopic(name, partitions, 1, config=config or {})], operation_timeout=30
        )
        futures[name].result(30)

    def names(self, alias: str) -> set[str]:
        return set(self.admin(alias).list_topics(timeout=30).topics)

    def partitions(self, alias: str, name: str) -> int:
        topic = self.admin(alias).list_topics(name, timeout=30).topics[name]
        if topic.error is not None:
            raise AssertionError(f"{alias}:{name}: {topic.error}")
        return len(topic.partitions)

    def add_partitions(self, alias: str, name: str, total: int) -> None:
        self.admin(alias).create_partitions([NewPartitions(name, total)])[name].result(30)

    def configs(self, alias: str, name: str) -> dict[str, tuple[str | None, str]]:
        """`{key: (value, ConfigSource name)}` of a topic."""
        resource = ConfigResource(ResourceType.TOPIC, name)
        entries = self.admin(alias).describe_configs([resource])[resource].result(30)
        return {k: (e.value, ConfigSource(e.source).name) for k, e in entries.items()}

    def alter(self, alias: str, name: str, set_: dict[str, str] | None = None, delete: Sequence[str] = ()) -> None:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in (set_ or {}).items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        self.admin(alias).incremental_alter_configs([resource])[resource].result(30)


@pytest.fixture
def topics(kafka_clusters: LocalClusters) -> Topics:
    return Topics(kafka_clusters)

"""Metadata requests as a local broker saw them: every client's, librdkafka's own included.

A broker started with `MIRRORFLOW_BROKER_METADATA_LOG=DEBUG` in its environment logs each metadata request and
its answer to `<server.log>.metadata` (mirrorflow/local/log4j2.properties). `MetadataLog` reads what was
appended since a mark and counts, per topic, the requests whose answer listed it and the partitions listed.

The bytes an answer costs on the wire are estimated from the partitions it lists: each partition of a Metadata
response (v12-13) takes 18 + 8 x replicas bytes (error code, index, leader, epoch, replica and in-sync arrays,
offline array and tags): 26 at replication factor 1, as on these benchmark clusters, and 42 at 3, as in
production.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ENV = "MIRRORFLOW_BROKER_METADATA_LOG"
PREFIX = "Completed request:"


def partition_bytes(replicas: int) -> int:
    return 18 + 8 * replicas


def log_metadata() -> None:
    """Make brokers started from now on (in this process's environment) log their metadata requests."""
    os.environ[ENV] = "DEBUG"


@dataclass
class Asked:
    """Metadata requests since a mark: per topic, how many answers listed it and the partitions they listed."""

    requests: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    partitions: Counter[str] = field(default_factory=Counter)

    def of(self, topics: list[str]) -> tuple[int, int]:
        """(answers listing any of `topics`, partitions of `topics` listed in all answers)."""
        return sum(self.answers[t] for t in topics), sum(self.partitions[t] for t in topics)


class MetadataLog:
    """The metadata log of one broker (`<cluster directory>/<alias>/server.log.metadata`)."""

    def __init__(self, clusters_dir: Path, alias: str) -> None:
        self.path = clusters_dir / alias / "server.log.metadata"
        self.position = 0

    def mark(self) -> None:
        """Count from here on."""
        self.position = self.path.stat().st_size if self.path.exists() else 0

    def since_mark(self) -> Asked:
        asked = Asked()
        if not self.path.exists():
            return asked
        with self.path.open("rb") as log:
            log.seek(self.position)
            for line in log:
                text = line.decode("utf-8", "replace")
                if not text.startswith(PREFIX):
                    continue
                asked.requests += 1
                for topic in json.loads(text[len(PREFIX) :]).get("response", {}).get("topics", []):
                    name = str(topic.get("name"))
                    asked.answers[name] += 1
                    asked.partitions[name] += len(topic.get("partitions", []))
        return asked

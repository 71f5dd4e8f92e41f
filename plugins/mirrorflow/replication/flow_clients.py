"""The Kafka clients of one flow's control plane, built on first use from the flow's MM2 client configs and
reused across cycles (a `run --for` loop heartbeats every second; a new client per call would reconnect)."""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.produce import RecordWriter

# librdkafka's own log lines (every refused connection) would flood stderr; failures surface as exceptions.
LIBRDKAFKA_LOG = logging.getLogger("mirrorflow.kafka.librdkafka")

Admin = Any  # confluent_kafka.admin.AdminClient; only mirrorflow.kafka may name confluent-kafka types.


class FlowClients:
    """Source and target admin clients (MM2's `replication-source-admin`/`-target-admin` configs) and a
    target producer for heartbeats."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self.timeout_s = flow.admin_timeout_ms / 1000.0
        self._source_admin: Admin | None = None
        self._target_admin: Admin | None = None
        self._target_writer: RecordWriter | None = None

    @property
    def source_admin(self) -> Admin:
        if self._source_admin is None:
            self._source_admin = admin_client(self.flow.source_admin.librdkafka(), logger=LIBRDKAFKA_LOG)
        return self._source_admin

    @property
    def target_admin(self) -> Admin:
        if self._target_admin is None:
            self._target_admin = admin_client(self.flow.target_admin.librdkafka(), logger=LIBRDKAFKA_LOG)
        return self._target_admin

    def admin(self, side: str) -> Admin:
        """The admin of `"source"` or `"target"`."""
        return self.source_admin if side == "source" else self.target_admin

    def alias(self, side: str) -> str:
        return self.flow.source if side == "source" else self.flow.target

    @property
    def target_writer(self) -> RecordWriter:
        if self._target_writer is None:
            self._target_writer = RecordWriter(
                self.flow.target, self.flow.target_producer.librdkafka(), self.timeout_s, logger=LIBRDKAFKA_LOG
            )
        return self._target_writer

    def close(self) -> None:
        if self._target_writer is not None:
            self._target_writer.close()
        self._source_admin = self._target_admin = self._target_writer = None

    def __enter__(self) -> FlowClients:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

"""A set of local single-node Kafka clusters sharing one directory: what `mirrorflow local` and the tests run.

Files in the directory (docs/design.md §6): `clusters.json` (`{"<alias>": {"bootstrap.servers": "127.0.0.1:<port>"}}`)
and `mm2.properties` (all clusters, no flow enabled, replication factors 1) are the contract for other tools;
`state.json` (ports, cluster ids, PIDs) is ours. A cluster keeps its ports and data across stop/start, so its
bootstrap address stays valid for the life of the directory. Every change happens under a lock file, so two
processes working on one directory (a test and a CLI call) do not start the same broker twice.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.core.file_lock import file_lock
from mirrorflow.local import broker, process, properties, security
from mirrorflow.local.broker import BrokerSpec, BrokerStartError
from mirrorflow.local.maven import KAFKA_VERSION
from mirrorflow.local.netns import Placement
from mirrorflow.local.runtime import KafkaRuntime, kafka_runtime

STATE_FILE = "state.json"
CLUSTERS_FILE = "clusters.json"
MM2_FILE = "mm2.properties"
LOCK_FILE = ".local.lock"
DEFAULT_HEAP_MAX = "512m"
_PORT_ATTEMPTS = 3


@dataclass
class _Entry:
    broker_port: int
    controller_port: int
    cluster_id: str
    pid: int | None = None
    host: str = process.LOOPBACK
    launch_prefix: list[str] = field(default_factory=list)


class LocalClusters:
    """Handle on the clusters of one directory. Build it with `up(...)` or `open(directory)`."""

    def __init__(
        self,
        directory: Path,
        *,
        heap_max: str | None = None,
        broker_config: Mapping[str, str] | None = None,
        timeout_s: float = 120.0,
        tie_to_parent: bool = False,
        cache_dir: Path | None = None,
        placements: Mapping[str, Placement] | None = None,
        security_kind: str | None = None,
    ) -> None:
        """`placements`: per alias, the address and launch prefix of a broker not on loopback (local/netns.py);
        recorded in state.json, so restarts keep them."""
        self.directory = directory.expanduser().resolve()
        self._placements = dict(placements or {})
        self.timeout_s = timeout_s
        self.tie_to_parent = tie_to_parent
        self._heap_max = heap_max
        self._broker_config = dict(broker_config) if broker_config is not None else None
        self._cache_dir = cache_dir
        self._runtime: KafkaRuntime | None = None
        self._entries: dict[str, _Entry] = {}
        self._load()
        self.security = self._security(security_kind)
        """SASL/TLS of the broker listeners (`security_kind`: sasl, tls, sasl_ssl), kept for the directory."""

    # ----------------------------------------------------------------------------------------- construction

    @classmethod
    def open(cls, directory: Path, **options: Any) -> LocalClusters:
        """The clusters recorded in `directory` (none if it holds no state), without starting anything."""
        return cls(directory, **options)

    @classmethod
    def up(
        cls, aliases: Sequence[str], directory: Path, *, base_port: int | None = None, **options: Any
    ) -> LocalClusters:
        """Start (or keep running) one cluster per alias in `directory`; returns once all serve metadata."""
        clusters = cls(directory, **options)
        clusters.start(*aliases, base_port=base_port)
        return clusters

    # ----------------------------------------------------------------------------------------------- queries

    @property
    def aliases(self) -> list[str]:
        return list(self._entries)

    @property
    def clusters_file(self) -> Path:
        return self.directory / CLUSTERS_FILE

    @property
    def mm2_properties_file(self) -> Path:
        return self.directory / MM2_FILE

    @property
    def runtime(self) -> KafkaRuntime:
        """Java and the cached jars, for launching MM2 or Kafka tools against these clusters."""
        if self._runtime is None:
            self._runtime = kafka_runtime(self._cache_dir)
        return self._runtime

    def spec(self, alias: str) -> BrokerSpec:
        entry = self._entry(alias)
        return BrokerSpec(
            alias,
            self.directory / alias,
            entry.broker_port,
            entry.controller_port,
            entry.cluster_id,
            host=entry.host,
            launch_prefix=tuple(entry.launch_prefix),
        )

    def bootstrap(self, alias: str) -> str:
        return self.spec(alias).bootstrap

    def client_config(self, alias: str) -> dict[str, str]:
        """librdkafka settings to reach `alias`: bootstrap plus, for secured clusters, credentials in clear."""
        return {"bootstrap.servers": self.bootstrap(alias), **security.client_config(self.security)}

    def bootstraps(self) -> dict[str, str]:
        return {alias: self.bootstrap(alias) for alias in self._entries}

    def pid(self, alias: str) -> int | None:
        return self._entry(alias).pid

    def is_up(self, alias: str) -> bool:
        pid = self._entry(alias).pid
        return pid is not None and process.is_alive(pid, self.spec(alias).marker)

    def status(self) -> dict[str, dict[str, Any]]:
        """Per alias: bootstrap, `up`/`down`/`unresponsive` (JVM alive, port refusing), PID, directory."""
        report: dict[str, dict[str, Any]] = {}
        for alias in self._entries:
            spec = self.spec(alias)
            alive = self.is_up(alias)
            state = "down"
            if alive:
                state = "up" if process.port_accepts(spec.broker_port, host=spec.host) else "unresponsive"
            report[alias] = {
                "bootstrap.servers": spec.bootstrap,
                "status": state,
                "pid": self._entries[alias].pid if alive else None,
                "directory": str(spec.home),
            }
        return report

    # --------------------------------------------------------------------------------------------- changes

    def start(self, *aliases: str, base_port: int | None = None) -> None:
        """Make each alias run: new ones get ports, storage and a JVM; stopped ones restart on their ports."""
        if not aliases:
            raise UsageError("no cluster alias given; e.g. --clusters primary,backup")
        for alias in aliases:
            broker.validate_alias(alias)
        if len(set(aliases)) != len(aliases):
            raise UsageError(f"cluster aliases repeat: {', '.join(aliases)}")
        self.directory.mkdir(parents=True, exist_ok=True)
        with file_lock(self.directory / LOCK_FILE):
            self._load()
            self._start_locked(list(aliases), base_port)

    def add(self, alias: str, *, base_port: int | None = None) -> str:
        """Start one more cluster in this directory (the json and properties files list it); its bootstrap."""
        self.start(alias, base_port=base_port)
        return self.bootstrap(alias)

    def stop(self, *aliases: str, kill: bool = False, timeout_s: float = 30.0) -> None:
        """Stop the given clusters (default: all): SIGTERM, or SIGKILL at once when `kill` (a crash)."""
        if not self.directory.exists():
            return
        with file_lock(self.directory / LOCK_FILE):
            self._load()
            self._stop_locked(list(aliases) or self.aliases, kill=kill, timeout_s=timeout_s)

    def restart(self, alias: str, *, kill: bool = False) -> None:
        """Stop one broker and start it again on the same ports and data, e.g. for fault-injection tests."""
        self.stop(alias, kill=kill)
        self.start(alias)

    def down(self, *, purge: bool = False) -> None:
        """Stop every cluster; `purge` also deletes their data and the files this class wrote."""
        self.stop()
        if not purge or not self.directory.exists():
            return
        with file_lock(self.directory / LOCK_FILE):
            self._load()
            for alias in self._entries:
                shutil.rmtree(self.directory / alias, ignore_errors=True)
            for name in (STATE_FILE, CLUSTERS_FILE, MM2_FILE):
                (self.directory / name).unlink(missing_ok=True)
            shutil.rmtree(self.directory / security.SECURITY_DIR, ignore_errors=True)
            self._entries = {}
        (self.directory / LOCK_FILE).unlink(missing_ok=True)

    # ------------------------------------------------------------------------------------------- internals

    def _entry(self, alias: str) -> _Entry:
        try:
            return self._entries[alias]
        except KeyError:
            known = ", ".join(self._entries) or "none"
            raise MirrorflowError(
                f"no local cluster {alias!r} in {self.directory} (known: {known}); "
                f"start it with `mirrorflow local up --clusters {alias} --dir {self.directory}`"
            ) from None

    @property
    def heap_max(self) -> str:
        return self._heap_max or DEFAULT_HEAP_MAX

    def _start_locked(self, aliases: list[str], base_port: int | None) -> None:
        wanted = [alias for alias in aliases if alias not in self._entries or not self.is_up(alias)]
        if not wanted:
            self._write_files()
            return
        runtime = self.runtime
        fresh = {alias for alias in wanted if alias not in self._entries}
        self._assign_ports([a for a in wanted if a in fresh], base_port)
        started: list[str] = []
        attempts = dict.fromkeys(wanted, 1)
        pending = wanted
        try:
            while pending:
                specs = self._prepare(pending, fresh, base_port, attempts)
                broker.format_storage(runtime, specs, security.storage_format_args(self.security))
                for spec in specs:
                    pid = broker.launch(runtime, spec, heap_max=self.heap_max, tie_to_parent=self.tie_to_parent)
                    self._entries[spec.alias].pid = pid
                    started.append(spec.alias)
                self._save_state()
                deadline = time.monotonic() + self.timeout_s
                retry: list[str] = []
                for spec in specs:
                    try:
                        broker.wait_ready(
                            spec, self._entries[spec.alias].pid or 0, deadline, security.client_config(self.security)
                        )
                    except BrokerStartError as err:
                        if not self._may_move(spec.alias, err, fresh, base_port, attempts):
                            raise
                        retry.append(spec.alias)
                for alias in retry:  # a port grabbed between our check and the JVM's bind: new ports
                    self._stop_locked([alias], kill=True, timeout_s=5.0)
                    shutil.rmtree(self.directory / alias, ignore_errors=True)
                    attempts[alias] += 1
                    self._assign_ports([alias], None)
                pending = retry
        except BaseException:
            self._stop_locked(started, kill=False, timeout_s=15.0)
            for alias in fresh:  # never came up: forget it, keep its directory (logs) until the next `up`
                self._entries.pop(alias, None)
            self._save_state()
            self._write_files()
            raise
        self._save_state()
        self._write_files()

    def _prepare(
        self, aliases: list[str], fresh: set[str], base_port: int | None, attempts: dict[str, int]
    ) -> list[BrokerSpec]:
        specs = []
        for alias in aliases:
            if alias in fresh and attempts[alias] == 1:
                shutil.rmtree(self.directory / alias, ignore_errors=True)  # leftovers of a failed start
            while True:
                spec = self.spec(alias)
                try:
                    broker.check_ports_free(spec, fresh=alias in fresh)
                    break
                except BrokerStartError as err:
                    if not self._may_move(alias, err, fresh, base_port, attempts):
                        raise
                    attempts[alias] += 1
                    self._assign_ports([alias], None)
            spec.home.mkdir(parents=True, exist_ok=True)
            broker.write_config(spec, self._broker_config, self.security)
            specs.append(spec)
        return specs

    @staticmethod
    def _may_move(
        alias: str, err: BrokerStartError, fresh: set[str], base_port: int | None, attempts: dict[str, int]
    ) -> bool:
        """Only a new cluster on ports we picked ourselves may move to other ports after a conflict."""
        return err.port_conflict and alias in fresh and base_port is None and attempts[alias] < _PORT_ATTEMPTS

    def _assign_ports(self, aliases: Sequence[str], base_port: int | None) -> None:
        if not aliases:
            return
        if base_port is not None:
            if not 1024 <= base_port <= 65535 - 2 * len(aliases):
                raise UsageError(f"--base-port {base_port} is out of range (1024..{65535 - 2 * len(aliases)})")
            ports = list(range(base_port, base_port + 2 * len(aliases)))
        else:
            taken = {p for e in self._entries.values() for p in (e.broker_port, e.controller_port)}
            ports = process.free_ports(2 * len(aliases))
            while taken & set(ports):  # a stopped cluster of this directory still owns its ports
                ports = process.free_ports(2 * len(aliases))
        for index, alias in enumerate(aliases):
            old = self._entries.get(alias)
            cluster_id = old.cluster_id if old else broker.new_cluster_id()
            place = self._placements.get(alias, Placement())
            self._entries[alias] = _Entry(
                ports[2 * index], ports[2 * index + 1], cluster_id, None, place.host, list(place.launch_prefix)
            )

    def _stop_locked(self, aliases: Iterable[str], *, kill: bool, timeout_s: float) -> None:
        targets = []
        for alias in aliases:
            entry = self._entries.get(alias)
            if entry is not None and entry.pid is not None:
                targets.append((entry.pid, self.spec(alias).marker))
                entry.pid = None
        process.stop_processes(targets, timeout_s=timeout_s, kill=kill)
        self._save_state()

    def _security(self, kind: str | None) -> security.LocalSecurity | None:
        existing = security.load(self.directory)
        if kind is None or (existing is not None and existing.protocol == security.kind_to_protocol(kind)):
            return existing
        if existing is not None or self._entries:
            now = existing.protocol if existing is not None else "PLAINTEXT"
            raise UsageError(
                f"the clusters in {self.directory} use {now}; security cannot change after they were created: "
                f"use another --dir, or delete them with `mirrorflow local down --purge --dir {self.directory}`"
            )
        return security.create(kind, self.directory)

    def _load(self) -> None:
        path = self.directory / STATE_FILE
        if not path.exists():
            self._entries = {}
            return
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
            self._entries = {alias: _Entry(**fields) for alias, fields in state["clusters"].items()}
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise MirrorflowError(
                f"{path} is not a state file of `mirrorflow local` ({err}); stop any Kafka JVMs started "
                "from that directory and remove it, or use another --dir"
            ) from err
        if self._heap_max is None:
            self._heap_max = state.get("heap_max")
        if self._broker_config is None:
            self._broker_config = state.get("broker_config")

    def _save_state(self) -> None:
        if not self._entries:
            (self.directory / STATE_FILE).unlink(missing_ok=True)
            return
        state = {
            "kafka_version": KAFKA_VERSION,
            "heap_max": self.heap_max,
            "broker_config": self._broker_config or {},
            "clusters": {alias: asdict(entry) for alias, entry in self._entries.items()},
        }
        properties.write_atomically(self.directory / STATE_FILE, json.dumps(state, indent=2) + "\n")

    def _write_files(self) -> None:
        if not self._entries:
            return
        bootstraps = self.bootstraps()
        clusters = {alias: {"bootstrap.servers": servers} for alias, servers in bootstraps.items()}
        properties.write_atomically(self.clusters_file, json.dumps(clusters, indent=2) + "\n")
        mm2_props = properties.mm2_properties(bootstraps)
        mm2_props.update(security.mm2_properties(self.security, list(bootstraps)))
        mm2 = properties.render(mm2_props, properties.MM2_HEADER)
        properties.write_atomically(self.mm2_properties_file, mm2)

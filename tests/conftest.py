"""Session-wide test setup: Airflow's environment first, then real Kafka clusters and client factories.

Airflow reads its configuration when first imported, so the environment is set at the very top, before any
test module (or plugin) can import it. The Kafka clusters come from `mirrorflow.local`, the same code as
`mirrorflow local up`, started once per session and stopped at the end even when tests fail.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "dags"
PLUGINS = REPO / "plugins"
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="mirrorflow-airflow-home-"))
atexit.register(shutil.rmtree, AIRFLOW_HOME, True)
os.environ.update(
    {
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME}/airflow.db",
    }
)

import itertools  # noqa: E402  (Airflow's environment must be set before anything else is imported)
import re  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable, Iterator, Mapping  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from tests.kafka_helpers import KafkaKit  # noqa: E402
from tests.spark.standalone import Standalone, standalone_cluster  # noqa: E402

from mirrorflow.kafka.client_logs import with_logger  # noqa: E402
from mirrorflow.kafka.clients import admin_client  # noqa: E402
from mirrorflow.kafka.group_coordinator import remember_settings  # noqa: E402
from mirrorflow.local.cluster import LocalClusters  # noqa: E402
from mirrorflow.local.registry import RegistryServer  # noqa: E402

SESSION_ALIASES = ("A", "B")
LAZY_ALIAS = "C"


@pytest.fixture(scope="session")
def kafka_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusters]:
    """Clusters `A` and `B` (one KRaft node each), started once; `.bootstrap("A")` gives an address.

    `tie_to_parent` makes the brokers die with pytest even if it is killed before the finalizer runs. To skip
    the start-up while iterating, run `mirrorflow local up --clusters A,B --dir D` once and set
    `MIRRORFLOW_TEST_KAFKA_DIR=D`: the session then uses (and if needed starts) those and leaves them running.
    """
    reuse = os.environ.get("MIRRORFLOW_TEST_KAFKA_DIR")
    directory = Path(reuse) if reuse else tmp_path_factory.mktemp("kafka")
    clusters = LocalClusters(directory, tie_to_parent=not reuse)
    try:
        clusters.start(*SESSION_ALIASES)
        yield clusters
    finally:
        if not reuse:
            clusters.down()


@pytest.fixture(scope="session")
def kafka_cluster_c(kafka_clusters: LocalClusters) -> LocalClusters:
    """Adds a third cluster `C` to the session's clusters, only for the tests that ask for it."""
    kafka_clusters.add(LAZY_ALIAS)
    return kafka_clusters


_topic_counter = itertools.count(1)


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> Callable[..., str]:
    """`unique_topic(prefix="t")` -> a topic name no other call in this session returns.

    The name carries the test's name for debugging, without dots or underscores: MM2's default replication
    policy reads a dot as `<source alias>.` and Kafka warns when names differ only by `.` versus `_`.
    """
    test = re.sub(r"[^A-Za-z0-9-]+", "-", request.node.name).strip("-")[:60]

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{test}-{next(_topic_counter)}-{uuid.uuid4().hex[:6]}"

    return make


@pytest.fixture
def kafka_admin(kafka_clusters: LocalClusters) -> Iterator[Callable[..., AdminClient]]:
    """`kafka_admin("A")` -> an AdminClient on that session cluster, kept alive until the test ends (a
    collected client cancels its pending futures)."""
    admins: list[AdminClient] = []

    def make(alias: str = "A", config: Mapping[str, Any] | None = None) -> AdminClient:
        settings = {"bootstrap.servers": kafka_clusters.bootstrap(alias), **(config or {})}
        admin = remember_settings(admin_client(settings), settings)  # committed_offsets opens consumers with them
        admins.append(admin)
        return admin

    yield make
    admins.clear()


@pytest.fixture
def kafka_producer(kafka_clusters: LocalClusters) -> Iterator[Callable[..., Producer]]:
    """`kafka_producer("A", {"linger.ms": 0})` -> a Producer, flushed when the test ends."""
    producers: list[Producer] = []

    def make(alias: str = "A", config: Mapping[str, Any] | None = None) -> Producer:
        producer = Producer(with_logger({"bootstrap.servers": kafka_clusters.bootstrap(alias), **(config or {})}))
        producers.append(producer)
        return producer

    yield make
    for producer in producers:
        producer.flush(10)
    producers.clear()  # librdkafka handles close when collected, before the session stops the brokers


@pytest.fixture
def kafka_consumer(kafka_clusters: LocalClusters) -> Iterator[Callable[..., Consumer]]:
    """`kafka_consumer("A", {"isolation.level": ...})` -> a Consumer (own group, from the earliest offset,
    no auto-commit, partition EOF events on), closed when the test ends."""
    consumers: list[Consumer] = []

    def make(alias: str = "A", config: Mapping[str, Any] | None = None) -> Consumer:
        settings: dict[str, Any] = {
            "bootstrap.servers": kafka_clusters.bootstrap(alias),
            "group.id": f"g-{uuid.uuid4().hex[:12]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
        settings.update(config or {})
        consumer = Consumer(with_logger(settings))
        consumers.append(consumer)
        return consumer

    yield make
    for consumer in consumers:
        consumer.close()
    consumers.clear()


@pytest.fixture
def kafka(
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    unique_topic: Callable[..., str],
) -> KafkaKit:
    """The five fixtures above in one argument: `kafka.admin("A")`, `kafka.topic("t")`, `kafka.bootstrap("B")`."""
    return KafkaKit(kafka_clusters, kafka_admin, kafka_producer, kafka_consumer, unique_topic)


@pytest.fixture(scope="session")
def schema_registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RegistryServer, RegistryServer]]:
    """Two real Apicurio Registry servers (the source's and the target's), each with its own in-memory store;
    fetched from Maven Central into the cache on first use (mirrorflow/local/registry.py). Started together
    once per session, only by the tests that ask for them."""
    directory = tmp_path_factory.mktemp("registries")
    servers = (RegistryServer(directory / "source"), RegistryServer(directory / "target"))
    try:
        for server in servers:
            server.launch()
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """A real Spark standalone cluster (tests/spark/standalone.py): a master and one worker of 4 cores, so two
    flows of two cores each fill it (tests/spark/test_standalone_sizing.py), and 2 GiB for executors. Started
    once per session, only by the tests that ask for it."""
    with standalone_cluster(tmp_path_factory.mktemp("spark-standalone"), cores=4, memory="2g") as cluster:
        yield cluster

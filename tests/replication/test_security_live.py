"""End to end over secured listeners: a SASL/SCRAM cluster replicates to a TLS (mutual TLS) cluster, and no
user-facing output ever shows a password or key password.

One SASL_PLAINTEXT cluster (`scram`) and one SSL cluster (`tls`, client certificates required, encrypted client
key) are started once for the module with `mirrorflow.local`; their passwords are random. The mm2.properties is
written the MM2 way (Java client keys, `sasl.jaas.config`, PEM truststore/keystore) and reads its secrets through
`${file:...}` and `${env:...}` config providers. Every CLI surface runs as a real subprocess; each one's stdout
and stderr is searched for every secret value.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from tests.kafka_helpers import commit_when_ready, read_partition
from tests.replication.oauth_probe import ERROR_CALLS_ENV, OAUTH_CALLS_ENV
from tests.spark.copy_probe import copy_operator
from tests.spark.standalone import Standalone

from mirrorflow.core.checkpoint import Checkpoint
from mirrorflow.core.errors import UsageError
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.local import security
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import MM2_REPLICATION_FACTOR_KEYS, render

pytestmark = pytest.mark.integration
MIRRORFLOW = Path(sys.executable).with_name("mirrorflow")
REPO = Path(__file__).resolve().parents[2]
RECORDS = 200
COMMITTED = 60
ENV_PASSWORD = "MF_TEST_SCRAM_PASSWORD"
OAUTH_LOGIN = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_CB = "tests.replication.oauth_probe.unsecured_token"
ERROR_CB = "tests.replication.oauth_probe.error_probe"


@dataclass
class Secured:
    scram: LocalClusters
    tls: LocalClusters
    secrets: list[str]

    def conf(self, alias: str) -> dict[str, str]:
        return (self.scram if alias == "scram" else self.tls).client_config(alias)

    def seed(self, prefix: str, records: int) -> tuple[str, Any]:
        """A new 2-partition topic on `scram` holding `records` records; returns it and the admin client (kept
        by the caller: a collected client cancels its pending calls)."""
        topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin = admin_client(self.conf("scram"))
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(60)
        producer = Producer(with_logger(self.conf("scram")))
        for i in range(records):
            producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
        assert producer.flush(60) == 0
        return topic, admin

    def copied(self, topic: str) -> int:
        """How many records `scram.<topic>` holds on `tls`."""
        remote = Consumer(with_logger({**self.conf("tls"), "group.id": f"check-{topic}", "enable.partition.eof": True}))
        try:
            return sum(len(read_partition(remote, f"scram.{topic}", p)) for p in range(2))
        finally:
            remote.close()

    def mm2_text(self, body: str, *, scram_password: str | None = None, env_provider: bool = False) -> str:
        """Both clusters as MM2 would be configured for them; `scram_password` replaces the file reference."""
        props = {"clusters": "scram, tls"}
        props.update({"scram.bootstrap.servers": self.scram.bootstrap("scram")})
        props.update({"tls.bootstrap.servers": self.tls.bootstrap("tls")})
        props.update(dict.fromkeys(MM2_REPLICATION_FACTOR_KEYS, "1"))
        props.update(security.mm2_provider_properties())
        for alias, clusters in (("scram", self.scram), ("tls", self.tls)):
            props.update({f"{alias}.{k}": v for k, v in security.java_client_properties(clusters.security).items()})
        if env_provider:
            props["config.providers"] = "file, env"
            props["config.providers.env.class"] = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
        if scram_password is not None:
            props["scram.sasl.jaas.config"] = (
                'org.apache.kafka.common.security.scram.ScramLoginModule required username="mirrorflow" '
                f'password="{scram_password}";'
            )
        return render(props) + body


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("secured")
    # OAUTHBEARER next to SCRAM, with Kafka's default (unsecured) validator: for clients whose token comes from
    # an `oauth_cb` named in an Airflow connection.
    oauth = {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": f"{OAUTH_LOGIN} required;",
    }
    scram = LocalClusters(base / "scram", tie_to_parent=True, security_kind="sasl", broker_config=oauth)
    tls = LocalClusters(base / "tls", tie_to_parent=True, security_kind="tls")
    try:
        scram.start("scram")
        tls.start("tls")
        yield Secured(scram, tls, security.secret_values(scram.security) + security.secret_values(tls.security))
    finally:
        scram.down()
        tls.down()


def mirrorflow(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MIRRORFLOW), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def assert_no_secret(secrets: list[str], *outputs: str) -> None:
    assert secrets and all(len(s) >= 12 for s in secrets)
    for text in outputs:
        leaked = [s[:6] + "..." for s in secrets if s in text]
        assert not leaked, f"secret values {leaked} appear in: {text[:3000]}"


def flow_body(topic: str, group: str) -> str:
    return (
        "scram->tls.enabled = true\n"
        f"scram->tls.topics = {topic}\n"
        f"scram->tls.groups = {group}\n"
        "scram->tls.sync.group.offsets.enabled = true\n"
        "scram->tls.mirrorflow.copy.mode = interval\n"
        "scram->tls.mirrorflow.spark.master = local[2]\n"
        "emit.heartbeats.enabled = false\n"
    )


@pytest.fixture(scope="module")
def replicated(secured: Secured, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Records and a committed group at `scram`; then `plan` and `run --once` of scram->tls (outputs kept)."""
    topic, group = f"sec-{uuid.uuid4().hex[:8]}", f"g-sec-{uuid.uuid4().hex[:8]}"
    admin = admin_client(secured.conf("scram"))
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(60)
    producer = Producer(with_logger(secured.conf("scram")))
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(60) == 0
    commit_when_ready(secured.conf("scram"), group, TopicPartition(topic, 0, COMMITTED))
    config = tmp_path_factory.mktemp("secured-config") / "mm2.properties"
    config.write_text(secured.mm2_text(flow_body(topic, group)))
    plan = mirrorflow("plan", str(config), "--json", "-v")
    run = mirrorflow("run", str(config), "--once", "--json")
    return {"topic": topic, "group": group, "config": config, "plan": plan, "run": run}


def test_plan_and_run_replicate_from_sasl_to_tls(secured: Secured, replicated: dict[str, Any]) -> None:
    topic, group = replicated["topic"], replicated["group"]
    plan, run = replicated["plan"], replicated["run"]
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert f"scram.{topic}" in plan.stdout
    assert run.returncode == 0, run.stderr[-3000:]
    [report] = [r for r in json.loads(run.stdout)["flows"] if r["flow"] == "scram->tls"]
    assert [c["name"] for c in report["topics"]["created"]] == [f"scram.{topic}"]
    assert report["copy"]["records"] == RECORDS

    consumer = Consumer(with_logger({**secured.conf("tls"), "group.id": group}))  # reads only; never joins the group
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(f"scram.{topic}", p), timeout=30)[1] for p in (0, 1)]
        committed = consumer.committed([TopicPartition(f"scram.{topic}", 0)], timeout=30)
    finally:
        consumer.close()
    # each partition: its records plus the commit marker of the one transaction that carried them
    assert ends == [RECORDS // 2 + 1] * 2, "the same partitions, every record"
    checkpoints = [
        Checkpoint.from_record(k, v)
        for _, _, k, v, _ in read_to_end("tls", secured.conf("tls"), "scram.checkpoints.internal", timeout_s=60)
    ]
    mine = [c for c in checkpoints if c.consumer_group_id == group]
    assert [(c.partition, c.upstream_offset, c.downstream_offset) for c in mine] == [(0, COMMITTED, COMMITTED)]
    assert committed[0].offset == COMMITTED, "group offsets synced into the idle group on the TLS cluster"
    assert_no_secret(secured.secrets, plan.stdout, plan.stderr, run.stdout, run.stderr)


def test_every_cli_surface_keeps_the_secrets(secured: Secured, replicated: dict[str, Any], tmp_path: Path) -> None:
    config = str(replicated["config"])
    outputs: list[subprocess.CompletedProcess[str]] = [
        mirrorflow("validate", config),
        mirrorflow("validate", config, "--json"),
        mirrorflow("plan", config),
        mirrorflow("metrics", "show", config, "--json"),
        mirrorflow("metrics", "show", config),
        mirrorflow("audit", config, "--flow", "scram->tls", "--json", "-v"),
    ]
    for result in outputs:
        assert result.returncode == 0, (result.args, result.stderr[-2000:])
    audit = json.loads(outputs[-1].stdout)
    assert audit["clean"] and audit["lost"] == 0, audit

    # Bad configs: a typo beside the secrets, and a JKS truststore librdkafka cannot read.
    bad = tmp_path / "bad.properties"
    bad.write_text(
        secured.mm2_text(flow_body("x", "g") + "scram->tls.sync.group.offset = true\ntls.ssl.truststore.type = JKS\n")
    )
    refused = [mirrorflow("validate", str(bad)), mirrorflow("plan", str(bad)), mirrorflow("run", str(bad), "--once")]
    for result in refused:
        assert result.returncode == 2, (result.args, result.stdout[-2000:], result.stderr[-2000:])
        assert "JKS truststore cannot be read by librdkafka" in result.stdout + result.stderr
    assert_no_secret(secured.secrets, *(r.stdout + r.stderr for r in outputs + refused))


def test_a_wrong_password_fails_clearly_without_showing_either_password(secured: Secured, tmp_path: Path) -> None:
    wrong = f"mfwrong{uuid.uuid4().hex}"
    config = tmp_path / "wrong.properties"
    # a short admin timeout: the failing metadata call waits that long before it reports
    config.write_text(secured.mm2_text(flow_body("t", "g") + "admin.timeout.ms = 10000\n", scram_password=wrong))
    results = [
        mirrorflow("plan", str(config), "-v", timeout=900),
        mirrorflow("run", str(config), "--once", timeout=900),
    ]
    for result in results:
        assert result.returncode == 1, (result.args, result.stdout[-2000:], result.stderr[-2000:])
        assert "Traceback" not in result.stderr
        assert "authentication failed (" in result.stderr and "SCRAM-SHA-512" in result.stderr, result.stderr[-3000:]
        assert "check the cluster's security.protocol, sasl.mechanism and sasl.jaas.config" in result.stderr
    assert_no_secret([*secured.secrets, wrong], *(r.stdout + r.stderr for r in results))


def test_the_password_can_come_from_the_environment(
    secured: Secured, replicated: dict[str, Any], tmp_path: Path
) -> None:
    password = secured.scram.security.users[security.CLIENT_USER] if secured.scram.security else ""
    config = tmp_path / "env.properties"
    config.write_text(
        secured.mm2_text(
            flow_body(replicated["topic"], "g"), scram_password=f"${{env:{ENV_PASSWORD}}}", env_provider=True
        )
    )
    result = mirrorflow("plan", str(config), "--json", env={ENV_PASSWORD: password})
    assert result.returncode == 0, result.stderr[-3000:]
    assert_no_secret(secured.secrets, result.stdout, result.stderr)
    unset = mirrorflow("validate", str(config))
    assert unset.returncode == 2 and ENV_PASSWORD in unset.stdout + unset.stderr


def test_clients_without_credentials_are_refused(secured: Secured) -> None:
    """The listeners really are secured: no anonymous access through the broker port."""
    for alias, clusters in (("scram", secured.scram), ("tls", secured.tls)):
        admin = admin_client({"bootstrap.servers": clusters.bootstrap(alias), "security.protocol": "PLAINTEXT"})
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=5)


def test_credentials_from_an_airflow_connection_reach_the_copy_on_a_standalone_cluster(
    secured: Secured,
    standalone: Standalone,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The SCRAM password is only in the Airflow connection (the file's is wrong), and the copy runs on a real
    `spark://` master: the driver gets the connection's settings from the task, the executors the clients it
    built, and nothing the task prints shows a secret."""
    from mirrorflow.airflow.tasks import load_flow
    from mirrorflow.replication.flow_cycle import run_control_plane

    topic, _admin = secured.seed("sec-spark", 100)
    wrong = f"mfwrong{uuid.uuid4().hex}"
    body = flow_body(topic, "g-none").replace("scram->tls.mirrorflow.spark.master = local[2]\n", "")
    config = tmp_path / "conn.properties"
    config.write_text(secured.mm2_text(body + "scram.mirrorflow.connection = kafka_scram\n", scram_password=wrong))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SCRAM", json.dumps({"conn_type": "kafka", "extra": secured.conf("scram")}))
    monkeypatch.setenv("AIRFLOW_CONN_MIRRORFLOW_SPARK", json.dumps({"conn_type": "spark", "host": standalone.master}))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    run_control_plane(load_flow(str(config), "scram->tls"))
    operator = copy_operator(config, "scram->tls")
    result = operator.execute({})
    assert result is not None
    assert (result["records"], result["master"]) == (100, standalone.master), result
    assert secured.copied(topic) == 100
    out, err = capfd.readouterr()
    assert_no_secret([*secured.secrets, wrong], out, err)


def test_an_oauth_callback_named_in_a_connection_authenticates_the_control_plane_and_the_copy(
    secured: Secured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The connection names an `oauth_cb` (allowlisted for the Kafka provider's hook) and no password; the file's
    SCRAM password is wrong. Topic sync in this process and the Spark copy job (driver and executors, other
    processes) all get their OAUTHBEARER token from that function, resolved by name where each client is built."""
    from mirrorflow.airflow.tasks import load_flow
    from mirrorflow.replication.flow_cycle import run_control_plane

    topic, _admin = secured.seed("sec-oauth", 60)
    wrong = f"mfwrong{uuid.uuid4().hex}"
    config = tmp_path / "oauth.properties"
    config.write_text(
        secured.mm2_text(
            flow_body(topic, "g-none") + "scram.mirrorflow.connection = kafka_oauth\n", scram_password=wrong
        )
    )
    extra = {
        "bootstrap.servers": secured.scram.bootstrap("scram"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": OAUTH_CB,
    }
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_OAUTH", json.dumps({"conn_type": "kafka", "extra": extra}))
    calls = tmp_path / "oauth-calls"
    monkeypatch.setenv(OAUTH_CALLS_ENV, str(calls))
    # The callback's module must import where the copy job's clients are built (its own process).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))

    with pytest.raises(UsageError, match="callback_allowlist"):  # the provider's allowlist is honoured
        load_flow(str(config), "scram->tls")
    monkeypatch.setenv("AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST", OAUTH_CB)
    flow = load_flow(str(config), "scram->tls")
    assert flow.source_consumer.librdkafka()["oauth_cb"] == OAUTH_CB  # kept by name: it travels to Spark
    run_control_plane(flow)
    result = copy_operator(config, "scram->tls").execute({})
    assert result is not None and result["records"] == 60, result
    assert secured.copied(topic) == 60
    askers = set(calls.read_text().split())
    assert str(os.getpid()) in askers and len(askers) >= 2, askers  # this process, and the copy job's
    out, err = capfd.readouterr()
    assert_no_secret([*secured.secrets, wrong], out, err)


def test_an_error_callback_named_in_a_connection_runs_beside_mirrorflows_own(
    secured: Secured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (issue 22): a connection's `error_cb` replaced Mirrorflow's on every client of its side, so a wrong
    password read as a transport failure (the "authentication failed (...)" diagnosis comes from Mirrorflow's
    own callback). Both run now: the operator's sees every error event, the message still says why."""
    from mirrorflow.airflow.tasks import load_flow
    from mirrorflow.core.errors import MirrorflowError
    from mirrorflow.replication.discovery import discover
    from mirrorflow.replication.flow_clients import FlowClients

    wrong = f"mfwrong{uuid.uuid4().hex}"
    config = tmp_path / "errcb.properties"
    config.write_text(
        secured.mm2_text(
            flow_body("t", "g") + "admin.timeout.ms = 10000\nscram.mirrorflow.connection = kafka_errcb\n",
            scram_password=wrong,
        )
    )
    extra = {"bootstrap.servers": secured.scram.bootstrap("scram"), "error_cb": ERROR_CB}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_ERRCB", json.dumps({"conn_type": "kafka", "extra": extra}))
    monkeypatch.setenv("AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST", ERROR_CB)
    calls = tmp_path / "error-calls"
    monkeypatch.setenv(ERROR_CALLS_ENV, str(calls))
    flow = load_flow(str(config), "scram->tls")
    with FlowClients(flow) as clients, pytest.raises(MirrorflowError) as failed:
        discover(flow, clients)
    assert "authentication failed (" in str(failed.value), failed.value
    assert calls.is_file() and "SASL" in calls.read_text(), "the connection's own error_cb saw the failure"
    assert wrong not in str(failed.value)
    del failed
    gc.collect()  # the failed call's frames hold its clients: freed before the module's brokers stop

"""Client keys under `<alias>.consumer.*`, `A->B.producer.*`...: librdkafka names pass, Java names are mapped or
dropped with a warning, and anything else is an error with its line and a did-you-mean. The stored name tables
are checked against the installed confluent-kafka and the Kafka release MM2 files target."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from mirrorflow.cli.app import main
from mirrorflow.config.classify import UNKNOWN_CLIENT_FIX
from mirrorflow.config.client_names import LIBRDKAFKA_SCOPES
from mirrorflow.config.issues import Issue
from mirrorflow.config.librdkafka import classify_client_key, to_librdkafka
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow

from .client_key_tables import JAVA_FILE, LIBRDKAFKA_FILE, java_file_text, librdkafka_file_text

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
NO_SUCH_PROPERTY = "No such configuration property"
SEEDS_THAT_VALIDATE = sorted(
    p.name
    for p in CONFIGS.glob("*.properties")
    if p.stem not in ("seed000_nearby_bare_keys", "seed001_trailing_comments")
)


def test_the_stored_librdkafka_names_are_those_of_the_installed_library() -> None:
    assert LIBRDKAFKA_FILE.read_text() == librdkafka_file_text(), (
        "confluent-kafka changed: run `PYTHONPATH=plugins python tests/config/client_key_tables.py`"
    )


@pytest.mark.integration  # runs Java on the Kafka jars the local clusters use
def test_the_stored_java_names_are_those_of_the_kafka_release() -> None:
    assert JAVA_FILE.read_text() == java_file_text(), (
        "the Kafka release changed: run `PYTHONPATH=plugins python tests/config/client_key_tables.py`"
    )


def _construct(make: Any, conf: dict[str, str]) -> None:
    client = make(conf)
    if isinstance(client, Consumer):
        client.close()


def test_confluent_kafka_knows_every_stored_name() -> None:
    with pytest.raises(KafkaException, match=NO_SUCH_PROPERTY):
        Producer({"fetch.max.byte": "1"})  # the check below can tell an unknown name
    for name, scope in LIBRDKAFKA_SCOPES.items():
        make, base = (Consumer, {"group.id": "g"}) if scope == "C" else (Producer, {})
        try:  # a value no property takes: refused as a value, or a client built (strings), never as a name
            _construct(make, {**base, "log_level": "0", name: "not a value!"})
        except (KafkaException, ValueError, TypeError) as err:
            assert NO_SUCH_PROPERTY not in str(err), name


@pytest.mark.parametrize(
    ("key", "kind", "detail"),
    [
        ("fetch.max.bytes", "librdkafka", ""),
        ("max.poll.interval.ms", "librdkafka", ""),
        ("request.timeout.ms", "librdkafka", ""),
        ("fetch.max.wait.ms", "translated", "used as librdkafka's fetch.wait.max.ms"),
        ("max.request.size", "translated", "used as librdkafka's message.max.bytes"),
        ("ssl.truststore.location", "translated", "rewritten into librdkafka's ssl.* / sasl.* settings"),
        ("key.serializer", "dropped", "records are copied as raw bytes"),
        ("value.deserializer", "dropped", "records are copied as raw bytes"),
        ("buffer.memory", "dropped", "librdkafka sizes its queue with queue.buffering.max.kbytes"),
        ("max.block.ms", "dropped", "a Java producer setting"),
        ("compression.gzip.level", "dropped", "a Java client setting librdkafka has no equivalent for"),
        ("sasl.login.refresh.window.factor", "dropped", "a Java client setting"),
        ("fetch.max.byte", "unknown", "fetch.max.bytes"),
        ("ssl.truststore.locaton", "unknown", "ssl.truststore.location"),
        ("sasl.login.refresh.window.facto", "unknown", "sasl.login.refresh.window.factor"),
        ("no.such.thing.at.all", "unknown", ""),
    ],
)
def test_classification(key: str, kind: str, detail: str) -> None:
    assert classify_client_key(key) == (kind, detail)


def test_the_translation_does_what_the_classification_says() -> None:
    from mirrorflow.config.client_names import JAVA_CLIENT_KEYS, LIBRDKAFKA_KEYS

    values = {"partition.assignment.strategy": "range", "auto.offset.reset": "earliest"}
    for key in sorted(LIBRDKAFKA_KEYS | JAVA_CLIENT_KEYS):
        kind, _ = classify_client_key(key)
        conf, notes = to_librdkafka({key: values.get(key, "x")})
        dropped = [what for k, what in notes if k == key and what.startswith("dropped")]
        if kind == "librdkafka":
            assert key in conf and not dropped, key
        if kind == "dropped":
            assert dropped and key not in conf, key


MIXED = """\
clusters = a, b
a.bootstrap.servers = 127.0.0.1:9
b.bootstrap.servers = 127.0.0.1:9
a->b.enabled = true
a.consumer.fetch.max.wait.ms = 200
a.consumer.key.deserializer = org.apache.kafka.common.serialization.ByteArrayDeserializer
b.producer.compression.gzip.level = 5
a->b.consumer.max.poll.interval.ms = 600000
a->b.target.producer.linger.ms = 20
"""


@pytest.mark.parametrize(
    ("line", "hint"),
    [
        ("a.producer.lingr.ms = 5", "a.producer.linger.ms"),
        ("a.admin.request.timeout = 5", "a.admin.request.timeout.ms"),
        ("a.ssl.truststore.locaton = /ca.pem", "a.ssl.truststore.location"),
        ("a->b.source.consumer.isolation.levl = read_committed", "a->b.source.consumer.isolation.level"),
        ("a->b.producer.override.acks.all = 1", None),
        ("a->b.target.admin.bogus.name = 1", None),
    ],
)
def test_every_place_a_client_key_is_written_is_checked(
    config_errors: Callable[..., list[Issue]], line: str, hint: str | None
) -> None:
    [issue] = config_errors(MIXED + line + "\n")
    assert (issue.line, issue.key) == (10, line.split(" = ")[0])
    assert issue.problem.startswith("unknown client setting")
    assert issue.fix == (f"did you mean {hint}?" if hint else UNKNOWN_CLIENT_FIX)


def test_a_connector_key_written_per_cluster_is_an_error(config_errors: Callable[..., list[Issue]]) -> None:
    [issue] = config_errors(MIXED + "a.admin.timeout.ms = 5000\n")
    assert (issue.line, issue.key) == (10, "a.admin.timeout.ms")
    assert "reaches the admin clients as timeout.ms" in issue.problem
    assert issue.fix == "write admin.timeout.ms (all flows) or <source>->a.admin.timeout.ms instead"


def _validate(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(["validate", str(path)])
    out, err = capsys.readouterr()
    return (exited.value.code if isinstance(exited.value.code, int) else 1), out, err


def test_validate_flags_a_typo_warns_on_java_only_keys_and_maps_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text(MIXED + "a.consumer.fetch.max.byte = 1048576\na->b.producer.lingr.ms = 5\n")
    code, _, err = _validate(capsys, path)
    assert code == 2
    errors = err.strip().splitlines()
    assert errors[0] == (
        f"{path}:10: a.consumer.fetch.max.byte: unknown client setting fetch.max.byte: neither the Java Kafka client "
        "nor librdkafka has it, so the client would refuse it when the flow starts. Did you mean "
        "a.consumer.fetch.max.bytes?"
    )
    assert errors[1].startswith(f"{path}:11: a->b.producer.lingr.ms: unknown client setting lingr.ms")
    assert errors[1].endswith("Did you mean a->b.producer.linger.ms?")
    assert len(errors) == 2

    path.write_text(MIXED)
    code, out, err = _validate(capsys, path)
    assert (code, err) == (0, "")
    assert f"{path}:6: a.consumer.key.deserializer: key.deserializer dropped: records are copied as raw bytes." in out
    assert f"{path}:7: b.producer.compression.gzip.level: compression.gzip.level dropped: a Java client" in out
    issues = [line for line in out.splitlines() if f"{path}:" in line]
    assert len(issues) == 2, issues  # the mapped and librdkafka keys are no news
    flow = load_config(path, environ={}).flow("a->b")
    assert flow.source_consumer.librdkafka()["fetch.wait.max.ms"] == "200"
    assert "key.deserializer" not in flow.source_consumer.librdkafka()


def _clients(flow: Flow) -> Iterator[tuple[Any, dict[str, str]]]:
    makers = {"consumer": Consumer, "producer": Producer, "admin": AdminClient}
    for side in ("source", "target"):
        for role, make in makers.items():
            conf = getattr(flow, f"{side}_{role}").librdkafka()
            conf["bootstrap.servers"] = "127.0.0.1:9"  # construction needs no broker; no DNS lookups either
            yield make, ({"group.id": "g", **conf} if role == "consumer" else conf)


@pytest.mark.parametrize("name", [*SEEDS_THAT_VALIDATE, "mixed"])
def test_a_config_validate_accepts_builds_real_librdkafka_clients(tmp_path: Path, name: str) -> None:
    path = CONFIGS / name if name != "mixed" else tmp_path / "mm2.properties"
    if name == "mixed":
        path.write_text(MIXED)
    config = load_config(path, environ={"SRC_PASSWORD": "s", "TGT_PASSWORD": "t"})
    seen: set[tuple[Any, tuple[tuple[str, str], ...]]] = set()
    for flow in [*config.flows, *config.heartbeat_flows]:
        for make, conf in _clients(flow):
            marker = (make, tuple(sorted(conf.items())))
            if marker not in seen:
                seen.add(marker)
                _construct(make, {**conf, "log_level": "0"})
    assert seen

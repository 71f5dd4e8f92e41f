"""`mirrorflow translate`: the JSON contract of docs/design.md §6 from checkpoints and live, bulk output, and clear
errors (exit 2 for a bad alias or option, 1 for an unreachable cluster)."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.cli.app import main
from mirrorflow.config.loader import load_config
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.checkpoints import emit_checkpoints
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane
from mirrorflow.replication.remote_cluster_utils import translate_offsets


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(["translate", *args])
    out, err = capsys.readouterr()
    code = exited.value.code
    return (0 if code is None else code if isinstance(code, int) else 1), out, err


def _config(path: Path, a: str, b: str, body: str = "") -> str:
    path.write_text(mm2_config_text({"A": a, "B": b}, "A->B.enabled = true\n" + body))
    return str(path)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_unknown_alias_and_bad_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path / "mm2.properties", "127.0.0.1:1", "127.0.0.1:1")
    code, out, err = _run(capsys, config, "--group", "g", "--source", "A", "--target", "C", "--json")
    assert (code, out) == (2, "")
    assert "unknown cluster alias 'C'" in err and "Traceback" not in err
    code, _, err = _run(capsys, config, "--group", "g", "--groups", "g.*", "--source", "A", "--target", "B")
    assert code == 2 and "exactly one of --group" in err
    code, _, err = _run(capsys, config, "--groups", "g(", "--source", "A", "--target", "B")
    assert code == 2 and "--groups" in err


@pytest.mark.parametrize("live", [False, True])
def test_unreachable_cluster_exits_1_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], live: bool
) -> None:
    port = f"127.0.0.1:{_closed_port()}"
    config = _config(tmp_path / "mm2.properties", port, port, "admin.timeout.ms = 1500\n")
    args = [config, "--group", "g", "--source", "A", "--target", "B", "--json"] + (["--live"] if live else [])
    code, out, err = _run(capsys, *args)
    assert (code, out) == (1, "")
    assert f"on cluster '{'A' if live else 'B'}' failed" in err and "Traceback" not in err


@pytest.mark.integration
def test_translate_prints_the_checkpointed_and_live_offsets(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
) -> None:
    topic = unique_topic("translate")
    remote = f"A.{topic}"
    prefix = f"tr-{uuid.uuid4().hex[:8]}-"
    kafka_admin("A").create_topics([NewTopic(topic, 2, 1)])[topic].result()
    producer = kafka_producer("A")
    for i in range(12):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    config = _config(
        tmp_path / "mm2.properties",
        kafka_clusters.bootstrap("A"),
        kafka_clusters.bootstrap("B"),
        f"A->B.topics = {topic}\nA->B.groups = {prefix}.*\n",
    )
    flow = load_config(config).flow("A->B")
    run_control_plane(flow, steps={TOPICS})
    tasks = plan_copy(flow, [SourcePartitions(topic, remote, 2)], interval=True)
    assert sum(copy_range(t).records for t in tasks) == 12
    admin = kafka_admin("A")
    for group, offsets in ((prefix + "one", {0: 2, 1: 6}), (prefix + "two", {1: 1})):
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, o) for p, o in offsets.items()])]
        for attempt in range(100):  # a fresh cluster's group coordinator may still be loading
            try:
                admin.alter_consumer_group_offsets(request)[group].result()
                break
            except KafkaException:
                if attempt == 99:
                    raise
                time.sleep(0.2)
    report = emit_checkpoints(flow)
    expected: dict[str, list[dict[str, Any]]] = {
        g: [
            {"topic": e.topic, "partition": e.partition, "offset": e.downstream_offset}
            for e in sorted(report.emitted, key=lambda e: (e.topic, e.partition))
            if e.group == g
        ]
        for g in (prefix + "one", prefix + "two")
    }
    assert [o["topic"] for o in expected[prefix + "one"]] == [remote, remote]

    base = [config, "--source", "A", "--target", "B"]
    code, out, err = _run(capsys, *base, "--group", prefix + "one", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == expected[prefix + "one"]
    code, out, _ = _run(capsys, *base, "--group", prefix + "one", "--json", "--live")
    assert code == 0 and json.loads(out) == expected[prefix + "one"], "live agrees with the fresh checkpoints"
    code, out, _ = _run(capsys, *base, "--groups", f"{prefix}.*", "--json")
    assert code == 0 and json.loads(out) == expected
    code, out, _ = _run(capsys, *base, "--groups", f"{prefix}.*", "--json", "--live")
    assert code == 0 and json.loads(out) == expected
    code, out, _ = _run(capsys, *base, "--group", prefix + "missing", "--json")
    assert code == 0 and json.loads(out) == []
    java_style = translate_offsets(load_config(config).clusters["B"], "A", prefix + "one", timeout_s=30)
    assert {tp: o.offset for tp, o in java_style.items()} == {
        (o["topic"], o["partition"]): o["offset"] for o in expected[prefix + "one"]
    }
    code, out, _ = _run(capsys, *base, "--group", prefix + "one")
    assert code == 0 and remote in out and str(expected[prefix + "one"][1]["offset"]) in out

"""`mirrorflow failover|failback`: exit 2 for bad input, 1 for a refused preflight (with the reason), and the
`--json` report of an unplanned failover whose records at risk are exactly what was not copied."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.cli.app import main
from mirrorflow.config.loader import load_config
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    code = exited.value.code
    return (0 if code is None else code if isinstance(code, int) else 1), out, err


def _config(path: Path, a: str, b: str, body: str = "A->B.enabled = true\n") -> str:
    path.write_text(
        f"clusters = A, B\nA.bootstrap.servers = {a}\nB.bootstrap.servers = {b}\n"
        "replication.factor = 1\ncheckpoints.topic.replication.factor = 1\nheartbeats.topic.replication.factor = 1\n"
        "offset-syncs.topic.replication.factor = 1\nadmin.timeout.ms = 20000\n" + body
    )
    return str(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--primary", "A", "--dr", "C"], "unknown cluster alias 'C'"),
        (["--primary", "A", "--dr", "A"], "two different cluster aliases"),
        (["--primary", "A", "--dr", "B", "--fence", "acl"], "--fence-principals"),
        (["--primary", "A", "--dr", "B", "--fence", "command"], "--fence-command"),
        (["--primary", "A", "--dr", "B", "--mode", "sideways"], "--mode sideways"),
        (["--primary", "A", "--dr", "B", "--redirect", "webhook"], "--redirect-target"),
        (["--primary", "A", "--dr", "B", "--groups", "g("], "--groups"),
        (["--primary", "A", "--dr", "B", "--unfence-command", "true"], "--unfence-command"),
    ],
)
def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    config = _config(tmp_path / "mm2.properties", "127.0.0.1:1", "127.0.0.1:1")
    code, out, err = _run(capsys, "failover", config, *args, "--state-dir", str(tmp_path / "s"))
    assert (code, out) == (2, ""), err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()


def test_failback_needs_the_reverse_flow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path / "mm2.properties", "127.0.0.1:1", "127.0.0.1:1")
    code, _, err = _run(capsys, "failback", config, "--primary", "A", "--dr", "B", "--state-dir", str(tmp_path))
    assert code == 2 and "reverse flow B->A" in err


def _commit(admin: AdminClient, group: str, offsets: dict[tuple[str, int], int]) -> None:
    partitions = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, partitions)])[group].result()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.integration
def test_refused_preflight_exits_1_and_unplanned_json_ledger(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
) -> None:
    topic = f"focli-{uuid.uuid4().hex[:8]}"
    prefix = f"focli-{uuid.uuid4().hex[:6]}-"
    kafka_admin("A").create_topics([NewTopic(topic, 1, 1)])[topic].result()
    body = (
        f"A->B.enabled = true\nA->B.topics = {topic}\nA->B.groups = {prefix}.*\n"
        # The session clusters are shared: other tests' heartbeats must not count in this flow's drain.
        "A->B.heartbeats.replication.enabled = false\n"
    )
    config = _config(tmp_path / "mm2.properties", kafka_clusters.bootstrap("A"), kafka_clusters.bootstrap("B"), body)
    flow = load_config(config).flow("A->B")
    producer = kafka_producer("A")
    for i in range(12):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    run_control_plane(flow, steps={TOPICS})
    assert (
        sum(copy_range(t).records for t in plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", 1)], interval=True))
        == 12
    )
    for i in range(7):
        producer.produce(topic, value=b"late%d" % i, partition=0)
    assert producer.flush(30) == 0
    _commit(kafka_admin("A"), prefix + "g", {(topic, 0): 10})
    common = [config, "--primary", "A", "--dr", "B", "--groups", f"{prefix}.*", "--json"]

    code, out, err = _run(capsys, "failover", *common, "--max-lag-records", "0", "--state-dir", str(tmp_path / "p"))
    assert code == 1 and "preflight" in err and "replication lag 7 records > --max-lag-records 0" in err
    refused = json.loads(out)
    assert refused["steps"][0]["status"] == "failed" and not refused["completed"]

    code, out, err = _run(capsys, "failover", *common, "--mode", "unplanned", "--state-dir", str(tmp_path / "u"))
    assert code == 0, err
    report = json.loads(out)
    assert report["mode"] == "unplanned" and report["fence"]["status"] == "unfenced"
    assert report["partitions"] == [
        {
            "topic": topic,
            "partition": 0,
            "remote_topic": f"A.{topic}",
            "source_end": 19,
            "copied_to": 12,
            "records_at_risk": 7,
        }
    ]
    assert report["data_loss_bound_records"] == 7
    (row,) = report["groups"]
    assert (row["upstream_offset"], row["translated_offset"], row["status"]) == (10, 10, "exact")
    assert (row["lag"], row["records_at_risk"]) == (9, 7)
    assert {s["name"]: s["status"] for s in report["steps"]}["fence"] == "skipped"

"""Runbook state and pause markers in Kafka, on real brokers: keyed by the clusters' `cluster.id`, seen from any
working directory, safe against a second writer.

The same-alias tests use the session's clusters A and B and a third cluster C: pair 1 is (A, B); pair 2 names C
"A" (same B); pair 3 names C "B". A runbook of pair 1 pauses only pair 1's flow, and pair 2's runbook does not
resume pair 1's. Pause markers left here are deleted at the end: the session clusters are shared. Also: a fenced
second writer, the bound on finished DAG runs, a completed CLI runbook that is finished history (flow resumed,
or a failback after it), markers and runbooks found while the source does not answer (a closed port: each such
test waits the 10 s source probe), an unknown target or an open transaction that makes the pause check say it
cannot tell, and the runbook topic's compaction settings (~2 min in all).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.kafka_helpers import KafkaKit, Topics
from tests.replication.helpers import failover_config
from tests.replication.runbook_helpers import mirrorflow, runbook_records, unpause_all

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.core.runbook_record import RUNBOOK_TOPIC, RunbookId, encode_value, pause_key
from mirrorflow.kafka.compacted_log import StalledReadError
from mirrorflow.kafka.produce import OutgoingRecord
from mirrorflow.kafka.runbook_store import RUNBOOK_SEGMENT_MS, RunbookFenced, ensure_runbook_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication import pause_markers
from mirrorflow.replication.failover import kafka_state
from mirrorflow.replication.failover.kafka_state import KafkaStateStore
from mirrorflow.replication.failover.options import FailoverOptions
from mirrorflow.replication.failover.runbook import run_failover
from mirrorflow.replication.failover.state import DONE
from mirrorflow.replication.failover.steps import pause_flow
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_cycle import flow_paused
from mirrorflow.replication.pause_markers import PauseUnknown, flow_clusters, unpause, write_pause_marker

pytestmark = pytest.mark.integration


@pytest.fixture
def pair(write_config: Callable[..., MirrorConfig], kafka: KafkaKit) -> Iterator[tuple[MirrorConfig, str]]:
    """A config mirroring a new topic and group from A to B; every pause marker of its flow is removed after."""
    group = f"rbs-{uuid.uuid4().hex[:8]}"
    config = failover_config(write_config, kafka.admin("A"), kafka.topic("rbs"), 1, group)
    yield config, group
    unpause_all(config.flow("A->B"))


def _renamed(tmp_path: Path, clusters: LocalClusters, name: str, bootstraps: dict[str, str], like: Flow) -> Flow:
    """The same flow A->B, but the aliases A and B given to other clusters."""
    return _flow_at(tmp_path, name, {a: clusters.bootstrap(c) for a, c in bootstraps.items()}, like)


def _flow_at(tmp_path: Path, name: str, addresses: dict[str, str], like: Flow, timeout_ms: int = 30000) -> Flow:
    """The same flow A->B with its aliases at `addresses` (CLOSED_PORT: a cluster that does not answer)."""
    path = tmp_path / f"{name}.properties"
    body = f"admin.timeout.ms = {timeout_ms}\nA->B.enabled = true\nA->B.topics = {','.join(like.topics)}\n"
    path.write_text(mm2_config_text(addresses, body))
    return load_config(path).flow("A->B")


CLOSED_PORT = "127.0.0.1:1"


def _paused(flow: Flow) -> str | None:
    with FlowClients(flow) as clients:
        return flow_paused(flow, clients, None)


def test_an_old_local_marker_does_not_pause_fresh_clusters_with_the_same_aliases(
    tmp_path: Path, pair: tuple[MirrorConfig, str]
) -> None:
    """The report of issue 18: a failover a->b in a checkout left `var/failover/.../paused-flow.json`; a new flow
    between other clusters called A and B, run from that checkout, was skipped because of it."""
    config, _ = pair
    checkout = tmp_path / "checkout"
    write_pause_marker(checkout / "var" / "failover" / "failover-A-B", "A->B", "failover A->B")
    result = mirrorflow(checkout, "run", str(config.path), "--once", "--no-copy", "--flow", "A->B")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "paused" not in result.stderr, result.stderr


def test_markers_and_state_of_another_pair_with_the_same_aliases_have_no_effect(
    tmp_path: Path, pair: tuple[MirrorConfig, str], kafka_cluster_c: LocalClusters
) -> None:
    config, group = pair
    first = config.flow("A->B")
    other_a = _renamed(tmp_path, kafka_cluster_c, "other-a", {"A": "C", "B": "B"}, first)
    other_b = _renamed(tmp_path, kafka_cluster_c, "other-b", {"A": "A", "B": "C"}, first)
    options = FailoverOptions(config=str(config.path), primary="A", dr="B", groups=group, restart=True)
    try:
        report = run_failover(options, steps=[("pause_flow", pause_flow)])
        assert [(s["name"], s["status"]) for s in report["steps"]] == [("pause_flow", DONE)]

        assert "paused by a failover A->B" in str(_paused(first))
        assert _paused(other_a) is None and _paused(other_b) is None
        # `mirrorflow run` from anywhere: pair 1's flow is skipped, pair 2's runs.
        skipped = mirrorflow(tmp_path / "m1", "run", str(config.path), "--once", "--no-copy", "--flow", "A->B")
        assert skipped.returncode == 0 and "skipped: flow A->B is paused by a failover A->B" in skipped.stderr
        other_path = tmp_path / "other-a.properties"
        ran = mirrorflow(tmp_path / "m2", "run", str(other_path), "--once", "--no-copy", "--flow", "A->B")
        assert ran.returncode == 0 and "paused" not in ran.stderr, ran.stderr[-2000:]

        # Pair 1's runbook resumes (its step is done); pair 2's, on the same B, is a runbook of its own.
        again = run_failover(replace(options, restart=False), steps=[("pause_flow", pause_flow)])
        assert [s["attempts"] for s in again["steps"]] == [1]
        theirs = run_failover(replace(options, config=str(other_path)), steps=[("pause_flow", pause_flow)])
        assert [(s["status"], s["attempts"]) for s in theirs["steps"]] == [(DONE, 1)]
        assert "paused" in str(_paused(other_a)) and "paused" in str(_paused(first))
        ours, theirs_id = _source_id(first), _source_id(other_a)
        runbooks = runbook_records(first)
        sources = {k[5] for k in runbooks if k[:4] == ("runbook", "failover", "A", "B") and k[6] == ""}
        assert ours != theirs_id and {ours, theirs_id} <= sources, "two runbooks, one per pair"
    finally:
        unpause_all(other_a)


def _source_id(flow: Flow) -> str | None:
    with FlowClients(flow) as clients:
        return flow_clusters(flow, clients, target_required=True)[flow.source]


def test_a_fenced_writer_cannot_overwrite_the_state_of_the_process_that_took_over(
    pair: tuple[MirrorConfig, str],
) -> None:
    """Two processes on one runbook (a zombie Airflow task and its retry): the newer fences the older, whose next
    write fails and leaves the newer state in place. Interleaved by hand, no timing."""
    config, _ = pair
    flow = config.flow("A->B")
    key = {"direction": "failover", "run": uuid.uuid4().hex}
    with FlowClients(flow) as older_clients, FlowClients(flow) as newer_clients:
        clusters = flow_clusters(flow, older_clients, target_required=True)
        runbook = RunbookId("failover", "A", "B", str(clusters["B"]), str(clusters["A"]), key["run"])
        older = KafkaStateStore(flow, older_clients, runbook, clusters)
        newer = KafkaStateStore(flow, newer_clients, runbook, clusters)
        with older.locked():
            state = older.open(key, ["preflight", "fence"], restart=False)
            state.step("preflight").status = DONE
            older.save(state)
            with newer.locked():  # takes over: the older writer is fenced
                taken = newer.open(key, ["preflight", "fence"], restart=False)
                assert taken.step("preflight").status == DONE, "the newer process reads the older one's writes"
                taken.step("fence").status = DONE
                newer.save(taken)
                state.step("fence").status = "failed"
                with pytest.raises(RunbookFenced, match="another process took over this runbook"):
                    older.save(state)
        stored = newer.load()
    assert stored is not None
    assert {s.name: s.status for s in stored.steps.values()} == {"preflight": DONE, "fence": DONE}


def test_finished_dag_runs_are_pruned_to_a_bound(
    pair: tuple[MirrorConfig, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One record per runbook, and of the finished DAG runs of a direction and pair only the newest are kept."""

    monkeypatch.setattr(kafka_state, "KEPT_RUNS", 2)
    config, _ = pair
    flow = config.flow("A->B")
    pair_name = uuid.uuid4().hex[:8]  # a pair of aliases of this test only: other tests' runbooks stay out
    with FlowClients(flow) as clients:
        clusters = flow_clusters(flow, clients, target_required=True)

        def finish(run: str) -> None:
            runbook = RunbookId("failover", f"P{pair_name}", f"D{pair_name}", str(clusters["B"]), "", run)
            store = KafkaStateStore(flow, clients, runbook, clusters)
            with store.locked():
                state = store.open({"run": run}, ["preflight"], restart=False)
                state.step("preflight").status = DONE
                store.save(state)
                store.save(state)  # overwritten, not appended: still one runbook

        for run in ("r1", "r2", "r3"):
            finish(run)
    runs = sorted(k[6] for k in runbook_records(flow) if k[0] == "runbook" and k[2] == f"P{pair_name}")
    assert runs == ["r2", "r3"], "r1 was pruned when r3 started; r2 is the newest finished one besides it"


def test_a_failback_keeps_its_state_on_the_primary_and_pauses_only_the_reverse_flow(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """Roles swapped: clients move back to A, so the runbook and the marker of B->A live in A's runbook topic."""
    topic = kafka.topic("rbback")
    config = write_config(f"A->B.enabled = true\nA->B.topics = {topic}\nB->A.enabled = true\nB->A.topics = {topic}\n")
    options = FailoverOptions(config=str(config.path), primary="A", dr="B", direction="failback", restart=True)
    try:
        report = run_failover(options, steps=[("pause_flow", pause_flow)])
        assert report["state_dir"].startswith("topic mirrorflow-runbook.internal on 'A'")
        assert "paused by a failback B->A" in str(_paused(config.flow("B->A")))
        assert _paused(config.flow("A->B")) is None
    finally:
        unpause_all(config.flow("B->A"))


def test_a_state_too_large_for_the_topic_says_how_to_fix_it(pair: tuple[MirrorConfig, str]) -> None:
    config, _ = pair
    flow = config.flow("A->B")
    with FlowClients(flow) as clients:
        clusters = flow_clusters(flow, clients, target_required=True)
        runbook = RunbookId("failover", "A", "B", str(clusters["B"]), str(clusters["A"]), uuid.uuid4().hex)
        store = KafkaStateStore(flow, clients, runbook, clusters)
        with store.locked():
            state = store.open({"run": runbook.run}, ["drain"], restart=False)
            store.save(state)
            state.step("drain").status = DONE
            state.step("drain").result = {"noise": os.urandom(1_500_000).hex()}  # ~1.5 MB after gzip
            with pytest.raises(MirrorflowError, match=r"raise the topic's max\.message\.bytes"):
                store.save(state)
        stored = store.load()
    assert stored is not None and stored.step("drain").status == "pending", "the refused write left nothing"


def _steps(report: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(s["name"], s["status"], s["attempts"]) for s in report["steps"]]


def test_a_new_cli_failover_after_the_flow_was_resumed_runs_again(
    pair: tuple[MirrorConfig, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Review R5: failover, unpause (the flow resumed, as after a failback), and a failover of the same pair later
    was a silent no-op that re-showed the old report. A re-run while the failover still holds (its marker in
    place) must stay a no-op; once the flow resumed, the next invocation is a new runbook; the old one is kept."""
    config, group = pair
    flow = config.flow("A->B")
    options = FailoverOptions(config=str(config.path), primary="A", dr="B", groups=group, restart=True)
    first = run_failover(options, steps=[("pause_flow", pause_flow)])
    again = run_failover(replace(options, restart=False), steps=[("pause_flow", pause_flow)])
    assert (
        _steps(again) == [("pause_flow", DONE, 1)]
        and again["steps"][0]["started_ms"] == first["steps"][0]["started_ms"]
    ), "a re-run: no-op"
    assert "completed at" in caplog.text and "nothing is redone" in caplog.text
    unpause_all(flow)
    assert _paused(flow) is None
    later = run_failover(replace(options, restart=False), steps=[("pause_flow", pause_flow)])
    assert later["steps"][0]["started_ms"] != first["steps"][0]["started_ms"], "a new runbook, not the finished one"
    assert "paused by a failover A->B" in str(_paused(flow)), "the new failover paused the flow again"
    kept = [v for k, v in runbook_records(flow).items() if k[:4] == ("report", "failover", "A", "B")]
    assert first["steps"][0]["started_ms"] in {v["report"]["steps"][0]["started_ms"] for v in kept}, (
        "the finished runbook's report is kept"
    )


def test_a_failback_supersedes_the_finished_failover_of_the_pair(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """Failover A->B, failback (its runbook on A), and a failover A->B again with A->B's marker still in place:
    the failback ended the first failover, so the new one runs."""
    topic = kafka.topic("rbsup")
    config = write_config(f"A->B.enabled = true\nA->B.topics = {topic}\nB->A.enabled = true\nB->A.topics = {topic}\n")
    options = FailoverOptions(config=str(config.path), primary="A", dr="B", groups=f"sup-{uuid.uuid4().hex[:8]}")
    try:
        first = run_failover(replace(options, restart=True), steps=[("pause_flow", pause_flow)])
        run_failover(replace(options, direction="failback", restart=True), steps=[("pause_flow", pause_flow)])
        later = run_failover(options, steps=[("pause_flow", pause_flow)])
        assert later["steps"][0]["started_ms"] != first["steps"][0]["started_ms"], (
            "the failback closed the first failover"
        )
    finally:
        unpause_all(config.flow("A->B"), config.flow("B->A"))


def test_a_planned_marker_holds_while_the_source_does_not_answer(
    tmp_path: Path, pair: tuple[MirrorConfig, str], kafka_clusters: LocalClusters
) -> None:
    """Review R2: a marker written with the source's real id was ignored (the flow ran) when the source did not
    answer, and `unpause` then said "not paused". With the source's id unknown, any marker of the aliases on
    this target applies."""
    config, group = pair
    flow = config.flow("A->B")
    options = FailoverOptions(config=str(config.path), primary="A", dr="B", groups=group, restart=True)
    run_failover(options, steps=[("pause_flow", pause_flow)])
    dead = _flow_at(tmp_path, "dead-source", {"A": CLOSED_PORT, "B": kafka_clusters.bootstrap("B")}, flow)
    assert "paused by a failover A->B" in str(_paused(dead))
    with FlowClients(dead) as clients:
        assert unpause(dead, clients), "unpause with the source down deletes the marker"
    assert _paused(flow) is None


def test_unpause_with_the_source_down_refuses_when_markers_name_several_sources(
    tmp_path: Path, pair: tuple[MirrorConfig, str], kafka_clusters: LocalClusters
) -> None:
    """Two clusters called A paused A->B on this B: with A down, which marker is meant cannot be told."""
    config, group = pair
    flow = config.flow("A->B")
    run_failover(
        FailoverOptions(config=str(config.path), primary="A", dr="B", groups=group, restart=True),
        steps=[("pause_flow", pause_flow)],
    )
    with FlowClients(flow) as clients:
        other = pause_key("A", "B", str(flow_clusters(flow, clients, target_required=True)["B"]), "another-a")
        clients.target_writer.write([OutgoingRecord(RUNBOOK_TOPIC, 0, other, encode_value({"reason": "x"}, {}))])
        try:
            dead = _flow_at(tmp_path, "dead-source", {"A": CLOSED_PORT, "B": kafka_clusters.bootstrap("B")}, flow)
            with FlowClients(dead) as dead_clients, pytest.raises(UsageError, match="cannot be told"):
                unpause(dead, dead_clients)
            assert "paused" in str(_paused(flow)), "nothing was deleted"
        finally:
            clients.target_writer.write([OutgoingRecord(RUNBOOK_TOPIC, 0, other, None)])


def test_a_runbook_begun_with_the_source_up_resumes_while_it_is_down(pair: tuple[MirrorConfig, str]) -> None:
    """Review R2: the runbook written under the source's id was not found by a process that could not read it."""
    config, _ = pair
    flow = config.flow("A->B")
    key = {"run": uuid.uuid4().hex}
    with FlowClients(flow) as clients:
        clusters = flow_clusters(flow, clients, target_required=True)
        up = RunbookId("failover", "A", "B", str(clusters["B"]), str(clusters["A"]), key["run"])
        store = KafkaStateStore(flow, clients, up, clusters)
        with store.locked():
            state = store.open(key, ["preflight", "fence"], restart=False)
            state.step("preflight").status = DONE
            store.save(state)
        down = KafkaStateStore(flow, clients, replace(up, source_id=""), {**clusters, "A": None})
        with down.locked():
            resumed = down.open(key, ["preflight", "fence"], restart=False)
    assert resumed.step("preflight").status == DONE


def test_a_target_that_does_not_answer_skips_the_cycle(tmp_path: Path, pair: tuple[MirrorConfig, str]) -> None:
    """Review: flow_paused said "not paused" when the target's id could not be read, so `mirrorflow run` ran that
    cycle's steps if the target answered a moment later. Unknown is not "not paused"."""
    config, _ = pair
    flow = config.flow("A->B")
    dead = _flow_at(
        tmp_path,
        "dead-target",
        {"A": flow.source_admin.librdkafka()["bootstrap.servers"], "B": CLOSED_PORT},
        flow,
        2000,
    )
    with FlowClients(dead) as clients, pytest.raises(PauseUnknown, match="did not answer"):
        flow_paused(dead, clients, None)


def test_a_killed_runbook_writer_does_not_hold_pause_checks(pair: tuple[MirrorConfig, str], kafka: KafkaKit) -> None:
    """Review R4: a writer killed inside a transaction on the runbook topic held every pause check for ~37 s (its
    transaction timeout and the abort). Held open by hand here: the check waits a few seconds, then says it
    cannot tell; once the transaction ends, it answers."""
    config, _ = pair
    flow = config.flow("A->B")
    with FlowClients(flow) as clients:
        ensure_runbook_topic(clients.target_admin, "B", RUNBOOK_TOPIC, 1, 30)
    held: Any = kafka.producer("B", {"transactional.id": f"held-{uuid.uuid4().hex}", "transaction.timeout.ms": 120000})
    held.init_transactions(30)
    held.begin_transaction()
    held.produce(RUNBOOK_TOPIC, key=b'["held"]', value=b"{}", partition=0)
    assert held.flush(10) == 0
    try:
        started = time.monotonic()
        with FlowClients(flow) as clients, pytest.raises(PauseUnknown, match="open transaction"):
            flow_paused(flow, clients, None)
        assert time.monotonic() - started < 15
    finally:
        held.abort_transaction(30)
    assert _paused(flow) is None


def test_a_runbook_topic_that_cannot_be_read_makes_the_pause_unknown_not_a_crash(
    pair: tuple[MirrorConfig, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: only an open transaction became "unknown"; a stalled read (no leader) escaped as an error that
    killed `mirrorflow run` and failed (and retried) Airflow tasks instead of skipping them."""
    config, _ = pair
    flow = config.flow("A->B")
    with FlowClients(flow) as clients:
        ensure_runbook_topic(clients.target_admin, "B", RUNBOOK_TOPIC, 1, 30)

    def stalled(*_args: Any, **_kwargs: Any) -> Any:
        raise StalledReadError("the broker delivered nothing (a partition without a leader)")

    monkeypatch.setattr(pause_markers, "read_latest", stalled)
    with FlowClients(flow) as clients, pytest.raises(PauseUnknown, match="could not be read"):
        flow_paused(flow, clients, None)


def test_the_runbook_topic_is_compacted_within_the_hour(
    pair: tuple[MirrorConfig, str], kafka: KafkaKit, topics: Topics
) -> None:
    """Review: created without segment.ms, the active segment (all of a quiet topic) was not compacted for days."""
    config, _ = pair
    name = kafka.topic("rbtopic")  # a topic of its own: the session's runbook topic may predate this test
    with FlowClients(config.flow("A->B")) as clients:
        ensure_runbook_topic(clients.target_admin, "B", name, 1, 30)
    found = topics.configs("B", name)
    assert found["segment.ms"][0] == str(RUNBOOK_SEGMENT_MS) and found["cleanup.policy"][0] == "compact"

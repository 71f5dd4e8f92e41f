"""Pure parts of the failover runbook: the state file (resume, refusal of a different failover), fence
verification arithmetic, the bootstrap redirect record a client reads, and option validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorflow.config.loader import load_config
from mirrorflow.core.bootstrap_redirect import BootstrapRedirect, decode_redirect, encode_redirect, resolve
from mirrorflow.core.errors import UsageError
from mirrorflow.core.offset_map import OffsetMap
from mirrorflow.core.runbook_record import RUNBOOK_TOPIC
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.failover.drill import groups_check
from mirrorflow.replication.failover.fencing import moved, verify_writes_stopped
from mirrorflow.replication.failover.options import FailoverOptions
from mirrorflow.replication.failover.redirect import reverse_flow_lines
from mirrorflow.replication.failover.state import DONE, StateStore
from mirrorflow.replication.flow_rules import FlowRules
from mirrorflow.replication.offset_translation import FlowOffsetMaps, Translation
from mirrorflow.replication.pause_markers import paused_flows, write_pause_marker


def test_state_resumes_the_same_failover_and_refuses_another(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    key = {"direction": "failover", "primary": "A", "dr": "B", "mode": "planned", "groups": None}
    state = store.open(key, ["preflight", "fence"], restart=False)
    state.step("preflight").status = DONE
    state.step("preflight").result = {"source_reachable": True}
    store.save(state)
    again = store.open(key, ["preflight", "fence", "drain"], restart=False)
    assert again.step("preflight").status == DONE and again.result("preflight") == {"source_reachable": True}
    assert again.step("drain").status == "pending" and not again.completed()
    with pytest.raises(UsageError, match="different failover"):
        store.open({**key, "mode": "unplanned"}, ["preflight"], restart=False)
    assert store.open({**key, "mode": "unplanned"}, ["preflight"], restart=True).step("preflight").status == "pending"
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(UsageError, match="--restart"):
        store.load()


def test_pause_markers_are_found_by_flow(tmp_path: Path) -> None:
    marker = write_pause_marker(tmp_path / "failover-A-B", "A->B", "failover")
    assert paused_flows(tmp_path) == {"A->B": marker}


def test_fence_verification_reports_what_moved() -> None:
    samples = iter([{("t", 0): 5, ("t", 1): 9}, {("t", 0): 5, ("t", 1): 12}])
    ends, grew = verify_writes_stopped(lambda: next(samples), 0.0, sleep=lambda s: None)
    assert ends == {("t", 0): 5, ("t", 1): 12} and grew == {"t-1": 3}
    assert moved({("t", 0): 1}, {("t", 0): 1}) == {}


def test_redirect_record_round_trips_and_the_newest_matching_wins() -> None:
    old = BootstrapRedirect("orders-.*", "b1:9092", "B", "A", "failover", 100)
    new = BootstrapRedirect("orders-.*", "a1:9092", "A", "B", "failback", 200)
    other = BootstrapRedirect("billing", "b1:9092", "B", "A", "failover", 300)
    decoded = [decode_redirect(*encode_redirect(r)) for r in (old, new, other)]
    assert decoded == [old, new, other]
    assert resolve(decoded, "orders-eu") == new
    assert resolve(decoded, "payments") is None
    assert decode_redirect(b"orders-.*", None) is None
    with pytest.raises(ValueError, match="version"):
        decode_redirect(b"x", b'{"version": 9}')


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"fence": "acl", "fence_principals": ("bob",)}, "Type:name"),
        ({"redirect": "webhook", "redirect_target": "ftp://x"}, "http"),
        ({"max_lag_records": -1}, "0 or more"),
        ({"fence": "dance"}, "--fence dance"),
        ({"fence": "none", "unfence_command": "true"}, "--unfence-command"),
    ],
)
def test_options_are_validated(changes: dict[str, object], message: str) -> None:
    options = FailoverOptions(config="c", primary="A", dr="B", **changes)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=message):
        options.validate()
    assert (options.source, options.target) == ("A", "B")
    back = FailoverOptions(config="c", primary="A", dr="B", direction="failback")
    assert (back.source, back.target) == ("B", "A")


def test_local_state_is_an_explicit_override_never_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`$MIRRORFLOW_STATE_DIR` (where `mirrorflow run` and the flow DAGs then also look for pause markers) or
    `--state-dir` keep the state on disk; unset, nothing depends on the working directory: the state is in Kafka."""
    options = FailoverOptions(config="c", primary="A", dr="B", direction="failback")
    monkeypatch.setenv("MIRRORFLOW_STATE_DIR", str(tmp_path / "root"))
    assert options.state_path() == tmp_path / "root" / "failback-A-B"
    monkeypatch.delenv("MIRRORFLOW_STATE_DIR")
    monkeypatch.chdir(tmp_path)
    assert options.state_path() is None
    given = FailoverOptions(config="c", primary="A", dr="B", state_dir=str(tmp_path / "mine"))
    assert given.state_path() == tmp_path / "mine"


def test_flow_offset_maps_invert_exactly_and_say_when_they_cannot() -> None:
    forward = OffsetMap(start=0)
    forward.record_run(0, 0, 4)  # upstream 0-3
    forward.record_run(6, 5, 2)  # 4-5 were a transaction marker and an aborted record; our marker at 4
    forward.mark_consumed(8, downstream_end=8)  # our last commit marker at 7
    maps = FlowOffsetMaps({("orders", 0): forward})
    assert [maps.untranslate("orders", 0, d).offset for d in range(10)] == [0, 1, 2, 3, 6, 6, 7, 8, 8, 8]
    assert {maps.untranslate("orders", 0, d).status for d in range(10)} == {"exact"}
    assert maps.untranslate("orders", 1, 3) == Translation(None, "not-copied")


def test_the_runbook_topic_is_never_replicated(tmp_path: Path) -> None:
    """Runbook state and pause markers belong to their cluster: a `.*` flow must not copy them elsewhere."""
    path = tmp_path / "mm2.properties"
    path.write_text(
        mm2_config_text({"B": "127.0.0.1:1", "C": "127.0.0.1:2"}, "B->C.enabled = true\nB->C.topics = .*\n")
    )
    rules = FlowRules.of(load_config(path).flow("B->C"))
    assert not rules.should_replicate_topic(RUNBOOK_TOPIC)
    assert rules.should_replicate_topic("mirrorflow-runbooks-of-an-app")


def test_the_reverse_flows_snippet_keeps_the_forward_flows_selection(tmp_path: Path) -> None:
    """The way back selects what the way out selects: excludes and filter classes too (review, issue 21), or a
    failback would copy home topics and groups the operator had left out."""
    path = tmp_path / "mm2.properties"
    forward = (
        "A->B.enabled = true\nA->B.topics = orders.*\nA->B.topics.exclude = orders-tmp\n"
        "A->B.groups = app-.*\nA->B.groups.exclude = app-test\n"
        "A->B.topic.filter.class = mirrorflow.core.topic_filter.DefaultTopicFilter\n"
    )
    path.write_text(mm2_config_text({"A": "127.0.0.1:1", "B": "127.0.0.1:2"}, forward))
    lines = reverse_flow_lines(load_config(path).flow("A->B"))
    assert lines == [
        "B->A.enabled = true",
        "B->A.topics = orders.*",
        "B->A.topics.exclude = orders-tmp",
        "B->A.groups = app-.*",
        "B->A.groups.exclude = app-test",
        "B->A.topic.filter.class = mirrorflow.core.topic_filter.DefaultTopicFilter",
    ]
    path.write_text(mm2_config_text({"A": "127.0.0.1:1", "B": "127.0.0.1:2"}, "A->B.enabled = true\n"))
    assert reverse_flow_lines(load_config(path).flow("A->B")) == ["B->A.enabled = true", "B->A.topics = .*"]


def test_a_drill_fails_a_group_that_would_read_records_again() -> None:
    """The drill promised "resume exactly" for a group whose translation lies in a thinned run (conservative)
    or re-reads on a reverse copy; it names the group, the partition and the bound instead."""
    exact = {"group": "audit", "topic": "orders", "partition": 1, "status": "exact"}
    thinned = {
        "group": "billing",
        "topic": "orders",
        "partition": 0,
        "status": Translation(120, "conservative", 37).label,
    }
    reread = {"group": "crm", "topic": "orders", "partition": 2, "status": "re-read"}
    assert groups_check({"groups": [exact], "skipped_groups": []}).passed
    check = groups_check({"groups": [exact, thinned, reread], "skipped_groups": []})
    assert not check.passed
    assert (
        check.detail
        == "would read records again: billing (orders-0 conservative (<= 37 re-reads)); crm (orders-2 re-read)"
    )

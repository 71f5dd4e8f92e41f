"""A DAG run's supervision of a leased copy application (`copy_supervisor.Supervisor`) against stand-ins for the
runbook topic's records, the submission and the clock: adopt or submit, and when to stop watching or fail. The
whole of it on real brokers and Spark: tests/spark/test_copy_app_live.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.replication.copy_app import LEASE, AppState
from mirrorflow.replication.copy_supervisor import ApplicationFailed, Supervisor

NOW = 10_000_000


def flow(tmp_path: Any) -> Flow:
    path = tmp_path / "mm2.properties"
    path.write_text(
        "clusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = b:9092\nA->B.enabled = true\n"
        "A->B.mirrorflow.copy.mode = continuous\nA->B.mirrorflow.copy.round.seconds = 60\n"
    )
    return load_config(path).flow("A->B")


class Records:
    """The lease and heartbeat as a script of states (one per read, the last repeated), and the writes."""

    def __init__(self, states: list[AppState]) -> None:
        self.states, self.reads, self.writes = states, 0, []  # type: ignore[var-annotated]
        self.now = NOW
        self.submitted: list[str] = []

    def read(self) -> AppState:
        self.reads += 1
        return self.states[min(self.reads - 1, len(self.states) - 1)]

    def write(self, kind: str, body: Mapping[str, Any]) -> None:
        self.writes.append((kind, dict(body)))

    def sleep(self, seconds: float) -> None:
        self.now += int(seconds * 1000)

    def supervisor(self, f: Flow, run_s: float = 30) -> Supervisor:
        def submit(app: str, seconds: float, started_ms: int) -> Any:
            self.submitted.append(app)
            return Running()

        return Supervisor(
            f,
            "cfg",
            NOW + int(run_s * 1000),
            "run 1",
            submit,
            self.read,
            self.write,
            wall_ms=lambda: self.now,
            sleep=self.sleep,
            gone=lambda beat: False,
        )


class Running:
    pid = 0

    def poll(self) -> int | None:
        return None

    def stop(self) -> None:
        pass

    def failure(self) -> str:
        return "log tail"


def beat(app: str = "app-1", at: int = NOW - 1000, config: str = "cfg", **more: Any) -> dict[str, Any]:
    return {"app": app, "at_ms": at, "config": config, "round": 3, "counts": {"records": 10}, **more}


def lease(app: str = "app-1", until: int = NOW + 200_000, config: str = "cfg") -> dict[str, Any]:
    return {"app": app, "until_ms": until, "by": "run 0", "config": config, "submitted_ms": NOW - 60_000}


@pytest.mark.parametrize("left_ms", [None, 20_000])  # 45 s: its ranges run past the lease, it reads the extension
def test_a_live_application_of_the_same_configuration_is_adopted_and_its_lease_extended(
    tmp_path: Any, left_ms: int | None
) -> None:
    later = beat(at=NOW + 20_000, counts={"records": 25})
    held = lease() if left_ms is None else lease(until=NOW + left_ms)
    records = Records([AppState(held, beat()), AppState(held, later)])
    summary = records.supervisor(flow(tmp_path)).supervise()
    assert records.submitted == [] and summary["adopted"] and summary["app"] == "app-1"
    assert summary["records"] == 15, "what the application copied while this run watched it"
    kind, body = records.writes[0]
    assert kind == LEASE and body["app"] == "app-1" and body["until_ms"] > NOW + 30_000


@pytest.mark.parametrize(
    "before",
    [
        AppState(None, None),
        AppState(lease(config="other"), beat(config="other")),  # the configuration or the code changed
        AppState(lease(), beat(at=NOW - 600_000)),  # stale
        AppState(lease(), beat(ended="failed: x")),
        AppState(lease(until=NOW + 5_000), beat()),  # too little lease left for it to see the extension in time
    ],
)
def test_otherwise_a_new_application_is_submitted_under_a_new_lease(tmp_path: Any, before: AppState) -> None:
    records = Records([before])
    f = flow(tmp_path)

    def read() -> AppState:
        records.reads += 1
        if records.reads == 1 or not records.submitted:
            return before
        return AppState(lease(app=records.submitted[0]), beat(app=records.submitted[0], at=records.now))

    records.read = read  # type: ignore[method-assign]
    summary = records.supervisor(f).supervise()
    assert len(records.submitted) == 1 and not summary["adopted"]
    assert records.writes[0][0] == LEASE and records.writes[0][1]["app"] == records.submitted[0]


def test_an_application_that_stops_beating_fails_the_task(tmp_path: Any) -> None:
    records = Records([AppState(lease(), beat())])  # never beats again
    with pytest.raises(ApplicationFailed, match="stopped beating"):
        records.supervisor(flow(tmp_path), run_s=600).supervise()


def test_an_application_that_ended_with_an_error_fails_the_task_and_a_paused_one_ends_it(tmp_path: Any) -> None:
    failed = Records([AppState(lease(), beat()), AppState(lease(), beat(ended="failed: boom"))])
    with pytest.raises(ApplicationFailed, match="boom"):
        failed.supervisor(flow(tmp_path)).supervise()
    paused = Records([AppState(lease(), beat()), AppState(lease(), beat(ended="paused: flow A->B is paused"))])
    assert paused.supervisor(flow(tmp_path)).supervise()["paused"].startswith("paused")


def test_a_run_that_lost_the_lease_to_a_new_application_stops_watching(tmp_path: Any) -> None:
    records = Records([AppState(lease(), beat()), AppState(lease(app="app-2", until=NOW + 2_000_000), beat())])
    summary = records.supervisor(flow(tmp_path), run_s=600).supervise()
    assert summary["app"] == "app-1" and records.now < NOW + 600_000


def test_a_new_holder_whose_lease_ends_before_this_runs_is_extended_and_watched(tmp_path: Any) -> None:
    """An older run's retry submitted app-2 with a lease to its own (past) end: the run watching app-1 extends
    app-2's lease to its own and watches it (review of session 21: it stopped watching, nobody extended app-2,
    and replication stopped until the next DAG run without an error)."""
    short = lease(app="app-2", until=NOW + 100_000)
    states = [AppState(lease(), beat()), AppState(short, beat())]
    states += [
        AppState({**short, "until_ms": NOW + 900_000}, beat(app="app-2", at=NOW + 10_000 * i)) for i in range(1, 9)
    ]
    records = Records(states)
    summary = records.supervisor(flow(tmp_path), run_s=30).supervise()
    assert summary["app"] == "app-2" and summary["adopted"]
    assert any(
        kind == LEASE and body["app"] == "app-2" and body["until_ms"] > NOW + 100_000 for kind, body in records.writes
    )


def test_a_holder_that_has_not_beaten_yet_is_adopted_and_the_lease_never_shortened(tmp_path: Any) -> None:
    """A newer run submitted app-2 moments ago (its lease, with an older application's last heartbeat): an older
    run's retry adopts it rather than submitting a third one (review of session 21: it submitted, and the claims
    of its older run start stranded every partition), and keeps the newer run's later lease end."""
    held = lease(app="app-2", until=NOW + 900_000)
    records = Records([AppState(held, beat()), AppState(held, beat(app="app-2", at=NOW + 10_000))])
    summary = records.supervisor(flow(tmp_path)).supervise()
    assert records.submitted == [] and summary["app"] == "app-2" and summary["adopted"]
    assert records.writes[0][1]["until_ms"] == NOW + 900_000


def test_a_handed_over_application_that_ended_is_not_a_failure(tmp_path: Any) -> None:
    """Its last heartbeat says it ended, but the lease moved to a new application: the run stops watching."""
    moved = lease(app="app-2", until=NOW + 2_000_000)
    records = Records([AppState(lease(), beat()), AppState(moved, beat(ended="its lease ran out"))])
    assert records.supervisor(flow(tmp_path), run_s=600).supervise()["app"] == "app-1"


def test_a_holder_that_never_beat_is_not_adopted_after_its_start_wait(tmp_path: Any) -> None:
    """Its spark-submit died before the first heartbeat (review of session 21: adopted forever, every run failed
    and replication stayed down): past the start wait a new one is submitted."""
    held = {**lease(app="app-2"), "submitted_ms": NOW - 601_000}
    records = Records([AppState(held, beat())])
    f = flow(tmp_path)

    def read() -> AppState:
        records.reads += 1
        if not records.submitted:
            return AppState(held, beat())
        return AppState(lease(app=records.submitted[0]), beat(app=records.submitted[0], at=records.now))

    records.read = read  # type: ignore[method-assign]
    records.supervisor(f).supervise()
    assert len(records.submitted) == 1


def test_a_lease_taken_by_a_copy_without_one_ends_the_watch(tmp_path: Any) -> None:
    """Rounds were turned off: the next DAG run's copy task takes the lease (`revoke_lease`: no application). The
    run watching the leased application stops watching (review of session 21: it took the empty lease for a new
    holder and waited 10 minutes for its heartbeat, then failed and its retry submitted another application)."""
    revoked = {"app": "", "until_ms": 0, "by": "DAG run 2", "config": ""}
    records = Records([AppState(lease(), beat()), AppState(revoked, beat())])
    summary = records.supervisor(flow(tmp_path), run_s=600).supervise()
    assert summary["app"] == "app-1" and records.now < NOW + 60_000
    assert all(body["app"] == "app-1" for _, body in records.writes), "the empty lease is not extended"

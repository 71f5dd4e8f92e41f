"""What a DAG run's copy task does with a leased copy application (`copy_app`): adopt the running one or submit
a new one, then watch its heartbeat until the DAG run's end. Spark and Airflow stay outside: the submission is a
callable (`airflow/spark.py` starts a detached `spark-submit`), so the decisions are tested on their own
(tests/replication/test_copy_supervisor.py) and on real brokers and Spark (tests/spark/test_copy_app_live.py).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from mirrorflow.config.model import Flow
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.replication.copy_app import (
    LEASE,
    PAUSED,
    AppState,
    Watch,
    lease_until_ms,
    new_app_id,
    process_gone,
    stale_s,
)

log = logging.getLogger(__name__)

ADOPT_AHEAD_S = 10.0
"""How much lease an adopted application must have left: time for this run's extension to be written before the
application reads its lease at its end (a read and a write; its ranges run past the lease, so nothing else needs
time). A DAG run that starts late after a run without overlap still adopts (the live test's runs, under load,
started 16 s after the previous run's end: 27 s of lease left)."""

POLL_S = 5.0
START_WAIT_S = 600.0
"""How long a submitted application may take to beat for the first time (a cold JVM and Spark on a busy host,
the first round's discovery and plan)."""


class Launched(Protocol):
    """A submitted application's `spark-submit` process, as far as this task can see it."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def stop(self) -> None:
        """Ends the process group (its lease could not be written)."""
        ...

    def failure(self) -> str:
        """What its output says (the last lines), for an error message."""
        ...


Submit = Callable[[str, float, int], Launched]
"""(application id, seconds of lease it starts with, its claims' start in epoch ms) -> the process submitted. A
leased application's claims start at its submission, not at its DAG run's start: whichever run or try submits
last owns the partitions, so an older run's retry that submits after a newer run cannot strand them."""


class ApplicationFailed(MirrorflowError):
    """The supervised copy application ended with an error or stopped beating: Airflow's retry submits anew."""


@dataclass
class Supervisor:
    """One DAG run's supervision of a flow's leased copy application (see `copy_app`)."""

    flow: Flow
    config: str
    """`copy_app.config_id` of what this DAG run would submit."""
    run_end_ms: int
    by: str
    """Who supervises: the DAG run id and try, for the lease record and the log."""
    submit: Submit
    read: Callable[[], AppState]
    write: Callable[[str, Mapping[str, Any]], None]
    wall_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    sleep: Callable[[float], None] = time.sleep
    gone: Callable[[Mapping[str, Any]], bool] = process_gone
    poll_s: float = POLL_S
    start_wait_s: float = START_WAIT_S
    _until: int = 0
    _begun: int = 0

    def supervise(self) -> dict[str, Any]:
        """Adopts or submits, then watches until the DAG run's end; returns this run's totals (`Watch.summary`).
        Raises `ApplicationFailed` when the application fails, stops beating, or never beats."""
        state, now = self.read(), self.wall_ms()
        until = self._until = lease_until_ms(self.flow, self.run_end_ms, now)
        stale = stale_s(self.flow)
        beat = state.holder_beat()
        ahead_s = ADOPT_AHEAD_S
        adoptable = state.adoptable(now, stale, ahead_s, self.config, self.start_wait_s)
        if adoptable and state.lease and not self.gone(beat or state.lease):  # the lease names its spark-submit
            lease = state.lease
            watch = Watch(str(lease["app"]), True, dict((beat or {}).get("counts") or {}), beat)
            # never shorten it: an older run's retry may adopt after a newer run extended it
            self.write(LEASE, {**lease, "until_ms": max(until, int(lease.get("until_ms", 0))), "by": self.by})
            log.info(
                "flow %s: copy application %s adopted (round %s)", self.flow.name, watch.app, (beat or {}).get("round")
            )
            return self._watch(watch, None, int(lease.get("submitted_ms", now)), stale)
        gone = state.lease is not None and self.gone(beat or state.lease)
        why = "its driver is gone" if gone else _why_new(state, now, stale, self.config)
        watch = Watch(new_app_id(self.flow), False)
        log.info("flow %s: copy application %s submitted (%s)", self.flow.name, watch.app, why)
        if state.lease is not None:  # a newer run's longer lease is kept: it may have stopped watching already
            until = max(until, int(state.lease.get("until_ms", 0)))
        launched = self.submit(watch.app, (until - now) / 1000, now)
        try:  # after the submission: a lease naming an application that never started would stop the running one
            body = {"app": watch.app, "until_ms": until, "by": self.by, "config": self.config, "submitted_ms": now}
            self.write(LEASE, {**body, "host": socket.gethostname(), "pid": launched.pid})
        except BaseException:
            launched.stop()
            raise
        return self._watch(watch, launched, now, stale)

    def _watch(self, watch: Watch, launched: Launched | None, begun: int, stale: float) -> dict[str, Any]:
        last_ok, mine = begun, watch.app
        self._begun = begun
        while True:
            now = self.wall_ms()
            if now >= self.run_end_ms and watch.last is not None:
                return watch.summary()
            if launched is not None and watch.app == mine and (code := launched.poll()) is not None:
                return self._ended(watch, launched, code)
            try:
                state = self.read()
                last_ok = now
            except MirrorflowError as err:
                if now - last_ok > stale * 1000:
                    raise ApplicationFailed(
                        self._where(watch) + f"; its heartbeat could not be read for {stale:.0f} s: {err}"
                    ) from err
                log.warning("%s; its heartbeat could not be read now: %s", self._where(watch), err)
                self.sleep(self.poll_s)
                continue
            done = self._look(watch, state, now, self._begun, stale)
            if done is not None:
                return done
            self.sleep(self.poll_s)

    def _look(self, watch: Watch, state: AppState, now: int, begun: int, stale: float) -> dict[str, Any] | None:
        """One look at the records: the task's totals when it stops watching, None to watch on; raises."""
        lease = state.lease
        if lease is not None and not lease.get("app"):  # an unleased copy took it (`revoke_lease`): handed over
            log.warning(
                "flow %s: %s copies without a lease now; this run stops watching %s",
                self.flow.name,
                lease.get("by"),
                watch.app,
            )
            return watch.summary()
        if lease is not None and lease.get("app") != watch.app and int(lease.get("until_ms", 0)) < self._until:
            # A newer holder whose lease ends before this run's would: extend it and watch it instead (the run
            # that submitted it may have ended, and nobody would extend it until the next DAG run).
            try:
                self.write(LEASE, {**lease, "until_ms": self._until, "by": self.by})
            except MirrorflowError as err:  # tried again at the next look
                log.warning("flow %s: the lease of %s could not be extended now: %s", self.flow.name, lease["app"], err)
                return None
            log.warning(
                "flow %s: copy application %s took over from %s; watching it", self.flow.name, lease["app"], watch.app
            )
            watch.app, watch.adopted, watch.first, watch.last = str(lease["app"]), True, {}, None
            self._begun = int(lease.get("submitted_ms", now))
            return None
        if lease is not None and lease.get("app") != watch.app:  # before its end: a handed-over end is no failure
            log.warning(
                "flow %s: %s took the lease for copy application %s; this run stops watching %s",
                self.flow.name,
                lease.get("by"),
                lease.get("app"),
                watch.app,
            )
            return watch.summary()
        beat = state.beat if state.beat is not None and state.beat.get("app") == watch.app else None
        if beat is not None:
            watch.last = beat
            ended = beat.get("ended")
            if ended and str(ended).startswith(PAUSED):
                log.warning("flow %s: copy application %s ended: %s", self.flow.name, watch.app, ended)
                return {**watch.summary(), "paused": str(ended)}
            if ended:
                raise ApplicationFailed(f"{self._where(watch)} ended: {ended}")
            if self.gone(beat):
                raise ApplicationFailed(
                    f"{self._where(watch)}: its driver (pid {beat.get('pid')} on {beat.get('host')}) is gone without a "
                    "last heartbeat (killed?); the next try submits a new one"
                )
        if watch.last is None:
            if now - begun > self.start_wait_s * 1000:
                raise ApplicationFailed(
                    f"{self._where(watch)} did not beat within {self.start_wait_s:.0f} s of its submission"
                )
        elif now - int(watch.last.get("at_ms", 0)) > stale * 1000:
            raise ApplicationFailed(
                f"{self._where(watch)} stopped beating: its last heartbeat (round {watch.last.get('round')}) is "
                f"{(now - int(watch.last.get('at_ms', 0))) / 1000:.0f} s old; the next try submits a new one, which "
                "fences it"
            )
        return None

    def _ended(self, watch: Watch, launched: Launched, code: int) -> dict[str, Any]:
        """The submitted `spark-submit` ended while this run watched it."""
        try:
            state = self.read()
        except MirrorflowError:
            state = AppState(None, None)
        app = watch.app
        done = None if code else self._look(watch, state, self.wall_ms(), self.wall_ms(), float("inf"))
        if done is not None:
            return done
        if watch.app != app:  # it lost the lease to another application, which this run now watches
            return self._watch(watch, None, self._begun, stale_s(self.flow))
        raise ApplicationFailed(f"{self._where(watch)} ended with exit code {code}: {launched.failure()}")

    def _where(self, watch: Watch) -> str:
        return f"flow {self.flow.name}: copy application {watch.app} (supervised by {self.by})"


def _why_new(state: AppState, now: int, stale: float, config: str) -> str:
    lease, beat = state.lease, state.holder_beat()
    if lease is None:
        return "none ran before"
    if lease.get("config") != config:
        return f"the configuration or code changed since {lease.get('app')} started; it hands over to the new one"
    if beat is not None and beat.get("ended"):
        return f"the last one ended: {beat['ended']}"
    if beat is not None and now - int(beat.get("at_ms", 0)) >= stale * 1000:
        return f"the last one, {lease.get('app')}, beat {(now - int(beat.get('at_ms', 0))) / 1000:.0f} s ago"
    if beat is None:
        return f"{lease.get('app')} did not beat in time after its submission"
    return f"the lease of {lease.get('app')} ends too soon for it to read an extension"

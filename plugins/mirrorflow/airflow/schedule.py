"""`mirrorflow.schedule` → what `DAG(schedule=...)` takes: `@continuous`, a preset, a cron string or an interval.

Intervals are written the way operators write them (`30s`, `5m`, `1h30m`) or as ISO 8601 durations (`PT30S`,
`P1DT12H`); both become a `timedelta`, which Airflow runs as a `DeltaTriggerTimetable`. Years and months have
no fixed length, so they are refused with a pointer to cron. Cron strings are returned as they are: the factory
validates them with Airflow's own timetable, which knows Airflow's cron dialect.
"""

from __future__ import annotations

import re
from datetime import timedelta

from mirrorflow.config.model import Flow

CONTINUOUS = "@continuous"
MANUAL = {"none", "@none", "manual"}
PRESETS = {CONTINUOUS, "@once", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly"}

_UNIT_SECONDS = {
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "w": 604800,
    "week": 604800,
    "weeks": 604800,
}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
_HUMAN = re.compile(r"(?:\d+(?:\.\d+)?\s*[a-z]+\s*)+")
_ISO = re.compile(
    r"P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?"
)
_FIX = (
    "use @continuous, a preset (@hourly, @daily...), a cron string such as `*/5 * * * *`, "
    "an interval such as 30s, 5m or 1h30m, or an ISO 8601 duration such as PT30S"
)

Schedule = str | timedelta | None


class ScheduleError(ValueError):
    """`problem` and `fix` are kept apart so the caller can pin them to the key and line they came from."""

    def __init__(self, problem: str, fix: str = _FIX) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem = problem
        self.fix = fix


def parse_schedule(text: str) -> Schedule:
    """The DAG schedule for a `mirrorflow.schedule` value; cron strings come back unchanged (validate them)."""
    value = text.strip()
    lowered = value.lower()
    if not value:
        raise ScheduleError("the schedule is empty")
    if lowered in MANUAL:
        return None
    if lowered.startswith("@"):
        if lowered in PRESETS:
            return lowered
        raise ScheduleError(f"{value!r} is not a schedule preset Mirrorflow knows")
    if lowered.startswith("p"):
        return _positive(value, _iso_duration(value))
    if _HUMAN.fullmatch(lowered):
        return _positive(value, _human_interval(value, lowered))
    if len(value.split()) in (5, 6, 7):
        return value
    raise ScheduleError(f"{value!r} is neither a cron string nor an interval")


def _human_interval(value: str, lowered: str) -> timedelta:
    seconds = 0.0
    for number, unit in _PART.findall(lowered):
        if unit not in _UNIT_SECONDS:
            raise ScheduleError(f"{value!r}: unknown unit {unit!r} (use s, m, h, d or w)")
        seconds += float(number) * _UNIT_SECONDS[unit]
    return timedelta(seconds=seconds)


def _iso_duration(value: str) -> timedelta:
    upper = value.upper()
    match = _ISO.fullmatch(upper)
    parts = {k: float(v) for k, v in match.groupdict().items() if v is not None} if match else {}
    if not parts:
        if re.match(r"P[^T]*\d[YM]", upper):
            raise ScheduleError(
                f"{value!r}: years and months have no fixed length",
                "use a cron string (e.g. `0 0 1 * *` for monthly) or a duration in weeks, days, hours, "
                "minutes or seconds",
            )
        raise ScheduleError(f"{value!r} is not an ISO 8601 duration")
    return timedelta(**parts)


def _positive(value: str, interval: timedelta) -> timedelta:
    if interval < timedelta(seconds=1):
        raise ScheduleError(f"{value!r} is shorter than one second", "use 1s or more, or @continuous")
    return interval


def overlapping_runs(flow: Flow, schedule: Schedule) -> timedelta | None:
    """The interval at which a continuous flow's DAG runs start so that they overlap, or None when they do not;
    `schedule` is the flow's, parsed.

    Under `@continuous` one run starts only once the previous one ended, so every boundary stops replication for
    a run's whole start (discovery, spark-submit, a Spark session: ~37 s on the 2-core test host, `make
    bench-deployed`). An exactly-once flow left at `@continuous` instead starts a run every `run.seconds -
    handover.seconds` with two runs allowed at once: the next run's copy starts while the current one still
    copies, its transactional producers fence the current copy's (same ids), and the fenced copy ends as handed
    over (`copy_loop.CopyLoop`). Replication then pauses for one transaction, not for a start. At-least-once
    copies have no fence, and two of them on one partition at once could skip records: they never overlap. Nor
    do flows with their own schedule, or with `mirrorflow.copy.handover.seconds` 0 or not below
    `mirrorflow.copy.run.seconds`. The overlap is what remains of `handover.seconds` once the next run has
    started: a start slower than it leaves a gap, never a double copy.
    """
    handover, run = flow.copy_handover_seconds, flow.copy_run_seconds
    if flow.copy_mode != "continuous" or flow.delivery != "exactly-once" or schedule != CONTINUOUS:
        return None
    return timedelta(seconds=run - handover) if 0 < handover < run else None

"""`mirrorflow.schedule` values → DAG schedules, with the errors an operator sees for the rest."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mirrorflow.airflow.schedule import ScheduleError, parse_schedule


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("@continuous", "@continuous"),
        (" @Continuous ", "@continuous"),
        ("@hourly", "@hourly"),
        ("@once", "@once"),
        ("none", None),
        ("manual", None),
        ("*/5 * * * *", "*/5 * * * *"),
        ("0 3 * * MON-FRI", "0 3 * * MON-FRI"),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("5 minutes", timedelta(minutes=5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1w", timedelta(weeks=1)),
        ("1.5h", timedelta(minutes=90)),
        ("PT30S", timedelta(seconds=30)),
        ("pt1m30s", timedelta(seconds=90)),
        ("P1DT12H", timedelta(hours=36)),
        ("P2W", timedelta(weeks=2)),
    ],
)
def test_valid_schedules(text: str, expected: object) -> None:
    assert parse_schedule(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the schedule is empty"),
        ("@fortnightly", "'@fortnightly' is not a schedule preset"),
        ("every tuesday", "'every tuesday' is neither a cron string nor an interval"),
        ("5 parsecs", "unknown unit 'parsecs'"),
        ("0s", "'0s' is shorter than one second"),
        ("PT0.5S", "shorter than one second"),
        ("P1M", "years and months have no fixed length"),
        ("P1Y2D", "years and months have no fixed length"),
        ("PT", "'PT' is not an ISO 8601 duration"),
        ("P1H", "'P1H' is not an ISO 8601 duration"),
    ],
)
def test_invalid_schedules_say_what_is_wrong_and_what_to_write(text: str, message: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(text)
    assert message in caught.value.problem
    assert caught.value.fix

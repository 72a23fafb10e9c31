"""The offline EventBridge Scheduler fires a zoned cron() across daylight saving as AWS does.

EventBridge Scheduler skips a cron time that does not exist on a spring-forward day and
runs a time that happens twice on a fall-back day once; rate() is elapsed time.  The
offline poller (local/sources/scheduler.py) asks chalicelib's next_fire, so the local
runtime fires what the deployed schedules would.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from local.sources.scheduler import next_due


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def schedule(expression: str, tz: str, created: datetime) -> dict[str, Any]:
    return {"Name": "s", "ScheduleExpression": expression, "ScheduleExpressionTimezone": tz,
            "CreationDate": created}


def invocations_on(expression: str, tz: str, day: date) -> list[str]:
    """The offline scheduler's invocations on the local calendar ``day``, as local time with offset."""
    zone = ZoneInfo(tz)
    begin = datetime.combine(day, datetime.min.time(), zone).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), datetime.min.time(), zone).astimezone(UTC)
    created = begin - timedelta(days=1)
    seen: list[str] = []
    due = next_due(schedule(expression, tz, created), begin - timedelta(seconds=1))
    while due is not None and due < end:
        seen.append(due.astimezone(zone).strftime("%H:%M%z"))
        due = next_due(schedule(expression, tz, created), due)
    return seen


@pytest.mark.parametrize(("expression", "tz", "day", "expected"), [
    # spring forward: 02:30 (01:30 in London) does not exist that day: no invocation
    ("cron(30 2 * * ? *)", "America/New_York", date(2026, 3, 8), []),
    ("cron(30 1 * * ? *)", "Europe/London", date(2026, 3, 29), []),
    ("cron(30 2 * * ? *)", "Australia/Sydney", date(2026, 10, 4), []),
    ("cron(0,30 1-3 * * ? *)", "America/New_York", date(2026, 3, 8),
     ["01:00-0500", "01:30-0500", "03:00-0400", "03:30-0400"]),
    # fall back: 01:30 (02:30 in Sydney) happens twice: one invocation, the first
    ("cron(30 1 * * ? *)", "America/New_York", date(2026, 11, 1), ["01:30-0400"]),
    ("cron(30 1 * * ? *)", "Europe/London", date(2026, 10, 25), ["01:30+0100"]),
    ("cron(30 2 * * ? *)", "Australia/Sydney", date(2026, 4, 5), ["02:30+1100"]),
    ("cron(0,30 1-2 * * ? *)", "America/New_York", date(2026, 11, 1),
     ["01:00-0400", "01:30-0400", "02:00-0500", "02:30-0500"]),
    # no DST
    ("cron(30 2 * * ? *)", "Asia/Kolkata", date(2026, 3, 8), ["02:30+0530"]),
    ("cron(30 2 * * ? *)", "Asia/Kolkata", date(2026, 11, 1), ["02:30+0530"]),
])
def test_the_offline_scheduler_skips_a_missing_local_time_and_runs_a_repeated_one_once(
        expression: str, tz: str, day: date, expected: list[str]) -> None:
    assert invocations_on(expression, tz, day) == expected


@pytest.mark.parametrize(("tz", "after", "expected"), [
    ("America/New_York", utc(2026, 3, 7, 12, 0), utc(2026, 3, 8, 12, 0)),
    ("Europe/London", utc(2026, 10, 24, 12, 0), utc(2026, 10, 25, 12, 0)),
    ("Australia/Sydney", utc(2026, 4, 4, 12, 0), utc(2026, 4, 5, 12, 0)),
])
def test_the_offline_scheduler_runs_a_rate_on_elapsed_time_across_daylight_saving(
        tz: str, after: datetime, expected: datetime) -> None:
    assert next_due(schedule("rate(1 day)", tz, after), after) == expected

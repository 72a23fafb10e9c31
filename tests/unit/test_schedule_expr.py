"""next_fire: when an EventBridge rate(), cron() or at() expression fires next (table-driven)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from chalicelib.schedule_expr import InvalidScheduleExpression, next_fire, parse_cron


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


# 2026-11-22 is a Sunday.
SUNDAY_NOON = utc(2026, 11, 22, 12, 0, 0)

CRON_UTC = [
    # expression, after, expected
    ("cron(* * * * ? *)", SUNDAY_NOON, utc(2026, 11, 22, 12, 1)),
    ("cron(* * * * ? *)", utc(2026, 11, 22, 12, 0, 30), utc(2026, 11, 22, 12, 1)),
    ("cron(0/15 * * * ? *)", SUNDAY_NOON, utc(2026, 11, 22, 12, 15)),
    ("cron(5/20 * * * ? *)", SUNDAY_NOON, utc(2026, 11, 22, 12, 5)),
    ("cron(10-12 * * * ? *)", utc(2026, 11, 22, 12, 11), utc(2026, 11, 22, 12, 12)),
    ("cron(10-12 * * * ? *)", utc(2026, 11, 22, 12, 12), utc(2026, 11, 22, 13, 10)),
    ("cron(0,30 8 * * ? *)", SUNDAY_NOON, utc(2026, 11, 23, 8, 0)),
    ("cron(0 22-2 * * ? *)", SUNDAY_NOON, utc(2026, 11, 22, 22, 0)),        # wrapping hour range
    ("cron(0 22-2 * * ? *)", utc(2026, 11, 22, 23, 30), utc(2026, 11, 23, 0, 0)),
    ("cron(0 9 ? * MON-FRI *)", SUNDAY_NOON, utc(2026, 11, 23, 9, 0)),      # Sunday -> Monday
    ("cron(0 9 ? * MON-FRI *)", utc(2026, 11, 27, 9, 0), utc(2026, 11, 30, 9, 0)),  # Friday -> Monday
    ("cron(0 9 ? * 2-6 *)", utc(2026, 11, 27, 9, 0), utc(2026, 11, 30, 9, 0)),      # same, by number
    ("cron(0 9 ? * FRI-MON *)", utc(2026, 11, 24, 0, 0), utc(2026, 11, 27, 9, 0)),  # wrapping day range
    ("cron(0 9 ? * SUN *)", SUNDAY_NOON, utc(2026, 11, 29, 9, 0)),
    ("cron(0 12 1 * ? *)", SUNDAY_NOON, utc(2026, 12, 1, 12, 0)),
    ("cron(0 12 31 * ? *)", SUNDAY_NOON, utc(2026, 12, 31, 12, 0)),         # November has no 31st
    ("cron(0 12 31 * ? *)", utc(2026, 12, 31, 12, 0), utc(2027, 1, 31, 12, 0)),
    ("cron(0 12 31 * ? *)", utc(2027, 1, 31, 12, 0), utc(2027, 3, 31, 12, 0)),  # nor February
    ("cron(0 0 29 2 ? *)", SUNDAY_NOON, utc(2028, 2, 29, 0, 0)),           # next leap year
    ("cron(0 0 1 JAN,JUL ? *)", SUNDAY_NOON, utc(2027, 1, 1, 0, 0)),
    ("cron(0 0 1 */3 ? *)", SUNDAY_NOON, utc(2027, 1, 1, 0, 0)),
    ("cron(0 12 L * ? *)", SUNDAY_NOON, utc(2026, 11, 30, 12, 0)),
    ("cron(0 12 L * ? *)", utc(2026, 11, 30, 12, 0), utc(2026, 12, 31, 12, 0)),
    ("cron(0 12 L * ? *)", utc(2028, 2, 1), utc(2028, 2, 29, 12, 0)),
    ("cron(0 12 L-2 * ? *)", SUNDAY_NOON, utc(2026, 11, 28, 12, 0)),
    ("cron(0 12 LW * ? *)", utc(2027, 1, 1), utc(2027, 1, 29, 12, 0)),     # Jan 31 2027 is a Sunday
    ("cron(0 12 15W * ? *)", utc(2026, 11, 1), utc(2026, 11, 16, 12, 0)),  # 15th Sunday -> Monday 16th
    ("cron(0 12 14W * ? *)", utc(2026, 11, 1), utc(2026, 11, 13, 12, 0)),  # 14th Saturday -> Friday 13th
    ("cron(0 12 1W * ? *)", utc(2026, 8, 1), utc(2026, 8, 3, 12, 0)),      # 1st Saturday -> Monday 3rd
    ("cron(0 12 31W * ? *)", utc(2026, 5, 1), utc(2026, 5, 29, 12, 0)),    # 31st Sunday -> Friday 29th
    ("cron(0 12 ? * 6L *)", SUNDAY_NOON, utc(2026, 11, 27, 12, 0)),        # last Friday
    ("cron(0 12 ? * FRIL *)", utc(2026, 11, 27, 12, 0), utc(2026, 12, 25, 12, 0)),
    ("cron(0 12 ? * 6#3 *)", SUNDAY_NOON, utc(2026, 12, 18, 12, 0)),       # third Friday
    ("cron(0 12 ? * MON#5 *)", SUNDAY_NOON, utc(2026, 11, 30, 12, 0)),     # fifth Monday, where there is one
    ("cron(0 12 ? * MON#5 *)", utc(2026, 11, 30, 12, 0), utc(2027, 3, 29, 12, 0)),
    ("cron(0 8 1 1 ? 2028-2030)", SUNDAY_NOON, utc(2028, 1, 1, 8, 0)),
    ("cron(0 8 1 1 ? 2027/2)", utc(2027, 1, 1, 8, 0), utc(2029, 1, 1, 8, 0)),
    ("cron(0 0 1 1 ? 2020)", SUNDAY_NOON, None),                           # only in the past
    ("cron(0 0 30 2 ? *)", SUNDAY_NOON, None),                             # never
]


@pytest.mark.parametrize(("expression", "after", "expected"), CRON_UTC)
def test_cron_fires_at_the_next_matching_utc_minute(expression: str, after: datetime,
                                                    expected: datetime | None) -> None:
    assert next_fire(expression, after) == expected


CRON_ZONED = [
    # expression, time zone, after, expected (UTC)
    ("cron(0 9 * * ? *)", "Europe/Paris", SUNDAY_NOON, utc(2026, 11, 23, 8, 0)),      # CET = UTC+1
    ("cron(0 9 * * ? *)", "Europe/Paris", utc(2026, 7, 1), utc(2026, 7, 1, 7, 0)),    # CEST = UTC+2
    ("cron(0 9 ? * MON *)", "Asia/Tokyo", SUNDAY_NOON, utc(2026, 11, 23, 0, 0)),      # Monday 9:00 JST
    ("cron(0 0 L * ? *)", "America/New_York", utc(2026, 11, 30, 4, 0), utc(2026, 11, 30, 5, 0)),
    # spring forward (2026-03-08 in New York): 02:30 does not exist, it fires an hour later, once
    ("cron(30 2 * * ? *)", "America/New_York", utc(2026, 3, 7, 12, 0), utc(2026, 3, 8, 7, 30)),
    ("cron(30 2 * * ? *)", "America/New_York", utc(2026, 3, 8, 7, 30), utc(2026, 3, 9, 6, 30)),
    # 02:30 (skipped, fires at 03:30 EDT) comes after 03:00 EDT, which must not be lost
    ("cron(0,30 2-3 * * ? *)", "America/New_York", utc(2026, 3, 8, 6, 59), utc(2026, 3, 8, 7, 0)),
    # fall back (2026-11-01): 01:30 happens twice and fires once, at the first
    ("cron(30 1 * * ? *)", "America/New_York", utc(2026, 10, 31, 12, 0), utc(2026, 11, 1, 5, 30)),
    ("cron(30 1 * * ? *)", "America/New_York", utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)),
]


@pytest.mark.parametrize(("expression", "tz", "after", "expected"), CRON_ZONED)
def test_cron_fields_are_wall_clock_time_in_the_time_zone(expression: str, tz: str, after: datetime,
                                                          expected: datetime) -> None:
    assert next_fire(expression, after, tz) == expected


RATE = [
    # expression, after, start, expected
    ("rate(5 minutes)", SUNDAY_NOON, None, utc(2026, 11, 22, 12, 5)),
    ("rate(1 hour)", utc(2026, 11, 22, 12, 0, 7), None, utc(2026, 11, 22, 13, 0, 7)),
    ("rate(2 days)", SUNDAY_NOON, None, utc(2026, 11, 24, 12, 0)),
    ("rate(5 minutes)", SUNDAY_NOON, utc(2026, 11, 22, 11, 58), utc(2026, 11, 22, 12, 3)),
    ("rate(5 minutes)", utc(2026, 11, 22, 12, 3), utc(2026, 11, 22, 11, 58), utc(2026, 11, 22, 12, 8)),
    ("rate(5 minutes)", utc(2026, 11, 22, 11, 0), utc(2026, 11, 22, 11, 58), utc(2026, 11, 22, 12, 3)),
]


@pytest.mark.parametrize(("expression", "after", "start", "expected"), RATE)
def test_rate_fires_one_period_after_its_start_or_previous_firing(
        expression: str, after: datetime, start: datetime | None, expected: datetime) -> None:
    assert next_fire(expression, after, start=start) == expected


AT = [
    # expression, time zone, after, expected
    ("at(2026-11-22T12:30:00)", "UTC", SUNDAY_NOON, utc(2026, 11, 22, 12, 30)),
    ("at(2026-11-22T12:30:00)", "UTC", utc(2026, 11, 22, 12, 30), None),
    ("at(2026-11-22T12:30:00)", "Europe/Paris", SUNDAY_NOON, None),                   # 11:30 UTC
    ("at(2026-11-22T12:30:00)", "America/New_York", SUNDAY_NOON, utc(2026, 11, 22, 17, 30)),
]


@pytest.mark.parametrize(("expression", "tz", "after", "expected"), AT)
def test_at_fires_once_at_its_time_in_the_time_zone(expression: str, tz: str, after: datetime,
                                                    expected: datetime | None) -> None:
    assert next_fire(expression, after, tz) == expected


def test_a_parsed_expression_is_accepted_as_well_as_text() -> None:
    assert next_fire(parse_cron("cron(0 12 * * ? *)"), SUNDAY_NOON) == utc(2026, 11, 23, 12, 0)


def test_naive_and_non_utc_times_are_read_as_the_instants_they_name() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert next_fire("cron(0 * * * ? *)", datetime(2026, 11, 22, 12, 0)) == utc(2026, 11, 22, 13, 0)
    assert next_fire("cron(0 * * * ? *)", datetime(2026, 11, 22, 14, 0, tzinfo=plus_two)) == utc(2026, 11, 22, 13, 0)


def test_the_result_is_always_strictly_after_and_in_utc() -> None:
    moment = next_fire("cron(0 12 * * ? *)", utc(2026, 11, 22, 12, 0))
    assert moment == utc(2026, 11, 23, 12, 0)
    assert moment is not None and moment.tzinfo is UTC


def test_an_unknown_time_zone_is_rejected_by_name() -> None:
    with pytest.raises(InvalidScheduleExpression, match="Mars/Olympus"):
        next_fire("cron(0 12 * * ? *)", SUNDAY_NOON, "Mars/Olympus")


def test_an_expression_that_never_fires_again_answers_quickly() -> None:
    started = time.perf_counter()
    assert next_fire("cron(0 0 31 2 ? *)", SUNDAY_NOON) is None
    assert time.perf_counter() - started < 1.0


def test_successive_firings_of_a_cron_walk_forward_without_gaps() -> None:
    moment = SUNDAY_NOON
    seen = []
    for _ in range(4):
        nxt = next_fire("cron(0/20 12 * * ? *)", moment)
        assert nxt is not None
        seen.append(nxt)
        moment = nxt
    assert seen == [utc(2026, 11, 22, 12, 20), utc(2026, 11, 22, 12, 40),
                    utc(2026, 11, 23, 12, 0), utc(2026, 11, 23, 12, 20)]

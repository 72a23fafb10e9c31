"""next_fire: when an EventBridge rate(), cron() or at() expression fires next (table-driven)."""

from __future__ import annotations

import re
import time
from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from chalicelib.schedule_expr import InvalidScheduleExpression, parse_cron
from chalicelib.schedule_fire import next_fire


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
    ("cron(0 12 LW * ? *)", utc(2027, 1, 1), utc(2027, 1, 29, 12, 0)),     # Jan 31 2027 is a Sunday
    ("cron(0 12 15W * ? *)", utc(2026, 11, 1), utc(2026, 11, 16, 12, 0)),  # 15th Sunday -> Monday 16th
    ("cron(0 12 14W * ? *)", utc(2026, 11, 1), utc(2026, 11, 13, 12, 0)),  # 14th Saturday -> Friday 13th
    ("cron(0 12 1W * ? *)", utc(2026, 8, 1), utc(2026, 8, 3, 12, 0)),      # 1st Saturday -> Monday 3rd
    ("cron(0 12 31W * ? *)", utc(2026, 5, 1), utc(2026, 5, 29, 12, 0)),    # 31st Sunday -> Friday 29th
    ("cron(0 12 ? * L *)", SUNDAY_NOON, utc(2026, 11, 28, 12, 0)),         # the last day of the week: Saturday
    ("cron(0 12 ? * L *)", utc(2026, 11, 28, 12, 0), utc(2026, 12, 5, 12, 0)),
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
]


@pytest.mark.parametrize(("expression", "tz", "after", "expected"), CRON_ZONED)
def test_cron_fields_are_wall_clock_time_in_the_time_zone(expression: str, tz: str, after: datetime,
                                                          expected: datetime) -> None:
    assert next_fire(expression, after, tz) == expected


# Daylight saving, as EventBridge Scheduler documents it: a local time that does not exist
# (spring forward) is skipped, one that happens twice (fall back) fires once, at the first.
# 2026 transitions:
#   America/New_York  Mar  8 02:00 EST -> 03:00 EDT (07:00Z)   Nov  1 02:00 EDT -> 01:00 EST (06:00Z)
#   Europe/London     Mar 29 01:00 GMT -> 02:00 BST (01:00Z)   Oct 25 02:00 BST -> 01:00 GMT (01:00Z)
#   Australia/Sydney  Oct  4 02:00 AEST -> 03:00 AEDT (Oct 3 16:00Z)
#                     Apr  5 03:00 AEDT -> 02:00 AEST (Apr 4 16:00Z)   (southern hemisphere)
#   Australia/Lord_Howe  Oct 4 02:00 -> 02:30 (+10:30 -> +11)   Apr 5 02:00 -> 01:30 (+11 -> +10:30)
#   Asia/Kolkata      no DST (+05:30 all year)
CRON_DST = [
    # expression, tz, after, expected
    # -- spring forward: the missing local time is skipped that day, not moved an hour later
    ("cron(30 2 * * ? *)", "America/New_York", utc(2026, 3, 7, 12, 0), utc(2026, 3, 9, 6, 30)),
    ("cron(30 2 * * ? *)", "America/New_York", utc(2026, 3, 8, 6, 59), utc(2026, 3, 9, 6, 30)),
    ("cron(30 2 * * ? *)", "America/New_York", utc(2026, 3, 6, 12, 0), utc(2026, 3, 7, 7, 30)),   # the day before
    ("cron(0 2 * * ? *)", "America/New_York", utc(2026, 3, 7, 12, 0), utc(2026, 3, 9, 6, 0)),     # 02:00 is gone too
    ("cron(59 2 * * ? *)", "America/New_York", utc(2026, 3, 7, 12, 0), utc(2026, 3, 9, 6, 59)),
    ("cron(0 3 * * ? *)", "America/New_York", utc(2026, 3, 7, 12, 0), utc(2026, 3, 8, 7, 0)),     # 03:00 EDT exists
    ("cron(59 1 * * ? *)", "America/New_York", utc(2026, 3, 7, 12, 0), utc(2026, 3, 8, 6, 59)),   # 01:59 EST exists
    ("cron(0,30 2-3 * * ? *)", "America/New_York", utc(2026, 3, 8, 6, 59), utc(2026, 3, 8, 7, 0)),
    ("cron(0,30 2-3 * * ? *)", "America/New_York", utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 7, 30)),
    ("cron(0,30 2-3 * * ? *)", "America/New_York", utc(2026, 3, 8, 7, 30), utc(2026, 3, 9, 6, 0)),   # 02:00 EDT
    ("cron(30 * * * ? *)", "America/New_York", utc(2026, 3, 8, 6, 30), utc(2026, 3, 8, 7, 30)),   # 01:30 -> 03:30
    ("cron(30 2 ? * SUN *)", "America/New_York", utc(2026, 3, 1, 12, 0), utc(2026, 3, 15, 6, 30)),  # a week lost
    ("cron(30 1 * * ? *)", "Europe/London", utc(2026, 3, 28, 12, 0), utc(2026, 3, 30, 0, 30)),
    ("cron(30 1 * * ? *)", "Europe/London", utc(2026, 3, 27, 12, 0), utc(2026, 3, 28, 1, 30)),
    ("cron(30 * * * ? *)", "Europe/London", utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 30)),     # 00:30 -> 02:30 BST
    ("cron(30 2 * * ? *)", "Australia/Sydney", utc(2026, 10, 3, 0, 0), utc(2026, 10, 4, 15, 30)),
    ("cron(30 2 * * ? *)", "Australia/Sydney", utc(2026, 10, 2, 0, 0), utc(2026, 10, 2, 16, 30)),
    ("cron(30 * * * ? *)", "Australia/Sydney", utc(2026, 10, 3, 15, 30), utc(2026, 10, 3, 16, 30)),  # 01:30 -> 03:30
    ("cron(15 2 * * ? *)", "Australia/Lord_Howe", utc(2026, 10, 3, 0, 0), utc(2026, 10, 4, 15, 15)),  # half-hour jump
    ("cron(45 2 * * ? *)", "Australia/Lord_Howe", utc(2026, 10, 3, 0, 0), utc(2026, 10, 3, 15, 45)),  # after it
    ("cron(30 2 * * ? *)", "Asia/Kolkata", utc(2026, 3, 7, 12, 0), utc(2026, 3, 7, 21, 0)),
    ("cron(30 2 * * ? *)", "Asia/Kolkata", utc(2026, 10, 3, 0, 0), utc(2026, 10, 3, 21, 0)),
    # -- fall back: the repeated local time fires once, at its first occurrence
    ("cron(30 1 * * ? *)", "America/New_York", utc(2026, 10, 31, 12, 0), utc(2026, 11, 1, 5, 30)),
    ("cron(30 1 * * ? *)", "America/New_York", utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)),
    ("cron(30 1 * * ? *)", "America/New_York", utc(2026, 11, 1, 6, 10), utc(2026, 11, 2, 6, 30)),  # in the repeat
    ("cron(30 * * * ? *)", "America/New_York", utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 7, 30)),  # 01:30 -> 02:30 EST
    ("cron(30 * * * ? *)", "America/New_York", utc(2026, 11, 1, 6, 10), utc(2026, 11, 1, 7, 30)),
    ("cron(0/20 1 * * ? *)", "America/New_York", utc(2026, 11, 1, 5, 40), utc(2026, 11, 2, 6, 0)),
    ("cron(30 1 * * ? *)", "Europe/London", utc(2026, 10, 24, 12, 0), utc(2026, 10, 25, 0, 30)),
    ("cron(30 1 * * ? *)", "Europe/London", utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)),
    ("cron(30 * * * ? *)", "Europe/London", utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 2, 30)),
    ("cron(30 2 * * ? *)", "Australia/Sydney", utc(2026, 4, 4, 0, 0), utc(2026, 4, 4, 15, 30)),
    ("cron(30 2 * * ? *)", "Australia/Sydney", utc(2026, 4, 4, 15, 30), utc(2026, 4, 5, 16, 30)),
    ("cron(30 * * * ? *)", "Australia/Sydney", utc(2026, 4, 4, 15, 30), utc(2026, 4, 4, 17, 30)),
    ("cron(45 1 * * ? *)", "Australia/Lord_Howe", utc(2026, 4, 4, 14, 45), utc(2026, 4, 5, 15, 15)),
    ("cron(30 1 * * ? *)", "Asia/Kolkata", utc(2026, 11, 1, 0, 0), utc(2026, 11, 1, 20, 0)),
]


@pytest.mark.parametrize(("expression", "tz", "after", "expected"), CRON_DST)
def test_cron_skips_a_local_time_that_does_not_exist_and_fires_a_repeated_one_once(
        expression: str, tz: str, after: datetime, expected: datetime) -> None:
    assert next_fire(expression, after, tz) == expected


def local_firings(expression: str, tz: str, day: date) -> list[str]:
    """Every firing on the local calendar ``day``, as local wall time with its UTC offset ("01:30-04:00")."""
    zone = ZoneInfo(tz)
    begin = datetime.combine(day, datetime.min.time(), zone).astimezone(UTC) - timedelta(seconds=1)
    end = datetime.combine(day + timedelta(days=1), datetime.min.time(), zone).astimezone(UTC)
    seen, moment = [], next_fire(expression, begin, tz)
    while moment is not None and moment < end:
        seen.append(moment.astimezone(zone).strftime("%H:%M%z"))
        moment = next_fire(expression, moment, tz)
    return seen


def hourly(offsets: dict[int, str]) -> list[str]:
    """``HH:30<offset>`` for each local hour given, in the order given."""
    return [f"{hour:02d}:30{offset}" for hour, offset in offsets.items()]


HOURLY_DST = [
    # tz, local day, the day's firings of cron(30 * * * ? *)
    ("America/New_York", date(2026, 3, 8),
     hourly({h: "-0500" for h in (0, 1)} | {h: "-0400" for h in range(3, 24)})),
    ("America/New_York", date(2026, 11, 1),
     hourly({h: "-0400" for h in (0, 1)} | {h: "-0500" for h in range(2, 24)})),
    ("Europe/London", date(2026, 3, 29),
     hourly({0: "+0000"} | {h: "+0100" for h in range(2, 24)})),
    ("Europe/London", date(2026, 10, 25),
     hourly({h: "+0100" for h in (0, 1)} | {h: "+0000" for h in range(2, 24)})),
    ("Australia/Sydney", date(2026, 10, 4),
     hourly({h: "+1000" for h in (0, 1)} | {h: "+1100" for h in range(3, 24)})),
    ("Australia/Sydney", date(2026, 4, 5),
     hourly({h: "+1100" for h in (0, 1, 2)} | {h: "+1000" for h in range(3, 24)})),
    ("Asia/Kolkata", date(2026, 3, 8), hourly({h: "+0530" for h in range(24)})),
    ("Asia/Kolkata", date(2026, 11, 1), hourly({h: "+0530" for h in range(24)})),
]


@pytest.mark.parametrize(("tz", "day", "expected"), HOURLY_DST)
def test_an_hourly_cron_fires_once_per_existing_local_time_on_a_transition_day(
        tz: str, day: date, expected: list[str]) -> None:
    assert local_firings("cron(30 * * * ? *)", tz, day) == expected


@pytest.mark.parametrize(("tz", "spring", "fall"), [
    ("America/New_York", date(2026, 3, 8), date(2026, 11, 1)),
    ("Europe/London", date(2026, 3, 29), date(2026, 10, 25)),
    ("Australia/Sydney", date(2026, 10, 4), date(2026, 4, 5)),
    ("Asia/Kolkata", date(2026, 3, 8), date(2026, 11, 1)),
])
def test_a_cron_every_five_minutes_loses_the_skipped_hour_and_never_repeats_the_doubled_one(
        tz: str, spring: date, fall: date) -> None:
    per_day = 24 * 12
    shift = 0 if tz == "Asia/Kolkata" else 12
    on_spring, on_fall = local_firings("cron(0/5 * * * ? *)", tz, spring), local_firings("cron(0/5 * * * ? *)", tz, fall)
    assert len(on_spring) == per_day - shift
    assert len(on_fall) == per_day
    assert len({f[:5] for f in on_fall}) == per_day  # each local time once


RATE_ACROSS_DST = [
    # expression, tz, start, expected: elapsed time, whatever the wall clock did
    ("rate(1 day)", "America/New_York", utc(2026, 3, 7, 12, 0), utc(2026, 3, 8, 12, 0)),
    ("rate(1 day)", "America/New_York", utc(2026, 10, 31, 12, 0), utc(2026, 11, 1, 12, 0)),
    ("rate(1 hour)", "America/New_York", utc(2026, 3, 8, 6, 30), utc(2026, 3, 8, 7, 30)),
    ("rate(1 hour)", "America/New_York", utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30)),
    ("rate(1 day)", "Europe/London", utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 30)),
    ("rate(1 day)", "Europe/London", utc(2026, 10, 24, 1, 30), utc(2026, 10, 25, 1, 30)),
    ("rate(1 day)", "Australia/Sydney", utc(2026, 10, 3, 12, 0), utc(2026, 10, 4, 12, 0)),
    ("rate(2 hours)", "Australia/Sydney", utc(2026, 4, 4, 15, 0), utc(2026, 4, 4, 17, 0)),
    ("rate(1 day)", "Asia/Kolkata", utc(2026, 3, 7, 12, 0), utc(2026, 3, 8, 12, 0)),
]


@pytest.mark.parametrize(("expression", "tz", "start", "expected"), RATE_ACROSS_DST)
def test_rate_is_elapsed_time_and_ignores_daylight_saving(expression: str, tz: str, start: datetime,
                                                          expected: datetime) -> None:
    assert next_fire(expression, start, tz, start=start) == expected
    assert next_fire(expression, start, tz) == expected


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


# "The / (slash) wildcard specifies increments. In the Minutes field, you could enter 1/10 to specify every tenth
# minute, starting from the first minute of the hour" (EventBridge's cron reference): n/1 is every value from n on.
STEP_OF_ONE = [
    # expression, after, the next firings
    ("cron(0 9/1 * * ? *)", utc(2026, 11, 22, 0, 0),
     [utc(2026, 11, 22, 9, 0), utc(2026, 11, 22, 10, 0), utc(2026, 11, 22, 11, 0)]),
    ("cron(0 9/1 * * ? *)", utc(2026, 11, 22, 23, 0), [utc(2026, 11, 23, 9, 0), utc(2026, 11, 23, 10, 0)]),
    ("cron(58/1 0 * * ? *)", utc(2026, 11, 22, 0, 0), [utc(2026, 11, 22, 0, 58), utc(2026, 11, 22, 0, 59)]),
    ("cron(0 0 1 3/1 ? *)", utc(2027, 3, 1), [utc(2027, 4, 1), utc(2027, 5, 1)]),
    ("cron(0 0 30/1 * ? *)", utc(2026, 11, 22), [utc(2026, 11, 30), utc(2026, 12, 30), utc(2026, 12, 31)]),
    ("cron(0 0 1 1 ? 2030/1)", utc(2030, 1, 1), [utc(2031, 1, 1), utc(2032, 1, 1)]),
]


@pytest.mark.parametrize(("expression", "after", "expected"), STEP_OF_ONE)
def test_a_step_of_one_fires_at_every_value_from_its_start_on(expression: str, after: datetime,
                                                              expected: list[datetime]) -> None:
    seen: list[datetime | None] = []
    moment: datetime | None = after
    for _ in expected:
        assert moment is not None
        moment = next_fire(expression, moment)
        seen.append(moment)
    assert seen == expected


# EventBridge's cron reference, "Field | Values | Wildcards": "Day-of-month | 1-31 | , - * ? / L W" and
# "Day-of-week | 1-7 or SUN-SAT | , - * ? L #"; "The L wildcard in the Day-of-month or Day-of-week fields specifies
# the last day of the month or week."  No '/' in day-of-week; L-n (Quartz's "n days before the last") is nowhere.
REFUSED = [
    ("cron(0 12 ? * */3 *)", "'/' is not allowed in the day-of-week field"),
    ("cron(0 12 ? * MON/2 *)", "'/' is not allowed in the day-of-week field"),
    ("cron(0 12 ? * 1-5/2 *)", "'/' is not allowed in the day-of-week field"),
    ("cron(0 12 ? * 2,4/2 *)", "'/' is not allowed in the day-of-week field"),
    ("cron(0 12 L-2 * ? *)", "L-n is not EventBridge cron"),
    ("cron(0 12 L-0 * ? *)", "L-n is not EventBridge cron"),
    ("cron(0 12 L-31 * ? *)", "L-n is not EventBridge cron"),
    ("cron(0 12 ? * L-1 *)", "not a valid value in the day-of-week field"),
]


@pytest.mark.parametrize(("expression", "reason"), REFUSED)
def test_cron_wildcards_eventbridge_does_not_document_are_refused(expression: str, reason: str) -> None:
    with pytest.raises(InvalidScheduleExpression, match=re.escape(reason)):
        parse_cron(expression)

"""When an EventBridge schedule expression fires: ``next_fire``, with time zones and DST.

The calendar arithmetic, apart from the grammar (chalicelib/schedule_expr.py) so
that the settings, which parse the stage's schedules at import, do not load it (nor
the time-zone database): only task recurrence and the offline runtime fire schedules.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

from chalicelib.schedule_expr import DAY_NUMBERS, At, Cron, Expression, InvalidScheduleExpression, Rate, parse


def next_fire(expr: Expression | str, after: datetime, tz: str = "UTC", *,
              start: datetime | None = None) -> datetime | None:
    """The first time strictly after ``after`` at which ``expr`` fires (aware, UTC); None: never again.

    * ``rate(...)`` has no phase of its own: it fires at ``start + k * every`` (k >= 1),
      the first such time after ``after``; without ``start``, at ``after + every``
      (pass the previous firing).  It is elapsed time, whatever ``tz`` says: ``rate(1 day)``
      is 24 hours even across a DST change (the same page: "days represents a 24-hour
      duration").
    * ``cron(...)`` fields are wall-clock time in ``tz`` (an IANA name), with daylight
      saving time handled as EventBridge Scheduler documents it
      (https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html#daylist-savings-time,
      https://repost.aws/knowledge-center/eventbridge-scheduler-adjust-dst): "When the time
      shifts forward in Spring, your schedule invocation gets skipped if the cron expression
      falls on a non-existent date and time.  When the time shifts back in the Fall, your
      schedule runs only once and doesn't repeat its invocation."  So a local time that does
      not exist (02:30 on a spring-forward night in New York) is skipped, not moved: that
      day has no such firing; a local time that happens twice (01:30 on a fall-back night)
      fires once, at its first occurrence.  This holds for every matching minute, wildcard
      hours included: ``cron(30 * * * ? *)`` fires 23 times on the spring-forward day and
      24 times on the fall-back day.
    * ``at(...)`` fires once, at its time read in ``tz``.

    A naive ``after`` or ``start`` is taken as UTC.  Pure: no clock, no I/O.
    """
    parsed = parse(expr, allow_at=True) if isinstance(expr, str) else expr
    after_utc = _as_utc(after)
    if isinstance(parsed, Rate):
        try:
            if start is None:
                return after_utc + parsed.every
            origin = _as_utc(start)
            periods = max(1, (after_utc - origin) // parsed.every + 1)
            return origin + periods * parsed.every
        except OverflowError:  # past year 9999: never again
            return None
    zone = _zone(tz)
    if isinstance(parsed, At):
        when = parsed.when.replace(tzinfo=zone).astimezone(UTC)
        return when if when > after_utc else None
    return _next_cron(parsed, after_utc, zone)


def _as_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ValueError, KeyError) as exc:  # ZoneInfoNotFoundError is a KeyError
        raise InvalidScheduleExpression(f"{tz!r} is not an IANA time zone like 'Europe/Paris'") from exc


def _next_cron(cron: Cron, after: datetime, zone: ZoneInfo) -> datetime | None:
    """The first matching wall-clock time from ``after``'s on that has an instant later than ``after``: each
    wall time's first occurrence (``_first_occurrence``) keeps wall-clock order and UTC order the same."""
    for wall in _wall_times(cron, after.astimezone(zone).replace(tzinfo=None)):
        moment = _first_occurrence(wall, zone)
        if moment is not None and moment > after:
            return moment
    return None


def _first_occurrence(wall: datetime, zone: ZoneInfo) -> datetime | None:
    """The first instant (UTC) the clocks in ``zone`` show the naive ``wall``; None if they never do.

    ``fold=0`` picks the first of two occurrences (a fall-back repeat).  A time in a
    spring-forward gap does not survive the round trip (zoneinfo reads 02:30 as 03:30
    after the jump), so it has no instant: EventBridge Scheduler skips it.
    """
    moment = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    return moment if moment.astimezone(zone).replace(tzinfo=None) == wall else None


def _wall_times(cron: Cron, begin: datetime) -> Iterator[datetime]:
    """Every wall-clock minute matching ``cron`` from ``begin`` on, in order."""
    begin = begin.replace(second=0, microsecond=0)
    hours, minutes = sorted(cron.hours.values), sorted(cron.minutes.values)
    for year in sorted(y for y in cron.year.values if y >= begin.year):
        for month in sorted(cron.month.values):
            if (year, month) < (begin.year, begin.month):
                continue
            for day in _days(cron, year, month):
                if date(year, month, day) < begin.date():
                    continue
                for hour in hours:
                    for minute in minutes:
                        wall = datetime(year, month, day, hour, minute)
                        if wall >= begin:
                            yield wall


def _eventbridge_weekday(year: int, month: int, day: int) -> int:
    """1 = Sunday ... 7 = Saturday, as in EventBridge's day-of-week field."""
    return (date(year, month, day).weekday() + 1) % 7 + 1


def _days(cron: Cron, year: int, month: int) -> list[int]:
    """The days of ``month`` on which ``cron`` fires, in order."""
    last = calendar.monthrange(year, month)[1]
    dom, dow = cron.day_of_month, cron.day_of_week
    if dom.special == "?":
        if dow.special and dow.special != "?":
            return _special_weekdays(dow.special, year, month, last)
        return [d for d in range(1, last + 1) if _eventbridge_weekday(year, month, d) in dow.values]
    if dom.special and dom.special != "?":
        return _special_days(dom.special, year, month, last)
    return [d for d in sorted(dom.values) if d <= last]


def _special_days(spec: str, year: int, month: int, last: int) -> list[int]:
    """L (last day), nW (weekday nearest day n), LW (last weekday)."""
    if spec == "L":
        return [last]
    if spec == "LW":
        day = last
        while _eventbridge_weekday(year, month, day) in (1, 7):
            day -= 1
        return [day]
    target = int(spec[:-1])  # nW
    if target > last:
        return []
    weekday = _eventbridge_weekday(year, month, target)
    if weekday == 7:  # Saturday: the Friday before, or Monday the 3rd if the 1st is a Saturday
        return [target - 1 if target > 1 else target + 2]
    if weekday == 1:  # Sunday: the Monday after, or the Friday before if the month ends first
        return [target + 1 if target < last else target - 2]
    return [target]


def _special_weekdays(spec: str, year: int, month: int, last: int) -> list[int]:
    """xL (the last weekday x of the month) and x#n (the n-th weekday x), x in 1-7 or SUN-SAT."""
    name, _, nth = spec.partition("#")
    name = name[:-1] if not nth else name  # strip the trailing L
    weekday = DAY_NUMBERS.get(name.upper()) or int(name)
    matching = [d for d in range(1, last + 1) if _eventbridge_weekday(year, month, d) == weekday]
    if not nth:
        return matching[-1:]
    index = int(nth) - 1
    return [matching[index]] if index < len(matching) else []

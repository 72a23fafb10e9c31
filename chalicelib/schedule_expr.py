"""EventBridge schedule expressions: ``rate(...)``, ``cron(...)`` and ``at(...)``.

Pure parsing and validation, shared by the settings (which reject a bad
expression at import), task recurrence and the offline runtime (which fires
them).  The grammar is EventBridge's: cron has six fields
``minutes hours day-of-month month day-of-week year``; exactly one of
day-of-month and day-of-week is ``?``; times are UTC unless a time zone is
given.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

# Always re.fullmatch ("$" would also match before a final newline); ASCII digits only: "\\d" and
# str.isdigit() also take digits of other scripts and "²", which EventBridge refuses (and int() may too).
_RATE = re.compile(r"rate\(([0-9]{1,9}) +(minute|minutes|hour|hours|day|days)\)")
_CRON = re.compile(r"cron\(([ -~]+)\)")  # printable ASCII
_AT = re.compile(r"at\(([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})\)")
_NUMBER = re.compile(r"[0-9]{1,4}")
MAX_EXPRESSION = 256  # EventBridge's limit on a schedule expression
MAX_RATE = timedelta(days=36500)  # a recurrence every century at most: its next time stays a datetime

_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}

_MONTHS = {m: i + 1 for i, m in enumerate(
    ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"])}
_DAYS = {d: i + 1 for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}


class InvalidScheduleExpression(ValueError):
    """The expression is not a valid EventBridge rate(), cron() or at() expression."""


@dataclass(frozen=True)
class Rate:
    every: timedelta


@dataclass(frozen=True)
class CronField:
    """One cron field: the set of allowed values, or a special (L, W, #) spec."""

    values: frozenset[int]
    any: bool            # '*' or '?'
    special: str = ""    # raw text for L / W / # forms, evaluated per month


@dataclass(frozen=True)
class Cron:
    minutes: CronField
    hours: CronField
    day_of_month: CronField
    month: CronField
    day_of_week: CronField
    year: CronField


@dataclass(frozen=True)
class At:
    when: datetime  # naive: interpreted in the schedule's time zone (UTC by default)


Expression = Rate | Cron | At


def parse_rate(text: str) -> Rate:
    m = _RATE.fullmatch(text.strip())
    if not m:
        raise InvalidScheduleExpression(
            f"{_shown(text)} is not a rate expression like 'rate(5 minutes)' (at most 9 digits)")
    value, unit = int(m.group(1)), m.group(2)
    if value <= 0:
        raise InvalidScheduleExpression(f"{text!r}: the rate must be a positive number")
    singular = unit.rstrip("s")
    if (value == 1) != (unit == singular):
        raise InvalidScheduleExpression(
            f"{text!r}: use '{singular}' for a value of 1 and '{singular}s' otherwise")
    every = timedelta(seconds=value * _UNIT_SECONDS[singular])
    if every > MAX_RATE:
        raise InvalidScheduleExpression(f"{text!r}: the rate must be at most {MAX_RATE.days} days")
    return Rate(every)


def _parse_values(text: str, lo: int, hi: int, names: dict[str, int], what: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        step = 1
        if "/" in part:
            part, step_text = part.split("/", 1)
            if not _NUMBER.fullmatch(step_text) or int(step_text) == 0:
                raise InvalidScheduleExpression(f"bad step {step_text!r} in the {what} field")
            step = int(step_text)
        if part == "*":
            start, end = lo, hi
        elif "-" in part:
            a, b = part.split("-", 1)
            start, end = _value(a, lo, hi, names, what), _value(b, lo, hi, names, what)
        else:
            start = _value(part, lo, hi, names, what)
            end = hi if step > 1 else start
        if start <= end:
            values.update(range(start, end + 1, step))
        else:  # a wrapping range like FRI-MON or 22-2
            span = list(range(start, hi + 1)) + list(range(lo, end + 1))
            values.update(span[::step])
    return frozenset(values)


def _value(text: str, lo: int, hi: int, names: dict[str, int], what: str) -> int:
    upper = text.upper()
    if upper in names:
        return names[upper]
    if not _NUMBER.fullmatch(text):
        raise InvalidScheduleExpression(f"{_shown(text)} is not a valid value in the {what} field")
    value = int(text)
    if not lo <= value <= hi:
        raise InvalidScheduleExpression(
            f"{value} is out of range {lo}-{hi} in the {what} field")
    return value


def _field(text: str, lo: int, hi: int, what: str, names: dict[str, int] | None = None,
           allow_question: bool = False) -> CronField:
    if text == "?":
        if not allow_question:
            raise InvalidScheduleExpression(f"'?' is not allowed in the {what} field")
        return CronField(frozenset(range(lo, hi + 1)), any=True, special="?")
    if text == "*":
        return CronField(frozenset(range(lo, hi + 1)), any=True)
    return CronField(_parse_values(text, lo, hi, names or {}, what), any=False)


def parse_cron(text: str) -> Cron:
    m = _CRON.fullmatch(text.strip())
    if not m:
        raise InvalidScheduleExpression(
            f"{_shown(text)} is not a cron expression like 'cron(0 12 * * ? *)' (printable ASCII)")
    fields = m.group(1).split()
    if len(fields) != 6:
        raise InvalidScheduleExpression(
            f"{text!r}: cron needs 6 fields (minutes hours day-of-month month day-of-week year),"
            f" got {len(fields)}")
    minute, hour, dom, month, dow, year = fields
    if (dom == "?") == (dow == "?"):
        raise InvalidScheduleExpression(
            f"{text!r}: exactly one of day-of-month and day-of-week must be '?'")
    dom_field = _special_dom(dom) or _field(dom, 1, 31, "day-of-month", allow_question=True)
    dow_field = _special_dow(dow) or _field(dow, 1, 7, "day-of-week", _DAYS, allow_question=True)
    return Cron(
        minutes=_field(minute, 0, 59, "minutes"),
        hours=_field(hour, 0, 23, "hours"),
        day_of_month=dom_field,
        month=_field(month, 1, 12, "month", _MONTHS),
        day_of_week=dow_field,
        year=_field(year, 1970, 2199, "year"),
    )


def _special_dom(text: str) -> CronField | None:
    if text == "L" or re.fullmatch(r"L-[0-9]{1,2}", text) or re.fullmatch(r"[0-9]{1,2}W|LW", text):
        if text.endswith("W") and text != "LW" and not 1 <= int(text[:-1]) <= 31:
            raise InvalidScheduleExpression(f"{text!r} is not a valid day-of-month")
        return CronField(frozenset(), any=False, special=text)
    return None


def _special_dow(text: str) -> CronField | None:
    m = re.fullmatch(r"([1-7A-Za-z]{1,3})(L|#[1-5])", text)
    if not m:
        return None
    _value(m.group(1), 1, 7, _DAYS, "day-of-week")
    return CronField(frozenset(), any=False, special=text)


def parse_at(text: str) -> At:
    m = _AT.fullmatch(text.strip())
    if not m:
        raise InvalidScheduleExpression(
            f"{_shown(text)} is not an at() expression like 'at(2030-01-31T12:00:00)'")
    try:
        return At(datetime.fromisoformat(m.group(1)))
    except ValueError as exc:
        raise InvalidScheduleExpression(f"{text!r}: {exc}") from exc


def parse(text: str, allow_at: bool = False) -> Expression:
    """Parse any supported expression; ``at()`` only where one-time schedules are allowed."""
    if len(text) > MAX_EXPRESSION:
        raise InvalidScheduleExpression(f"{_shown(text)} is longer than {MAX_EXPRESSION} characters")
    stripped = text.strip()
    if stripped.startswith("rate("):
        return parse_rate(stripped)
    if stripped.startswith("cron("):
        return parse_cron(stripped)
    if allow_at and stripped.startswith("at("):
        return parse_at(stripped)
    kinds = "rate(...), cron(...) or at(...)" if allow_at else "rate(...) or cron(...)"
    raise InvalidScheduleExpression(f"{_shown(text)} is not a {kinds} expression")


def _shown(text: str, limit: int = 80) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit] + "..."


# --- when an expression fires -------------------------------------------------

# The largest shift of a wall clock at a time-zone transition (DST is 1 h; a few
# historic changes were 2 h); wall-clock candidates this far around ``after`` are
# compared in UTC, so the earliest instant wins even where wall-clock order and
# UTC order differ (``after`` inside a repeated hour).
_MAX_TRANSITION = timedelta(hours=3)


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
    wall_after = after.astimezone(zone).replace(tzinfo=None)
    best: datetime | None = None
    horizon: datetime | None = None
    for wall in _wall_times(cron, wall_after - _MAX_TRANSITION):
        if horizon is not None and wall > horizon:
            break
        moment = _first_occurrence(wall, zone)
        if moment is None or moment <= after:
            continue
        if best is None or moment < best:
            best = moment
        if horizon is None:
            horizon = wall + _MAX_TRANSITION
    return best


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
    """L (last day), L-n (n days before it), nW (weekday nearest day n), LW (last weekday)."""
    if spec == "L":
        return [last]
    if spec.startswith("L-"):
        day = last - int(spec[2:])
        return [day] if day >= 1 else []
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
    weekday = _DAYS.get(name.upper()) or int(name)
    matching = [d for d in range(1, last + 1) if _eventbridge_weekday(year, month, d) == weekday]
    if not nth:
        return matching[-1:]
    index = int(nth) - 1
    return [matching[index]] if index < len(matching) else []

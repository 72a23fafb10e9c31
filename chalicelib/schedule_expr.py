"""EventBridge schedule expressions: ``rate(...)``, ``cron(...)`` and ``at(...)``.

Pure parsing and validation, shared by the settings (which reject a bad
expression at import), task recurrence and the offline runtime (which fires
them).  The grammar is EventBridge's: cron has six fields
``minutes hours day-of-month month day-of-week year``; exactly one of
day-of-month and day-of-week is ``?``; times are UTC unless a time zone is
given.  When an expression fires is chalicelib/schedule_fire.py (``next_fire``),
which the settings never load: they only parse.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import NamedTuple

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
DAY_NUMBERS = {d: i + 1 for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}


class InvalidScheduleExpression(ValueError):
    """The expression is not a valid EventBridge rate(), cron() or at() expression."""


# The parsed forms are NamedTuples: immutable like frozen dataclasses, and several times
# cheaper to define, which the settings do at every cold start.
class Rate(NamedTuple):
    every: timedelta


class CronField(NamedTuple):
    """One cron field: the set of allowed values, or a special (L, W, #) spec."""

    values: frozenset[int]
    any: bool            # '*' or '?'
    special: str = ""    # raw text for L / W / # forms, evaluated per month


class Cron(NamedTuple):
    minutes: CronField
    hours: CronField
    day_of_month: CronField
    month: CronField
    day_of_week: CronField
    year: CronField


class At(NamedTuple):
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
        step, stepped = 1, "/" in part
        if stepped:
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
            end = hi if stepped else start  # n/k: every k-th value from n to the field's end, k = 1 too
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
           allow_question: bool = False, allow_step: bool = True) -> CronField:
    if text == "?":
        if not allow_question:
            raise InvalidScheduleExpression(f"'?' is not allowed in the {what} field")
        return CronField(frozenset(range(lo, hi + 1)), any=True, special="?")
    if text == "*":
        return CronField(frozenset(range(lo, hi + 1)), any=True)
    if "/" in text and not allow_step:
        raise InvalidScheduleExpression(
            f"{_shown(text)}: '/' is not allowed in the {what} field (its wildcards are , - * ? L #)")
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
    dow_field = _special_dow(dow) or _field(dow, 1, 7, "day-of-week", DAY_NUMBERS, allow_question=True,
                                            allow_step=False)
    return Cron(
        minutes=_field(minute, 0, 59, "minutes"),
        hours=_field(hour, 0, 23, "hours"),
        day_of_month=dom_field,
        month=_field(month, 1, 12, "month", _MONTHS),
        day_of_week=dow_field,
        year=_field(year, 1970, 2199, "year"),
    )


def _special_dom(text: str) -> CronField | None:
    """L (the last day of the month), LW (its last weekday), nW (the weekday nearest day n)."""
    if text.startswith("L-"):  # Quartz's "n days before the last": not in EventBridge's reference
        raise InvalidScheduleExpression(
            f"{_shown(text)}: L-n is not EventBridge cron; the day-of-month field takes L (the last day), LW or nW")
    if text in ("L", "LW") or re.fullmatch(r"[0-9]{1,2}W", text):
        if text.endswith("W") and text != "LW" and not 1 <= int(text[:-1]) <= 31:
            raise InvalidScheduleExpression(f"{text!r} is not a valid day-of-month")
        return CronField(frozenset(), any=False, special=text)
    return None


def _special_dow(text: str) -> CronField | None:
    """L alone (the last day of the week: Saturday, 7), xL (the last weekday x of the month), x#n (the n-th)."""
    if text == "L":
        return CronField(frozenset({DAY_NUMBERS["SAT"]}), any=False)
    m = re.fullmatch(r"([1-7A-Za-z]{1,3})(L|#[1-5])", text)
    if not m:
        return None
    _value(m.group(1), 1, 7, DAY_NUMBERS, "day-of-week")
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


# An IANA time zone name (what EventBridge Scheduler's ScheduleExpressionTimezone takes): Area/Location
# (Europe/Paris, America/Argentina/Buenos_Aires, Etc/GMT+1) or one name (UTC, EST5EDT), each part starting with a
# capital letter.  A system's zone files hold more that ZoneInfo loads but no zone is named: localtime (the
# machine's own zone), Factory, posixrules, and the posix/... and right/... (leap seconds) copies.
ZONE_NAME = re.compile(r"(?!Factory\Z)[A-Z][A-Za-z0-9_+-]{0,31}(?:/[A-Z][A-Za-z0-9_+-]{0,31}){0,2}")


def zone_problem(name: str) -> str | None:
    """What is wrong with ``name`` as a time zone (completing "<field> ..."), or None for a canonical IANA
    zone name the time zone database has.  The one check of the API, the stream and the sources' settings."""
    if not ZONE_NAME.fullmatch(name):
        return f"must be an IANA time zone name like 'Europe/Paris', got {_shown(name)}"
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # on the first zone only: the settings' import stays light

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return f"is not an IANA time zone name: {_shown(name)}"
    return None

"""cron(): the app against an independent implementation of EventBridge's cron, aws-croniter (a dev dependency).

A seeded generator (deterministic) writes a few thousand expressions over all six fields, valid and not; the app
and the peer must agree on which are cron and, for those both accept, on the next firing after a few thousand
instants, in UTC.  The peer knows no time zone, so in a zone the app must fire the peer's wall-clock times as
EventBridge Scheduler documents daylight saving (``expected_in_zone``).

Every disagreement is one of ``KNOWN``, each settled by EventBridge's cron reference (quoted; "Cron expressions
reference", docs.aws.amazon.com/eventbridge/latest/userguide/eb-cron-expressions.html); an entry no generated
expression needs fails the test too, so the list stays true.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from aws_croniter import AwsCroniter  # type: ignore[import-untyped]
from aws_croniter.exceptions import AwsCroniterExpressionError  # type: ignore[import-untyped]

from chalicelib.schedule_expr import InvalidScheduleExpression, parse_cron
from chalicelib.schedule_fire import next_fire

SEED = 20261128
EXPRESSIONS = 3000


# --- the generator ---------------------------------------------------------------

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


class Field(NamedTuple):
    lo: int
    hi: int
    names: list[str]


MINUTE, HOUR, DOM, MONTH, DOW = Field(0, 59, []), Field(0, 23, []), Field(1, 31, []), Field(1, 12, MONTHS), \
    Field(1, 7, DAYS)
YEAR = Field(2026, 2032, [])  # the years a firing can be compared in; the field's own range is 1970-2199


def value(rng: random.Random, f: Field, bad: bool) -> str:
    if bad and rng.random() < 0.5:
        return str(rng.choice([f.lo - 1, f.hi + 1] if f is not YEAR else [1969, 2200]))
    number = rng.randint(f.lo, f.hi)
    if f.names and rng.random() < 0.3:
        name = f.names[number - f.lo]
        return name.lower() if rng.random() < 0.1 else name
    return str(number)


def term(rng: random.Random, f: Field, bad: bool, steps: bool) -> str:
    kind = rng.random()
    if kind < 0.35:
        return value(rng, f, bad)
    if kind < 0.6 or not steps:
        a, b = value(rng, f, bad), value(rng, f, bad)
        if f is YEAR and int(a) > int(b):
            a, b = b, a  # a year range that wraps through 2199 to 1970 is no useful schedule
        return f"{a}-{b}"
    step = rng.choice([1, 1, 2, 3, rng.randint(1, (f.hi - f.lo) or 1)])
    start = rng.choice(["*", value(rng, f, bad), f"{value(rng, f, bad)}-{value(rng, f, bad)}"])
    if f is YEAR and "-" in start:
        a, b = sorted(start.split("-"), key=int)
        start = f"{a}-{b}"
    return f"{start}/{step}"


def field(rng: random.Random, f: Field, bad: bool, steps: bool = True) -> str:
    if rng.random() < 0.25:
        return "*"
    return ",".join(term(rng, f, bad, steps) for _ in range(rng.choice([1, 1, 1, 2, 3])))


def day_of_month(rng: random.Random, bad: bool) -> str:
    special = rng.random()
    if special < 0.06:
        return "L"
    if special < 0.08:
        return "LW"
    if special < 0.14:
        return f"{rng.randint(1, 31)}W"
    if special < 0.17:
        return f"L-{rng.randint(0, 31)}"
    return field(rng, DOM, bad)


def day_of_week(rng: random.Random, bad: bool) -> str:
    special = rng.random()
    day = rng.choice([str(rng.randint(1, 7)), rng.choice(DAYS)])
    if special < 0.05:
        return "L"
    if special < 0.12:
        return f"{day}L"
    if special < 0.2:
        return f"{day}#{rng.randint(1, 5) if not bad else rng.choice([0, 6])}"
    if special < 0.22:
        return f"{day}#{rng.randint(1, 5)},{rng.choice(DAYS)}#{rng.randint(1, 5)}"
    if special < 0.24:
        return f"L-{rng.randint(1, 7)}"
    if special < 0.3:
        return rng.choice(["*", day, f"{day}-{rng.choice(DAYS)}"]) + f"/{rng.randint(1, 3)}"
    if special < 0.32:
        return rng.choice([f"*-{day}", f"{day}-*"])
    return field(rng, DOW, bad, steps=False)


def expression(rng: random.Random) -> str:
    bad = rng.random() < 0.1  # out-of-range values in some field
    if rng.random() < 0.5:
        dom, dow = day_of_month(rng, bad), "?"
    else:
        dom, dow = "?", day_of_week(rng, bad)
    if rng.random() < 0.03:
        dom, dow = rng.choice([("?", "?"), ("*", "*"), ("1", "MON")])
    year = rng.choice(["*", "*", field(rng, YEAR, bad)])
    fields = [field(rng, MINUTE, bad), field(rng, HOUR, bad), dom, field(rng, MONTH, bad), dow, year]
    return " ".join(fields)


def generated() -> list[str]:
    rng = random.Random(SEED)
    return [expression(rng) for _ in range(EXPRESSIONS)]


FIELDS = generated()  # "minutes hours day-of-month month day-of-week year", inside cron(...)


# --- the known disagreements, each settled by EventBridge's documentation ---------------------------

class Known(NamedTuple):
    """A disagreement between the app and the peer, who is right, and the documentation that says so."""

    name: str
    applies: Callable[[list[str]], bool]  # of the six fields
    quote: str
    peer_wrong: bool
    app_accepts: bool | None = None  # a disagreement on accepting (the app's side), or None: on firing


KNOWN = [
    # -- known peer bugs (and one more that peer_next works around: its search gives up after 10 steps)
    Known("a step in the year field",
          lambda f: "/" in f[5],
          '"Year | 1970-2199 | , - * /": the peer takes a step only where it is itself a year (1970-2199), so it '
          'refuses 2027/2; the app accepts it', peer_wrong=True, app_accepts=True),
    Known("LW in day-of-month",
          lambda f: f[2] == "LW",
          '"Day-of-month | 1-31 | , - * ? / L W": the peer\'s own grammar takes LW, then it fails with a ValueError '
          "(int('L')) reading it; the app fires on the last weekday of the month", peer_wrong=True, app_accepts=True),
    Known("L alone in day-of-week",
          lambda f: f[4] == "L",
          '"The L wildcard in the Day-of-month or Day-of-week fields specifies the last day of the month or week": '
          "the last day of the week, SAT (7); the peer accepts L and never fires it", peer_wrong=True),
    # -- the peer accepts what EventBridge's reference does not list; the app refuses it
    Known("L-n in day-of-month",
          lambda f: f[2].startswith("L-"),
          '"Day-of-month | 1-31 | , - * ? / L W" and "The L wildcard ... specifies the last day of the month": L-n '
          "(n days before the last) is not in the reference; the app refuses it (docs/tasks.md)", peer_wrong=False,
          app_accepts=False),
    Known("L-n in day-of-week",
          lambda f: f[4].startswith("L-"),
          '"Day-of-week | 1-7 or SUN-SAT | , - * ? L #": no L-n', peer_wrong=False, app_accepts=False),
]


def explained(fields: list[str]) -> list[Known]:
    return [k for k in KNOWN if k.applies(fields)]


# --- the peer --------------------------------------------------------------------

def peer(fields: str) -> AwsCroniter | None:
    """The peer's reading of the six fields; None: refused (its own error, or a crash on input it took)."""
    try:
        return AwsCroniter(fields)
    except (AwsCroniterExpressionError, ValueError):
        return None


def app_accepts(fields: str) -> bool:
    try:
        parse_cron(f"cron({fields})")
    except InvalidScheduleExpression:
        return False
    return True


def month_start_after(moment: datetime) -> datetime:
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return datetime(year, month, 1, tzinfo=UTC)


def peer_next(cron: AwsCroniter, after: datetime, until: datetime | None) -> datetime | None:
    """The peer's first firing after ``after`` (UTC; None: none up to ``until``, or ever).

    A known peer bug: its search gives up (answers None) after 10 steps, each a month, a day or an hour on, so a
    firing more than a few months away (a fifth Monday in February, a year field's next year) is "never".  Within
    one month it takes at most three steps, so a None means "none in this month": ask again from the next.
    """
    while (until is None or after < until) and after.year <= max(cron.years):
        found: datetime | None = cron.get_next(after)[0]
        if found is not None:
            return found
        after = month_start_after(after + timedelta(minutes=1)) - timedelta(minutes=1)
    return None


def instants(rng: random.Random) -> list[datetime]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [start + timedelta(seconds=rng.randrange(0, 6 * 365 * 86400)) for _ in range(2)]


# --- accept / refuse -----------------------------------------------------------------

def test_the_app_and_the_peer_agree_on_which_expressions_are_cron() -> None:
    disagreements: dict[str, list[str]] = {}
    unexplained: list[str] = []
    accepted = 0
    for fields in FIELDS:
        ours, theirs = app_accepts(fields), peer(fields) is not None
        accepted += ours
        if ours == theirs:
            continue
        reasons = [k for k in explained(fields.split(" ")) if k.app_accepts == ours]
        if not reasons:
            unexplained.append(f"{fields!r}: app {'accepts' if ours else 'refuses'}, peer the opposite")
        for k in reasons:
            disagreements.setdefault(k.name, []).append(fields)
    assert unexplained == []
    assert EXPRESSIONS * 0.5 < accepted < EXPRESSIONS * 0.9  # the generator writes both kinds
    assert set(disagreements) == {k.name for k in KNOWN if k.app_accepts is not None}  # each one needed


# --- when: UTC -----------------------------------------------------------------------

@cache
def both_accept() -> list[tuple[str, Any]]:
    return [(fields, cron) for fields in FIELDS if app_accepts(fields) and (cron := peer(fields)) is not None]


def test_the_app_and_the_peer_fire_at_the_same_utc_times() -> None:
    rng = random.Random(SEED + 1)
    unexplained: list[str] = []
    compared, peer_wrong = 0, set[str]()
    for fields, cron in both_accept():
        for after in instants(rng):
            ours = next_fire(f"cron({fields})", after)
            theirs = peer_next(cron, after, ours)
            compared += 1
            if ours == theirs:
                continue
            reasons = [k for k in explained(fields.split(" ")) if k.app_accepts is None]
            if not reasons:
                unexplained.append(f"cron({fields}) after {after}: app {ours}, peer {theirs}")
            peer_wrong.update(k.name for k in reasons)
    assert unexplained == []
    assert compared > 3000
    assert peer_wrong == {k.name for k in KNOWN if k.app_accepts is None}  # each one needed


# --- when: in a time zone, across daylight saving ---------------------------------

ZONES = ["America/New_York", "Europe/London", "Australia/Sydney", "Australia/Lord_Howe", "Asia/Kolkata"]


def transitions(zone: ZoneInfo) -> list[datetime]:
    """The instants (to the hour) at which ``zone``'s offset changes in 2026-2027."""
    found, moment = [], datetime(2026, 1, 1, tzinfo=UTC)
    offset = moment.astimezone(zone).utcoffset()
    while moment.year < 2028:
        moment += timedelta(hours=1)
        now = moment.astimezone(zone).utcoffset()
        if now != offset:
            found.append(moment)
            offset = now
    return found


def wall_kind(wall: datetime, zone: ZoneInfo) -> str:
    """"gap" (the clocks skip this naive wall time), "twice" (it happens twice) or "once"."""
    first, second = wall.replace(tzinfo=zone, fold=0), wall.replace(tzinfo=zone, fold=1)
    if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != wall:
        return "gap"
    return "twice" if first.astimezone(UTC) != second.astimezone(UTC) else "once"


def expected_in_zone(cron: AwsCroniter, after: datetime, zone: ZoneInfo, seen: set[str]) -> datetime | None:
    """The first of the peer's wall-clock times in ``zone`` after ``after``, as EventBridge Scheduler runs them.

    EventBridge Scheduler's user guide (Schedule types, "Daylight savings time"): "When the time shifts forward in
    Spring, your schedule invocation gets skipped if the cron expression falls on a non-existent date and time.
    When the time shifts back in the Fall, your schedule runs only once and doesn't repeat its invocation."  So a
    wall time that does not exist is no firing and one that happens twice fires at its first instant (fold=0).
    That reading is increasing in the wall time, so the answer is the first wall time from ``after``'s own that
    exists and falls after ``after``.  The peer runs on wall times dressed as UTC.  ``seen`` collects the kinds
    of wall time met on the way.
    """
    wall = after.astimezone(zone).replace(tzinfo=None)
    cursor = wall.replace(tzinfo=UTC) - timedelta(minutes=1)
    for _ in range(200):
        found = peer_next(cron, cursor, None)
        if found is None:
            return None
        kind = wall_kind(found.replace(tzinfo=None), zone)
        seen.add(kind)
        first = found.replace(tzinfo=zone, fold=0).astimezone(UTC)
        if kind != "gap" and first > after:
            return first
        cursor = found
    raise AssertionError(f"{after}: no firing in 200 of the peer's")


def test_in_a_time_zone_the_app_fires_the_peers_wall_times_as_eventbridge_scheduler_documents_dst() -> None:
    rng = random.Random(SEED + 2)
    edges = {name: transitions(ZoneInfo(name)) for name in ZONES}
    unexplained: list[str] = []
    compared, kinds = 0, {"gap": 0, "twice": 0, "once": 0}
    for fields, cron in both_accept()[::2]:
        if explained(fields.split(" ")):
            continue
        name = rng.choice(ZONES)
        zone = ZoneInfo(name)
        edge = rng.choice(edges[name]) if edges[name] else datetime(2026, 3, 8, 7, tzinfo=UTC)
        # just before a transition (the next firing may fall in its gap or its repeat), and around one
        for after in [edge - timedelta(minutes=rng.randint(1, 20)), edge + timedelta(minutes=rng.randint(-2160, 2160))]:
            ours = next_fire(f"cron({fields})", after, name)
            seen: set[str] = set()
            expected = expected_in_zone(cron, after, zone, seen)
            compared += 1
            for kind in seen:
                kinds[kind] += 1
            if ours != expected:
                unexplained.append(f"cron({fields}) in {name} after {after}: app {ours}, expected {expected}")
    assert unexplained == []
    assert compared > 1000
    assert kinds["gap"] >= 10 and kinds["twice"] >= 20  # skipped and repeated wall times were met


def test_the_differential_sees_the_step_of_one_and_the_day_of_week_rules() -> None:
    """The generator writes what this work is about: n/1 steps, L and '/' in day-of-week, L-n."""
    assert sum("/1 " in f + " " or "/1," in f for f in FIELDS) > 100
    assert sum(f.split(" ")[4] == "L" for f in FIELDS) > 20
    assert sum("/" in f.split(" ")[4] for f in FIELDS) > 50
    assert sum(f.split(" ")[2].startswith("L-") for f in FIELDS) > 20

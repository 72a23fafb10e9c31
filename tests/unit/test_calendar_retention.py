"""Retention by calendar (rules.retention_verdicts): properties under hypothesis, then examples across DST and
ISO-week and year boundaries."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.backups.rules import Backup, Keep, Policy, backup_name, backups_to_delete, retention_verdicts
from chalicelib.settings import Calendar, Settings, SettingsError

PREFIX = "timekeeper-prod"
TABLES = ("orders", "audit")
NOW = datetime(2027, 3, 1, 3, 0, tzinfo=UTC)
PARIS = ZoneInfo("Europe/Paris")
ZONES: list[tzinfo] = [UTC, PARIS, ZoneInfo("America/New_York"), ZoneInfo("Pacific/Auckland")]
FAST = settings(max_examples=40, deadline=None)


def ours(label: str, created: datetime, table: str = "orders", status: str = "AVAILABLE",
         name: str | None = None) -> Backup:
    return Backup(arn=label, name=name or backup_name(PREFIX, table, created), table=table, created=created,
                  status=status, type="USER")


@st.composite
def backups(draw: st.DrawFn) -> list[Backup]:
    """Up to 40 backups of two tables over two years (hours apart or the same day), some failed, some copies."""
    out: list[Backup] = []
    for i, minutes in enumerate(draw(st.lists(st.integers(0, 2 * 365 * 24 * 60), max_size=40))):
        created = NOW - timedelta(minutes=minutes)
        table = draw(st.sampled_from(TABLES))
        status = draw(st.sampled_from(["AVAILABLE", "AVAILABLE", "AVAILABLE", "CREATING", "DELETED"]))
        out.append(ours(f"b{i}", created, table, status))
        if draw(st.integers(0, 9)) == 0:  # a retried CreateBackup's copy: same name, a little later
            out.append(ours(f"b{i}-copy", created + timedelta(seconds=7), table, status,
                            name=backup_name(PREFIX, table, created)))
    return out


policies = st.builds(Policy, age=st.integers(0, 40).map(lambda d: timedelta(days=d)), min_keep=st.integers(1, 3),
                     daily=st.integers(0, 10), weekly=st.integers(0, 6), monthly=st.integers(0, 14),
                     yearly=st.integers(0, 3), zone=st.sampled_from(ZONES))


def kept(listed: list[Backup], policy: Policy, now: datetime = NOW) -> set[str]:
    return {v.backup.arn for v in retention_verdicts(listed, now, policy, PREFIX, TABLES) if not v.deleted}


def deleted(listed: list[Backup], policy: Policy, now: datetime = NOW) -> set[str]:
    return {b.arn for b in backups_to_delete(listed, now, policy, policy.min_keep, PREFIX, TABLES)}


@FAST
@given(backups(), policies)
def test_the_newest_good_backup_of_a_table_is_never_deleted(listed: list[Backup], policy: Policy) -> None:
    doomed = deleted(listed, policy)
    for table in TABLES:
        good = [b for b in listed if b.table == table and b.status == "AVAILABLE"]
        if good:
            newest = max(good, key=lambda b: (b.created, b.name, b.arn))
            assert newest.arn not in doomed


@FAST
@given(backups(), policies)
def test_a_backup_one_rule_keeps_is_kept(listed: list[Backup], policy: Policy) -> None:
    alone = [Policy(age=policy.age, min_keep=0, zone=policy.zone), Policy(age=timedelta(0), min_keep=policy.min_keep)]
    alone += [Policy(age=timedelta(0), min_keep=0, zone=policy.zone, **{rule: policy.count(Keep(rule))})
              for rule in ("daily", "weekly", "monthly", "yearly")]
    everything = kept(listed, policy)
    for single in alone:
        assert kept(listed, single) <= everything


@FAST
@given(backups(), policies, st.randoms(use_true_random=False))
def test_the_kept_set_does_not_depend_on_the_listing_order(listed: list[Backup], policy: Policy,
                                                             rng: random.Random) -> None:
    shuffled = list(listed)
    rng.shuffle(shuffled)
    assert kept(shuffled, policy) == kept(listed, policy)
    assert deleted(shuffled, policy) == deleted(listed, policy)


@FAST
@given(backups(), policies)
def test_a_run_repeated_at_the_same_instant_deletes_nothing_more(listed: list[Backup], policy: Policy) -> None:
    doomed = deleted(listed, policy)
    left = [b for b in listed if b.arn not in doomed]
    assert deleted(left, policy) == set()


# --- examples ----------------------------------------------------------------------------------------


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def decided(listed: list[Backup], policy: Policy, now: datetime) -> dict[str, tuple[Keep, ...]]:
    return {v.backup.arn: v.kept for v in retention_verdicts(listed, now, policy, PREFIX, TABLES)}


def test_days_are_the_time_zones_days_across_the_spring_dst_change() -> None:
    # Paris moves to summer time at 02:00 on 2026-03-29: 22:30 UTC on the 28th is 23:30 there, 23:30 UTC is
    # 00:30 on the 29th, and 20:00 UTC on the 29th is 22:00 (UTC+2)
    listed = [ours("sat-night", utc("2026-03-28T22:30")), ours("sun-early", utc("2026-03-28T23:30")),
              ours("newest", utc("2026-03-29T20:00"))]
    policy = Policy(age=timedelta(0), min_keep=1, daily=2)
    now = utc("2026-04-10T00:00")
    assert decided(listed, policy, now) == {"newest": (Keep.LAST_GOOD, Keep.DAILY), "sun-early": (Keep.DAILY,),
                                            "sat-night": ()}
    paris = decided(listed, replace(policy, zone=PARIS), now)  # in Paris, 23:30 UTC is already Sunday
    assert paris == {"newest": (Keep.LAST_GOOD, Keep.DAILY), "sun-early": (), "sat-night": (Keep.DAILY,)}
    sunday_first = decided(listed[:2], replace(policy, zone=PARIS, min_keep=0), now)
    assert sunday_first == {"sun-early": (Keep.DAILY,), "sat-night": (Keep.DAILY,)}
    one_day = replace(policy, min_keep=0, daily=1)  # daily=2 would keep sat-night too: the oldest, 1 day of 2
    assert decided(listed[:2], one_day, now) == {"sun-early": (Keep.DAILY,), "sat-night": ()}


def test_the_hour_that_repeats_in_autumn_is_one_day() -> None:
    # 2026-10-25 in Paris: 02:30 happens twice (00:30 and 01:30 UTC); both are that day, the later one kept
    listed = [ours("first-0230", utc("2026-10-25T00:30")), ours("second-0230", utc("2026-10-25T01:30")),
              ours("day-before", utc("2026-10-24T12:00"))]
    got = decided(listed, Policy(age=timedelta(0), min_keep=0, daily=3, zone=PARIS), utc("2026-11-30T00:00"))
    assert got == {"second-0230": (Keep.DAILY,), "first-0230": (), "day-before": (Keep.DAILY,)}


def test_weeks_are_iso_weeks_across_the_year_end() -> None:
    # 2026-12-28 (Monday) to 2027-01-03 (Sunday) is ISO week 53 of 2026; 2027-01-04 starts week 1 of 2027
    listed = [ours("w53-mon", utc("2026-12-28T03:00")), ours("w53-sun", utc("2027-01-03T03:00")),
              ours("w01-mon", utc("2027-01-04T03:00")), ours("w52-sun", utc("2026-12-27T03:00"))]
    got = decided(listed, Policy(age=timedelta(0), min_keep=0, weekly=3), utc("2027-02-01T00:00"))
    assert got == {"w01-mon": (Keep.WEEKLY,), "w53-sun": (Keep.WEEKLY,), "w53-mon": (), "w52-sun": (Keep.WEEKLY,)}


def test_years_are_calendar_years_in_the_time_zone() -> None:
    # 12:00 UTC on 2026-12-31 is already 2027 in Auckland (UTC+13)
    listed = [ours("dec31-noon", utc("2026-12-31T12:00")), ours("dec31-morning", utc("2026-12-31T08:00")),
              ours("jan2", utc("2027-01-02T08:00"))]
    policy = Policy(age=timedelta(0), min_keep=0, yearly=2)
    now = utc("2027-03-01T00:00")
    assert decided(listed, policy, now) == {"jan2": (Keep.YEARLY,), "dec31-noon": (Keep.YEARLY,),
                                            "dec31-morning": ()}
    auckland = decided(listed, replace(policy, zone=ZoneInfo("Pacific/Auckland")), now)
    assert auckland == {"jan2": (Keep.YEARLY,), "dec31-noon": (), "dec31-morning": (Keep.YEARLY,)}


def test_the_last_n_periods_are_those_that_have_a_good_backup() -> None:
    # monthly=2: a month without a good backup (February failed) is not counted
    listed = [ours("mar", utc("2027-03-01T03:00")), ours("feb-failed", utc("2027-02-01T03:00"), status="DELETED"),
              ours("jan", utc("2027-01-15T03:00")), ours("dec", utc("2026-12-15T03:00"))]
    got = decided(listed, Policy(age=timedelta(0), min_keep=1, monthly=2), utc("2027-03-02T00:00"))
    assert got == {"mar": (Keep.LAST_GOOD, Keep.MONTHLY), "jan": (Keep.MONTHLY,), "dec": ()}


def test_expires_after_is_when_age_alone_stops_keeping_it_and_none_for_the_other_rules() -> None:
    listed = [ours("new", utc("2027-02-28T03:00")), ours("mid", utc("2027-02-27T03:00")),
              ours("mid2", utc("2027-02-27T02:00")), ours("old", utc("2027-02-20T03:00"))]
    verdicts = {v.backup.arn: v for v in retention_verdicts(
        listed, NOW, Policy(age=timedelta(days=3), min_keep=1, weekly=1), PREFIX, TABLES)}
    assert verdicts["new"].kept == (Keep.LAST_GOOD, Keep.WEEKLY, Keep.AGE) and verdicts["new"].expires_after is None
    assert verdicts["mid"].kept == (Keep.AGE,) and verdicts["mid"].expires_after == utc("2027-03-02T03:00")
    assert verdicts["old"].deleted and verdicts["old"].expires_after == utc("2027-02-23T03:00")


def test_without_a_calendar_the_decision_is_the_age_and_last_good_one() -> None:
    listed = [ours("a", NOW - timedelta(days=1)), ours("b", NOW - timedelta(days=5)), ours("c", NOW - timedelta(days=9))]
    assert deleted(listed, Policy(age=timedelta(days=3), min_keep=1)) == {"b", "c"}
    assert deleted(listed, Policy(age=timedelta(days=3), min_keep=1, daily=2)) == {"c"}


@pytest.mark.parametrize(("value", "expected"), [
    ("", Calendar()),
    ("daily=7,weekly=4,monthly=12,yearly=3", Calendar(7, 4, 12, 3)),
    (" monthly = 6 , daily=1 ", Calendar(daily=1, monthly=6)),
])
def test_backup_retention_is_parsed(value: str, expected: Calendar) -> None:
    assert Settings.from_env({"BACKUP_RETENTION": value}).backup_retention == expected


@pytest.mark.parametrize(("value", "why"), [
    ("daily=x", "daily: 'x' is not a whole number from 1 to 3660"),
    ("hourly=3", "'hourly=3' is not one of daily=N, weekly=N, monthly=N, yearly=N"),
    ("daily=7,daily=2", "daily is given twice"),
    ("weekly=0", "weekly: '0' is not a whole number from 1 to 520"),
    ("daily=7,", "'' is not one of"),
])
def test_a_bad_backup_retention_fails_at_import_naming_it(value: str, why: str) -> None:
    with pytest.raises(SettingsError, match="BACKUP_RETENTION=") as error:
        Settings.from_env({"BACKUP_RETENTION": value})
    assert why in str(error.value) and "expected comma-separated daily=N" in str(error.value)


def test_backup_timezone_is_a_zone_and_an_unknown_one_fails_at_import() -> None:
    assert Settings.from_env({}).backup_timezone is UTC
    assert Settings.from_env({"BACKUP_TIMEZONE": "Europe/Paris"}).backup_timezone == PARIS
    with pytest.raises(SettingsError, match="BACKUP_TIMEZONE='Mars/Olympus' is invalid: expected an IANA time zone"):
        Settings.from_env({"BACKUP_TIMEZONE": "Mars/Olympus"})

"""Retention by calendar against its peers, restic (``forget --keep-*``) and borg (``prune --keep-*``): cases
transcribed from their published tests, then cases of our own from their documented behaviour (a year of daily
backups, a gap of missed days, a table younger than its policy). Which rules agree: docs/backups.md's table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given

from chalicelib.backups.rules import CALENDAR, Backup, Keep, Policy, backup_name, calendar_bucket, retention_verdicts
from tests.unit.test_calendar_retention import FAST, PREFIX, TABLES, backups, policies

TABLE = "orders"
NAMED = datetime(2000, 1, 1, tzinfo=UTC)  # names: one run each, whatever the time (two snapshots of one second)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def listing(times: list[datetime], status: str = "AVAILABLE") -> list[Backup]:
    return [Backup(arn=f"{status}-{i}", name=backup_name(PREFIX, TABLE, NAMED + timedelta(seconds=i)), table=TABLE,
                   created=t, status=status, type="USER") for i, t in enumerate(times)]


def kept_times(times: list[datetime], policy: Policy, now: datetime) -> list[str]:
    verdicts = retention_verdicts(listing(times), now, policy, PREFIX, [TABLE])
    return sorted(f"{v.backup.created:%Y-%m-%d %H:%M:%S}" for v in verdicts if not v.deleted)


def calendar(daily: int = 0, weekly: int = 0, monthly: int = 0, yearly: int = 0, last: int = 0) -> Policy:
    """Only the counts (no age): restic's ``--keep-last`` is BACKUP_MIN_KEEP."""
    return Policy(age=timedelta(0), min_keep=last, daily=daily, weekly=weekly, monthly=monthly, yearly=yearly)


# --- restic ------------------------------------------------------------------------------------------------
# The snapshots of TestApplyPolicy and the snapshots each policy keeps, read from github.com/restic/restic at
# commit a80be1478a4c537f8396e0db2b05120aa78f11e0: internal/data/snapshot_policy_test.go (testExpireSnapshots,
# the policies in order) and internal/data/testdata/policy_keep_snapshots_<N> ("keep", N the policy's index).
# All at 10:20:30 UTC but the 2016 ones; "13+" is 10:20:30.1; 2015-10-22 five times.

RESTIC_DAYS = """
2014-08 08 10 12 13 13+ 15 18 20 21 22
2014-09 01 02 05 06 08 09 10 11 20 22
2014-10 01 02 05 06 08 09 10 11 20 22
2014-11 08 10 12 13 13+ 15 18 20 21 22
2015-09 01 02 05 06 08 09 10 11 20 22
2015-08 08 10 12 13 13+ 15 18 20 21 22
2015-10 01 02 05 06 08 09 10 11 20 22 22 22 22 22
2015-11 08 10 12 13 13+ 15 18 20 21 22
"""
RESTIC_2016 = """2016-01-01 01:02:03, 2016-01-01 01:03:03, 2016-01-01 07:08:03, 2016-01-03 07:02:03, 2016-01-04 10:23:03,
2016-01-04 11:23:03, 2016-01-04 12:23:03, 2016-01-04 12:24:03, 2016-01-04 12:28:03, 2016-01-04 12:30:03,
2016-01-04 16:23:03, 2016-01-05 09:02:03, 2016-01-06 08:02:03, 2016-01-07 10:02:03, 2016-01-08 20:02:03,
2016-01-09 21:02:03, 2016-01-12 21:02:03, 2016-01-12 21:08:03, 2016-01-18 12:02:03"""


def restic_snapshots() -> list[datetime]:
    out = []
    for line in RESTIC_DAYS.split("\n"):
        month, *days = line.split() or [""]
        out += [at(f"{month}-{d.rstrip('+')}T10:20:30") + timedelta(milliseconds=100 if d.endswith("+") else 0)
                for d in days]
    return out + [at(t.strip()) for t in RESTIC_2016.split(",")]


def test_the_restic_snapshots_are_transcribed_whole() -> None:
    assert len(restic_snapshots()) == 103  # as many as testExpireSnapshots holds


RESTIC_NOW = at("2016-01-19T00:00")
J = "2016-01-"
RESTIC_CASES = {  # policy index: (policy, kept)
    6: (calendar(daily=3), [J + "09 21:02:03", J + "12 21:08:03", J + "18 12:02:03"]),
    9: (calendar(last=5, daily=5), [J + "07 10:02:03", J + "08 20:02:03", J + "09 21:02:03", J + "12 21:02:03",
                                    J + "12 21:08:03", J + "18 12:02:03"]),
    10: (calendar(last=2, daily=10), [J + "01 07:08:03", J + "03 07:02:03", J + "04 16:23:03", J + "05 09:02:03",
                                      J + "06 08:02:03", J + "07 10:02:03", J + "08 20:02:03", J + "09 21:02:03",
                                      J + "12 21:08:03", J + "18 12:02:03"]),
    12: (calendar(weekly=4), [J + "03 07:02:03", J + "09 21:02:03", J + "12 21:08:03", J + "18 12:02:03"]),
    13: (calendar(daily=3, weekly=4), [J + "03 07:02:03", J + "09 21:02:03", J + "12 21:08:03", J + "18 12:02:03"]),
    14: (calendar(monthly=6), ["2014-11-22 10:20:30", "2015-08-22 10:20:30", "2015-09-22 10:20:30",
                               "2015-10-22 10:20:30", "2015-11-22 10:20:30", J + "18 12:02:03"]),
    15: (calendar(daily=2, weekly=2, monthly=6), ["2014-11-22 10:20:30", "2015-08-22 10:20:30", "2015-09-22 10:20:30",
                                                  "2015-10-22 10:20:30", "2015-11-22 10:20:30", J + "12 21:08:03",
                                                  J + "18 12:02:03"]),
    # 16 and 17: yearly is not filled by three years, so restic keeps the oldest ("oldest yearly snapshot")
    16: (calendar(yearly=10), ["2014-08-08 10:20:30", "2014-11-22 10:20:30", "2015-11-22 10:20:30", J + "18 12:02:03"]),
    17: (calendar(daily=7, weekly=2, monthly=3, yearly=10),
         ["2014-08-08 10:20:30", "2014-11-22 10:20:30", "2015-10-22 10:20:30", "2015-11-22 10:20:30", J + "05 09:02:03",
          J + "06 08:02:03", J + "07 10:02:03", J + "08 20:02:03", J + "09 21:02:03", J + "12 21:08:03",
          J + "18 12:02:03"]),
}


@pytest.mark.parametrize("index", sorted(RESTIC_CASES))
def test_restics_published_policy_cases(index: int) -> None:
    policy, expected = RESTIC_CASES[index]
    assert kept_times(restic_snapshots(), policy, RESTIC_NOW) == expected


# --- borg --------------------------------------------------------------------------------------------------
# Read from github.com/borgbackup/borg, branch 1.2-maint at commit 81add4757a054ef063c82ca84547818912bbf128:
# src/borg/testsuite/helpers.py, test_prune_split (archives 1-13, the ids each rule keeps) and
# test_prune_split_keep_oldest (archives 1-4). One rule at a time: borg's not counting a backup an earlier rule
# kept plays no part.

BORG_ARCHIVES = ["2015-01-01 10:00:00", "2016-01-01 10:00:00", "2017-01-01 10:00:00", "2017-02-01 10:00:00",
                 "2017-03-01 10:00:00", "2017-03-02 10:00:00", "2017-03-03 10:00:00", "2017-03-04 10:00:00",
                 "2017-10-01 09:45:00", "2017-10-01 09:55:00", "2017-10-01 10:00:01", "2017-10-01 10:00:03",
                 "2017-10-01 10:00:05"]
BORG_OLDEST = ["2018-01-01 10:00:00", "2018-12-30 10:00:00", "2018-12-31 10:00:00", "2019-12-31 10:00:00"]


@pytest.mark.parametrize(("archives", "policy", "ids"), [
    (BORG_ARCHIVES, calendar(yearly=3), [1, 2, 13]),
    (BORG_ARCHIVES, calendar(monthly=3), [4, 8, 13]),
    (BORG_ARCHIVES, calendar(weekly=2), [8, 13]),
    (BORG_ARCHIVES, calendar(daily=3), [7, 8, 13]),
    (BORG_ARCHIVES, calendar(last=4), [10, 11, 12, 13]),  # --keep-secondly 4: one a second, as BACKUP_MIN_KEEP
    (BORG_OLDEST, calendar(yearly=3), [1, 3, 4]),  # the oldest ("yearly[oldest]"): only two years have one
    (BORG_OLDEST, calendar(yearly=2), [3, 4]),
])
def test_borgs_published_prune_cases(archives: list[str], policy: Policy, ids: list[int]) -> None:
    assert kept_times([at(a) for a in archives], policy, at("2020-01-01T00:00")) == [archives[i - 1] for i in ids]


# borg 1.2's PruneWithinTestCase.test_prune_within (same file and commit): archives 1 minute, 1.5, 2.5, 3.5, 25
# and 49 hours old; --keep-within is BACKUP_RETENTION_DAYS, back from now (restic's goes back from the newest).
BORG_WITHIN_NOW = at("2020-01-01T00:00")
BORG_WITHIN = [BORG_WITHIN_NOW - timedelta(minutes=m) for m in (1, 90, 150, 210, 25 * 60, 49 * 60)]


@pytest.mark.parametrize(("within", "indices"), [
    (timedelta(hours=1), [0]), (timedelta(hours=3), [0, 1, 2]), (timedelta(hours=24), [0, 1, 2, 3]),
    (timedelta(days=2), [0, 1, 2, 3, 4]), (timedelta(hours=50), [0, 1, 2, 3, 4, 5]),
])
def test_borgs_published_keep_within_cases(within: timedelta, indices: list[int]) -> None:
    got = kept_times(BORG_WITHIN, Policy(age=within, min_keep=0), BORG_WITHIN_NOW)
    assert got == sorted(f"{BORG_WITHIN[i]:%Y-%m-%d %H:%M:%S}" for i in indices)


# --- our own cases, from the peers' documented behaviour ------------------------------------------------------

YEAR_END = at("2026-11-22T03:00")  # a Sunday, the last day of ISO week 2026-W47


def daily_backups(days: int, end: datetime = YEAR_END, missed: frozenset[int] = frozenset()) -> list[datetime]:
    """One backup a day at 03:00 UTC for ``days`` days up to ``end``, but the days ``missed`` (days before end)."""
    return [end - timedelta(days=d) for d in range(days) if d not in missed]


def test_a_year_of_daily_backups_keeps_what_restic_keeps() -> None:
    # 2025-11-23 (a Sunday) to 2026-11-22: the 7 last days, the Sundays ending the 4 last ISO weeks, the last days
    # of the 12 last months (November 2026's is the 22nd), the last days of 2026 and 2025, and, yearly=3 not
    # being filled by two years, the oldest. borg would keep two more: the Sunday of a fifth week (2026-10-25) and
    # the last of a 13th month (2025-11-30), since it does not count a backup an earlier rule kept.
    got = kept_times(daily_backups(365), calendar(daily=7, weekly=4, monthly=12, yearly=3), YEAR_END)
    assert got == [f"{d} 03:00:00" for d in [
        "2025-11-23", "2025-12-31", "2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30", "2026-05-31", "2026-06-30",
        "2026-07-31", "2026-08-31", "2026-09-30", "2026-10-31", "2026-11-01", "2026-11-08", "2026-11-15",
        "2026-11-16", "2026-11-17", "2026-11-18", "2026-11-19", "2026-11-20", "2026-11-21", "2026-11-22"]]


def test_missed_days_are_not_counted_the_rules_reach_further_back() -> None:
    # no backup on 2026-11-18, 19 and 20 (failed runs leave none good) nor in the whole ISO week of 2-8 November
    missed = frozenset({2, 3, 4, *range(14, 21)})
    times = daily_backups(60, missed=missed)
    failed = listing([YEAR_END - timedelta(days=d) for d in sorted(missed)], status="DELETED")
    verdicts = retention_verdicts(listing(times) + failed, YEAR_END, calendar(daily=7, weekly=3), PREFIX, [TABLE])
    got = sorted(f"{v.backup.created:%m-%d}" for v in verdicts if not v.deleted)
    # daily: the 22nd, 21st, then the 17th back to the 13th; weekly: the 22nd, the 15th, then 1 November
    assert got == ["11-01", "11-13", "11-14", "11-15", "11-16", "11-17", "11-21", "11-22"]
    assert all(v.backup.status == "AVAILABLE" for v in verdicts)  # the failed ones neither counted nor decided on


def test_a_table_younger_than_its_policy_keeps_its_oldest_backup_too() -> None:
    # two backups a day for three days, daily=7: the later of each day, and the first backup of all (restic:
    # "oldest daily snapshot", borg: "daily[oldest]"), the only one of its day's runs that is not the day's newest
    times = [at(f"2026-11-{d}T{h}:00") for d in (20, 21, 22) for h in ("03", "15")]
    now = at("2026-11-23T00:00")
    verdicts = {f"{v.backup.created:%d %H}": v.kept
                for v in retention_verdicts(listing(times), now, calendar(daily=7), PREFIX, [TABLE])}
    assert verdicts == {"22 15": (Keep.DAILY,), "22 03": (), "21 15": (Keep.DAILY,), "21 03": (),
                        "20 15": (Keep.DAILY,), "20 03": (Keep.DAILY,)}
    assert kept_times(times, calendar(daily=3), now)[0] == "2026-11-20 15:00:00"  # filled: the oldest goes


def test_one_backup_counts_for_every_rule_that_keeps_it_as_restic_counts_not_borg() -> None:
    # daily=2, weekly=2 over three weeks of daily backups: this week's Sunday is the newest day AND the newest of
    # this week, so weekly's second is last week's Sunday (restic). borg's weekly skips the backup daily kept,
    # and keeps the Sundays of the two weeks before (2026-11-15 and 2026-11-08).
    got = kept_times(daily_backups(21), calendar(daily=2, weekly=2), YEAR_END)
    assert got == ["2026-11-15 03:00:00", "2026-11-21 03:00:00", "2026-11-22 03:00:00"]


@FAST
@given(backups(), policies)
def test_the_oldest_good_backup_is_kept_while_a_rule_has_fewer_periods_than_its_count(
        listed: list[Backup], policy: Policy) -> None:
    verdicts = retention_verdicts(listed, at("2027-03-01T03:00"), policy, PREFIX, TABLES)
    for table in TABLES:
        good = [v for v in verdicts if v.backup.table == table]
        if not good:
            continue
        periods = {rule: len({calendar_bucket(rule, v.backup.created, policy.zone) for v in good}) for rule in CALENDAR}
        oldest = min(good, key=lambda v: (v.backup.created, v.backup.name, v.backup.arn))
        if any(policy.count(rule) > n for rule, n in periods.items()):
            assert not oldest.deleted, (oldest, periods)

"""backups_to_delete: the retention decision, table-driven."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.backups.rules import Backup, backup_name, backups_to_delete

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
PREFIX = "timekeeper-prod"
LONG = "t" * 250  # a table whose backup names are trimmed and hashed


def b(label: str, days_old: float, table: str = "orders", status: str = "AVAILABLE", type_: str = "USER",
      name: str | None = None, prefix: str = PREFIX) -> Backup:
    """A backup labelled ``label`` (its ARN), named as ``prefix``'s stage names it unless ``name`` says otherwise."""
    created = NOW - timedelta(days=days_old)
    return Backup(arn=label, name=name or backup_name(prefix, table, created), table=table, created=created,
                  status=status, type=type_)


@dataclass
class Case:
    backups: list[Backup]
    expected: list[str]
    min_keep: int = 2
    retention_days: int = 3


CASES = {
    "nothing old: nothing deleted": Case([b("a", 0), b("b", 1)], []),
    "older than retention deleted, newest two kept": Case([b("a", 0), b("b", 1), b("c", 4), b("d", 5)], ["d", "c"]),
    "exactly at the cutoff is kept": Case([b("a", 0), b("b", 1), b("c", 3)], []),
    "five days of failed runs keep the last min_keep good ones": Case(
        [b("ok1", 6), b("ok2", 7), b("ok3", 8)] + [b(f"f{i}", i, status="DELETED") for i in range(5)], ["ok3"]),
    "CREATING backups are never deleted and never count as good": Case(
        [b("c1", 10, status="CREATING"), b("a", 9), b("b", 8)], []),
    "other prefixes untouched": Case(
        [b("manual", 30, prefix="manual"), b("tk2", 30, prefix="timekeeper-prod2"), b("new", 0), b("new2", 0)], []),
    "another stage whose prefix starts with this one's: untouched": Case(
        [b("eu1", 30, prefix="timekeeper-prod-eu"), b("eu2", 31, prefix="timekeeper-prod-eu"), b("new", 0),
         b("new2", 0)], []),
    "a stage whose prefix this one's starts with: untouched": Case(
        [b("old1", 30, prefix="timekeeper"), b("old2", 31, prefix="timekeeper"), b("new", 0), b("new2", 0)], []),
    "another stage's newer backups never count toward min_keep": Case(
        [b("ours1", 10), b("ours2", 11), b("dev1", 0, prefix="timekeeper-prod-dev"),
         b("dev2", 0, prefix="timekeeper-prod-dev"), b("plain1", 0, prefix="timekeeper"),
         b("plain2", 0, prefix="timekeeper")], []),
    "a name that only starts like ours is not ours": Case(
        [b("hand", 30, name="timekeeper-prod-orders-manual"), b("x", 30, name="timekeeper-prod-orders-20261001T000000x"),
         b("bad-time", 30, name="timekeeper-prod-orders-20261399T000000"), b("new", 0), b("new2", 0)], []),
    "another table's name on this table's backup is not ours": Case(
        [b("other", 30, name=backup_name(PREFIX, "users", NOW - timedelta(days=30))), b("new", 0), b("new2", 0)], []),
    "a long table's trimmed and hashed names are ours": Case(
        [b("l1", 10, table=LONG), b("l2", 11, table=LONG), b("l3", 12, table=LONG)], ["l3"]),
    "other tables untouched": Case([b("u1", 30, table="users"), b("u2", 31, table="users"), b("u3", 32, table="users")],
                                   []),
    "SYSTEM and AWS_BACKUP untouched": Case(
        [b("s", 30, type_="SYSTEM"), b("w", 30, type_="AWS_BACKUP"), b("a", 0), b("b", 0)], []),
    "min_keep counted per table": Case(
        [b("o1", 10), b("o2", 11), b("o3", 12), b("a1", 10, table="audit"), b("a2", 11, table="audit"),
         b("a3", 12, table="audit")], ["a3", "o3"]),
    "two copies of one run's backup count once toward min_keep": Case(
        [b("today", 0), b("today-copy", 0, name=backup_name(PREFIX, "orders", NOW)), b("yesterday", 4),
         b("older", 5)], ["older"]),
    "min_keep 1 keeps only the newest": Case([b("a", 10), b("b", 11)], ["b"], min_keep=1),
    "retention 0 with min_keep": Case([b("a", 0.5), b("b", 1), b("c", 2)], ["c"], retention_days=0),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_backups_to_delete(case: Case) -> None:
    doomed = backups_to_delete(case.backups, NOW, timedelta(days=case.retention_days), case.min_keep,
                               PREFIX, ["orders", "audit", LONG])
    assert sorted(d.arn for d in doomed) == sorted(case.expected)
    assert [d.created for d in doomed] == sorted(d.created for d in doomed)  # oldest first

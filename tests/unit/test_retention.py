"""backups_to_delete: the retention decision, table-driven."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.backups.rules import Backup, backups_to_delete

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def b(name: str, days_old: float, table: str = "orders", status: str = "AVAILABLE", type_: str = "USER") -> Backup:
    return Backup(arn=f"arn:{table}:{name}", name=name, table=table, created=NOW - timedelta(days=days_old),
                  status=status, type=type_)


@dataclass
class Case:
    backups: list[Backup]
    expected: list[str]
    min_keep: int = 2
    retention_days: int = 3


CASES = {
    "nothing old: nothing deleted": Case([b("timekeeper-orders-a", 0), b("timekeeper-orders-b", 1)], []),
    "older than retention deleted, newest two kept": Case(
        [b("timekeeper-orders-a", 0), b("timekeeper-orders-b", 1), b("timekeeper-orders-c", 4),
         b("timekeeper-orders-d", 5)],
        ["timekeeper-orders-d", "timekeeper-orders-c"]),
    "exactly at the cutoff is kept": Case(
        [b("timekeeper-orders-a", 0), b("timekeeper-orders-b", 1), b("timekeeper-orders-c", 3)], []),
    "five days of failed runs keep the last min_keep good ones": Case(
        [b("timekeeper-orders-ok1", 6), b("timekeeper-orders-ok2", 7), b("timekeeper-orders-ok3", 8)]
        + [b(f"timekeeper-orders-f{i}", i, status="DELETED") for i in range(5)],
        ["timekeeper-orders-ok3"]),
    "CREATING backups are never deleted and never count as good": Case(
        [b("timekeeper-orders-c1", 10, status="CREATING"), b("timekeeper-orders-a", 9), b("timekeeper-orders-b", 8)],
        []),
    "other prefixes untouched": Case(
        [b("manual-orders-a", 30), b("timekeeper2-orders-a", 30), b("timekeeper-orders-new", 0),
         b("timekeeper-orders-new2", 0)], []),
    "other tables untouched": Case(
        [b("timekeeper-users-a", 30, table="users"), b("timekeeper-users-b", 31, table="users"),
         b("timekeeper-users-c", 32, table="users")], []),
    "SYSTEM and AWS_BACKUP untouched": Case(
        [b("timekeeper-orders-s", 30, type_="SYSTEM"), b("timekeeper-orders-w", 30, type_="AWS_BACKUP"),
         b("timekeeper-orders-a", 0), b("timekeeper-orders-b", 0)], []),
    "min_keep counted per table": Case(
        [b("timekeeper-orders-a", 10), b("timekeeper-orders-b", 11), b("timekeeper-orders-c", 12),
         b("timekeeper-audit-a", 10, table="audit"), b("timekeeper-audit-b", 11, table="audit"),
         b("timekeeper-audit-c", 12, table="audit")],
        ["timekeeper-audit-c", "timekeeper-orders-c"]),
    "min_keep 1 keeps only the newest": Case(
        [b("timekeeper-orders-a", 10), b("timekeeper-orders-b", 11)], ["timekeeper-orders-b"], min_keep=1),
    "retention 0 with min_keep": Case(
        [b("timekeeper-orders-a", 0.5), b("timekeeper-orders-b", 1), b("timekeeper-orders-c", 2)],
        ["timekeeper-orders-c"], retention_days=0),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_backups_to_delete(case: Case) -> None:
    doomed = backups_to_delete(case.backups, NOW, timedelta(days=case.retention_days), case.min_keep,
                               "timekeeper", ["orders", "audit"])
    assert sorted(d.name for d in doomed) == sorted(case.expected)
    assert [d.created for d in doomed] == sorted(d.created for d in doomed)  # oldest first

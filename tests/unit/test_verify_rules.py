"""Restore verification's pure decisions: which tables, the temporary tables' names, the verdict."""

from __future__ import annotations

import re

import pytest

from chalicelib.backups.verify_rules import (
    TableShape,
    compare,
    recorded_shape,
    restore_table_name,
    restored_shape,
    rotation_after,
    run_of_restore_table,
    tables_to_verify,
)
from chalicelib.settings import BackupVerify

TABLES = ["a", "b", "c", "d", "e"]
RUN = "20261122T120000Z-scheduled"
TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")


@pytest.mark.parametrize(("spec", "after", "expected"), [
    (BackupVerify(), None, []),
    (BackupVerify(sample=2), None, ["a", "b"]),
    (BackupVerify(sample=2), "b", ["c", "d"]),
    (BackupVerify(sample=2), "d", ["e", "a"]),          # wraps
    (BackupVerify(sample=2), "e", ["a", "b"]),
    (BackupVerify(sample=2), "bb", ["c", "d"]),         # the last one verified is no longer selected
    (BackupVerify(sample=9), "c", ["d", "e", "a", "b", "c"]),  # more than the run has: all, once
    (BackupVerify(tables=("e", "zz", "a")), "c", ["e", "a"]),   # a list: the run's listed tables, in order
])
def test_tables_to_verify(spec: BackupVerify, after: str | None, expected: list[str]) -> None:
    assert tables_to_verify(spec, TABLES, after) == expected


def test_a_sample_verifies_every_table_in_turn_over_successive_runs() -> None:
    plans: list[list[str]] = []
    for _ in range(3):
        plans.insert(0, tables_to_verify(BackupVerify(sample=2), TABLES, rotation_after(plans)))
    assert sorted(t for plan in plans for t in plan) == ["a", "a", "b", "c", "d", "e"]


def test_the_rotation_goes_on_after_the_newest_plan_that_chose_tables() -> None:
    assert rotation_after([[], ["c", "d"], ["a", "b"]]) == "d"
    assert rotation_after([]) is None


@pytest.mark.parametrize("table", ["orders", "x" * 255, "a.b-c_d", "y" * 240 + "1", "y" * 240 + "2"])
def test_a_restore_table_name_is_a_table_name_of_this_stage_that_names_its_run(table: str) -> None:
    name = restore_table_name("timekeeper-prod", RUN, table)
    assert TABLE_NAME.fullmatch(name), name
    assert name.startswith("timekeeper-prod.verify.")
    assert run_of_restore_table("timekeeper-prod", name) == RUN


def test_restore_table_names_are_unique_per_run_and_table() -> None:
    long = ["y" * 240 + "1", "y" * 240 + "2"]
    names = {restore_table_name("p", run, t) for run in (RUN, "20261123T120000Z-scheduled")
             for t in ["orders", "users", *long]}
    assert len(names) == 8


@pytest.mark.parametrize("name", [
    "orders", "timekeeper-prod.verify.orders", "timekeeper-prod-x.verify.20261122T120000Z-a.orders",
    "timekeeper-prod.verify.20261122T120000Z-a", "timekeeper-dev.verify.20261122T120000Z-a.orders",
])
def test_only_this_stages_restore_tables_parse_back_to_a_run(name: str) -> None:
    assert run_of_restore_table("timekeeper-prod", name) is None


KEYS = [{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}]
GSI = {"IndexName": "by-status", "KeySchema": [{"AttributeName": "status", "KeyType": "HASH"}],
       "Projection": {"ProjectionType": "ALL"}}
BACKUP = {"SourceTableDetails": {"KeySchema": KEYS, "ItemCount": 10, "TableSizeBytes": 900},
          "SourceTableFeatureDetails": {"GlobalSecondaryIndexes": [GSI]}}
RESTORED = {"KeySchema": KEYS, "GlobalSecondaryIndexes": [GSI], "TableStatus": "ACTIVE"}


@pytest.mark.parametrize(("restored", "items", "complete", "problems"), [
    (RESTORED, 10, True, []),
    (RESTORED, 12, True, []),  # the backup's count is DynamoDB's, refreshed every six hours: more is fine
    (RESTORED, 7, True, ["restored 7 items, the backup recorded 10"]),
    (RESTORED, 7, False, []),  # the bounded scan stopped: 7 is only a lower bound
    (RESTORED, 0, False, ["restored table returned no items, the backup recorded 10"]),
    ({**RESTORED, "KeySchema": KEYS[:1]}, 10, True,
     ["key schema [('PK', 'HASH')] differs from the backup's [('PK', 'HASH'), ('SK', 'RANGE')]"]),
    ({**RESTORED, "GlobalSecondaryIndexes": []}, 10, True, ["indexes missing: global by-status"]),
    ({**RESTORED, "LocalSecondaryIndexes": [{**GSI, "IndexName": "lsi"}]}, 10, True,
     ["indexes the backup did not have: local lsi"]),
    ({**RESTORED, "GlobalSecondaryIndexes": [{**GSI, "Projection": {"ProjectionType": "KEYS_ONLY"}}]}, 10, True,
     ["indexes with another key schema or projection: global by-status"]),
])
def test_compare(restored: dict[str, object], items: int, complete: bool, problems: list[str]) -> None:
    assert compare(recorded_shape(BACKUP), restored_shape(restored, items, complete)) == problems


def test_an_empty_backup_restored_empty_matches() -> None:
    assert compare(TableShape((("PK", "HASH"),), items=0), TableShape((("PK", "HASH"),), items=0)) == []

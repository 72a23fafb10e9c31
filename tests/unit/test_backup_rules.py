"""Backup names, statuses and table selection: pure rules."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.backups.rules import Outcome, backup_name, outcome, select_tables

AT = datetime(2026, 11, 22, 12, 30, 5, tzinfo=UTC)


@pytest.mark.parametrize(("prefix", "table", "expected"), [
    ("timekeeper", "orders", "timekeeper-orders-20261122T123005"),
    ("tk", "my.table_1-x", "tk-my.table_1-x-20261122T123005"),
    ("bad prefix!", "orders", "bad_prefix_-orders-20261122T123005"),
])
def test_backup_name(prefix: str, table: str, expected: str) -> None:
    assert backup_name(prefix, table, AT) == expected


def test_a_long_table_name_is_trimmed_to_255_keeping_prefix_and_time() -> None:
    name = backup_name("timekeeper", "t" * 255, AT)
    assert len(name) == 255
    assert name.startswith("timekeeper-t") and name.endswith("-20261122T123005")
    assert re.fullmatch(r"[A-Za-z0-9_.-]{3,255}", name)


STARTED = AT
DEADLINE = timedelta(minutes=360)


@pytest.mark.parametrize(("status", "elapsed", "expected"), [
    ("AVAILABLE", 1, Outcome.AVAILABLE),
    ("CREATING", 10, Outcome.PENDING),
    ("CREATING", 360, Outcome.PENDING),
    ("CREATING", 361, Outcome.STUCK),
    ("DELETED", 1, Outcome.FAILED),
    (None, 1, Outcome.FAILED),
    ("AVAILABLE", 10_000, Outcome.AVAILABLE),
])
def test_outcome(status: str | None, elapsed: int, expected: Outcome) -> None:
    assert outcome(status, STARTED, STARTED + timedelta(minutes=elapsed), DEADLINE) is expected


def test_selection_combines_list_pattern_and_tag_without_duplicates() -> None:
    chosen = select_tables(["a", "b", "shop-1", "shop-2", "c"], ["b", "a", "b"], re.compile(r"shop-\d"), ["c", "a"])
    assert chosen == ["b", "a", "c", "shop-1", "shop-2"]


def test_pattern_must_match_the_whole_name() -> None:
    assert select_tables(["shop-1", "myshop-1x"], [], re.compile(r"shop-\d"), []) == ["shop-1"]

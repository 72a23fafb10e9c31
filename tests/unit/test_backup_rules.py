"""Backup names, statuses and table selection: pure rules."""

from __future__ import annotations

import itertools
import math
import re
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.backups.rules import (
    Outcome,
    backup_name,
    outcome,
    parse_backup_name,
    pitr_checked,
    select_tables,
)

AT = datetime(2026, 11, 22, 12, 30, 5, tzinfo=UTC)


AWS_BACKUP_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")


@pytest.mark.parametrize(("prefix", "table", "expected"), [
    ("timekeeper-prod", "orders", "timekeeper-prod-orders-20261122T123005"),
    ("tk", "my.table_1-x", "tk-my.table_1-x-20261122T123005"),
    ("bad prefix!", "orders", "bad_prefix_-orders-20261122T123005"),
])
def test_backup_name(prefix: str, table: str, expected: str) -> None:
    assert backup_name(prefix, table, AT) == expected
    assert parse_backup_name(expected, prefix, table) == AT.replace(microsecond=0)


@pytest.mark.parametrize(("prefix", "table"), [
    ("timekeeper", "t" * 255),
    ("p" * 100, "t" * 255),
    ("p" * 100, "a.b-c_d" * 36),
    ("timekeeper-prod", "x" * 223),   # fits exactly: 15 + 1 + 223 + 1 + 15 = 255
    ("timekeeper-prod", "x" * 224),   # one more: trimmed and hashed
])
def test_a_long_table_name_gives_a_valid_name_that_parses_back_keeping_prefix_and_time(prefix: str, table: str) -> None:
    name = backup_name(prefix, table, AT)
    assert AWS_BACKUP_NAME.fullmatch(name), name
    assert name.startswith(f"{prefix}-") and name.endswith("-20261122T123005")
    assert parse_backup_name(name, prefix, table) == AT.replace(microsecond=0)


def test_two_long_tables_sharing_their_start_get_different_names() -> None:
    first, second = "t" * 250 + "a", "t" * 250 + "b"
    assert backup_name("timekeeper-prod", first, AT) != backup_name("timekeeper-prod", second, AT)
    assert parse_backup_name(backup_name("timekeeper-prod", first, AT), "timekeeper-prod", second) is None


@pytest.mark.parametrize(("name", "prefix", "table"), [
    ("timekeeper-prod-orders-20261122T123005", "timekeeper", "prod-orders"),  # parses, but as table prod-orders
    ("timekeeper-prod-orders-20261122T123005", "timekeeper-prod", "users"),
    ("timekeeper-prod-orders-20261122T123005", "timekeeper-pro", "orders"),
    ("timekeeper-prod-orders-20261122T123005x", "timekeeper-prod", "orders"),
    ("timekeeper-prod-orders-20261122T123005\n", "timekeeper-prod", "orders"),
    ("timekeeper-prod-orders-copy-20261122T123005", "timekeeper-prod", "orders"),
    ("timekeeper-prod-orders-20261399T123005", "timekeeper-prod", "orders"),
    ("timekeeper-prod-orders-manual", "timekeeper-prod", "orders"),
])
def test_only_this_prefix_and_tables_exact_names_parse(name: str, prefix: str, table: str) -> None:
    expected = AT.replace(microsecond=0) if (prefix, table) == ("timekeeper", "prod-orders") else None
    assert parse_backup_name(name, prefix, table) == expected


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


# --- the point-in-time recovery report's spread (BACKUP_REQUIRE_PITR=false) ---------------------------

TABLE_NAMES = st.sets(st.text("abcdefghij-_.0123456789", min_size=3, max_size=12), max_size=40)


@settings(max_examples=30, deadline=None)
@given(tables=TABLE_NAMES, first=st.dates(min_value=date(2020, 1, 1), max_value=date(2040, 1, 1)))
def test_a_week_of_runs_reads_each_table_once_and_a_run_at_most_a_seventh(tables: set[str], first: date) -> None:
    week = [pitr_checked(sorted(tables), first + timedelta(days=d), required=False) for d in range(7)]

    assert all(len(day) <= math.ceil(len(tables) / 7) for day in week)
    assert sorted(t for day in week for t in day) == sorted(tables)  # each table on exactly one day
    assert pitr_checked(sorted(tables, reverse=True), first, required=False) == week[0]  # not the given order


def test_with_backup_require_pitr_every_run_reads_every_table() -> None:
    tables = [f"t{i}" for i in range(20)]
    assert pitr_checked(tables, date(2026, 11, 22), required=True) == set(tables)


@settings(max_examples=25, deadline=None)
@given(tables=TABLE_NAMES.filter(bool), changes=st.sets(st.text("klmnop", min_size=3, max_size=6), max_size=5),
       first=st.dates(min_value=date(2020, 1, 1), max_value=date(2040, 1, 1)), changed=st.integers(0, 13))
def test_a_changed_selection_reads_each_table_again_within_13_days(
        tables: set[str], changes: set[str], first: date, changed: int) -> None:
    later = tables | changes  # tables added on day ``changed`` (and the same holds read backwards: removed)
    days = [first + timedelta(days=d) for d in range(35)]
    read = {t: [d for i, d in enumerate(days) if t in pitr_checked(tables if i < changed else later, d, False)]
            for t in tables}
    for t, when in read.items():
        gaps = [(b - a).days for a, b in itertools.pairwise(when)]
        assert when and (when[0] - first).days <= 13 and all(gap <= 13 for gap in gaps), (t, gaps)

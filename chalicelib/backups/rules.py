"""Pure decisions about backups: names, statuses, retention. No I/O here."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

NAME_MIN, NAME_MAX = 3, 255
STAMP_FORMAT = "%Y%m%dT%H%M%S"
STAMP_LENGTH = 15          # yyyymmddTHHMMSS
HASH_LENGTH = 10           # hex digits of sha256(table) that stand for a trimmed table name
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_.-]")


def name_table_part(prefix: str, table: str) -> str:
    """The part of a backup name that stands for ``table``: the table's name itself when the
    whole name fits AWS's 255 characters, else its start, ``.`` and a hash of the full name
    (so two long tables that share their first 200 characters still get different names)."""
    clean_prefix = _NOT_ALLOWED.sub("_", prefix)
    clean_table = _NOT_ALLOWED.sub("_", table)
    room = NAME_MAX - len(clean_prefix) - STAMP_LENGTH - 2
    if len(clean_table) <= room and clean_table == table:
        return clean_table
    digest = hashlib.sha256(table.encode()).hexdigest()[:HASH_LENGTH]
    return f"{clean_table[:max(room - HASH_LENGTH - 1, 0)]}.{digest}"


def backup_name(prefix: str, table: str, at: datetime) -> str:
    """``<prefix>-<table part>-<UTC yyyymmddTHHMMSS>``: 3-255 characters of [A-Za-z0-9_.-].

    A table name too long for the whole to fit is trimmed and hashed (``name_table_part``),
    so the prefix and the timestamp always survive and the name still parses back.
    """
    return f"{_NOT_ALLOWED.sub('_', prefix)}-{name_table_part(prefix, table)}-{at.strftime(STAMP_FORMAT)}"


def parse_backup_name(name: str, prefix: str, table: str) -> datetime | None:
    """The UTC time in ``name`` when it is exactly a name ``backup_name(prefix, table, ...)`` gives,
    else None. The whole name must match: another stage's prefix that merely starts with this one
    (``timekeeper-prod`` vs ``timekeeper``), another table or a hand-made name never parses."""
    pattern = (re.escape(_NOT_ALLOWED.sub("_", prefix)) + "-" + re.escape(name_table_part(prefix, table))
               + r"-([0-9]{8}T[0-9]{6})")
    match = re.fullmatch(pattern, name)
    if match is None:
        return None
    try:
        return datetime.strptime(match[1], STAMP_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


class Outcome(StrEnum):
    """A backup's state as this app sees it."""

    PENDING = "PENDING"      # CREATING, before the deadline
    AVAILABLE = "AVAILABLE"  # done
    FAILED = "FAILED"        # DELETED, vanished (BackupNotFound) or never created
    STUCK = "STUCK"          # CREATING past the deadline

    @property
    def final(self) -> bool:
        return self is not Outcome.PENDING


def outcome(status: str | None, run_started: datetime, now: datetime, deadline: timedelta) -> Outcome:
    """Map a DynamoDB BackupStatus (None: the backup is gone) to an outcome.

    DynamoDB has no FAILED status: a backup that disappears or is DELETED
    failed, and one CREATING past the deadline is stuck.
    """
    if status == "AVAILABLE":
        return Outcome.AVAILABLE
    if status == "CREATING":
        return Outcome.STUCK if now - run_started > deadline else Outcome.PENDING
    return Outcome.FAILED


@dataclass(frozen=True)
class Backup:
    arn: str
    name: str
    table: str
    created: datetime
    status: str      # CREATING | AVAILABLE | DELETED
    type: str        # USER | SYSTEM | AWS_BACKUP


def is_ours(backup: Backup, prefix: str) -> bool:
    """A USER backup named by this stage's ``backup_name`` for its own table (the whole name parsed)."""
    return backup.type == "USER" and parse_backup_name(backup.name, prefix, backup.table) is not None


def backups_to_delete(
    backups: Iterable[Backup],
    now: datetime,
    retention: timedelta,
    min_keep: int,
    prefix: str,
    tables: Iterable[str],
) -> list[Backup]:
    """This app's AVAILABLE USER backups of ``tables`` older than ``retention``,
    except the newest ``min_keep`` AVAILABLE ones of each table (by name: copies of one
    run's backup count once, and all stay), which stay
    however old they are (so days of failed runs never prune the last good
    backups). SYSTEM and AWS_BACKUP backups, names that are not exactly this
    prefix's (``is_ours``: another stage's, a hand-made one) and other tables are
    never returned, and never counted among the kept ones. Oldest first.
    """
    selected = set(tables)
    cutoff = now - retention
    by_table: dict[str, list[Backup]] = {}
    for backup in backups:
        if backup.table in selected and is_ours(backup, prefix) and backup.status == "AVAILABLE":
            by_table.setdefault(backup.table, []).append(backup)
    doomed: list[Backup] = []
    for table_backups in by_table.values():
        kept: set[str] = set()  # names: two copies of one run's backup (a retried CreateBackup) count once
        for backup in sorted(table_backups, key=lambda b: (b.created, b.arn), reverse=True):
            if backup.name in kept or len(kept) < min_keep:
                kept.add(backup.name)
            elif backup.created < cutoff:
                doomed.append(backup)
    return sorted(doomed, key=lambda b: (b.created, b.arn))


def select_tables(
    all_tables: Sequence[str] | None,
    listed: Sequence[str],
    pattern: re.Pattern[str] | None,
    tagged: Iterable[str],
) -> list[str]:
    """Union of the listed tables, the tables matching ``pattern`` and the tagged ones,
    without duplicates, in a stable order (listed first, then by name)."""
    chosen = list(dict.fromkeys(listed))
    extra: set[str] = set(tagged)
    if pattern is not None and all_tables is not None:
        extra.update(t for t in all_tables if pattern.fullmatch(t))
    chosen.extend(sorted(extra - set(chosen)))
    return chosen

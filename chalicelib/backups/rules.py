"""Pure decisions about backups: names, statuses, retention. No I/O here."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

NAME_MIN, NAME_MAX = 3, 255
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_.-]")


def backup_name(prefix: str, table: str, at: datetime) -> str:
    """``<prefix>-<table>-<UTC yyyymmddTHHMMSS>``, sanitised to 3-255 chars of [A-Za-z0-9_.-].

    The table part is trimmed when the whole would be too long, so the prefix
    (which retention matches on) and the timestamp always survive.
    """
    stamp = at.strftime("%Y%m%dT%H%M%S")
    clean_prefix = _NOT_ALLOWED.sub("_", prefix)
    clean_table = _NOT_ALLOWED.sub("_", table)
    room = NAME_MAX - len(clean_prefix) - len(stamp) - 2
    name = f"{clean_prefix}-{clean_table[:max(room, 0)]}-{stamp}"
    return name[:NAME_MAX].ljust(NAME_MIN, "_")


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
    return backup.type == "USER" and backup.name.startswith(f"{prefix}-")


def backups_to_delete(
    backups: Iterable[Backup],
    now: datetime,
    retention: timedelta,
    min_keep: int,
    prefix: str,
    tables: Iterable[str],
) -> list[Backup]:
    """This app's AVAILABLE USER backups of ``tables`` older than ``retention``,
    except the newest ``min_keep`` AVAILABLE ones of each table, which stay
    however old they are (so days of failed runs never prune the last good
    backups). SYSTEM and AWS_BACKUP backups, other prefixes and other tables
    are never returned. Oldest first.
    """
    selected = set(tables)
    cutoff = now - retention
    by_table: dict[str, list[Backup]] = {}
    for backup in backups:
        if backup.table in selected and is_ours(backup, prefix) and backup.status == "AVAILABLE":
            by_table.setdefault(backup.table, []).append(backup)
    doomed: list[Backup] = []
    for table_backups in by_table.values():
        newest_first = sorted(table_backups, key=lambda b: (b.created, b.arn), reverse=True)
        doomed.extend(b for b in newest_first[min_keep:] if b.created < cutoff)
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

"""Pure decisions about backups: names, statuses, retention. No I/O here."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from enum import StrEnum
from functools import lru_cache

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
    match = _name_pattern(prefix, table).fullmatch(name)
    if match is None:
        return None
    stamp = match[1]  # yyyymmddTHHMMSS, digits checked by the pattern
    try:
        return datetime(int(stamp[0:4]), int(stamp[4:6]), int(stamp[6:8]), int(stamp[9:11]), int(stamp[11:13]),
                        int(stamp[13:15]), tzinfo=UTC)
    except ValueError:
        return None


@lru_cache(maxsize=4096)
def _name_pattern(prefix: str, table: str) -> re.Pattern[str]:
    """The names ``backup_name(prefix, table, ...)`` gives (made once per table: retention parses every
    backup's name, hundreds of thousands in a backlog)."""
    return re.compile(re.escape(_NOT_ALLOWED.sub("_", prefix)) + "-" + re.escape(name_table_part(prefix, table))
                      + r"-([0-9]{8}T[0-9]{6})")


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


class Keep(StrEnum):
    """Why retention keeps a backup, in the order a catalog names the first one that applies."""

    LAST_GOOD = "last_good"  # among the newest BACKUP_MIN_KEEP good ones of its table: no policy overrides it
    YEARLY = "yearly"
    MONTHLY = "monthly"
    WEEKLY = "weekly"
    DAILY = "daily"
    AGE = "age"              # younger than BACKUP_RETENTION_DAYS


CALENDAR = (Keep.DAILY, Keep.WEEKLY, Keep.MONTHLY, Keep.YEARLY)


@dataclass(frozen=True)
class Policy:
    """Retention: a backup is kept when ANY rule keeps it, deleted when none does.

    ``min_keep``: the newest ``min_keep`` good backups of each table (``Keep.LAST_GOOD``);
    ``age``: every backup younger than it (``Keep.AGE``, BACKUP_RETENTION_DAYS);
    ``daily`` ... ``yearly`` (BACKUP_RETENTION): the newest good backup of each of the last N days / ISO
    weeks / months / years, in ``zone``, that have one, and the table's oldest while N is not reached (as
    restic and borg keep; one backup counts for every rule that keeps it, as restic counts). 0: the rule
    keeps nothing.
    """

    age: timedelta
    min_keep: int
    daily: int = 0
    weekly: int = 0
    monthly: int = 0
    yearly: int = 0
    zone: tzinfo = UTC

    def count(self, rule: Keep) -> int:
        return int(getattr(self, rule.value))


def calendar_bucket(rule: Keep, at: datetime, zone: tzinfo) -> tuple[int, int, int]:
    """The day, ISO week, month or year ``at`` falls in, in ``zone`` (comparable within one rule)."""
    local = at.astimezone(zone)
    if rule is Keep.DAILY:
        return local.year, local.month, local.day
    if rule is Keep.WEEKLY:
        iso = local.isocalendar()
        return iso.year, iso.week, 0
    if rule is Keep.MONTHLY:
        return local.year, local.month, 0
    return local.year, 0, 0


@dataclass(frozen=True)
class Verdict:
    """Retention's decision on one backup: every rule that keeps it (in ``Keep``'s order; none: retention
    deletes it), and ``expires_after``: for a backup kept by age alone, when that ends (a run finishing
    after it deletes the backup unless another rule keeps it then); for one retention deletes, when it
    expired; else None (kept for as long as its rule keeps it)."""

    backup: Backup
    kept: tuple[Keep, ...]
    expires_after: datetime | None

    @property
    def deleted(self) -> bool:
        return not self.kept


@dataclass
class TableWalk:
    """What retention has seen of one table's good backups, newest first (one run's backup: its copies, by
    name, count once). The decision on an older backup depends only on this: how many were seen, and for
    each calendar rule how many periods it counted and the last one; and on whether it is the table's oldest
    run (``oldest``: that run's time in its name, epoch seconds, once known: ``catalog`` pages look it up)."""

    seen: int = 0
    counted: dict[Keep, int] = field(default_factory=dict)
    last_bucket: dict[Keep, tuple[int, int, int]] = field(default_factory=dict)
    oldest: int | None = None

    def oldest_matters(self, created: datetime, policy: Policy) -> bool:
        """Whether being the table's oldest run changes the decision on the next run's backup (made at
        ``created``): a calendar rule with its count not filled would not count it otherwise (its period is
        the last one the rule counted)."""
        return any(self.counted.get(rule, 0) < policy.count(rule)
                   and self.last_bucket.get(rule) == calendar_bucket(rule, created, policy.zone) for rule in CALENDAR)

    def next_run(self, created: datetime, policy: Policy, oldest: bool = False) -> list[Keep]:
        """The rules other than age that keep the next older run's backup of the table, made at ``created``.

        A calendar rule counts it when its count is not filled and it is the first of its period; or, as
        restic (0.16 on) and borg (1.2 on) do, when it is the table's ``oldest`` run, whatever its period."""
        self.seen += 1
        reasons = [Keep.LAST_GOOD] if self.seen <= policy.min_keep else []
        for rule in CALENDAR:
            bucket = calendar_bucket(rule, created, policy.zone)
            if self.counted.get(rule, 0) < policy.count(rule) and (oldest or self.last_bucket.get(rule) != bucket):
                self.counted[rule] = self.counted.get(rule, 0) + 1
                self.last_bucket[rule] = bucket
                reasons.append(rule)
        return reasons


def newest_first(backups: Iterable[Backup]) -> list[Backup]:
    """Newest first by (created, name, arn): one order whatever order they were listed in."""
    return sorted(backups, key=lambda b: (b.created, b.name, b.arn), reverse=True)


def decide(backup: Backup, reasons: Iterable[Keep], now: datetime, policy: Policy) -> Verdict:
    """The verdict on ``backup`` given the rules that keep its run's backup (``TableWalk.next_run``)."""
    kept = [*reasons, *([Keep.AGE] if backup.created >= now - policy.age else [])]
    ordered = tuple(sorted(set(kept), key=list(Keep).index))
    return Verdict(backup, ordered, backup.created + policy.age if ordered in ((), (Keep.AGE,)) else None)


def table_verdicts(walk: TableWalk, backups: Iterable[Backup], now: datetime, policy: Policy,
                   is_oldest: Callable[[list[Backup]], bool] = lambda copies: True) -> list[Verdict]:
    """Verdicts on good backups of one table that are all older than those ``walk`` has seen, newest first;
    ``walk`` goes on past them. The last run of ``backups`` is the table's oldest when ``is_oldest`` says so
    of its copies (default: ``backups`` reach the table's oldest), asked only when it matters."""
    runs: dict[str, list[Backup]] = {}
    for backup in newest_first(backups):
        runs.setdefault(backup.name, []).append(backup)  # a run's copies: its newest first
    out: list[Verdict] = []
    last = len(runs) - 1
    for i, copies in enumerate(runs.values()):  # in the order of each run's newest copy
        created = copies[0].created
        oldest = i == last and walk.oldest_matters(created, policy) and is_oldest(copies)
        reasons = walk.next_run(created, policy, oldest)
        out.extend(decide(b, reasons, now, policy) for b in copies)
    return out


def retention_verdicts(
    backups: Iterable[Backup],
    now: datetime,
    policy: Policy,
    prefix: str,
    tables: Iterable[str],
) -> list[Verdict]:
    """Retention's decision on each of this app's AVAILABLE USER backups of ``tables``, newest first.

    Walking each table's backups newest first (``newest_first``), a backup is kept when it is one of the
    newest ``policy.min_keep`` (copies of one run's backup, by name, count once and share the decision),
    younger than ``policy.age``, or the newest of a day / ISO week / month / year (in ``policy.zone``) among
    the last N such periods of the table that have a good backup, or the table's oldest (the last listed:
    ``backups`` are taken for the whole listing) when fewer than N periods have one; deleted when no rule
    keeps it. SYSTEM and AWS_BACKUP backups, names that are not exactly this prefix's (``is_ours``), other
    tables and backups not AVAILABLE are not decided on (never deleted) and never counted.
    """
    selected = set(tables)
    by_table: dict[str, list[Backup]] = {}
    for backup in backups:
        if backup.table in selected and is_ours(backup, prefix) and backup.status == "AVAILABLE":
            by_table.setdefault(backup.table, []).append(backup)
    out = [v for table_backups in by_table.values() for v in table_verdicts(TableWalk(), table_backups, now, policy)]
    return sorted(out, key=lambda v: (v.backup.created, v.backup.name, v.backup.arn), reverse=True)


def backups_to_delete(
    backups: Iterable[Backup],
    now: datetime,
    retention: timedelta | Policy,
    min_keep: int,
    prefix: str,
    tables: Iterable[str],
) -> list[Backup]:
    """The backups ``retention_verdicts`` deletes, oldest first. ``retention``: a Policy, or the age alone
    (BACKUP_RETENTION_DAYS; with ``min_keep``): this app's AVAILABLE USER backups of ``tables`` older than
    it, except the newest ``min_keep`` AVAILABLE ones of each table (by name: copies of one run's backup
    count once, and all stay), which stay however old they are (so days of failed runs never prune the
    last good backups)."""
    policy = retention if isinstance(retention, Policy) else Policy(age=retention, min_keep=min_keep)
    doomed = [v.backup for v in retention_verdicts(backups, now, policy, prefix, tables) if v.deleted]
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


PITR_SPREAD_DAYS = 7  # without BACKUP_REQUIRE_PITR, each table's point-in-time recovery is read one day in 7


def pitr_checked(tables: Iterable[str], day: date, required: bool) -> set[str]:
    """The tables whose point-in-time recovery a run on ``day`` reads (one DescribeContinuousBackups each).

    ``required`` (BACKUP_REQUIRE_PITR): all of them, since the run alerts on every one that has it off.
    Otherwise spread over PITR_SPREAD_DAYS days: the tables in a fixed order (a hash of the name, then the
    name), the k-th read on the days whose ordinal is k modulo 7. A run reads at most ceil(n / 7) of n tables,
    and each table of an unchanged selection is read once in any 7 consecutive days (a table added to or
    removed from the selection may move the others' day once: at most 13 days apart then).
    """
    chosen = set(tables)
    if required:
        return chosen
    order = sorted(chosen, key=lambda t: (hashlib.sha256(t.encode()).digest(), t))
    slot = day.toordinal() % PITR_SPREAD_DAYS
    return {t for i, t in enumerate(order) if i % PITR_SPREAD_DAYS == slot}

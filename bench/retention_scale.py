"""P1, retention by calendar at 2,000 tables with a year of daily backups: ListBackups pages and DeleteBackups.

Retention runs as the monitor runs it (``chalicelib.backups.monitor.prune``, each invocation with the
backup_monitor function's 240 s, carried over while it has more to delete), against a count-only stand-in
for DynamoDB's ListBackups and DeleteBackup, not moto (730,000 backups are beyond moto: ~70 us a backup to
make, and the ListBackups correction sorts every backup per call). The stand-in answers as AWS does and as
``local.moto_corrections.aws_like_backups`` models it: oldest first, at most 100 a page with
``LastEvaluatedBackupArn``, ``TimeRangeLowerBound`` inclusive and ``TimeRangeUpperBound`` exclusive,
``BackupType``; DeleteBackup of a backup gone is ``BackupNotFoundException``; any other call fails the
bench (no per-backup describe). Its calls take no time: the clock moves only by the app's own pacing at
AWS's quotas (ListBackups 5/s, DeleteBackup at BACKUP_DELETE_RATE, 8/s), so each invocation's seconds are
what the quotas alone make it.

Policy ``daily=7,weekly=4,monthly=12,yearly=3``, BACKUP_RETENTION_DAYS=3, BACKUP_MIN_KEEP=2; every table
has one backup of this app a day at 03:00 UTC. Scenarios:

- **daily run**: what a year under the policy leaves (the policy's kept set of 365 daily backups as of the
  day before) plus the day's new backup: the daily run's retention, every invocation to the end;
- **first run**: the policy switched on over 365 daily backups a table (and the day's): at a few tables,
  every invocation to the end; at the largest N, the first invocations only (the whole would take
  thousands), with the invocations the rest needs estimated at the last one's rate (said so in the row).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.core import BENCH_ENV, Clock, Scale, Section, Target

START = datetime(2026, 11, 25, 3, 0, tzinfo=UTC)  # a Wednesday: a backup a table leaves the policy
RETENTION = "daily=7,weekly=4,monthly=12,yearly=3"
INVOCATION_SECONDS = 240.0  # backup_monitor's lambda_timeout (.chalice/config.json)
PAGE = 100                  # AWS's ListBackups page (local.moto_corrections.LIST_BACKUPS_PAGE)
ACCOUNT_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table"


class CountedBackups:
    """ListBackups and DeleteBackup as AWS answers them, over backups kept in memory, counting calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._keys: list[tuple[float, str]] = []          # (created, arn), oldest first
        self._summaries: dict[str, dict[str, Any]] = {}   # the backups that exist, by ARN
        self._key_of: dict[str, tuple[float, str]] = {}   # every ARN ever made (a page may start after a gone one)

    def add(self, table: str, name: str, created: datetime) -> None:
        arn = f"{ACCOUNT_ARN}/{table}/backup/{int(created.timestamp() * 1000):017d}-{len(self._key_of):08x}"
        key = (created.timestamp(), arn)
        self._summaries[arn] = {"TableName": table, "BackupArn": arn, "BackupName": name,
                                "BackupCreationDateTime": created, "BackupStatus": "AVAILABLE",
                                "BackupType": "USER", "BackupSizeBytes": 1}
        self._key_of[arn] = key
        self._keys.append(key)

    def sort(self) -> None:
        self._keys.sort()

    def __len__(self) -> int:
        return len(self._summaries)

    def list_backups(self, **kwargs: Any) -> dict[str, Any]:
        self.calls["ListBackups"] += 1
        if kwargs.get("BackupType", "USER") not in ("USER", "ALL"):
            return {"BackupSummaries": []}
        lower = kwargs["TimeRangeLowerBound"].timestamp() if "TimeRangeLowerBound" in kwargs else -math.inf
        upper = kwargs["TimeRangeUpperBound"].timestamp() if "TimeRangeUpperBound" in kwargs else math.inf
        limit = int(kwargs.get("Limit", PAGE))
        start = kwargs.get("ExclusiveStartBackupArn")
        i = (bisect.bisect_right(self._keys, self._key_of[start]) if start
             else bisect.bisect_left(self._keys, (lower, "")))
        page: list[dict[str, Any]] = []
        while i < len(self._keys) and self._keys[i][0] < upper:
            if len(page) == limit:
                return {"BackupSummaries": page, "LastEvaluatedBackupArn": page[-1]["BackupArn"]}
            page.append(self._summaries[self._keys[i][1]])
            i += 1
        return {"BackupSummaries": page}

    def delete_backup(self, BackupArn: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        self.calls["DeleteBackup"] += 1
        if BackupArn not in self._summaries:
            raise ClientError({"Error": {"Code": "BackupNotFoundException", "Message": "gone"}}, "DeleteBackup")
        del self._summaries[BackupArn]
        del self._keys[bisect.bisect_left(self._keys, self._key_of[BackupArn])]
        return {}

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"retention called {name}: only ListBackups and DeleteBackup are expected")


@dataclass
class Chain:
    """One scenario's invocations of retention."""

    scenario: str
    tables: int
    backups: int                 # in the world before retention
    doomed: int                  # what the policy deletes
    invocations: int = 0         # measured
    pages: int = 0
    deletes: int = 0
    longest: float = 0.0         # seconds of the longest invocation, at the quotas
    left: int = 0                # still to delete after the measured invocations
    estimated: int | None = None  # invocations in all, estimated, when not all were measured
    deletes_last: int = 0        # the last measured invocation's deletes
    seconds: list[float] = field(default_factory=list)

    @property
    def floor(self) -> int:
        """The fewest calls: every backup listed once (pages of 100) and each doomed one deleted once."""
        return max(1, math.ceil(self.backups / PAGE)) + self.doomed


def _deps(clock: Clock, client: CountedBackups, tables: list[str]) -> Any:
    from types import SimpleNamespace

    from chalicelib.aws import Deps
    from chalicelib.settings import Settings

    settings = Settings.from_env({**BENCH_ENV, "STAGE": "bench", "BACKUP_RETENTION": RETENTION,
                                  "BACKUP_RETENTION_DAYS": "3", "BACKUP_MIN_KEEP": "2"})
    settings = replace(settings, backup_tables=tuple(tables), backup_table_pattern=None, backup_table_tag=None)
    return Deps(settings=settings, clients=SimpleNamespace(dynamodb=client),  # type: ignore[arg-type]
                clock=clock, sleep=clock.sleep)


def _daily(days: int) -> list[datetime]:
    """A backup a day at 03:00 UTC: today's (START) and the ``days`` days before, newest first."""
    return [START - timedelta(days=d) for d in range(days + 1)]


def _kept_days(days: int) -> list[datetime]:
    """The times of the backups a year under the policy leaves a table: its kept set as of yesterday's run
    (one table stands for all: they are alike), and today's new backup."""
    from chalicelib.backups import retention, rules

    settings_deps = _deps(Clock(START), CountedBackups(), ["t"])
    policy = retention.retention_policy(settings_deps.settings)
    prefix = settings_deps.settings.backup_name_prefix
    yesterday = START - timedelta(days=1)
    backups = [rules.Backup(f"arn-{i}", rules.backup_name(prefix, "t", at), "t", at, "AVAILABLE", "USER")
               for i, at in enumerate(_daily(days)[1:])]
    verdicts = rules.retention_verdicts(backups, yesterday + timedelta(minutes=30), policy, prefix, ["t"])
    return [START] + [v.backup.created for v in verdicts if not v.deleted]


def chain(scenario: str, n: int, times: list[datetime], most: int | None = None) -> Chain:
    """Retention over ``n`` tables with a backup at each of ``times``, invocation after invocation until it
    is done (or ``most`` invocations; then the rest is estimated at the last one's rate)."""
    from chalicelib.backups import monitor, retention, rules

    tables = [f"bench-{i:04d}" for i in range(n)]
    client = CountedBackups()
    clock = Clock(START + timedelta(minutes=30))
    deps = _deps(clock, client, tables)
    prefix = deps.settings.backup_name_prefix
    stamps = [(at, at.strftime(rules.STAMP_FORMAT)) for at in times]
    for table in tables:
        head = rules.backup_name(prefix, table, START)[:-rules.STAMP_LENGTH]
        for at, stamp in stamps:
            client.add(table, head + stamp, at)
    client.sort()
    one = [rules.Backup(str(i), rules.backup_name(prefix, "t", at), "t", at, "AVAILABLE", "USER")
           for i, at in enumerate(times)]
    policy = retention.retention_policy(deps.settings)
    doomed = n * sum(v.deleted for v in rules.retention_verdicts(one, clock.now, policy, prefix, ["t"]))
    out = Chain(scenario, n, len(client), doomed)
    windowed = False
    while True:
        started = clock.now
        pruned = monitor.prune(deps, tables, clock.now, windowed=windowed, seconds_left=lambda started=started: (  # type: ignore[misc]
            INVOCATION_SECONDS - (clock.now - started).total_seconds()))
        out.invocations += 1
        out.seconds.append((clock.now - started).total_seconds())
        out.deletes += len(pruned.deleted)
        windowed = pruned.windowed
        if not pruned.more or (most is not None and out.invocations >= most):
            break
        clock.sleep(1.0)  # the next message's delivery
    out.pages = client.calls["ListBackups"]
    out.longest = max(out.seconds)
    out.left = out.doomed - out.deletes
    out.deletes_last = len(pruned.deleted)
    if out.left > 0 and pruned.more and out.deletes_last:
        out.estimated = out.invocations + math.ceil(out.left / out.deletes_last)
    return out


# --- the section ----------------------------------------------------------------------------


def scenarios(scale: Scale) -> list[tuple[str, int, list[datetime], int | None]]:
    """(scenario, tables, backup times of each table, invocations measured at most) at ``scale``."""
    largest: int = scale.pick(2000, 200, 3)
    whole: int = scale.pick(20, 20, 3)
    most: int | None = scale.pick(3, 3, None)
    return [("daily run (a year under the policy, and the day's backup)", largest, _kept_days(365), None),
            ("first run (365 daily backups a table), to the end", whole, _daily(365), None),
            ("first run (365 daily backups a table)", largest, _daily(365), most)]


def section(scale: Scale) -> Section:
    import logging
    import time

    from chalicelib.log import logger

    level = logger.log_level
    logger.setLevel(logging.WARNING)  # a line per deleted backup at INFO
    started, cpu = time.perf_counter(), time.process_time()
    try:
        chains = [chain(name, n, times, most) for name, n, times, most in scenarios(scale)]
    finally:
        logger.setLevel(level)
    wall, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    out = Section(
        key="P1", title=f"retention by calendar ({RETENTION}): ListBackups pages and DeleteBackups, "
                        f"each invocation within backup_monitor's {INVOCATION_SECONDS:.0f} s",
        columns=["scenario", "tables", "backups", "to delete", "invocations", "ListBackups", "DeleteBackup",
                 "calls / floor", "longest invocation s", "left"])
    for c in chains:
        invocations: Any = c.invocations if c.estimated is None else f"{c.invocations} measured (~{c.estimated:,} in all)"
        out.rows.append([c.scenario, c.tables, c.backups, c.doomed, invocations, c.pages, c.deletes,
                         (c.pages + c.deletes) / c.floor if c.estimated is None else "n/a", round(c.longest, 1), c.left])
    out.targets = [Target(f"longest retention invocation at {max(c.tables for c in chains)} tables, seconds at "
                          "the quotas (backup_monitor's timeout)", max(c.longest for c in chains), INVOCATION_SECONDS)]
    out.notes = [
        "a count-only stand-in for ListBackups (oldest first, pages of 100, time bounds) and DeleteBackup, "
        "not moto (bench/retention_scale.py); any other call (a per-backup describe) fails the bench; calls take "
        "no time: each invocation's seconds are the app's pacing at AWS's quotas (ListBackups 5/s, "
        "DeleteBackup BACKUP_DELETE_RATE 8/s)",
        "retention alone, as the monitor's finish runs it (monitor.prune), carried over from invocation to "
        "invocation; the run's polls are P1's table above; the floor lists every backup once and deletes "
        "each doomed one once",
        "the daily run: the policy's kept set of a year of daily backups as of the day before, plus the day's "
        "backup (a Wednesday: one backup a table leaves the policy)",
    ]
    for c in chains:
        if c.estimated is not None:
            out.notes.append(
                f"{c.scenario} at {c.tables} tables: {c.invocations} invocations measured "
                f"({', '.join(f'{s:.0f}' for s in c.seconds)} s); the rest estimated at the last one's rate "
                f"({c.deletes_last} deletes): ~{c.estimated:,} invocations in all")
    out.notes.append(f"measured in {wall:.0f} s wall, {cpu_s:.0f} s CPU")
    out.figures = {"chains": [
        {"scenario": c.scenario, "tables": c.tables, "backups": c.backups, "doomed": c.doomed,
         "invocations": c.invocations, "estimated_invocations": c.estimated, "list_backups": c.pages,
         "delete_backup": c.deletes, "floor": c.floor, "seconds": [round(s, 1) for s in c.seconds],
         "left": c.left} for c in chains],
        "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu_s, 1)}
    return out

"""Pure decisions of exports to S3 (exports.py does the I/O): where an export goes, its idempotency token, what a
DescribeExport answer means.

One export of one table at one time: its key prefix ``<EXPORT_PREFIX>/<table>/<time>`` and its ``ClientToken``
are both derived from the table and the export time, so a second call for the same export (a lost answer, a
scheduled event delivered twice) names the same export: AWS answers a repeated token with the export it made,
and a listing of the table's exports finds it by its prefix where a token is not honoured (moto).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from chalicelib.backups import rules

# An export's status in its record: AWS's IN_PROGRESS, COMPLETED and FAILED, and the app's own verdicts.
PENDING = "PENDING"          # recorded, ExportTableToPointInTime not answered yet
IN_PROGRESS = "IN_PROGRESS"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
REFUSED = "REFUSED"          # never asked: the table's point-in-time recovery is off
VANISHED = "VANISHED"        # DescribeExport: ExportNotFoundException
STUCK = "STUCK"              # IN_PROGRESS past EXPORT_DEADLINE_MINUTES
SETTLED = (COMPLETED, FAILED, REFUSED, VANISHED, STUCK)

# FailureCodes of an export that the bucket refused (missing, access denied by its policy or its owner, its
# Object Lock or encryption): one alert names the bucket, not one a table.
BUCKET_FAILURES = ("S3NoSuchBucket", "S3AccessDenied", "S3InvalidBucketName", "S3ObjectLocked", "S3PermissionDenied",
                   "KMSAccessDenied")


EXPORT_RUN_ID = re.compile(r"[0-9]{8}T[0-9]{6}Z")  # an export run's id: its export time (export_time_label)


def export_time_label(at: datetime) -> str:
    """The export time as it appears in keys and ids: ``20261122T120000Z`` (UTC, whole seconds)."""
    return f"{at.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def export_prefix(stage_prefix: str, table: str, at: datetime) -> str:
    """The S3 key prefix of ``table``'s export at ``at``; AWS writes under ``<it>/AWSDynamoDB/<export id>/``."""
    return f"{stage_prefix}/{table}/{export_time_label(at)}"


def client_token(table: str, at: datetime) -> str:
    """ExportTableToPointInTime's ``ClientToken``: the same for the same table and export time, different
    for any other (AWS keeps a token 8 hours: a repeat within them answers the export it made)."""
    return hashlib.sha256(f"{table}@{export_time_label(at)}".encode()).hexdigest()[:32]


def import_token(restore_id: str) -> str:
    """ImportTable's ``ClientToken`` for a restore: one restore id, one table."""
    return hashlib.sha256(f"import@{restore_id}".encode()).hexdigest()[:32]


def is_bucket_failure(code: str) -> bool:
    return code in BUCKET_FAILURES or code.startswith("S3")


def run_summary(exports: list[tuple[str, int, int]], tables: int) -> dict[str, int]:
    """An export run's counts from its exports (``(status, item count, size in bytes)``) and its number of tables:
    how many started (asked of DynamoDB and not refused), are in progress, completed and failed (FAILED, REFUSED,
    VANISHED, STUCK), and the completed ones' items and bytes."""
    completed = [e for e in exports if e[0] == COMPLETED]
    return {"exports": tables, "started": sum(1 for e in exports if e[0] not in (PENDING, REFUSED)),
            "in_progress": sum(1 for e in exports if e[0] == IN_PROGRESS), "completed": len(completed),
            "failed": sum(1 for e in exports if e[0] in (FAILED, REFUSED, VANISHED, STUCK)),
            "item_count": sum(e[1] for e in completed), "size_bytes": sum(e[2] for e in completed)}


def settle(status: str, started: datetime, now: datetime, deadline_minutes: int) -> str:
    """The record's next status from DescribeExport's (``""``: the export is gone): a COMPLETED or FAILED answer
    settles it, a vanished one is VANISHED, and one still IN_PROGRESS past the deadline is STUCK."""
    if not status:
        return VANISHED
    if status in (COMPLETED, FAILED):
        return status
    if (now - started).total_seconds() > deadline_minutes * 60:
        return STUCK
    return IN_PROGRESS


# How long each calendar rule can keep one export at most: N periods of its length (a month 31 days, a year 366).
RULE_SPAN = {rules.Keep.DAILY: timedelta(days=1), rules.Keep.WEEKLY: timedelta(weeks=1),
             rules.Keep.MONTHLY: timedelta(days=31), rules.Keep.YEARLY: timedelta(days=366)}


def planned_expiry(export_time: datetime, policy: rules.Policy) -> datetime:
    """The latest time the stage's retention may keep an export made at ``export_time`` by age or calendar
    (BACKUP_RETENTION_DAYS, BACKUP_RETENTION): its Object Lock retention. Only the newest BACKUP_MIN_KEEP good
    ones may be kept longer (``last_good``), never deleted while newer ones are not."""
    spans = [policy.age, *(RULE_SPAN[rule] * policy.count(rule) for rule in rules.CALENDAR)]
    return export_time + max(spans)


@dataclass(frozen=True)
class ExportVerdict:
    """Retention's decision on one COMPLETED export: why kept (rule names, ``lock``), when it expires (None: as long
    as its rule keeps it), whether its objects are to be deleted now."""

    run_id: str
    kept: tuple[str, ...]
    expires: datetime | None
    delete: bool


def export_verdicts(completed: list[tuple[str, datetime, str]], now: datetime, policy: rules.Policy
                    ) -> list[ExportVerdict]:
    """Verdicts on one table's COMPLETED exports (``(run_id, export time, locked until ISO or "")``), by the
    backups' rules (rules.table_verdicts): one a run, newest first. The newest BACKUP_MIN_KEEP (at least 1) are
    always kept. One the rules expire but whose objects are still locked is kept by ``lock`` until then."""
    as_backups = [rules.Backup(arn=run_id, name=run_id, table="", created=at, status="AVAILABLE", type="USER")
                  for run_id, at, _ in completed]
    locks = {run_id: locked for run_id, _, locked in completed}
    out: list[ExportVerdict] = []
    for verdict in rules.table_verdicts(rules.TableWalk(), as_backups, now, policy):
        run_id = verdict.backup.name
        locked = datetime.fromisoformat(locks[run_id]) if locks[run_id] else None
        if verdict.deleted and locked is not None and locked > now:
            out.append(ExportVerdict(run_id, ("lock",), locked, False))
        else:
            out.append(ExportVerdict(run_id, tuple(k.value for k in verdict.kept), verdict.expires_after,
                                     verdict.deleted))
    return out

"""Pure decisions of exports to S3 (exports.py does the I/O): where an export goes, its idempotency token, what a
DescribeExport answer means, whether a table's next export is full or incremental, and which exports a restore chains.

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
from typing import Any

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


FULL, INCREMENTAL = "FULL_EXPORT", "INCREMENTAL_EXPORT"  # ExportType
VIEW_TYPE = "NEW_AND_OLD_IMAGES"  # an incremental's lines carry OldImage too: a restore counts inserts and deletes
INCREMENTAL_MIN, INCREMENTAL_MAX = timedelta(minutes=15), timedelta(hours=24)  # AWS's bounds of an incremental window
CHAINABLE = (PENDING, IN_PROGRESS, COMPLETED)  # an export whose window is fixed and not (yet) failed

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


# --- full or incremental, and the chains a restore follows ---------------------------------------------------------

@dataclass(frozen=True)
class Link:
    """What the chain rules need of one export's record: its time (an incremental's ExportToTime), its type, the
    time an incremental starts from (the previous export's time), its status, whether its objects are deleted."""

    run_id: str
    export_time: datetime
    kind: str = FULL
    from_time: datetime | None = None
    status: str = COMPLETED
    deleted: bool = False


@dataclass(frozen=True)
class Plan:
    """A table's next export: FULL, or INCREMENTAL from ``from_time`` to the export time; why (for the log)."""

    kind: str
    from_time: datetime | None
    reason: str


def next_export(previous: list[Link], at: datetime, full_every: timedelta | None) -> Plan:
    """The export of a table at ``at`` (``previous``: its earlier exports): FULL when incrementals are off
    (``full_every`` None: EXPORT_FULL_HOURS 0), when it has no full export that is good or under way, when its last
    one is ``full_every`` old, when the chain since is broken (an export after it failed, is gone, or does not
    start where the one before it ends), or when the window since the previous export is outside AWS's 15 minutes
    to 24 hours; else INCREMENTAL from the previous export's time."""
    if full_every is None:
        return Plan(FULL, None, "EXPORT_FULL_HOURS is 0: every export is full")
    earlier = sorted((link for link in previous if link.export_time < at), key=lambda link: link.export_time)
    fulls = [n for n, link in enumerate(earlier) if link.kind == FULL and link.status in CHAINABLE and not link.deleted]
    if not fulls:
        return Plan(FULL, None, "no full export to chain from")
    chain = earlier[fulls[-1]:]
    if at - chain[0].export_time >= full_every:
        return Plan(FULL, None, f"the last full export ({chain[0].run_id}) is {full_every} old or more")
    problem = chain_problem(chain, CHAINABLE)
    if problem:
        return Plan(FULL, None, problem)
    since = chain[-1].export_time
    refusal = window_refusal(since, at)
    if refusal:
        return Plan(FULL, None, refusal)
    return Plan(INCREMENTAL, since, f"the changes since {chain[-1].run_id}")


def window_refusal(start: datetime, end: datetime) -> str:
    """Why AWS refuses an incremental export from ``start`` to ``end`` ("": it takes it): 15 minutes to 24 hours."""
    if end - start < INCREMENTAL_MIN:
        return f"an incremental window of {end - start} is under AWS's {INCREMENTAL_MIN}"
    if end - start > INCREMENTAL_MAX:
        return f"an incremental window of {end - start} is over AWS's {INCREMENTAL_MAX}"
    return ""


def chain_problem(chain: list[Link], good: tuple[str, ...]) -> str:
    """What breaks ``chain`` (oldest first: a full export, then incrementals each starting where the one before
    ends, every one's status in ``good`` and its objects kept); "": nothing."""
    for n, link in enumerate(chain):
        if n == 0 and link.kind != FULL:
            return f"{link.run_id} is not a full export"
        if n > 0 and (link.kind != INCREMENTAL or link.from_time != chain[n - 1].export_time):
            return f"{link.run_id} does not start where {chain[n - 1].run_id} ends"
        if link.status not in good or link.deleted:
            return f"export {link.run_id} is {'deleted' if link.deleted else link.status}"
    return ""


def restore_chain(exports: list[Link], run_id: str) -> tuple[list[Link], str]:
    """The exports a restore to ``run_id``'s time applies, oldest first: a full export alone, or for an incremental
    the full export it chains from then each incremental up to it, walked back by their start times; and what breaks
    the chain ("": nothing), every link COMPLETED with its objects kept."""
    by_time = {link.export_time: link for link in exports}
    found = {link.run_id: link for link in exports}
    if run_id not in found:
        return [], f"no export {run_id}"
    chain = [found[run_id]]
    while chain[0].kind == INCREMENTAL:
        start = chain[0].from_time
        before = by_time.get(start) if start is not None else None
        if before is None or before in chain:
            return chain, f"{chain[0].run_id} chains from {export_time_label(start) if start else 'nothing'}, " \
                "which is not recorded"
        chain.insert(0, before)
    return chain, chain_problem(chain, (COMPLETED,))


def chain_verdicts(exports: list[tuple[Link, str]], now: datetime, policy: rules.Policy) -> list[ExportVerdict]:
    """Retention of one table's exports (``(link, locked until ISO or "")``, every status) with incrementals. A full
    export and the COMPLETED incrementals chained from it are one restore chain, judged by the backups' rules
    (export_verdicts) as of its newest link's time: the newest restore point it holds is kept as long as the rules
    keep that time, and every link is kept (or deleted) with it. An incremental whose chain is broken before it (a
    link failed or deleted: no restore goes through it) is kept by age alone (BACKUP_RETENTION_DAYS); one whose
    chain has a link still under way gets no verdict yet. A link the verdict deletes while its lock holds is kept
    by ``lock``."""
    by_time = {link.export_time: link for link, _ in exports}
    roots: dict[str, str | None] = {}  # a COMPLETED incremental's full export; None: its chain is broken
    for link, _ in exports:
        if link.kind != INCREMENTAL or link.status != COMPLETED or link.deleted:
            continue
        root: Link | None = link
        while root is not None and root.kind == INCREMENTAL and root.status == COMPLETED and not root.deleted:
            root = by_time.get(root.from_time) if root.from_time else None
        if root is not None and root.status in (PENDING, IN_PROGRESS):
            continue  # settled later: judged then
        good_full = root is not None and root.kind == FULL and root.status == COMPLETED and not root.deleted
        roots[link.run_id] = root.run_id if root is not None and good_full else None
    ends = {link.run_id: link.export_time for link, _ in exports}
    for run_id, root_id in roots.items():
        if root_id is not None:
            ends[root_id] = max(ends[root_id], ends[run_id])
    fulls = [(link.run_id, ends[link.run_id], locked) for link, locked in exports
             if link.kind == FULL and link.status == COMPLETED and not link.deleted]
    verdicts = {v.run_id: v for v in export_verdicts(fulls, now, policy)}
    out: list[ExportVerdict] = []
    for link, locked in exports:
        if link.run_id in verdicts:
            out.append(verdicts[link.run_id])
        if link.run_id not in roots:
            continue
        root_id = roots[link.run_id]
        base = verdicts[root_id] if root_id is not None else ExportVerdict(  # broken: by its own age
            link.run_id, ("age",), link.export_time + policy.age, now >= link.export_time + policy.age)
        lock = datetime.fromisoformat(locked) if locked else None
        if base.delete and lock is not None and lock > now:
            out.append(ExportVerdict(link.run_id, ("lock",), lock, False))
        else:
            out.append(ExportVerdict(link.run_id, base.kept, base.expires, base.delete))
    return out


@dataclass(frozen=True)
class Change:
    """One line of an incremental export as a restore applies it: the item to put (its NewImage), or the key to
    delete (no NewImage); what it does to the table's item count (+1 new, -1 deleted, 0 updated)."""

    put: dict[str, Any] | None
    delete: dict[str, Any] | None
    count: int


def change(line: dict[str, Any]) -> Change:
    """An incremental export's line (``{"Metadata", "Keys", "NewImage", "OldImage"}``, NEW_AND_OLD_IMAGES); a line
    without ``Keys`` is a ValueError (the export is not what DynamoDB writes)."""
    keys, new, old = line.get("Keys"), line.get("NewImage"), line.get("OldImage")
    if not isinstance(keys, dict) or not keys:
        raise ValueError(f"an incremental export's line without Keys: {str(line)[:200]}")
    if new is not None:
        return Change(dict(new), None, 0 if old is not None else 1)
    return Change(None, dict(keys), -1 if old is not None else 0)

"""Pure decisions of restore on demand (``POST /backups/restores``): the request, the refusals, the
comparison, which settings to re-apply. No I/O.

A restore brings a table back from a backup (``backup_arn``, or ``latest``: the newest AVAILABLE
backup this stage made of the table) or from a point in time (``point_in_time``: an ISO time inside
the source's restorable window, or ``latest_restorable``) into a new table whose name
RESTORE_TARGET_PATTERN allows (``target_pattern``). When the restored table is ACTIVE it is compared
with what it was restored from, as restore verification compares (verify_rules.compare), and, unless
``copy_settings`` is false, what DynamoDB does not restore is re-applied from the source table as it
is now (``settings_changes``): the TTL attribute, the stream, point-in-time recovery, deletion
protection and the tags.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from chalicelib.backups import rules, verify_rules
from chalicelib.web import ApiError, bad_request, reject_unknown

RESTORING, ACTIVE, FAILED = "RESTORING", "ACTIVE", "FAILED"
FROM_BACKUP, FROM_POINT, FROM_EXPORT = "backup", "point_in_time", "export"
LATEST_RESTORABLE = "latest_restorable"
BILLING_MODES = ("SOURCE", "PAY_PER_REQUEST")  # SOURCE: as the source had it (the backup's or the point's)
RESTORE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")
BACKUP_ARN = re.compile(r"arn:aws[a-zA-Z-]*:dynamodb:[a-z0-9-]+:[0-9]{12}:table/[A-Za-z0-9_.-]{3,255}/backup/[0-9A-Za-z-]{1,80}")
FIELDS = {"table", "backup_arn", "latest", "point_in_time", "export", "target", "copy_settings", "billing_mode",
          "restore_id"}
SOURCES = ("backup_arn", "latest", "point_in_time", "export")
EXPORT_ID = re.compile(r"[0-9]{8}T[0-9]{6}Z")  # an export's run id: its export time (export_rules.export_time_label)
# What DynamoDB does not restore and a restore re-applies from the source, in the order it applies them.
SETTINGS = ("ttl", "pitr", "tags", "stream", "deletion_protection")


@dataclass(frozen=True)
class RestoreRequest:
    """A valid ``POST /backups/restores`` body: what to restore (``kind``, the backup or the point), where."""

    table: str
    target: str
    kind: str                          # FROM_BACKUP or FROM_POINT
    backup_arn: str = ""               # named by ARN ("" with ``latest``)
    point_in_time: datetime | None = None  # None with latest_restorable
    copy_settings: bool = True
    billing_mode: str = "SOURCE"
    restore_id: str = ""               # the client's idempotency key ("": the app names the restore)
    export: str = ""                   # FROM_EXPORT: the export's time label (its run id)

    def same_as(self, recorded: Mapping[str, Any]) -> bool:
        """The request a restore was recorded with (``Restore.request``) is this one."""
        return dict(recorded) == self.as_record()

    def as_record(self) -> dict[str, Any]:
        record = {"table": self.table, "target": self.target, "kind": self.kind, "backup_arn": self.backup_arn,
                  "point_in_time": self.point_in_time.isoformat() if self.point_in_time else "",
                  "copy_settings": self.copy_settings, "billing_mode": self.billing_mode}
        return {**record, "export": self.export} if self.export else record


def parse_time(text: str) -> datetime:
    """An ISO-8601 time (``Z`` or an offset; none: UTC), as an aware datetime; ValueError if not one."""
    at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def parse_request(body: Mapping[str, Any] | None) -> RestoreRequest:
    """The request, or an ApiError 400 naming the first field that is wrong."""
    if body is None:
        raise bad_request("body", "a JSON object body is required: table, target and one of " + ", ".join(SOURCES))
    reject_unknown(dict(body), FIELDS)
    table, target = body.get("table"), body.get("target")
    if not isinstance(table, str) or not TABLE_NAME.fullmatch(table):
        raise bad_request("table", "table must be the source table's name (3-255 of A-Z a-z 0-9 _ . -)")
    if not isinstance(target, str) or not TABLE_NAME.fullmatch(target):
        raise bad_request("target", "target must be a new table's name (3-255 of A-Z a-z 0-9 _ . -)")
    named = [f for f in SOURCES if f in body]
    if len(named) != 1:
        raise bad_request(named[1] if len(named) > 1 else "backup_arn",
                          f"name exactly one of {', '.join(SOURCES)} (what to restore from)")
    kind, backup_arn, point, export = FROM_BACKUP, "", None, ""
    if named == ["backup_arn"]:
        backup_arn = body["backup_arn"]
        if not isinstance(backup_arn, str) or not BACKUP_ARN.fullmatch(backup_arn):
            raise bad_request("backup_arn", "backup_arn must be a DynamoDB backup ARN "
                              "(arn:aws:dynamodb:REGION:ACCOUNT:table/TABLE/backup/ID)")
    elif named == ["export"]:
        kind, export = FROM_EXPORT, body["export"]
        if not isinstance(export, str) or not EXPORT_ID.fullmatch(export):
            raise bad_request("export", "export must be an export's id, its export time as 20261122T120000Z "
                              "(GET /backups?table=... lists them)")
    elif named == ["latest"]:
        if body["latest"] is not True:
            raise bad_request("latest", "latest must be true (the newest AVAILABLE backup this stage made)")
    else:
        kind, raw = FROM_POINT, body["point_in_time"]
        if raw != LATEST_RESTORABLE:
            try:
                if not isinstance(raw, str) or len(raw) > 40:
                    raise ValueError(raw)
                point = parse_time(raw)
            except ValueError:
                raise bad_request("point_in_time", f"point_in_time must be an ISO-8601 time or "
                                  f"{LATEST_RESTORABLE!r}, got {str(raw)[:60]!r}") from None
    copy_settings = body.get("copy_settings", True)
    if not isinstance(copy_settings, bool):
        raise bad_request("copy_settings", "copy_settings must be true or false")
    billing_mode = body.get("billing_mode", "SOURCE")
    if billing_mode not in BILLING_MODES:
        raise bad_request("billing_mode", f"billing_mode must be one of {', '.join(BILLING_MODES)}")
    restore_id = body.get("restore_id", "")
    if "restore_id" in body and (not isinstance(restore_id, str) or not RESTORE_ID.fullmatch(restore_id)):
        raise bad_request("restore_id", "restore_id must be 1-64 of A-Z a-z 0-9 _ -")
    return RestoreRequest(table, target, kind, backup_arn, point, copy_settings, billing_mode, restore_id, export)


def target_pattern(pattern: str, table: str) -> re.Pattern[str]:
    """RESTORE_TARGET_PATTERN for source ``table`` as a regular expression (``*``: any characters)."""
    tokens = re.split(r"(<table>|\*)", pattern)
    return re.compile("".join(re.escape(table) if t == "<table>" else ".*" if t == "*" else re.escape(t)
                              for t in tokens))


def any_target(pattern: str) -> re.Pattern[str]:
    """RESTORE_TARGET_PATTERN for any source table: the names a restore may make (``<table>``: any name)."""
    return re.compile("".join(".+" if t == "<table>" else ".*" if t == "*" else re.escape(t)
                              for t in re.split(r"(<table>|\*)", pattern)))


def target_refusal(request: RestoreRequest, pattern: str, own_tables: Collection[str], prefix: str) -> ApiError | None:
    """Why the target may not be restored into, judged from names alone: one of the app's own tables (the
    state, tasks and task sources' tables, restore verification's temporary ones), the source itself,
    or a name RESTORE_TARGET_PATTERN does not allow."""
    target = request.target
    if target in own_tables or target.startswith(verify_rules.restore_prefix(prefix)):
        return ApiError(400, f"target {target!r} is one of the app's own tables", "target")
    if target == request.table:
        return ApiError(400, "target must be a new table, not the source table", "target")
    if not target_pattern(pattern, request.table).fullmatch(target):
        shown = pattern.replace("<table>", request.table)
        return ApiError(400, f"target {target!r} does not match RESTORE_TARGET_PATTERN {shown!r}", "target")
    return None


def window_refusal(point: datetime, earliest: datetime | None, latest: datetime | None) -> str | None:
    """Why ``point`` cannot be restored to, given the source's restorable window (None: it can)."""
    if earliest is None or latest is None:
        return "the source has no restorable window (point-in-time recovery is off)"
    if not earliest <= point <= latest:
        return (f"point_in_time {point.isoformat()} is outside the source's restorable window "
                f"{earliest.isoformat()} to {latest.isoformat()}")
    return None


def backup_refusal(description: Mapping[str, Any], table: str, prefix: str, foreign_allowed: bool) -> str | None:
    """Why the backup DescribeBackup describes may not be restored as ``table``: another table's, not
    AVAILABLE, or not this stage's (its name is not this stage's prefix and table) unless allowed."""
    details = description.get("BackupDetails", {})
    source = description.get("SourceTableDetails", {}).get("TableName", "")
    if source != table:
        return f"the backup is of table {source!r}, not {table!r}"
    if details.get("BackupStatus") != "AVAILABLE":
        return f"the backup is {details.get('BackupStatus', 'unknown')}, not AVAILABLE"
    name = str(details.get("BackupName", ""))
    if rules.parse_backup_name(name, prefix, table) is None and not foreign_allowed:
        return (f"the backup {name!r} is not this stage's (its name does not start with {prefix!r}); "
                "BACKUP_RESTORE_FOREIGN=true allows another stage's")
    return None


def newest_ours(backups: Sequence[rules.Backup], table: str, prefix: str) -> rules.Backup | None:
    """The newest AVAILABLE backup of ``table`` this stage made (``latest``)."""
    ours = [b for b in backups if b.table == table and b.status == "AVAILABLE" and rules.is_ours(b, prefix)]
    return max(ours, key=lambda b: b.created, default=None)


def is_our_restore(table: Mapping[str, Any], kind: str, backup_arn: str, source_arn_suffix: str) -> bool:
    """DescribeTable's ``table`` is the one this restore made: restored from its backup, or (a point in
    time) from its source table (``source_arn_suffix``: ``table/<source>``)."""
    summary = table.get("RestoreSummary") or {}
    if kind == FROM_EXPORT:  # an import leaves no mark on the table: the name is this restore's (claimed, new)
        return True
    if kind == FROM_BACKUP:
        return bool(backup_arn) and summary.get("SourceBackupArn") == backup_arn
    return str(summary.get("SourceTableArn", "")).endswith(":" + source_arn_suffix)


def compare(recorded: verify_rules.TableShape, restored: verify_rules.TableShape) -> list[str]:
    """How the restored table differs from what it was restored from (verify_rules.compare)."""
    return verify_rules.compare(recorded, restored)


def source_shape(table: Mapping[str, Any]) -> verify_rules.TableShape:
    """What a point-in-time restore is compared with: the source table's key schema and indexes as
    DescribeTable shows them now (DynamoDB records no item count for a point in time)."""
    return verify_rules.TableShape(verify_rules.restored_shape(table, 0, True).key_schema,
                                   verify_rules.restored_shape(table, 0, True).indexes, 0, True)


@dataclass(frozen=True)
class TableSettings:
    """What DynamoDB does not restore, as a table has it (DescribeTable, DescribeTimeToLive,
    DescribeContinuousBackups, ListTagsOfResource)."""

    ttl_attribute: str = ""
    stream_view_type: str = ""
    pitr: bool = False
    deletion_protection: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)

    def view(self) -> dict[str, Any]:
        return {"ttl": self.ttl_attribute or None, "stream": self.stream_view_type or None, "pitr": self.pitr,
                "deletion_protection": self.deletion_protection, "tags": dict(sorted(self.tags.items()))}


def table_settings(table: Mapping[str, Any], ttl: Mapping[str, Any], continuous: Mapping[str, Any],
                   tags: Sequence[Mapping[str, str]]) -> TableSettings:
    """A table's settings from its descriptions (the answers' inner objects: ``Table``,
    ``TimeToLiveDescription``, ``ContinuousBackupsDescription``, ``Tags``). A tag AWS owns (``aws:``) is
    not a user's and cannot be set."""
    stream = table.get("StreamSpecification") or {}
    on = ttl.get("TimeToLiveStatus") in ("ENABLED", "ENABLING")
    pitr = continuous.get("PointInTimeRecoveryDescription", {}).get("PointInTimeRecoveryStatus") == "ENABLED"
    return TableSettings(
        ttl_attribute=str(ttl.get("AttributeName", "")) if on else "",
        stream_view_type=str(stream.get("StreamViewType", "")) if stream.get("StreamEnabled") else "",
        pitr=pitr, deletion_protection=bool(table.get("DeletionProtectionEnabled", False)),
        tags={t["Key"]: t["Value"] for t in tags if not t["Key"].startswith("aws:")})


def copied(source: TableSettings) -> list[str]:
    """The settings a restore re-applies from ``source``: those the source has (in SETTINGS' order)."""
    has = {"ttl": bool(source.ttl_attribute), "pitr": source.pitr, "tags": bool(source.tags),
           "stream": bool(source.stream_view_type), "deletion_protection": source.deletion_protection}
    return [name for name in SETTINGS if has[name]]


def settings_changes(source: TableSettings, target: TableSettings) -> list[str]:
    """The settings of ``copied(source)`` the target does not have yet (in SETTINGS' order): what is left to
    apply. A target whose TTL or stream is already another one is not changed (nothing of the app's set it)."""
    left = {"ttl": not target.ttl_attribute, "pitr": not target.pitr,
            "tags": any(target.tags.get(k) != v for k, v in source.tags.items()),
            "stream": not target.stream_view_type, "deletion_protection": not target.deletion_protection}
    return [name for name in copied(source) if left[name]]

"""Restore on demand: ``POST /backups/restores`` starts a restore, the monitor queue's polls finish it.

The API function checks the request (restore_rules: the fields, the target's name; here: the source
is in the stage's selection, the target does not exist, the backup or the point can be restored),
records the restore (RestoreStore.create: the restore id is the idempotency key; the target's name is
claimed in the same write, so one target name belongs to one restore), queues its first
poll and calls RestoreTableFromBackup or RestoreTableToPointInTime. Whatever happens to that call
(refused: the restore FAILS; its answer lost, an error, the worker gone: the polls go on), the
monitor's polls take it from there, no Lambda waiting: each claims its number on the record, then
describes the target and moves the restore on as far as it goes now:

- no target table yet: the restore is started (again), from the same backup or to the same point in
  time (``latest_restorable`` is resolved once, when the restore is asked for, and recorded); a
  TableAlreadyExistsException, or a table DynamoDB says was restored from this restore's backup (or
  source), is this restore's own;
- the table still CREATING (or UPDATING while its settings are applied): the next poll;
- ACTIVE: from an incremental export, each incremental of its chain applied in order (restore_chain.py), then
  compared as restore verification compares (key schema, indexes, at least the backup's
  recorded item count), then, unless ``copy_settings`` is false, what DynamoDB does not restore is
  re-applied from the source as it is now (TTL, point-in-time recovery, tags, stream, deletion
  protection), each only if the target lacks it: ACTIVE, saying which were applied;
- BACKUP_DEADLINE_MINUTES after the request, a restore not ACTIVE FAILS.

A FAILED restore, or an ACTIVE one whose settings could not be copied (the source deleted since:
``settings_skipped``), is alerted once: only the delivery whose conditional write settles it alerts.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib import alerts
from chalicelib.aws import Deps
from chalicelib.backups import restore_rules as rr
from chalicelib.backups import rules, verify, verify_rules
from chalicelib.backups.api import not_allowed, query_limit
from chalicelib.backups.messages import RestoreMessage, send_restore_poll
from chalicelib.backups.restore_store import Restore, RestoreStore
from chalicelib.backups.retry import is_transient, retry_transient
from chalicelib.deadletter import dead_letter
from chalicelib.log import logger
from chalicelib.throttle import error_code
from chalicelib.web import ApiError, bad_request, not_found, reject_unknown

GONE = ("ResourceNotFoundException", "TableNotFoundException")
LIMIT_MAX = 100
RETRY_LATER = ("LimitExceededException", "BackupInUseException")  # 50 restores at once; the backup busy


# --- the API -----------------------------------------------------------------------------------------------

def start(deps: Deps, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
    """``POST /backups/restores``: 202 with the restore (RESTORING, or FAILED if DynamoDB refused it)."""
    s, store = deps.settings, RestoreStore(deps)
    request = rr.parse_request(body)
    if request.restore_id:
        existing = store.get(request.restore_id)
        if existing is not None:
            return _again(deps, request, existing)
    refusal = rr.target_refusal(request, s.restore_target_pattern, s.own_tables(), s.backup_name_prefix)
    if refusal is not None:
        raise refusal
    if not_allowed(deps, [request.table]):
        raise bad_request("table", f"table {request.table!r} is not one this stage backs up (BACKUP_TABLES, "
                          "BACKUP_TABLE_PATTERN, BACKUP_TABLE_TAG or BACKUP_API_TABLES)")
    if _describe(deps, request.target) is not None:
        raise ApiError(409, f"target table {request.target!r} exists: restore into a new table", "target")
    previous = _free_target(store, request.target)
    source = _resolve(deps, request)
    now = deps.clock()
    restore = Restore(restore_id=request.restore_id or f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}",
                      request=request.as_record(), source=source, requested_at=now)
    if not store.create(restore, previous):  # the restore id, or the target, taken meanwhile by another request
        existing = store.get(restore.restore_id)
        if existing is not None:
            return _again(deps, request, existing)
        raise _target_taken(request.target, store.target_owner(request.target))
    send_restore_poll(deps, restore.restore_id, 0)
    logger.info("restore requested", extra={"restore_id": restore.restore_id, "table": restore.table,
                                            "target": restore.target, "restored_from": source})
    refused = _start_restore(deps, restore)
    if refused is None and _describe_ours(deps, restore) is False:
        refused = f"table {restore.target!r} exists and was not made by this restore"
    if refused is not None:
        restore.status, restore.error = rr.FAILED, refused
        _settle(deps, store, restore, now)
    return 202, restore.view()


def _target_taken(target: str, owner: str | None) -> ApiError:
    return ApiError(409, f"target {target!r} is claimed by restore {owner!r}: one restore a target name", "target")


def _free_target(store: RestoreStore, target: str) -> str:
    """Whether the target's name may be claimed (the target table does not exist): "" when no restore claims
    it, the claimant's id when that restore is settled (its table gone since); a 409 while it is RESTORING."""
    owner = store.target_owner(target)
    if owner is None:
        return ""
    held = store.get(owner)
    if held is not None and held.status == rr.RESTORING:
        raise _target_taken(target, owner)
    return owner


def _again(deps: Deps, request: rr.RestoreRequest, existing: Restore) -> tuple[int, dict[str, Any]]:
    """A retried POST of a restore id recorded already: the same request answers as the first did (and
    queues a poll in case the first died before it could); another request is refused."""
    if not request.same_as(existing.request):
        raise ApiError(409, f"restore_id {existing.restore_id!r} names another restore already", "restore_id")
    if existing.status == rr.RESTORING:
        send_restore_poll(deps, existing.restore_id, existing.poll)
    return 202, existing.view()


def _resolve(deps: Deps, request: rr.RestoreRequest) -> dict[str, Any]:
    """What the restore restores from, checked: the backup (by ARN, or the newest of this stage's), or the
    point in time inside the source's restorable window."""
    s, client = deps.settings, deps.clients.dynamodb
    if request.kind == rr.FROM_POINT:
        try:
            continuous = retry_transient(lambda: client.describe_continuous_backups(
                TableName=request.table), deps.sleep)["ContinuousBackupsDescription"]
        except ClientError as exc:
            if error_code(exc) not in GONE:
                raise
            raise bad_request("table", f"unknown table {request.table!r}") from None
        pitr = continuous.get("PointInTimeRecoveryDescription", {})
        earliest, latest = pitr.get("EarliestRestorableDateTime"), pitr.get("LatestRestorableDateTime")
        if pitr.get("PointInTimeRecoveryStatus") != "ENABLED" or latest is None:
            raise bad_request("point_in_time", f"point-in-time recovery is off for {request.table!r}: "
                              "no point in time to restore")
        window = {"earliest": earliest.isoformat() if earliest else None, "latest": latest.isoformat()}
        if request.point_in_time is None:  # pinned now: every start of the restore restores to this point
            return {"from": rr.FROM_POINT, "point_in_time": latest.isoformat(), "latest_restorable": True,
                    "window": window}
        refusal = rr.window_refusal(request.point_in_time, earliest, latest)
        if refusal is not None:
            raise bad_request("point_in_time", refusal)
        return {"from": rr.FROM_POINT, "point_in_time": request.point_in_time.isoformat(),
                "latest_restorable": False, "window": window}
    if request.kind == rr.FROM_EXPORT:
        return _export_source(deps, request)
    arn = request.backup_arn or _latest_backup(deps, request.table)
    try:
        description = retry_transient(lambda: client.describe_backup(BackupArn=arn), deps.sleep)["BackupDescription"]
    except ClientError as exc:
        if error_code(exc) != "BackupNotFoundException":
            raise
        raise bad_request("backup_arn", f"no backup {arn!r}") from None
    refusal = rr.backup_refusal(description, request.table, s.backup_name_prefix, s.backup_restore_foreign)
    if refusal is not None:
        raise bad_request("backup_arn" if request.backup_arn else "latest", refusal)
    details = description["BackupDetails"]
    return {"from": rr.FROM_BACKUP, "backup_arn": arn, "backup_name": details.get("BackupName", ""),
            "backup_created": details["BackupCreationDateTime"].isoformat(),
            "recorded_items": int(description.get("SourceTableDetails", {}).get("ItemCount", 0))}


def _export_source(deps: Deps, request: rr.RestoreRequest) -> dict[str, Any]:
    """A COMPLETED export of the table, its objects not deleted: its data's prefix, its table's keys and indexes
    (recorded when it was made: the source table may be gone) and its item count. For an incremental export, the
    full export it chains from is the one imported, and the incrementals up to it are listed (``incrementals``,
    oldest first, by their manifests) to be applied once the import is done; a broken chain is refused."""
    from chalicelib.backups import export_rules as er
    from chalicelib.backups.export_store import ExportStore

    every = {e.run_id: e for e in ExportStore(deps).of_table(request.table)}
    export = every.get(request.export)
    if export is None or export.status != "COMPLETED" or export.deleted:
        state = "none" if export is None else "deleted" if export.deleted else export.status
        raise bad_request("export", f"no COMPLETED export {request.export!r} of {request.table!r} ({state})")
    chain, problem = er.restore_chain([e.link() for e in every.values()], export.run_id)
    if problem:
        raise bad_request("export", f"export {request.export!r} of {request.table!r} is incremental and its chain "
                          f"from a full export is broken: {problem}")
    full = every[chain[0].run_id]
    return {"from": rr.FROM_EXPORT, "export": export.run_id, "export_arn": export.export_arn,
            "export_time": export.export_time.isoformat(), "bucket": full.bucket, "bucket_owner": full.owner,
            "data_prefix": f"{full.prefix}/AWSDynamoDB/{full.export_id}/data/", "full_export": full.run_id,
            "incrementals": [{"export": link.run_id, "bucket": every[link.run_id].bucket,
                              "bucket_owner": every[link.run_id].owner,
                              "manifest": f"{every[link.run_id].prefix}/AWSDynamoDB/{every[link.run_id].export_id}"
                                          "/manifest-summary.json"} for link in chain[1:]],
            "schema": full.schema, "recorded_items": full.item_count}


def _import(deps: Deps, restore: Restore) -> None:
    """ImportTable of the export's data into the target (a new table: an import cannot write an existing one),
    with a ClientToken of the restore, so a repeat of a call whose answer was lost names the same import."""
    from chalicelib.backups.export_rules import import_token

    source = restore.source
    bucket: dict[str, Any] = {"S3Bucket": source["bucket"], "S3KeyPrefix": source["data_prefix"]}
    if source.get("bucket_owner"):
        bucket["S3BucketOwner"] = source["bucket_owner"]
    schema = source["schema"]
    creation: dict[str, Any] = {"TableName": restore.target, "BillingMode": "PAY_PER_REQUEST",
                                "KeySchema": schema["KeySchema"], "AttributeDefinitions": schema["AttributeDefinitions"]}
    if schema.get("GlobalSecondaryIndexes"):
        creation["GlobalSecondaryIndexes"] = schema["GlobalSecondaryIndexes"]
    request: Any = {"ClientToken": import_token(restore.restore_id), "S3BucketSource": bucket,
                    "InputFormat": "DYNAMODB_JSON", "InputCompressionType": "GZIP", "TableCreationParameters": creation}
    deps.clients.dynamodb_unretried.import_table(**request)


def _latest_backup(deps: Deps, table: str) -> str:
    """The newest AVAILABLE backup of ``table`` this stage made (ListBackups of the table, every page)."""
    kwargs: dict[str, Any] = {"TableName": table, "BackupType": "USER"}
    found: list[rules.Backup] = []
    while True:
        page = retry_transient(lambda: deps.clients.dynamodb.list_backups(**kwargs), deps.sleep)
        found += [rules.Backup(arn=b["BackupArn"], name=b.get("BackupName", ""), table=b.get("TableName", ""),
                               created=b["BackupCreationDateTime"], status=b.get("BackupStatus", ""),
                               type=b.get("BackupType", "")) for b in page.get("BackupSummaries", [])]
        if not page.get("LastEvaluatedBackupArn"):
            break
        kwargs["ExclusiveStartBackupArn"] = page["LastEvaluatedBackupArn"]
    newest = rr.newest_ours(found, table, deps.settings.backup_name_prefix)
    if newest is None:
        raise bad_request("latest", f"no AVAILABLE backup of {table!r} made by this stage")
    return newest.arn


def show(deps: Deps, restore_id: str) -> tuple[int, dict[str, Any]]:
    restore = RestoreStore(deps).get(restore_id)
    if restore is None:
        raise not_found("restore", restore_id)
    return 200, restore.view()


def recent(deps: Deps, query: dict[str, str] | None) -> tuple[int, dict[str, Any]]:
    """``GET /backups/restores``: the newest restores first, ``limit`` of them (default 20)."""
    query = query or {}
    reject_unknown(query, {"limit"})
    return 200, {"restores": [r.view() for r in RestoreStore(deps).recent(query_limit(query, 20, LIMIT_MAX))]}


# --- restoring (the API's first try, and the monitor's polls) ---------------------------------------------

def _failure(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        return f"{error_code(exc)}: {exc.response['Error'].get('Message', '')}"
    return str(exc)


def _start_restore(deps: Deps, restore: Restore) -> str | None:
    """Call the restore; a refusal's reason (the restore FAILS), or None: started, or already this
    restore's (TableAlreadyExistsException: the poll's DescribeTable tells), or to try again at the next poll."""
    kwargs: dict[str, Any] = {"TargetTableName": restore.target}
    if restore.request["billing_mode"] == "PAY_PER_REQUEST":
        kwargs["BillingModeOverride"] = "PAY_PER_REQUEST"
    client = deps.clients.dynamodb
    try:
        if restore.source["from"] == rr.FROM_EXPORT:  # once a call: a lost answer is the next poll's to see
            _import(deps, restore)
        elif restore.source["from"] == rr.FROM_BACKUP:
            retry_transient(lambda: client.restore_table_from_backup(
                BackupArn=restore.source["backup_arn"], **kwargs), deps.sleep)
        else:  # the point recorded when the restore was asked for (``latest_restorable``: as resolved then)
            retry_transient(lambda: client.restore_table_to_point_in_time(
                SourceTableName=restore.table, RestoreDateTime=rr.parse_time(restore.source["point_in_time"]),
                **kwargs), deps.sleep)
    except (ClientError, BotoCoreError) as exc:
        code = error_code(exc) if isinstance(exc, ClientError) else ""
        if code in ("TableAlreadyExistsException", "ResourceInUseException"):
            return None
        if code in RETRY_LATER or is_transient(exc):
            logger.warning("restore not started yet", extra={"restore_id": restore.restore_id, "reason": _failure(exc)})
            return None
        return f"restore refused: {_failure(exc)}"
    logger.info("restore started", extra={"restore_id": restore.restore_id, "target": restore.target})
    return None


def _describe(deps: Deps, table: str) -> Mapping[str, Any] | None:
    try:
        return retry_transient(lambda: deps.clients.dynamodb.describe_table(TableName=table), deps.sleep)["Table"]
    except ClientError as exc:
        if error_code(exc) not in GONE:
            raise
        return None


def _ours(restore: Restore, table: Mapping[str, Any]) -> bool:
    return rr.is_our_restore(table, restore.source["from"], restore.source.get("backup_arn", ""),
                             f"table/{restore.table}")


def _describe_ours(deps: Deps, restore: Restore) -> bool | None:
    """Whether the target is this restore's (None: there is no target table yet, or it cannot be told now)."""
    try:
        table = _describe(deps, restore.target)
    except (ClientError, BotoCoreError):
        return None
    return None if table is None else _ours(restore, table)


def check(deps: Deps, message: RestoreMessage, body: str, message_id: str) -> str:
    """One poll of a restore; returns what happened (for logs and tests)."""
    store, now = RestoreStore(deps), deps.clock()
    restore = store.claim_poll(message.restore_id, message.poll, now, message_id)
    if restore is None:
        existing = store.get(message.restore_id)
        if existing is None:
            dead_letter(deps, deps.settings.backup_monitor_dlq, "backup-monitor", message_id,
                        f"restore {message.restore_id!r} not found", body)
            return "dead-lettered"
        logger.info("duplicate restore poll ignored", extra={"restore_id": message.restore_id, "poll": message.poll,
                                                             "restore_poll": existing.poll, "status": existing.status})
        return "duplicate"
    return _advance(deps, store, restore, message.poll, now)


def _advance(deps: Deps, store: RestoreStore, restore: Restore, poll: int, now: datetime) -> str:
    minutes = deps.settings.backup_deadline_minutes
    late = now - restore.requested_at > timedelta(minutes=minutes)
    table = _describe(deps, restore.target)
    if table is None:
        if late:
            return _fail(deps, store, restore, now, f"no restored table {minutes} minutes after the restore was asked for")
        refused = _start_restore(deps, restore)
        if refused is not None:
            return _fail(deps, store, restore, now, refused)
        return _next(deps, restore, poll)
    if not _ours(restore, table):
        return _fail(deps, store, restore, now, f"table {restore.target!r} exists and was not made by this restore")
    status = table.get("TableStatus", "")
    if status in ("CREATING", "UPDATING") or table.get("RestoreSummary", {}).get("RestoreInProgress"):
        if late:
            return _fail(deps, store, restore, now, f"restore still in progress after {minutes} minutes")
        return _next(deps, restore, poll)
    if status != "ACTIVE":
        return _fail(deps, store, restore, now, f"restored table is {status}")
    try:
        changed = 0  # what the incrementals change in the full export's item count
        if restore.source.get("incrementals"):  # every poll that gets here applies them all again: same images
            from chalicelib.backups.restore_chain import apply_incrementals
            changed = apply_incrementals(deps, restore.target, restore.source["incrementals"])
        restore.comparison = _compare(deps, restore, table, changed)
        if restore.comparison["problems"]:
            return _fail(deps, store, restore, now, "; ".join(restore.comparison["problems"]))
        if restore.request["copy_settings"] and not _copy_settings(deps, restore, table):
            if late:
                return _fail(deps, store, restore, now, f"settings still being applied after {minutes} minutes")
            return _next(deps, restore, poll)
    except (ClientError, BotoCoreError, ValueError, KeyError) as exc:  # ValueError, KeyError: an export's content
        if isinstance(exc, ClientError | BotoCoreError) and is_transient(exc):
            raise
        return _fail(deps, store, restore, now, f"could not finish the restore: {_failure(exc)}")
    restore.status = rr.ACTIVE
    if _settle(deps, store, restore, now):
        logger.info("restore active", extra={"restore_id": restore.restore_id, "target": restore.target,
                                             "settings_applied": restore.settings_applied})
    return "active"


def _next(deps: Deps, restore: Restore, poll: int) -> str:
    send_restore_poll(deps, restore.restore_id, poll + 1)
    logger.info("restore polled", extra={"restore_id": restore.restore_id, "poll": poll})
    return "requeued"


def _compare(deps: Deps, restore: Restore, table: Mapping[str, Any], changed: int = 0) -> dict[str, Any]:
    """The restored ``table`` against what it came from: the backup's record (DescribeBackup), the export's (its
    count, with what the ``changed`` incrementals add or remove), or for a point in time the source table's key
    schema and indexes now. Nothing to compare with (the backup or the source
    deleted since): said, not failed."""
    client = deps.clients.dynamodb
    recorded: verify_rules.TableShape | None = None
    try:
        if restore.source["from"] == rr.FROM_EXPORT:  # the table's keys and indexes, and items, as exported
            schema = restore.source["schema"]
            exported = rr.source_shape(schema)
            recorded = verify_rules.TableShape(exported.key_schema, exported.indexes,
                                               int(restore.source["recorded_items"]) + changed, True)
        elif restore.source["from"] == rr.FROM_BACKUP:
            description = retry_transient(lambda: client.describe_backup(
                BackupArn=restore.source["backup_arn"]), deps.sleep)["BackupDescription"]
            recorded = verify_rules.recorded_shape(description)
        else:
            source = _describe(deps, restore.table)
            recorded = rr.source_shape(source) if source is not None else None
    except ClientError as exc:
        if error_code(exc) != "BackupNotFoundException":
            raise
    items, complete = verify.count_items(deps, restore.target)
    if recorded is None:
        return {"compared_with": None, "recorded_items": None, "restored_items": items, "scan_complete": complete,
                "problems": []}
    restored = verify_rules.restored_shape(table, items, complete)
    kind = restore.source["from"]
    return {"compared_with": {rr.FROM_BACKUP: "backup", rr.FROM_EXPORT: "export"}.get(kind, "source table"),
            "recorded_items": recorded.items if kind in (rr.FROM_BACKUP, rr.FROM_EXPORT) else None,
            "restored_items": items, "scan_complete": complete, "problems": rr.compare(recorded, restored)}


def _table_settings(deps: Deps, name: str, table: Mapping[str, Any]) -> rr.TableSettings:
    client = deps.clients.dynamodb
    ttl = retry_transient(lambda: client.describe_time_to_live(TableName=name), deps.sleep)["TimeToLiveDescription"]
    continuous = retry_transient(lambda: client.describe_continuous_backups(
        TableName=name), deps.sleep)["ContinuousBackupsDescription"]
    tags: list[Any] = []
    kwargs: dict[str, Any] = {"ResourceArn": table["TableArn"]}
    while True:
        page = retry_transient(lambda: client.list_tags_of_resource(**kwargs), deps.sleep)
        tags += page.get("Tags", [])
        if not page.get("NextToken"):
            break
        kwargs["NextToken"] = page["NextToken"]
    return rr.table_settings(table, ttl, continuous, tags)


def _copy_settings(deps: Deps, restore: Restore, target: Mapping[str, Any]) -> bool:
    """Re-apply from the source as it is now what the target lacks; False when the target is busy (an
    UpdateTable in progress): the next poll goes on. The source deleted since: none can be copied, and
    ``settings_skipped`` says why (the restore alerts)."""
    source_table = _describe(deps, restore.table)
    try:
        source = _table_settings(deps, restore.table, source_table) if source_table is not None else None
    except ClientError as exc:
        if error_code(exc) not in GONE:
            raise
        source = None
    if source is None:
        restore.settings, restore.settings_applied = {}, []
        restore.settings_skipped = (f"the source table {restore.table!r} no longer exists: none of its settings "
                                    f"({', '.join(rr.SETTINGS)}) could be read or copied")
        return True
    restore.settings = source.view()
    left = rr.settings_changes(source, _table_settings(deps, restore.target, target))
    client, name = deps.clients.dynamodb, restore.target
    calls = {
        "ttl": lambda: client.update_time_to_live(TableName=name, TimeToLiveSpecification={
            "Enabled": True, "AttributeName": source.ttl_attribute}),
        "pitr": lambda: client.update_continuous_backups(TableName=name, PointInTimeRecoverySpecification={
            "PointInTimeRecoveryEnabled": True}),
        "tags": lambda: client.tag_resource(ResourceArn=target["TableArn"], Tags=[
            {"Key": k, "Value": v} for k, v in sorted(source.tags.items())]),
        "stream": lambda: client.update_table(TableName=name, StreamSpecification={
            "StreamEnabled": True, "StreamViewType": source.stream_view_type}),  # type: ignore[typeddict-item]
        "deletion_protection": lambda: client.update_table(TableName=name, DeletionProtectionEnabled=True),
    }
    for setting in left:
        try:
            retry_transient(calls[setting], deps.sleep)
        except ClientError as exc:
            if error_code(exc) == "ResourceInUseException":
                logger.info("restored table busy, settings applied at the next poll",
                            extra={"restore_id": restore.restore_id, "setting": setting})
                return False
            raise
        logger.info("restore setting applied", extra={"restore_id": restore.restore_id, "setting": setting})
    restore.settings_applied = rr.copied(source)
    return True


def _fail(deps: Deps, store: RestoreStore, restore: Restore, now: datetime, reason: str) -> str:
    restore.status, restore.error = rr.FAILED, reason
    _settle(deps, store, restore, now)
    return "failed"


def _settle(deps: Deps, store: RestoreStore, restore: Restore, now: datetime) -> bool:
    """Record a restore's outcome; False when another delivery recorded it first. A FAILED restore, or an ACTIVE
    one whose settings could not be copied, alerts: only the delivery that records it (undone if the alert
    cannot go, so that a redelivery does both again)."""
    if not store.settle(restore, now):
        return False
    if restore.status == rr.FAILED:
        what, reason = "failed", restore.error
    elif restore.settings_skipped:
        what, reason = "is ACTIVE without the source's settings", restore.settings_skipped
    else:
        return True
    try:
        retry_transient(lambda: alerts.publish(
            deps, f"timekeeper: restore of {restore.table} into {restore.target} {what}", {
                "restore_id": restore.restore_id, "table": restore.table, "target": restore.target,
                "restored_from": restore.source, "reason": reason,
                "href": f"/backups/restores/{restore.restore_id}"}), deps.sleep)
    except Exception:
        store.unsettle(restore)
        raise
    return True

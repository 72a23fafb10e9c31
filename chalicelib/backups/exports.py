"""Exports to S3: start a run of exports (ExportTableToPointInTime), and follow it (the monitor's polls).

A run (``start``, from the export_trigger schedule) is named by its export time, so a scheduled event delivered
twice names the same run and the same exports. For each table (EXPORT_TABLES, else the backup selection) the
export is recorded PENDING (a conditional write: a repeat finds it and goes on from where it is), the table's
point-in-time recovery read (an export needs it: a table without is REFUSED, with one alert naming it), and the
export asked for at the run's export time into ``s3://EXPORT_BUCKET/<EXPORT_PREFIX>/<table>/<time>/`` with a
``ClientToken`` of the table and time (export_rules.py). Each is full, or with EXPORT_FULL_HOURS incremental
(the changes since the table's previous export) as export_rules.next_export decides when it is recorded.
botocore never retries the call itself: an error that may hide an export that was made (a 5xx, a lost answer)
is followed by a look at the table's exports (ListExports, DescribeExport) for one at that prefix before the call
is tried again with the same token.

The run's poll messages go through the backup monitor queue (``{"export_run", "poll"}``), each number claimed once
on the run: DescribeExport of each export still IN_PROGRESS settles COMPLETED (its item count and size recorded),
FAILED, VANISHED (ExportNotFoundException) or STUCK (past EXPORT_DEADLINE_MINUTES), each settled by one conditional
write whose winner alerts once; failures the bucket caused (missing, refused by its policy or lock) make one alert
a run naming the bucket. While any export is in progress the next poll is queued; then the run is complete.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib import alerts
from chalicelib.aws import Deps
from chalicelib.backups import export_rules as er
from chalicelib.backups.export_store import RUNNING, Export, ExportRun, ExportStore
from chalicelib.backups.retention import retention_policy
from chalicelib.backups.retry import is_transient, retry_transient
from chalicelib.deadletter import dead_letter
from chalicelib.log import logger
from chalicelib.throttle import error_code

EXPORT_ATTEMPTS = 3  # ExportTableToPointInTime tries on transient errors, each after a look for the export
PITR_OFF = "point-in-time recovery is off: an export needs it (UpdateContinuousBackups)"


class ExportsOff(RuntimeError):
    """EXPORT_BUCKET is empty: the stage makes no exports."""


def _send_poll(deps: Deps, run_id: str, poll: int) -> None:
    url = deps.queue_url(deps.settings.backup_monitor_queue)
    retry_transient(lambda: deps.clients.sqs.send_message(
        QueueUrl=url, MessageBody=json.dumps({"export_run": run_id, "poll": poll}),
        DelaySeconds=deps.settings.backup_monitor_delay_seconds), deps.sleep)


def export_tables(deps: Deps) -> list[str]:
    """EXPORT_TABLES, else the backup selection (BACKUP_TABLES, BACKUP_TABLE_PATTERN, BACKUP_TABLE_TAG)."""
    if deps.settings.export_tables:
        return list(deps.settings.export_tables)
    from chalicelib.backups.trigger import selected_tables
    return selected_tables(deps)


def start(deps: Deps, at: datetime) -> ExportRun:
    """Export the selected tables as they were at ``at`` (the schedule's time), and queue the run's monitor."""
    s = deps.settings
    if not s.export_bucket:
        raise ExportsOff("EXPORT_BUCKET is empty: this stage makes no exports")
    store = ExportStore(deps)
    _resume_previous(deps, store, er.export_time_label(at))
    run = ExportRun(run_id=er.export_time_label(at), export_time=at, tables=export_tables(deps))
    if not store.create_run(run):
        existing = store.get_run(run.run_id)
        assert existing is not None
        run = existing
        logger.info("export run repeated", extra={"export_run": run.run_id})
    else:
        logger.info("export run started", extra={"export_run": run.run_id, "tables": run.tables})
    for table in run.tables:
        export_table(deps, store, run, table)
    _send_poll(deps, run.run_id, 0)  # a repeat's second message is harmless: each poll number is claimed once
    return run


def _resume_previous(deps: Deps, store: ExportStore, run_id: str) -> None:
    """The previous run, if still RUNNING, gets a poll message of the number it expects: its chain of polls
    goes on if a worker died between claiming a poll and sending the next (a live chain's twin of that number
    finds it claimed: "duplicate"). Errors are logged: they must not stop this run."""
    try:
        previous = store.latest_run()
        if previous is not None and previous.status == RUNNING and previous.run_id != run_id:
            _send_poll(deps, previous.run_id, previous.poll)
            logger.info("export run still running: poll sent again", extra={
                "export_run": previous.run_id, "poll": previous.poll})
    except Exception:
        logger.exception("could not look at the previous export run")


def export_table(deps: Deps, store: ExportStore, run: ExportRun, table: str, pending: Export | None = None) -> Export:
    """Record and start ``table``'s export of ``run`` (a repeat goes on from the record it finds); ``pending``:
    its PENDING record, read already (the monitor starting an export the quota deferred)."""
    s = deps.settings
    export = pending or Export(table=table, export_time=run.export_time, run_id=run.run_id, bucket=s.export_bucket,
                               prefix=er.export_prefix(s.export_prefix, table, run.export_time),
                               owner=s.export_bucket_owner)
    if pending is None and s.export_full_hours:
        plan = er.next_export([e.link() for e in store.of_table(table) if e.run_id != run.run_id], run.export_time,
                              timedelta(hours=s.export_full_hours))
        export.export_type, export.from_time = plan.kind, plan.from_time
        logger.info("export planned", extra={"export_run": run.run_id, "table": table, "export_type": plan.kind,
                                             "reason": plan.reason})
    if pending is None and not store.create(export):
        found = store.get(table, run.run_id)
        assert found is not None
        if found.status != er.PENDING:
            return found
        export = found
    export.started_at = deps.clock()
    _ask(deps, export)
    if export.status == er.PENDING:
        logger.warning("export deferred: the account's concurrent exports are at their quota",
                       extra={"export_run": run.run_id, "table": table})
        return export
    if not store.started(export):
        return store.get(table, run.run_id) or export
    if export.status in (er.REFUSED, er.FAILED):
        logger.error("export not started", extra={"export_run": run.run_id, "table": table, "reason": export.error})
        _alert(deps, f"timekeeper: export of {table} refused" if export.status == er.REFUSED
               else f"timekeeper: export of {table} failed", export)
    else:
        logger.info("export started", extra={"export_run": run.run_id, "table": table, "export_arn": export.export_arn})
    return export


def _ask(deps: Deps, export: Export) -> None:
    """PITR first, then ExportTableToPointInTime (once, or again after a look finds no export of a lost answer);
    sets the export's status (IN_PROGRESS, REFUSED, FAILED), its ARN or its error."""
    client = deps.clients.dynamodb
    try:
        described = retry_transient(lambda: client.describe_table(TableName=export.table), deps.sleep)["Table"]
        arn = described["TableArn"]
        export.schema = table_schema(described)
        pitr = retry_transient(lambda: client.describe_continuous_backups(TableName=export.table), deps.sleep)
    except ClientError as exc:
        export.status, export.failure_code = er.FAILED, error_code(exc)
        export.error = f"{error_code(exc)}: {exc.response['Error'].get('Message', '')}"
        return
    status = pitr["ContinuousBackupsDescription"].get("PointInTimeRecoveryDescription", {}).get(
        "PointInTimeRecoveryStatus", "")
    if status != "ENABLED":
        export.status, export.error = er.REFUSED, PITR_OFF
        return
    kwargs: dict[str, Any] = {
        "TableArn": arn, "ClientToken": er.client_token(export.table, export.export_time),
        "S3Bucket": export.bucket, "S3Prefix": export.prefix, "ExportFormat": "DYNAMODB_JSON",
        "ExportType": export.export_type}
    if export.export_type == er.INCREMENTAL:
        kwargs["IncrementalExportSpecification"] = {
            "ExportFromTime": export.from_time, "ExportToTime": export.export_time, "ExportViewType": er.VIEW_TYPE}
    else:
        kwargs["ExportTime"] = export.export_time
    if export.owner:
        kwargs["S3BucketOwner"] = export.owner
    attempt = 0
    while True:
        try:
            answer = deps.clients.dynamodb_unretried.export_table_to_point_in_time(**kwargs)
            export.status, export.export_arn = er.IN_PROGRESS, answer["ExportDescription"]["ExportArn"]
            return
        except (ClientError, BotoCoreError) as exc:
            attempt += 1
            if isinstance(exc, ClientError) and error_code(exc) == "PointInTimeRecoveryUnavailableException":
                export.status, export.error = er.REFUSED, PITR_OFF
                return
            if isinstance(exc, ClientError) and error_code(exc) == "LimitExceededException":
                export.status = er.PENDING  # 300 exports at once an account: a later poll starts it
                return
            if not is_transient(exc) or attempt == EXPORT_ATTEMPTS:
                export.status = er.FAILED
                export.failure_code = error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__
                export.error = f"ExportTableToPointInTime failed: {exc}"[:1000]
                return
            deps.sleep(2.0 ** (attempt - 1))
            found = find_export(deps, arn, export)
            if found:
                logger.info("export found after a failed answer", extra={"table": export.table, "export_arn": found})
                export.status, export.export_arn = er.IN_PROGRESS, found
                return


def table_schema(table: Any) -> dict[str, Any]:
    """What ImportTable needs to recreate the table (DescribeTable's keys, attributes and global indexes)."""
    schema: dict[str, Any] = {"KeySchema": table["KeySchema"], "AttributeDefinitions": table["AttributeDefinitions"]}
    indexes = [{"IndexName": i["IndexName"], "KeySchema": i["KeySchema"], "Projection": i["Projection"]}
               for i in table.get("GlobalSecondaryIndexes", [])]
    if indexes:
        schema["GlobalSecondaryIndexes"] = indexes
    return schema


def find_export(deps: Deps, table_arn: str, export: Export) -> str | None:
    """The ARN of the table's export into ``export``'s bucket and prefix, if one was made (ListExports of the
    table, DescribeExport of each: the summaries do not say where an export went)."""
    client = deps.clients.dynamodb
    kwargs: dict[str, Any] = {"TableArn": table_arn}
    while True:
        page = retry_transient(lambda: client.list_exports(**kwargs), deps.sleep)
        for summary in page.get("ExportSummaries", []):
            if summary.get("ExportStatus") == "FAILED":
                continue
            arn = str(summary["ExportArn"])
            described = retry_transient(lambda a=arn: client.describe_export(ExportArn=a),  # type: ignore[misc]
                                        deps.sleep)["ExportDescription"]
            if described.get("S3Bucket") == export.bucket and described.get("S3Prefix") == export.prefix:
                return arn
        if not page.get("NextToken"):
            return None
        kwargs["NextToken"] = page["NextToken"]


def _alert(deps: Deps, subject: str, export: Export) -> None:
    try:
        retry_transient(lambda: alerts.publish(deps, subject, {
            "table": export.table, "export_run": export.run_id, "export_arn": export.export_arn or None,
            "location": f"s3://{export.bucket}/{export.prefix}/", "reason": export.error}), deps.sleep)
    except Exception:
        logger.exception("could not send the export alert", extra={"table": export.table})


# --- the monitor -------------------------------------------------------------------------------------------------

def poll(deps: Deps, run_id: str, number: int, body: str = "", message_id: str = "") -> str:
    """One poll of an export run (see the module's docstring); what happened, for logs and tests. A message
    naming a run that does not exist is dead-lettered (its content is wrong: no retry mends it)."""
    store = ExportStore(deps)
    named = er.EXPORT_RUN_ID.fullmatch(run_id) is not None
    run = store.claim_poll(run_id, number) if named else None
    if run is None:
        if not named or store.get_run(run_id) is None:
            dead_letter(deps, deps.settings.backup_monitor_dlq, "backup-monitor", message_id,
                        f"export run {run_id[:100]!r} not found", body)
            return "dead-lettered"
        logger.info("export poll not claimed", extra={"export_run": run_id, "poll": number})
        return "duplicate"
    now = deps.clock()
    waiting = False
    exports: list[Export] = []
    for table in run.tables:
        export = store.get(table, run.run_id)
        if (export is None or export.status == er.PENDING) and not _past_deadline(deps, run.export_time, now):
            # deferred (the account's 300 concurrent exports), or its start died (before or after its record was
            # written: the trigger's Lambda timed out): started (again) from here
            if export_table(deps, store, run, table, export).status == er.PENDING:
                waiting = True
                continue
            export = store.get(table, run.run_id) or export
        if export is None or export.status == er.PENDING:
            continue
        exports.append(export)
        if export.status != er.IN_PROGRESS:
            continue
        if not _check(deps, store, export, now):
            waiting = True
    bucket_failures = [e for e in exports if e.status == er.FAILED and er.is_bucket_failure(e.failure_code)]
    if bucket_failures and not run.bucket_alerted and not _alert_bucket(deps, store, run, bucket_failures):
        waiting = True  # the next poll alerts again
    if waiting:
        _send_poll(deps, run.run_id, number + 1)
        return "requeued"
    if store.complete(run.run_id):
        logger.info("export run complete", extra={"export_run": run.run_id})
        for table in run.tables:
            prune(deps, store, table, now)
    return "complete"


def _past_deadline(deps: Deps, started: datetime, now: datetime) -> bool:
    return (now - started).total_seconds() > deps.settings.export_deadline_minutes * 60


def _check(deps: Deps, store: ExportStore, export: Export, now: datetime) -> bool:
    """DescribeExport: settle the export if it is done (True), alerting once a failure the bucket did not cause."""
    try:
        described = retry_transient(lambda: deps.clients.dynamodb.describe_export(ExportArn=export.export_arn),
                                    deps.sleep)["ExportDescription"]
    except ClientError as exc:
        if error_code(exc) not in ("ExportNotFoundException", "ResourceNotFoundException"):
            raise
        described = {}
    status = er.settle(str(described.get("ExportStatus", "")), export.started_at or export.export_time, now,
                       deps.settings.export_deadline_minutes)
    if status == er.IN_PROGRESS:
        return False
    export.status, export.finished_at = status, now
    export.item_count = int(described.get("ItemCount", 0) or 0)
    export.size_bytes = int(described.get("BilledSizeBytes", 0) or 0)
    export.failure_code = str(described.get("FailureCode") or "")
    export.error = {er.VANISHED: "the export is gone (ExportNotFoundException)",
                    er.STUCK: f"still IN_PROGRESS {deps.settings.export_deadline_minutes} minutes after it started",
                    er.FAILED: f"{export.failure_code}: {described.get('FailureMessage') or ''}"}.get(status, "")
    if status == er.COMPLETED:
        problem = manifest_problem(deps, export, described)
        if problem:
            export.status, export.error = er.FAILED, problem
        else:
            lock(deps, export)
    if not store.settle(export):
        return True
    if export.locked_until:
        store.plan(export)
    status = export.status  # a COMPLETED export whose manifests disagree is FAILED
    (logger.info if status == er.COMPLETED else logger.error)("export settled", extra={
        "export_run": export.run_id, "table": export.table, "status": status, "reason": export.error})
    if status != er.COMPLETED and not (status == er.FAILED and er.is_bucket_failure(export.failure_code)):
        _alert(deps, f"timekeeper: export of {export.table} {status.lower()}", export)
    return True


def manifest_problem(deps: Deps, export: Export, described: Any) -> str:
    """A COMPLETED export checked by its manifests (two S3 GETs; an import would cost $0.15 a GB): the summary's
    item count is DescribeExport's, and the data files' counts (manifest-files.json) add up to it. What is
    wrong ("": nothing)."""
    key = str(described.get("ExportManifest") or "")
    if not key:
        return "no ExportManifest in DescribeExport's answer"
    try:
        summary = json.loads(_read(deps, export, key))
        files = [json.loads(line) for line in _read(deps, export, str(summary["manifestFilesS3Key"])).splitlines()
                 if line.strip()]
    except (ClientError, KeyError, ValueError) as exc:
        return f"the export's manifests cannot be read: {exc}"[:1000]
    counted = sum(int(f.get("itemCount", 0)) for f in files)
    if not int(summary.get("itemCount", -1)) == counted == export.item_count:
        return (f"manifest counts disagree: DescribeExport {export.item_count}, manifest-summary.json "
                f"{summary.get('itemCount')}, data files {counted}")
    return ""


def _read(deps: Deps, export: Export, key: str) -> str:
    body = retry_transient(lambda: deps.clients.s3.get_object(Bucket=export.bucket, Key=key, **_owner(export)),
                           deps.sleep)["Body"]
    return str(body.read().decode())


def _alert_bucket(deps: Deps, store: ExportStore, run: ExportRun, failed: list[Export]) -> bool:
    """One alert a run for the exports the bucket refused, naming the bucket (claimed on the run); False when it
    could not be sent (released for the next poll)."""
    if run.status != RUNNING or not store.claim_bucket_alert(run.run_id):
        return True
    bucket = failed[0].bucket
    logger.error("exports refused by the bucket", extra={"export_run": run.run_id, "bucket": bucket,
                                                         "tables": [e.table for e in failed][:100]})
    try:
        retry_transient(lambda: alerts.publish(deps, f"timekeeper: exports refused by bucket {bucket}", {
            "bucket": bucket, "export_run": run.run_id, "tables": [e.table for e in failed][:100],
            "reason": failed[0].error}), deps.sleep)
        return True
    except Exception:
        logger.exception("could not send the bucket alert", extra={"export_run": run.run_id, "bucket": bucket})
        store.release_bucket_alert(run.run_id)
        return False


# --- Object Lock and retention ------------------------------------------------------------------------------------

def _owner(export: Export) -> dict[str, str]:
    """ExpectedBucketOwner: every S3 call on another account's bucket checks the bucket is still that account's."""
    return {"ExpectedBucketOwner": export.owner} if export.owner else {}


def _versions(deps: Deps, export: Export) -> list[dict[str, str]]:
    """Every version of the export's objects (its prefix and below only): Key and VersionId."""
    assert export.prefix.startswith(f"{deps.settings.export_prefix}/"), export.prefix  # the stage's prefix only
    found: list[dict[str, str]] = []
    pages = deps.clients.s3.get_paginator("list_object_versions").paginate(
        Bucket=export.bucket, Prefix=f"{export.prefix}/", **_owner(export))
    for page in pages:
        for entry in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
            found.append({"Key": entry["Key"], "VersionId": entry.get("VersionId") or "null"})
    return found


def bucket_locked(deps: Deps, export: Export) -> bool:
    """Whether the bucket has Object Lock on (GetObjectLockConfiguration; read, never changed)."""
    try:
        answer = deps.clients.s3.get_object_lock_configuration(Bucket=export.bucket, **_owner(export))
    except ClientError as exc:
        if error_code(exc) in ("ObjectLockConfigurationNotFoundError", "ObjectLockConfigurationNotFound"):
            return False
        raise
    return bool(answer.get("ObjectLockConfiguration", {}).get("ObjectLockEnabled") == "Enabled")


def lock(deps: Deps, export: Export) -> None:
    """Set a COMPLETED export's objects' retention to its planned expiry (EXPORT_LOCK_MODE), where the bucket has
    Object Lock on; the lock only ever lengthens (S3 refuses to shorten one without bypassing governance, which
    this app never asks for). Failures are logged: the export stands, unlocked, and the catalog says so."""
    try:
        if not bucket_locked(deps, export):
            return
        until = er.planned_expiry(export.export_time, retention_policy(deps.settings)).astimezone(UTC)
        for version in _versions(deps, export):
            deps.clients.s3.put_object_retention(
                Bucket=export.bucket, Key=version["Key"], VersionId=version["VersionId"], **_owner(export),
                Retention={"Mode": deps.settings.export_lock_mode, "RetainUntilDate": until})
        export.locked_until = until.isoformat()
        logger.info("export locked", extra={"table": export.table, "export_run": export.run_id,
                                            "locked_until": export.locked_until})
    except (ClientError, BotoCoreError):
        logger.exception("could not lock the export's objects", extra={"table": export.table,
                                                                       "export_run": export.run_id})


def prune(deps: Deps, store: ExportStore, table: str, now: datetime) -> list[str]:
    """Retention of ``table``'s exports (BACKUP_RETENTION_DAYS, BACKUP_MIN_KEEP, BACKUP_RETENTION: the backups'
    rules): each COMPLETED one's record says why it is kept and when it expires; one the rules expire has its
    objects deleted (every version, under its own prefix), unless they are still locked: then it is kept by
    ``lock`` until the lock ends. The newest BACKUP_MIN_KEEP (at least one) are never deleted. An incremental
    goes with the full export it chains from (export_rules.chain_verdicts). The run ids whose objects were
    deleted."""
    every = store.of_table(table)
    exports = {e.run_id: e for e in every if e.status == er.COMPLETED and not e.deleted}
    verdicts = er.chain_verdicts([(e.link(), e.locked_until) for e in every], now, retention_policy(deps.settings))
    deleted: list[str] = []
    for verdict in verdicts:
        export = exports[verdict.run_id]
        expires = verdict.expires.isoformat() if verdict.expires else ""
        if verdict.delete:
            try:
                _delete_objects(deps, export)
            except (ClientError, BotoCoreError):  # a lock this app did not set, a refusal: kept, said, tried again
                logger.exception("could not delete the export's objects", extra={"table": table,
                                                                                 "export_run": export.run_id})
                continue
            export.deleted, export.kept_because, export.expires = True, [], expires
            deleted.append(export.run_id)
        elif list(verdict.kept) == export.kept_because and expires == export.expires:
            continue
        else:
            export.kept_because, export.expires = list(verdict.kept), expires
            if verdict.kept == ("lock",):
                logger.info("export kept by its lock", extra={"table": table, "export_run": export.run_id,
                                                              "locked_until": export.locked_until})
        store.plan(export)
    if deleted:
        logger.info("expired exports deleted", extra={"table": table, "export_runs": deleted})
    return deleted


def _delete_objects(deps: Deps, export: Export) -> None:
    versions = _versions(deps, export)
    for start in range(0, len(versions), 1000):  # DeleteObjects takes 1,000 keys a call
        answer = deps.clients.s3.delete_objects(Bucket=export.bucket, **_owner(export),
                                                Delete={"Objects": versions[start:start + 1000], "Quiet": True})
        if answer.get("Errors"):
            error = answer["Errors"][0]
            raise ClientError({"Error": {"Code": error.get("Code", ""), "Message": error.get("Message", "")}},
                              "DeleteObjects")


# --- the catalog -------------------------------------------------------------------------------------------------

def catalog(deps: Deps, table: str | None, limit: int) -> list[dict[str, Any]]:
    """The exports GET /backups shows beside the backups, newest first: ``table``'s, else the newest run's."""
    store = ExportStore(deps)
    if table is not None:
        found = store.of_table(table)[::-1]
    else:
        run = store.latest_run()
        found = [e for e in (store.get(t, run.run_id) for t in run.tables) if e is not None] if run else []
    return [e.view() for e in found[:limit]]


def recent_runs(deps: Deps, limit: int) -> list[dict[str, Any]]:
    """The newest export runs, as GET /backups/runs lists them beside the backup runs."""
    return [run.view() for run in ExportStore(deps).recent_runs(limit)]


def run_view(deps: Deps, run_id: str) -> dict[str, Any] | None:
    """An export run with each of its exports (their size, item count, why kept, expiry) and its counts; None
    when there is no such run."""
    store = ExportStore(deps)
    run = store.get_run(run_id)
    if run is None:
        return None
    found = [e for e in (store.get(t, run.run_id) for t in run.tables) if e is not None]
    return {**run.view(), "exports": [e.view() for e in found],
            "summary": er.run_summary([(e.status, e.item_count, e.size_bytes) for e in found], len(run.tables))}

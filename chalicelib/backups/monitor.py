"""Check a backup run until every backup is done; alert, re-queue, finish with retention.

One poll reads every status with ListBackups (paginated, from the run's start),
so its cost is O(pages), not one DescribeBackup per table; DescribeBackup is
used only for an ARN the listing lacks. Each message carries the run's poll
number: the run item accepts one advance per number, so a duplicate delivery
neither re-queues a second chain of messages nor alerts or deletes twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from chalicelib import alerts
from chalicelib.aws import Deps
from chalicelib.backups import rules, trigger
from chalicelib.backups.messages import BadMessage, parse_message, send_poll_message
from chalicelib.backups.retry import is_transient, retry_transient
from chalicelib.backups.store import FINISHING, RUNNING, STARTING, Run, RunStore, TableResult
from chalicelib.deadletter import dead_letter
from chalicelib.log import logger
from chalicelib.throttle import Pacer, error_code, with_backoff

LISTING_SKEW = trigger.LISTING_SKEW  # backups are listed from a little before the run started
# A worker that claimed a poll but has not sent the next message after this long has died.
RESEND_AFTER = timedelta(seconds=60)


class RetryLater(RuntimeError):
    """Another worker holds the run; raising makes SQS deliver the message again later."""


def _to_backup(summary: Any) -> rules.Backup:
    return rules.Backup(
        arn=summary["BackupArn"], name=summary.get("BackupName", ""),
        table=summary.get("TableName", ""), created=summary["BackupCreationDateTime"],
        status=summary.get("BackupStatus", ""), type=summary.get("BackupType", ""))


def list_user_backups(deps: Deps, since: datetime | None = None) -> list[rules.Backup]:
    """All USER backups (since ``since``, if given), every page."""
    kwargs: dict[str, Any] = {"BackupType": "USER"}
    if since is not None:
        kwargs["TimeRangeLowerBound"] = since
    backups: list[rules.Backup] = []
    client = deps.clients.dynamodb
    while True:
        page = retry_transient(lambda: client.list_backups(**kwargs), deps.sleep)
        backups.extend(_to_backup(s) for s in page.get("BackupSummaries", []))
        last = page.get("LastEvaluatedBackupArn")
        if not last:
            return [b for b in backups if b.type == "USER"]
        kwargs["ExclusiveStartBackupArn"] = last


def current_statuses(deps: Deps, run: Run) -> dict[str, str | None]:
    """Status of each pending backup of the run (None: it no longer exists)."""
    pending = {r.backup_arn for r in run.tables.values() if r.status == "PENDING" and r.backup_arn}
    if not pending:
        return {}
    listed = {b.arn: b.status for b in list_user_backups(deps, run.started_at - LISTING_SKEW)}
    statuses: dict[str, str | None] = {arn: listed[arn] for arn in pending if arn in listed}
    for arn in sorted(pending - statuses.keys()):
        try:
            description = retry_transient(lambda arn=arn: deps.clients.dynamodb.describe_backup(  # type: ignore[misc]
                BackupArn=arn), deps.sleep)["BackupDescription"]
            statuses[arn] = description["BackupDetails"]["BackupStatus"]
        except ClientError as exc:
            if error_code(exc) != "BackupNotFoundException":
                raise
            statuses[arn] = None
    return statuses


def _settle(deps: Deps, store: RunStore, run: Run, result: TableResult) -> None:
    """Record a final outcome; only the delivery that records it sends the alert."""
    needs_alert = result.status in ("FAILED", "STUCK")
    result.alerted = needs_alert
    if not store.settle_table(run.run_id, result):
        return
    if not needs_alert:
        logger.info("backup done", extra={"run_id": run.run_id, "table": result.table,
                                          "backup_arn": result.backup_arn})
        return
    try:
        retry_transient(lambda: alerts.publish(deps, f"timekeeper: backup of {result.table} {result.status.lower()}", {
            "run_id": run.run_id, "table": result.table, "backup_arn": result.backup_arn,
            "reason": result.error}), deps.sleep)
    except Exception:
        store.unsettle_table(run.run_id, result.table)
        raise


def _first_delivery_died(run: Run, poll: int, now: datetime) -> bool:
    """This message's first delivery claimed its poll but never sent the next message."""
    return (run.status == RUNNING and poll == run.poll - 1 and not run.poll_queued
            and run.advanced_at is not None and now - run.advanced_at > RESEND_AFTER)


def check_run(deps: Deps, body: str, message_id: str = "") -> str:
    """Process one monitor message; returns what happened (for logs and tests)."""
    settings = deps.settings
    try:
        message = parse_message(body)
    except BadMessage as exc:
        dead_letter(deps, settings.backup_monitor_dlq, "backup-monitor", message_id, str(exc), body)
        return "dead-lettered"
    run_id, poll = message.run_id, message.poll
    store = RunStore(deps)
    run = store.get(run_id)
    if run is None:
        dead_letter(deps, settings.backup_monitor_dlq, "backup-monitor", message_id,
                    f"run {run_id!r} not found", body)
        return "dead-lettered"
    now = deps.clock()
    lease = timedelta(seconds=settings.backup_run_lease_seconds)
    if message.watch:
        return _watch(deps, store, run, now)
    if run.status == FINISHING:
        # The finisher may have died mid-retention: retry until its lease ends, then take over.
        if not store.claim_finish(run_id, -1, now, now - lease):
            raise RetryLater(f"run {run_id} is being finished by another worker")
        return _finish(deps, store, run, now)
    if run.status == STARTING:
        raise RetryLater(f"run {run_id} is still starting")
    if _first_delivery_died(run, poll, now) and store.claim_resend(run_id, run.poll, run.advanced_at, now):
        _send_poll(deps, store, run_id, run.poll)
        return "resent"
    if run.status != RUNNING or poll != run.poll:
        logger.info("duplicate monitor message ignored", extra={"run_id": run_id, "poll": poll,
                                                                 "run_poll": run.poll, "status": run.status})
        return "duplicate"

    trigger.alert_failed_starts(deps, store, run)  # if the trigger stopped before it could
    deadline = timedelta(minutes=settings.backup_deadline_minutes)
    statuses = current_statuses(deps, run)
    for result in run.tables.values():
        if result.status != "PENDING":
            continue
        status = statuses.get(result.backup_arn)
        outcome = rules.outcome(status, run.started_at, now, deadline)
        if outcome is rules.Outcome.PENDING:
            continue
        result.status = outcome.value
        if outcome is rules.Outcome.FAILED:
            result.error = "backup was deleted" if status == "DELETED" else "backup no longer exists"
        elif outcome is rules.Outcome.STUCK:
            result.error = f"still CREATING after {settings.backup_deadline_minutes} minutes"
        _settle(deps, store, run, result)

    pending = [r.table for r in run.tables.values() if r.status == "PENDING"]
    logger.info("backup run polled", extra={"run_id": run_id, "poll": poll, "pending": pending})
    if pending:
        # Claim the poll first: of two deliveries of this message only one sends the next,
        # so duplicates never start a second chain. A crash between claim and send is
        # repaired by the redelivery of this message (see "resent" above).
        if not store.advance_poll(run_id, poll, now):
            return "duplicate"
        _send_poll(deps, store, run_id, poll + 1)
        return "requeued"
    if not store.claim_finish(run_id, poll, now, now - lease):
        return "duplicate"
    return _finish(deps, store, run, now)


def _watch(deps: Deps, store: RunStore, run: Run, now: datetime) -> str:
    """The start watch: a run still STARTING past its lease had its starter die; take the start over."""
    if run.status != STARTING:
        return "watched"
    trigger.resume_start(deps, store, run, now, RetryLater, watch_again=False)  # SQS redelivers this one
    return "start resumed"


def _send_poll(deps: Deps, store: RunStore, run_id: str, poll: int) -> None:
    send_poll_message(deps, run_id, poll)
    store.mark_queued(run_id, poll)
    logger.info("monitor queued", extra={"run_id": run_id, "poll": poll,
                                         "delay_seconds": deps.settings.backup_monitor_delay_seconds})


def apply_retention(deps: Deps, tables: list[str], now: datetime) -> list[rules.Backup]:
    """Delete this app's expired backups of ``tables``, keeping BACKUP_MIN_KEEP good ones each."""
    s = deps.settings
    doomed = rules.backups_to_delete(
        list_user_backups(deps), now, timedelta(days=s.backup_retention_days), s.backup_min_keep,
        s.backup_name_prefix, tables)
    pacer = Pacer(s.backup_delete_rate, deps.clock, deps.sleep)
    deleted: list[rules.Backup] = []
    for backup in doomed:
        def call(arn: str = backup.arn) -> None:
            pacer.wait()
            deps.clients.dynamodb.delete_backup(BackupArn=arn)
        try:
            with_backoff(call, deps.sleep, retryable=is_transient)
        except ClientError as exc:
            if error_code(exc) == "BackupNotFoundException":
                continue  # already gone: a retried finish, or deleted by hand
            if error_code(exc) == "BackupInUseException":
                logger.warning("backup in use, kept for the next run", extra={"backup_arn": backup.arn})
                continue
            raise
        deleted.append(backup)
        logger.info("backup deleted by retention", extra={
            "backup_arn": backup.arn, "table": backup.table, "backup_created": backup.created.isoformat()})
    return deleted


def _finish(deps: Deps, store: RunStore, run: Run, now: datetime) -> str:
    deleted = apply_retention(deps, sorted(run.tables), now)
    counts = {s: sorted(r.table for r in run.tables.values() if r.status == s)
              for s in ("AVAILABLE", "FAILED", "STUCK")}
    summary = {"backed_up": len(counts["AVAILABLE"]), "failed": len(counts["FAILED"]),
               "stuck": len(counts["STUCK"]), "deleted": len(deleted),
               "deleted_backups": [b.arn for b in deleted]}
    if store.complete(run.run_id, now, summary):
        retry_transient(lambda: alerts.publish(
            deps,
            f"timekeeper backup run {run.run_id}: {summary['backed_up']} ok, {summary['failed']} failed, "
            f"{summary['stuck']} stuck, {summary['deleted']} deleted",
            {"run_id": run.run_id, "kind": "summary", **{k.lower(): v for k, v in counts.items()},
             "deleted": summary["deleted_backups"]}, kind="summary"), deps.sleep)
    logger.info("backup run complete", extra={"run_id": run.run_id, **summary})
    return "complete"

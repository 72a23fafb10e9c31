"""Restore verification: prove that a run's backups restore, through the monitor's polls.

When a run's backups are settled and retention is done, a run with a verification plan
(BACKUP_VERIFY, chosen when the run was created: verify_rules.tables_to_verify) goes
VERIFYING instead of COMPLETE, and its poll messages go on (same claim, one chain: a
duplicate delivery never starts a second). Each VERIFYING poll, never waiting inside
Lambda:

1. the first records one verification item per planned table (store.py), RESTORING, or
   SKIPPED when the table has no AVAILABLE backup in this run;
2. a RESTORING verification whose temporary table does not exist yet gets its
   RestoreTableFromBackup (on-demand billing, into ``verify_rules.restore_table_name``:
   a name of this stage's, unique per run and table; a name already taken is this
   verification's own earlier attempt); one still CREATING waits for the next poll, and
   fails past BACKUP_DEADLINE_MINUTES;
3. an ACTIVE one is compared with what DescribeBackup recorded (key schema, indexes,
   item count: verify_rules.compare) after a bounded COUNT scan of at most SCAN_PAGES
   pages, and settled PASSED or FAILED by one conditional write: the delivery that
   settles it sends the alert of a FAILED one (a restore refused, or a mismatch);
4. every settled verification's temporary table is deleted (even when the restore or
   the comparison failed), then marked so;
5. when every verification is settled and its table deleted, the run is COMPLETE with
   the verifications counted in its summary.

A table left behind (the run's chain died for good) is deleted by the next scheduled
trigger (``remove_leftover_tables``), by name: this stage's prefix, ``.verify.``, a run
id whose run is not VERIFYING; and only if DynamoDB says it was restored from a backup.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib import alerts
from chalicelib import metrics as m
from chalicelib.aws import Deps
from chalicelib.backups import verify_rules
from chalicelib.backups.messages import send_poll_message
from chalicelib.backups.quotas import paced, pacer
from chalicelib.backups.retry import is_transient, retry_transient
from chalicelib.backups.store import (
    PASSED,
    RESTORING,
    SKIPPED,
    VERIFYING,
    Run,
    RunStore,
    Verification,
)
from chalicelib.log import logger
from chalicelib.throttle import error_code

SCAN_PAGES = 10  # a verification's COUNT scan reads at most this many 1 MB pages of the restored table
GONE = ("ResourceNotFoundException", "TableNotFoundException")


def plan(deps: Deps, tables: list[str], recent_plans: list[list[str]]) -> list[str]:
    """The tables a new run over ``tables`` verifies (``recent_plans``: the plans of earlier runs, newest first)."""
    return verify_rules.tables_to_verify(deps.settings.backup_verify, tables,
                                         verify_rules.rotation_after(recent_plans))


def poll(deps: Deps, store: RunStore, run: Run, number: int, now: datetime) -> str:
    """Poll ``number`` of a VERIFYING run (claimed: ``run`` is the run item at ``number + 1``)."""
    store.load_verifications(run)
    if any(t not in run.verifications for t in run.verify_plan):
        _start(deps, store, run, now)
    for verification in run.verifications.values():
        if verification.status == RESTORING:
            _advance(deps, store, run, verification, now)
        if verification.status not in (RESTORING, SKIPPED) and not verification.table_deleted:
            _delete(deps, store, run, verification)
    waiting = sorted(v.table for v in run.verifications.values() if not v.done)
    logger.info("restore verification polled", extra={"run_id": run.run_id, "poll": number, "waiting": waiting})
    if waiting:
        send_poll_message(deps, run.run_id, number + 1)
        return "verifying"
    counts = {"verified": sum(1 for v in run.verifications.values() if v.status == PASSED),
              "verify_failed": sum(1 for v in run.verifications.values() if v.status == "FAILED"),
              "verify_skipped": sum(1 for v in run.verifications.values() if v.status == SKIPPED)}
    if store.verified(run.run_id, now, counts):
        logger.info("restore verification complete", extra={"run_id": run.run_id, **counts})
        deps.metrics.count(m.BACKUPS_VERIFIED, counts["verified"])
        deps.metrics.count(m.BACKUP_VERIFICATIONS_FAILED, counts["verify_failed"])
    return "complete"


def _start(deps: Deps, store: RunStore, run: Run, now: datetime) -> None:
    """Record the planned verifications the run has no item for (the first poll, or its retry)."""
    store.load_tables(run)  # the backups' ARNs (and any verification recorded meanwhile)
    prefix = deps.settings.backup_name_prefix
    new: list[Verification] = []
    for table in run.verify_plan:
        if table in run.verifications:
            continue
        result = run.tables.get(table)
        if result is None or result.status != "AVAILABLE" or not result.backup_arn:
            new.append(Verification(table, SKIPPED, started_at=now.isoformat(),
                                    error="no AVAILABLE backup of the table in this run", table_deleted=True))
            continue
        new.append(Verification(table, RESTORING, backup_arn=result.backup_arn, started_at=now.isoformat(),
                                restore_table=verify_rules.restore_table_name(prefix, run.run_id, table)))
    store.add_verifications(run.run_id, new)
    run.verifications.update({v.table: v for v in new})


def _failure(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        return f"{error_code(exc)}: {exc.response['Error'].get('Message', '')}"
    return str(exc)


def _advance(deps: Deps, store: RunStore, run: Run, v: Verification, now: datetime) -> None:
    """Move a RESTORING verification on as far as it goes now; settled, it is alerted (if FAILED)."""
    client = deps.clients.dynamodb
    table: Mapping[str, Any] | None
    try:
        table = retry_transient(lambda: client.describe_table(TableName=v.restore_table), deps.sleep)["Table"]
    except ClientError as exc:
        if error_code(exc) not in GONE:
            raise
        table = None
    minutes = deps.settings.backup_deadline_minutes
    late = bool(v.started_at) and now - datetime.fromisoformat(v.started_at) > timedelta(minutes=minutes)
    if table is None:  # not restored yet (or a restore that was refused, or AWS gave up on)
        if late:
            v.status, v.error = "FAILED", f"no restored table {minutes} minutes after the verification started"
        else:
            _restore(deps, run, v)
        if v.status != RESTORING:
            _settle(deps, store, run, v)
        return
    status = table.get("TableStatus", "")
    if status == "CREATING" or table.get("RestoreSummary", {}).get("RestoreInProgress"):
        if late:
            v.status, v.error = "FAILED", f"restore still in progress after {minutes} minutes"
            _settle(deps, store, run, v)
        return
    if status != "ACTIVE":
        v.status, v.error = "FAILED", f"restored table is {status}"
        _settle(deps, store, run, v)
        return
    try:
        _compare(deps, v, table)
    except (ClientError, BotoCoreError) as exc:
        if is_transient(exc):
            raise
        v.status, v.error = "FAILED", f"could not compare the restored table: {_failure(exc)}"
    _settle(deps, store, run, v)


def _restore(deps: Deps, run: Run, v: Verification) -> None:
    """RestoreTableFromBackup into the verification's temporary table; a refusal fails the verification."""
    try:
        retry_transient(lambda: deps.clients.dynamodb.restore_table_from_backup(
            TargetTableName=v.restore_table, BackupArn=v.backup_arn, BillingModeOverride="PAY_PER_REQUEST"),
            deps.sleep)
        logger.info("restore started", extra={"run_id": run.run_id, "table": v.table,
                                              "restore_table": v.restore_table, "backup_arn": v.backup_arn})
    except ClientError as exc:
        code = error_code(exc)
        if code in ("TableAlreadyExistsException", "ResourceInUseException"):
            return  # this verification's own restore (an earlier attempt whose answer was lost)
        if code in ("LimitExceededException", "BackupInUseException") or is_transient(exc):
            logger.warning("restore not started yet", extra={"run_id": run.run_id, "table": v.table, "reason": code})
            return  # 50 restores at once per account, or the backup busy: the next poll tries again
        v.status, v.error = "FAILED", f"restore refused: {_failure(exc)}"


def _count_items(deps: Deps, table: str) -> tuple[int, bool]:
    """Items of ``table`` counted by a COUNT scan of at most SCAN_PAGES pages; whether it read them all."""
    kwargs: dict[str, Any] = {"TableName": table, "Select": "COUNT"}
    items = 0
    for _ in range(SCAN_PAGES):
        page = retry_transient(lambda: deps.clients.dynamodb.scan(**kwargs), deps.sleep)
        items += int(page.get("Count", 0))
        if "LastEvaluatedKey" not in page:
            return items, True
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return items, False


count_items = _count_items  # restore on demand (restore.py) counts its restored table the same way


def _compare(deps: Deps, v: Verification, table: Mapping[str, Any]) -> None:
    """Compare the ACTIVE restored ``table`` with what its backup recorded: v becomes PASSED or FAILED."""
    describing = pacer(deps, "DescribeBackup")
    try:
        description = retry_transient(paced(describing, lambda: deps.clients.dynamodb.describe_backup(
            BackupArn=v.backup_arn)), deps.sleep)["BackupDescription"]
    except ClientError as exc:
        if error_code(exc) != "BackupNotFoundException":
            raise
        description = None
    items, complete = _count_items(deps, v.restore_table)
    v.restored_items, v.scan_complete = items, complete
    if description is None:
        v.status, v.error = "FAILED", "the backup no longer exists: nothing to compare the restored table with"
        return
    recorded = verify_rules.recorded_shape(description)
    v.recorded_items = recorded.items
    v.problems = verify_rules.compare(recorded, verify_rules.restored_shape(table, items, complete))
    v.status = "FAILED" if v.problems else PASSED
    v.error = "; ".join(v.problems)


def _settle(deps: Deps, store: RunStore, run: Run, v: Verification) -> None:
    """Record a verification's verdict; only the delivery that records a FAILED one alerts it."""
    if not store.settle_verification(run.run_id, v):
        return
    extra = {"run_id": run.run_id, "table": v.table, "restore_table": v.restore_table, "backup_arn": v.backup_arn}
    if v.status == PASSED:
        logger.info("restore verified", extra={**extra, "items": v.restored_items})
        return
    try:
        retry_transient(lambda: alerts.publish(deps, f"timekeeper: restore verification of {v.table} failed", {
            **extra, "reason": v.error, "problems": v.problems, "recorded_items": v.recorded_items,
            "restored_items": v.restored_items, "href": f"/backups/runs/{run.run_id}"}), deps.sleep)
    except Exception:
        store.unsettle_verification(run.run_id, v)
        raise


def _delete(deps: Deps, store: RunStore, run: Run, v: Verification) -> None:
    """Delete a settled verification's temporary table (gone already: fine; still being created: next poll)."""
    try:
        retry_transient(lambda: deps.clients.dynamodb.delete_table(TableName=v.restore_table), deps.sleep)
    except ClientError as exc:
        code = error_code(exc)
        if code == "ResourceInUseException":
            logger.info("restore table busy, deleted at the next poll", extra={
                "run_id": run.run_id, "restore_table": v.restore_table})
            return
        if code not in GONE:
            raise
    store.restore_table_deleted(run.run_id, v)
    v.table_deleted = True
    logger.info("restore table deleted", extra={"run_id": run.run_id, "restore_table": v.restore_table})


def remove_leftover_tables(deps: Deps, runs: Iterable[Run], table_names: Iterable[str]) -> list[str]:
    """Delete this stage's temporary tables whose run is not VERIFYING (``runs``: the recent ones): a run
    whose verification chain died for good. Only tables DynamoDB says were restored from a backup."""
    prefix = deps.settings.backup_name_prefix
    verifying = {r.run_id for r in runs if r.status == VERIFYING}
    deleted: list[str] = []
    for name in table_names:
        run_id = verify_rules.run_of_restore_table(prefix, name)
        if run_id is None or run_id in verifying:
            continue
        try:
            table = deps.clients.dynamodb.describe_table(TableName=name)["Table"]
            if "RestoreSummary" not in table or table.get("TableStatus") != "ACTIVE":
                continue  # not a restored table, or not one that can be deleted now
            deps.clients.dynamodb.delete_table(TableName=name)
        except ClientError as exc:
            if error_code(exc) in GONE:
                continue
            logger.exception("could not delete a leftover restore table", extra={"restore_table": name})
            continue
        deleted.append(name)
        logger.warning("leftover restore table deleted", extra={"restore_table": name, "run_id": run_id})
    return deleted

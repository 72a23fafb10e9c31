"""Start a backup run: select tables, CreateBackup each (paced, retried), record, queue the monitor."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from botocore.exceptions import ClientError

from chalicelib import alerts
from chalicelib.aws import Deps
from chalicelib.backups import rules
from chalicelib.backups.monitor import send_poll_message
from chalicelib.backups.store import FINISHING, RUNNING, STARTING, Run, RunStore, TableResult
from chalicelib.log import logger
from chalicelib.throttle import Pacer, error_code, with_backoff

# CreateBackup errors that concern one table; the run goes on with the others.
TABLE_ERRORS = {
    "TableNotFoundException": "table not found",
    "ResourceNotFoundException": "table not found",
    "TableInUseException": "table is being created, updated or deleted",
    "ResourceInUseException": "table is being created, updated or deleted",
    "ContinuousBackupsUnavailableException": "backups are being enabled on the table",
    "BackupInUseException": "another backup of the table is in progress",
    "LimitExceededException": "backup quota exceeded",
}


class StartInProgress(RuntimeError):
    """A duplicate trigger while the first still holds the run; raising lets the async retry come back."""


def new_run_id(now: datetime, suffix: str | None = None) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{suffix or uuid.uuid4().hex[:8]}"


def list_table_names(deps: Deps) -> list[str]:
    names: list[str] = []
    for page in deps.clients.dynamodb.get_paginator("list_tables").paginate():
        names.extend(page.get("TableNames", []))
    return names


def tagged_tables(deps: Deps, tables: Sequence[str], key: str, value: str) -> list[str]:
    """The tables carrying tag ``key=value`` (ListTagsOfResource per table)."""
    client = deps.clients.dynamodb
    if not tables:
        return []
    # One DescribeTable gives the ARN layout; the others are derived from it.
    first_arn = client.describe_table(TableName=tables[0])["Table"]["TableArn"]
    arn_prefix = first_arn[: first_arn.index(":table/") + len(":table/")]
    found: list[str] = []
    for table in tables:
        tags: dict[str, str] = {}
        for page in client.get_paginator("list_tags_of_resource").paginate(ResourceArn=arn_prefix + table):
            tags.update({t["Key"]: t["Value"] for t in page.get("Tags", [])})
        if tags.get(key) == value:
            found.append(table)
    return found


def selected_tables(deps: Deps) -> list[str]:
    """BACKUP_TABLES + BACKUP_TABLE_PATTERN matches + BACKUP_TABLE_TAG matches, deduplicated."""
    s = deps.settings
    all_tables = list_table_names(deps) if (s.backup_table_pattern or s.backup_table_tag) else None
    tagged = tagged_tables(deps, all_tables or [], *s.backup_table_tag) if s.backup_table_tag else []
    return rules.select_tables(all_tables, s.backup_tables, s.backup_table_pattern, tagged)


def _create_backup(deps: Deps, pacer: Pacer, run_id: str, table: str, now: datetime) -> TableResult:
    name = rules.backup_name(deps.settings.backup_name_prefix, table, now)

    def call() -> str:
        pacer.wait()
        details = deps.clients.dynamodb.create_backup(TableName=table, BackupName=name)["BackupDetails"]
        return details["BackupArn"]

    try:
        arn = with_backoff(call, deps.sleep)
    except ClientError as exc:
        code = error_code(exc)
        reason = f"{TABLE_ERRORS.get(code, 'CreateBackup failed')}: {code}: {exc.response['Error'].get('Message', '')}"
        logger.error("backup not started", extra={"run_id": run_id, "table": table, "reason": reason})
        return TableResult(table=table, status="FAILED", backup_name=name, error=reason)
    logger.info("backup started", extra={"run_id": run_id, "table": table, "backup_arn": arn})
    return TableResult(table=table, status="PENDING", backup_arn=arn, backup_name=name)


def _queue_monitor(deps: Deps, run: Run, store: RunStore) -> None:
    send_poll_message(deps, run.run_id, run.poll)
    store.mark_queued(run.run_id, run.poll)
    run.poll_queued = True
    logger.info("monitor queued", extra={"run_id": run.run_id, "poll": run.poll,
                                         "delay_seconds": deps.settings.backup_monitor_delay_seconds})


def repair_stale_runs(deps: Deps, store: RunStore, now: datetime, recent: int = 20) -> list[str]:
    """Mend recent runs whose worker died or whose message was lost; each trigger does this first.

    - STARTING past the lease: closed and alerted (this trigger backs the tables up afresh);
    - RUNNING whose poll has not moved for the lease plus one monitor delay (its message was
      never sent, or was dead-lettered after failing deliveries): the message is sent again;
      a duplicate is harmless, since each poll number is claimed once;
    - FINISHING past the lease: a monitor message is sent, and the monitor takes the finish over.
    Errors are logged, never raised: a broken old run must not stop today's backups.
    """
    lease = timedelta(seconds=deps.settings.backup_run_lease_seconds)
    stale = now - lease
    silent = now - lease - timedelta(seconds=deps.settings.backup_monitor_delay_seconds)
    mended: list[str] = []
    try:
        runs = store.recent(recent)
    except Exception:
        logger.exception("could not list recent backup runs to repair")
        return mended
    for run in runs:
        try:
            if _repair(deps, store, run, now, stale, silent):
                mended.append(run.run_id)
        except Exception:
            logger.exception("could not repair backup run", extra={"run_id": run.run_id})
    if mended:
        logger.warning("stale backup runs mended", extra={"run_ids": mended})
    return mended


def _repair(deps: Deps, store: RunStore, run: Run, now: datetime, stale: datetime, silent: datetime) -> bool:
    if run.status == STARTING and run.claimed_at and run.claimed_at < stale:
        if not store.abandon(run.run_id, run.claimed_at, now, "abandoned: its starter stopped while starting"):
            return False
        try:
            alerts.publish(deps, f"timekeeper: backup run {run.run_id} abandoned", {
                "run_id": run.run_id, "reason": "the run stopped while starting; its tables are "
                "backed up by the next run"})
        except Exception:
            store.unabandon(run.run_id, run.claimed_at)  # the next trigger tries the alert again
            raise
        return True
    if run.status == RUNNING and run.advanced_at and run.advanced_at < silent:
        if store.claim_stale_poll(run.run_id, run.poll, run.advanced_at, now):
            _queue_monitor(deps, run, store)
            return True
        return False
    if run.status == FINISHING and run.claimed_at and run.claimed_at < stale:
        send_poll_message(deps, run.run_id, run.poll)
        return True
    return False


def start_run(deps: Deps, trigger: str, tables: Sequence[str] | None = None,
              run_id: str | None = None) -> Run:
    """Back up ``tables`` (default: the configured selection) and queue the run's monitor.

    ``run_id`` makes a trigger idempotent: a scheduled event delivered twice
    names the same run. The second delivery stops if the run is under way
    (raising while the first still holds it, so an async retry comes back
    later), finishes queueing the monitor if the first died before that, and
    takes over a start whose worker died.
    """
    now = deps.clock()
    store = RunStore(deps)
    repair_stale_runs(deps, store, now)
    run = Run(run_id=run_id or new_run_id(now), started_at=now, trigger=trigger, claimed_at=now)
    if not store.create(run):
        existing = store.get(run.run_id)
        assert existing is not None
        lease = timedelta(seconds=deps.settings.backup_run_lease_seconds)
        if existing.status == RUNNING and not existing.poll_queued and existing.poll == 0:
            if store.claim_resend(existing.run_id, 0, existing.advanced_at, now):
                _queue_monitor(deps, existing, store)
            return existing
        if existing.status == STARTING and not store.reclaim_start(run.run_id, now - lease, now):
            raise StartInProgress(f"backup run {run.run_id} is being started by another invocation")
        if existing.status != STARTING:
            logger.info("duplicate trigger ignored", extra={"run_id": run.run_id, "status": existing.status})
            return existing
        run.started_at = existing.started_at

    chosen = list(dict.fromkeys(tables)) if tables is not None else selected_tables(deps)
    logger.info("backup run started", extra={"run_id": run.run_id, "trigger": trigger, "tables": chosen})
    if not chosen:
        logger.warning("no tables selected for backup", extra={"run_id": run.run_id})
        alerts.publish(deps, "timekeeper: no tables selected for backup",
                       {"run_id": run.run_id, "reason": "no table matched BACKUP_TABLES, "
                        "BACKUP_TABLE_PATTERN or BACKUP_TABLE_TAG"})
        store.complete(run.run_id, now, {"backed_up": 0, "failed": 0, "stuck": 0, "deleted": 0,
                                         "note": "no tables selected"})
        return store.get(run.run_id) or run

    pacer = Pacer(deps.settings.backup_create_rate, deps.clock, deps.sleep)
    for table in chosen:
        result = _create_backup(deps, pacer, run.run_id, table, now)
        run.tables[table] = result
    for result in run.tables.values():
        if result.status == "FAILED":
            result.alerted = True
    run.status = RUNNING
    run.advanced_at = now
    if not store.started(run, now):
        logger.info("run started elsewhere", extra={"run_id": run.run_id})
        return store.get(run.run_id) or run
    # The monitor first: an alert that fails must not leave the run without one.
    _queue_monitor(deps, run, store)
    for result in run.tables.values():
        if result.status == "FAILED":
            alerts.publish(deps, f"timekeeper: backup of {result.table} failed", {
                "run_id": run.run_id, "table": result.table, "backup_arn": None, "reason": result.error})
    return run

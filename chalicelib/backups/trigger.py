"""Start a backup run: select tables, record the run, CreateBackup each (paced), queue the monitor.

The run item is written first (store.py; STARTING, before anything else can fail), a
watch message goes to the monitor queue, and then the chosen tables with the names
their backups will have (``rules.backup_name`` of the run's start time), in pages.
A try that fails with an error lets its claim go for the next try, and the
START_TRIES-th failure closes the run with one alert (``failed_try``). A start that dies half way
is resumed from the state, by the duplicate trigger after the lease or by the
monitor when the watch comes in: backups that exist already are found by their
name (ListBackups of the table since the run started) instead of being made
twice. A start still making backups after START_BUDGET hands the rest on: it
records which tables it tried, lets its claim lapse and sends a watch with no
delay; the continuation makes the untried tables' backups without looking first. botocore never
retries CreateBackup itself (a retry of a call whose answer was lost would make a second backup of
the same name): an error that may hide an applied call is followed by the same look by name.

A new run also records which of its tables it will verify by restoring them
(BACKUP_VERIFY, rotating after the recent runs' plans: verify.py), and
point-in-time recovery status (DescribeContinuousBackups, one call a table, written
with the table's result): of every table with BACKUP_REQUIRE_PITR, else of one in
7, each table once a week (``rules.pitr_checked``). A scheduled trigger first deletes the temporary
restore tables a dead verification left behind.
"""
from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib import alerts, metrics
from chalicelib.aws import Deps
from chalicelib.backups import restore_rules, rules, verify, verify_rules
from chalicelib.backups.messages import creating_of, send_poll_message, send_watch_message
from chalicelib.backups.quotas import paced, pacer
from chalicelib.backups.retry import is_transient, retry_transient
from chalicelib.backups.store import FINISHING, POLLED, RUNNING, STARTING, Run, RunStore, TableResult
from chalicelib.log import about, logger
from chalicelib.throttle import Pacer, error_code, is_rate_limit

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


CREATE_ATTEMPTS = 3  # CreateBackup tries per table on transient errors (each after a look for the backup)
THROTTLE_BACKOFF_CAP = 20.0  # seconds: a throttled CreateBackup waits as botocore's retry modes would
# A start hands the tables it has not reached on to the next invocation (through the monitor queue) after
# this long: well inside the trigger's (300 s) and the monitor's (240 s) Lambda timeouts and the lease.
START_BUDGET = timedelta(seconds=150)
LISTING_SKEW = timedelta(minutes=5)  # backups are listed from a little before the run started
RECENT_RUNS = 20  # runs a trigger reads: to repair, to rotate restore verification, to spare tables being verified
# Tries at starting a run that may fail with an error before it is closed with an alert: Lambda's asynchronous
# invocation of the scheduled event tries 3 times (its 2 retries), and a try cannot know it is the last.
START_TRIES = 3


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


def selected_tables(deps: Deps, listed: list[str] | None = None) -> list[str]:
    """BACKUP_TABLES + BACKUP_TABLE_PATTERN matches + BACKUP_TABLE_TAG matches, deduplicated (``listed``:
    the account's tables, if listed already). The stage's temporary restore tables are never selected, nor (by
    the pattern or the tag) a table whose name RESTORE_TARGET_PATTERN allows a restore to make: BACKUP_TABLES
    names one that is to be backed up."""
    s = deps.settings
    all_tables = None
    if s.backup_table_pattern or s.backup_table_tag:
        restore_prefix = verify_rules.restore_prefix(s.backup_name_prefix)
        restored = restore_rules.any_target(s.restore_target_pattern)
        all_tables = [t for t in (listed if listed is not None else list_table_names(deps))
                      if not t.startswith(restore_prefix) and not restored.fullmatch(t)]
    tagged = tagged_tables(deps, all_tables or [], *s.backup_table_tag) if s.backup_table_tag else []
    return rules.select_tables(all_tables, s.backup_tables, s.backup_table_pattern, tagged)


def find_backup(deps: Deps, table: str, name: str, since: datetime) -> str | None:
    """The ARN of ``table``'s backup named ``name`` (CREATING or AVAILABLE), made since ``since``, if any."""
    client = deps.clients.dynamodb
    kwargs: dict[str, Any] = {"TableName": table, "BackupType": "USER", "TimeRangeLowerBound": since - LISTING_SKEW}
    listing = pacer(deps, "ListBackups")
    while True:
        page = retry_transient(paced(listing, lambda: client.list_backups(**kwargs)), deps.sleep)
        for summary in page.get("BackupSummaries", []):
            if summary.get("BackupName") == name and summary.get("BackupStatus") in ("CREATING", "AVAILABLE"):
                return str(summary["BackupArn"])
        last = page.get("LastEvaluatedBackupArn")
        if not last:
            return None
        kwargs["ExclusiveStartBackupArn"] = last


def pitr_status(deps: Deps, run: Run, table: str) -> str:
    """Point-in-time recovery of ``table``: ENABLED or DISABLED (DescribeContinuousBackups: one call a
    table a run), "" when it cannot be told (the table is gone: its backup fails and says so)."""
    try:
        description = retry_transient(lambda: deps.clients.dynamodb.describe_continuous_backups(
            TableName=table), deps.sleep)["ContinuousBackupsDescription"]
    except (ClientError, BotoCoreError) as exc:
        logger.warning("point-in-time recovery not known", extra={
            "run_id": run.run_id, "table": table, "reason": str(exc)})
        return ""
    return str(description.get("PointInTimeRecoveryDescription", {}).get("PointInTimeRecoveryStatus", ""))


def _failure(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        code = error_code(exc)
        return f"{TABLE_ERRORS.get(code, 'CreateBackup failed')}: {code}: {exc.response['Error'].get('Message', '')}"
    return f"CreateBackup failed: {exc}"


def _back_up(deps: Deps, creates: Pacer, run: Run, result: TableResult, look_first: bool, read_pitr: bool) -> None:
    """Give ``result`` (a PENDING table without a backup) its backup, or its error (status FAILED).

    CreateBackup is not idempotent, so botocore makes it once (``dynamodb_unretried``): an error that
    may hide a backup that was made (a 5xx, a lost answer) comes here, and the table's backups are
    looked up by name before CreateBackup is tried again. A throttled call was not applied: it is
    tried again, AWS_MAX_ATTEMPTS times in all as botocore would, without looking. ``read_pitr``: the
    table's point-in-time recovery is read first (unless known already).
    """
    table, name = result.table, result.backup_name
    since = run.started_at
    if read_pitr and not result.pitr:
        result.pitr = pitr_status(deps, run, table)
    if look_first:
        result.backup_arn = find_backup(deps, table, name, since) or ""
        if result.backup_arn:
            logger.info("backup found", extra={"run_id": run.run_id, "table": table, "backup_arn": result.backup_arn})
            return

    def call() -> str:
        creates.wait()
        details = deps.clients.dynamodb_unretried.create_backup(TableName=table, BackupName=name)["BackupDetails"]
        return details["BackupArn"]

    attempt = throttled = 0
    while True:
        try:
            result.backup_arn = call()
            logger.info("backup started", extra={"run_id": run.run_id, "table": table,
                                                 "backup_arn": result.backup_arn})
            return
        except (ClientError, BotoCoreError) as exc:
            if isinstance(exc, ClientError) and is_rate_limit(exc) and throttled < deps.settings.aws_max_attempts - 1:
                throttled += 1
                deps.sleep(random.uniform(0, min(THROTTLE_BACKOFF_CAP, 2.0 ** throttled)))
                continue
            attempt += 1
            if not is_transient(exc) or attempt == CREATE_ATTEMPTS:
                result.status, result.error = "FAILED", _failure(exc)
                logger.error("backup not started", extra={"run_id": run.run_id, "table": table,
                                                          "reason": result.error})
                return
            deps.sleep(2.0 ** (attempt - 1))
            found = find_backup(deps, table, name, since)
            if found:
                result.backup_arn = found
                logger.info("backup found after a failed answer", extra={
                    "run_id": run.run_id, "table": table, "backup_arn": found})
                return


def _queue_monitor(deps: Deps, run: Run, store: RunStore) -> None:
    send_poll_message(deps, run.run_id, run.poll, creating_of(run))
    store.mark_queued(run.run_id, run.poll)
    run.poll_queued = True
    logger.info("monitor queued", extra={"run_id": run.run_id, "poll": run.poll,
                                         "delay_seconds": deps.settings.backup_monitor_delay_seconds})


def recent_runs(store: RunStore, recent: int = RECENT_RUNS) -> list[Run]:
    """The newest runs (without their tables), or none when they cannot be read (logged)."""
    try:
        return store.recent(recent, with_tables=False)
    except Exception:
        logger.exception("could not list recent backup runs")
        return []


def repair_stale_runs(deps: Deps, store: RunStore, now: datetime, recent: int = RECENT_RUNS,
                      runs: list[Run] | None = None) -> list[str]:
    """Mend recent runs whose worker died or whose message was lost; each trigger does this first.

    - STARTING past the lease: closed and alerted (this trigger backs the tables up afresh);
    - RUNNING or VERIFYING whose poll has not moved for the lease plus one monitor delay (its message
      was never sent, or was dead-lettered after failing deliveries): the message is sent again;
      a duplicate is harmless, since each poll number is claimed once; a RUNNING run whose polls may
      go unclaimed while its backups are CREATING (``messages.creating_of``) only once past its
      ``run_deadline`` too (until then, a silent run may be a healthy one), unless its first message
      was never marked sent;
    - FINISHING past the lease: a monitor message is sent, and the monitor takes the finish over.
    Errors are logged, never raised: a broken old run must not stop today's backups.
    """
    lease = timedelta(seconds=deps.settings.backup_run_lease_seconds)
    stale = now - lease
    silent = now - lease - timedelta(seconds=deps.settings.backup_monitor_delay_seconds)
    mended: list[str] = []
    if runs is None:
        runs = recent_runs(store, recent)
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
    handed_on_stale = run.handed_off and run.claimed_at is not None and run.claimed_at < stale - (now - stale)
    if run.status == STARTING and run.claimed_at and run.claimed_at < stale and (handed_on_stale or not run.handed_off):
        if not store.abandon(run.run_id, run.claimed_at, now, "abandoned: its starter stopped while starting"):
            return False
        try:
            retry_transient(lambda: alerts.publish(deps, f"timekeeper: backup run {run.run_id} abandoned", {
                "run_id": run.run_id, "reason": "the run stopped while starting; its tables are "
                "backed up by the next run"}), deps.sleep)
        except Exception:
            store.unabandon(run.run_id, run.claimed_at)  # the next trigger tries the alert again
            raise
        return True
    unsent = run.poll == 0 and not run.poll_queued  # the trigger's first message may never have been sent
    if run.status in POLLED and run.advanced_at and run.advanced_at < silent \
            and (creating_of(run) is None or unsent or now > run_deadline(deps, run)):
        if store.claim_stale_poll(run.run_id, run.poll, run.advanced_at, now):
            _queue_monitor(deps, run, store)
            return True
        return False
    if run.status == FINISHING and run.claimed_at and run.claimed_at < stale:
        send_poll_message(deps, run.run_id, run.poll)
        return True
    return False


def run_deadline(deps: Deps, run: Run) -> datetime:
    """When a run should be complete: its backups' deadline (BACKUP_DEADLINE_MINUTES, when the monitor calls the
    ones still CREATING stuck), plus one monitor delay to see it and a run lease to finish retention."""
    s = deps.settings
    return run.started_at + timedelta(minutes=s.backup_deadline_minutes, seconds=s.backup_monitor_delay_seconds
                                      + s.backup_run_lease_seconds)


def start_run(deps: Deps, trigger: str, tables: Sequence[str] | None = None,
              run_id: str | None = None) -> Run:
    """Back up ``tables`` (default: the configured selection) and queue the run's monitor.

    ``run_id`` makes a trigger idempotent: a scheduled event delivered twice
    names the same run. The second delivery stops if the run is under way
    (raising while the first still holds it, so an async retry comes back
    later), finishes queueing the monitor if the first died before that, and
    takes over a start whose worker died (after the lease) or whose try failed
    (at once: ``failed_try``).
    """
    now = deps.clock()
    named = run_id or new_run_id(now)
    with about(run_id=named):  # every line of this start names its run
        return _start_run(deps, trigger, tables, named, now)


def _start_run(deps: Deps, trigger: str, tables: Sequence[str] | None, run_id: str, now: datetime) -> Run:
    store = RunStore(deps)
    runs = recent_runs(store)
    repair_stale_runs(deps, store, now, runs=runs)
    run = Run(run_id=run_id, started_at=now, trigger=trigger, claimed_at=now)
    if not _record_intent(deps, store, run):
        existing = store.get(run.run_id)
        assert existing is not None
        return _again(deps, store, existing, now)
    logger.info("backup run recorded", extra={"run_id": run.run_id, "trigger": trigger})
    deps.metrics.count(metrics.BACKUP_RUNS_STARTED, **{metrics.TRIGGER: trigger})
    _send_watch(deps, run.run_id)
    return _trying(deps, store, run, lambda: _first_start(deps, store, run, runs, tables, now))


def _record_intent(deps: Deps, store: RunStore, run: Run) -> bool:
    """The run's first write: the run item, STARTING and claimed, before its tables are chosen (what can fail
    after it leaves a run to resume or close: ``failed_try``). False when it exists already (a duplicate
    trigger). When even this write fails, the alert is published directly (no state to claim it on: each try
    that fails so publishes it again, with one ``dedup_id``), and the error raised."""
    try:
        return store.create(run)
    except Exception as exc:
        logger.exception("could not record the backup run", extra={"run_id": run.run_id})
        reason = f"the state table refused the run's first write: {exc}"[:1000]
        try:
            retry_transient(lambda: alerts.publish(deps, f"timekeeper: backup run {run.run_id} could not be recorded", {
                "run_id": run.run_id, "reason": reason,
                "dedupe_id": f"backup-run-unrecorded:{run.run_id}"}), deps.sleep)
        except Exception:
            logger.exception("could not alert that the backup run could not be recorded", extra={"run_id": run.run_id})
        raise


def _first_start(deps: Deps, store: RunStore, run: Run, runs: list[Run], tables: Sequence[str] | None,
                 now: datetime) -> Run:
    """Choose a new run's tables, record them, and start their backups."""
    listed: list[str] | None = None
    if run.trigger == "schedule" and _may_have_leftovers(deps, runs):
        try:  # a clean-up that fails must not stop today's backups
            listed = list_table_names(deps)
            verify.remove_leftover_tables(deps, runs, listed)
        except Exception:
            logger.exception("could not look for leftover restore tables", extra={"run_id": run.run_id})
    chosen = list(dict.fromkeys(tables)) if tables is not None else selected_tables(deps, listed)
    prefix = deps.settings.backup_name_prefix
    run.tables = {t: TableResult(t, "PENDING", backup_name=rules.backup_name(prefix, t, now), tried=False)
                  for t in chosen}
    run.verify_plan = verify.plan(deps, chosen, [r.verify_plan for r in runs if r.trigger == run.trigger])
    if not store.record_tables(run):
        logger.info("run taken over elsewhere", extra={"run_id": run.run_id})
        return store.get(run.run_id) or run
    logger.info("backup run started", extra={"run_id": run.run_id, "trigger": run.trigger, "tables": chosen})
    return _start(deps, store, run, now, resumed=False)


def _trying(deps: Deps, store: RunStore, run: Run, start: Callable[[], Run]) -> Run:
    """``start()``, a try at starting ``run`` (claimed), which on an error is a ``failed_try`` before it raises."""
    try:
        return start()
    except Exception as exc:
        failed_try(deps, store, run, exc)
        raise


def failed_try(deps: Deps, store: RunStore, run: Run, exc: Exception) -> None:
    """A try at starting ``run`` failed with an error (a crash is no try that fails: its claim lapses after the
    lease). Its claim is let go, so the next try (Lambda's async retry of the scheduled event, the start watch)
    takes over at once, and the failure counted: the START_TRIES-th closes the run with one alert
    (``close_unstarted``). What fails here is logged: the try's own error is raised."""
    try:
        failures = store.release_start(run)
        logger.warning("backup run start failed", extra={"run_id": run.run_id, "failures": failures,
                                                         "reason": str(exc)[:1000]})
        if failures is not None and failures >= START_TRIES:
            run.start_failures = failures
            close_unstarted(deps, store, run, deps.clock(), f"{failures} tries failed, the last: {exc}"[:1000])
    except Exception:
        logger.exception("could not record the failed start", extra={"run_id": run.run_id})


def close_unstarted(deps: Deps, store: RunStore, run: Run, now: datetime, reason: str) -> bool:
    """Close a run that could not start (COMPLETE, with the reason) and alert it, once: the close is the claim
    on the alert; one that cannot be sent reopens the run for the next try to close and alert again."""
    assert run.claimed_at is not None
    if not store.abandon(run.run_id, run.claimed_at, now, f"not started: {reason}"):
        return False
    try:
        retry_transient(lambda: alerts.publish(deps, f"timekeeper: backup run {run.run_id} could not start", {
            "run_id": run.run_id, "reason": reason, "tries": run.start_failures,
            "href": f"/backups/runs/{run.run_id}"}), deps.sleep)
    except Exception:
        store.unabandon(run.run_id, run.claimed_at)
        raise
    logger.error("backup run closed: it could not start", extra={"run_id": run.run_id, "reason": reason})
    return True


def _may_have_leftovers(deps: Deps, runs: list[Run]) -> bool:
    """Temporary restore tables may be left: verification is on, or a recent run verified."""
    return deps.settings.backup_verify.enabled or any(r.verify_plan for r in runs)


def _send_watch(deps: Deps, run_id: str) -> None:
    try:
        send_watch_message(deps, run_id)
    except Exception:  # the duplicate trigger sends it again; the next trigger's repair is the last resort
        logger.exception("could not queue the start watch", extra={"run_id": run_id})


def _again(deps: Deps, store: RunStore, existing: Run, now: datetime) -> Run:
    """A trigger for a run that exists already (a duplicate delivery or Lambda's async retry)."""
    if existing.status == RUNNING and not existing.poll_queued and existing.poll == 0:
        if store.claim_resend(existing.run_id, 0, existing.advanced_at, now):
            _queue_monitor(deps, existing, store)
        return existing
    if existing.status == STARTING:
        return resume_start(deps, store, existing, now, StartInProgress, watch_again=True)
    logger.info("duplicate trigger ignored", extra={"run_id": existing.run_id, "status": existing.status})
    return existing


def resume_start(deps: Deps, store: RunStore, run: Run, now: datetime,
                 busy: type[Exception], watch_again: bool) -> Run:
    """Take over a STARTING run whose starter has been silent past the lease, and finish starting it;
    raise ``busy`` while the starter may still be at work (with ``watch_again``, after queueing a
    watch, in case the starter died before sending one)."""
    if run.start_failures >= START_TRIES:  # its last try could not close it (or its alert could not be sent)
        close_unstarted(deps, store, run, now, f"{run.start_failures} tries failed")
        return store.get(run.run_id, with_tables=False) or run
    lease = timedelta(seconds=deps.settings.backup_run_lease_seconds)
    handed_on = run.handed_off and store.take_handoff(run, now)  # its pages say which tables were tried
    if not handed_on and not store.reclaim_start(run.run_id, now - lease, now):
        if watch_again:
            _send_watch(deps, run.run_id)
        raise busy(f"backup run {run.run_id} is being started by another invocation")
    if handed_on:
        logger.info("backup run start continued", extra={"run_id": run.run_id})
    else:
        logger.warning("backup run start taken over", extra={"run_id": run.run_id, "claimed_at": str(run.claimed_at)})
        for result in run.tables.values():
            result.tried = True  # its starter died: any table may have its backup already
    run.claimed_at = now
    run.handed_off = run.released = False
    return _trying(deps, store, run, lambda: _resume(deps, store, run, now))


def _resume(deps: Deps, store: RunStore, run: Run, now: datetime) -> Run:
    if not run.tables or len(run.tables) < run.counts.get("count", 0):
        # Its tables were not all recorded (an older version's run, or a starter that died writing its
        # pages): the ones recorded, and the selection chosen again.
        prefix = deps.settings.backup_name_prefix
        for t in selected_tables(deps):
            if t not in run.tables:
                run.tables[t] = TableResult(t, "PENDING", backup_name=rules.backup_name(prefix, t, run.started_at))
        run.paginate()
    return _start(deps, store, run, now, resumed=True)


def _start(deps: Deps, store: RunStore, run: Run, now: datetime, resumed: bool) -> Run:
    """CreateBackup for each table still without one, record RUNNING, queue poll 0, alert failures."""
    if not run.tables:
        logger.warning("no tables selected for backup", extra={"run_id": run.run_id})
        retry_transient(lambda: alerts.publish(deps, "timekeeper: no tables selected for backup", {
            "run_id": run.run_id, "reason": "no table matched BACKUP_TABLES, BACKUP_TABLE_PATTERN or BACKUP_TABLE_TAG"}),
            deps.sleep)
        store.complete(run.run_id, now, {"backed_up": 0, "failed": 0, "stuck": 0, "deleted": 0,
                                         "note": "no tables selected"})
        return store.get(run.run_id) or run

    creates = pacer(deps, "CreateBackup")
    prefix = deps.settings.backup_name_prefix
    out_of_time = (run.claimed_at or now) + START_BUDGET
    pitr = rules.pitr_checked(run.tables, run.started_at.astimezone(UTC).date(), deps.settings.backup_require_pitr)
    for result in run.tables.values():
        if result.status == "PENDING" and not result.backup_arn:
            if deps.clock() >= out_of_time:
                return _hand_on(deps, store, run)
            result.backup_name = result.backup_name or rules.backup_name(prefix, result.table, run.started_at)
            look_first = resumed and result.tried  # a table never tried has no backup to find
            result.tried = True
            _back_up(deps, creates, run, result, look_first=look_first, read_pitr=result.table in pitr)
    run.status = RUNNING
    run.advanced_at = deps.clock()
    if not store.started(run, run.advanced_at):
        logger.info("run started elsewhere", extra={"run_id": run.run_id})
        return store.get(run.run_id) or run
    # The monitor first: an alert that fails must not leave the run without one.
    _queue_monitor(deps, run, store)
    alert_failed_starts(deps, store, run)
    return run


def _hand_on(deps: Deps, store: RunStore, run: Run) -> Run:
    """Out of START_BUDGET: record the progress, let the claim lapse and queue a watch with no delay,
    whose delivery (the monitor) claims the run and goes on from the first table not tried."""
    lease = timedelta(seconds=deps.settings.backup_run_lease_seconds)
    assert run.claimed_at is not None
    if not store.hand_off(run, run.claimed_at - lease):
        logger.info("run taken over elsewhere", extra={"run_id": run.run_id})
        return store.get(run.run_id) or run
    run.handed_off = True
    left = sum(1 for r in run.tables.values() if r.status == "PENDING" and not r.backup_arn)
    logger.info("backup run start handed on", extra={"run_id": run.run_id, "tables_left": left})
    send_watch_message(deps, run.run_id, delay=0)  # if it is lost: the lease's watch, then the next trigger
    return run


def alert_failed_starts(deps: Deps, store: RunStore, run: Run) -> None:
    """Alert each table whose backup could not be started, once: the alert is claimed on the run
    first (by the trigger, or by a monitor poll if the trigger stopped before); one that cannot
    be sent is released for the next poll."""
    for result in run.tables.values():
        if result.status != "FAILED" or result.alerted or result.backup_arn:
            continue
        if not store.claim_alert(run.run_id, result):
            continue
        result.alerted = True
        try:
            retry_transient(lambda r=result: alerts.publish(  # type: ignore[misc]
                deps, f"timekeeper: backup of {r.table} failed",
                {"run_id": run.run_id, "table": r.table, "backup_arn": None, "reason": r.error}), deps.sleep)
        except Exception:
            store.release_alert(run.run_id, result)
            raise

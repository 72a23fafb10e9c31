"""Check a backup run until every backup is done; alert, re-queue, finish with retention.

A poll lists the run's backups with ListBackups (every USER backup since the
run's start, paginated), O(pages), not one DescribeBackup per table. A poll
message of a run whose backups have all started carries the run's start and how
many it started (messages.Creating): while every backup of the run the listing
shows (by its name: this stage's prefix, its table, the run's start) is
CREATING, as many as the run started, before the deadline, the poll reads and
writes nothing of the run and sends the next message: it costs the listing's
pages and one SendMessage, the floor. Otherwise the delivery claims its poll
number on the run item (a conditional UpdateItem that returns the item: one call
both claims and reads; a RUNNING run may be claimed at a later number than it
expects, never at an earlier one), so of two deliveries of one message only one
goes on and sends the next; the run's table pages are read, new outcomes settled
(AVAILABLE: one UpdateItem per page; FAILED and STUCK: one per table, with its
alert), DescribeBackup asked only for an ARN the listing lacks, and the run
re-queued or finished. The price of the unclaimed polls: a message delivered
twice while the backups are CREATING makes a second chain of polls, which lasts
until the first poll that claims (a backup finished, or the deadline passed):
there the later of the two numbers wins and the other chain stops.

A run with tables to verify (BACKUP_VERIFY) goes VERIFYING when it finishes, not
COMPLETE: its polls go on, claimed the same way, and each is a restore
verification poll (verify.py) until every verification has its verdict and its
temporary table is deleted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from chalicelib import alerts
from chalicelib import metrics as m
from chalicelib.aws import Deps
from chalicelib.backups import rules, trigger, verify
from chalicelib.backups.messages import (
    BadMessage,
    Creating,
    ExportMessage,
    MonitorMessage,
    RestoreMessage,
    creating_of,
    parse_message,
    send_poll_message,
)
from chalicelib.backups.quotas import paced, pacer
from chalicelib.backups.retention import retention_policy
from chalicelib.backups.retry import retry_transient
from chalicelib.backups.store import FINISHING, POLLED, STARTING, VERIFYING, Run, RunStore, TableResult
from chalicelib.deadletter import dead_letter
from chalicelib.log import about, logger
from chalicelib.throttle import error_code, is_rate_limit

LISTING_SKEW = trigger.LISTING_SKEW  # backups are listed from a little before the run started
# A worker that claimed a poll but has not sent the next message after this long has died.
RESEND_AFTER = timedelta(seconds=60)
ALERT_LIST = 100  # tables of each outcome, and deleted ARNs, named in a run's summary alert
# Seconds of the invocation retention leaves for what follows it (the run's summary write and alerts, the
# next message): no DeleteBackup starts with less left (a quarter of a shorter invocation's time).
RETENTION_RESERVE = 30.0
FIRST_WINDOW = timedelta(days=1)  # a backlog's first listing window (then sized by density, ``_old_backups``)
MIN_WINDOW = timedelta(hours=1)
WINDOW_BACKUPS = 5_000            # what a window is sized for: 50 ListBackups pages, 10 s at 5/s
BACKUPS_BEGAN = datetime(2017, 11, 1, tzinfo=UTC)  # before DynamoDB's first on-demand backup


class RetryLater(RuntimeError):
    """Another worker holds the run; raising makes SQS deliver the message again later."""


def _to_backup(summary: Any) -> rules.Backup:
    return rules.Backup(
        arn=summary["BackupArn"], name=summary.get("BackupName", ""),
        table=summary.get("TableName", ""), created=summary["BackupCreationDateTime"],
        status=summary.get("BackupStatus", ""), type=summary.get("BackupType", ""))


class OutOfTime(RuntimeError):
    """A budgeted listing ran out of its share of the invocation's time before its last page."""


def list_user_backups(deps: Deps, since: datetime | None = None, before: datetime | None = None,
                      over: Callable[[], bool] | None = None) -> list[rules.Backup]:
    """All USER backups (created since ``since`` and before ``before``, if given), every page; ``over``:
    asked before each page after the first, raises OutOfTime when it says the listing's time is up."""
    kwargs: dict[str, Any] = {"BackupType": "USER"}
    if since is not None:
        kwargs["TimeRangeLowerBound"] = since
    if before is not None:
        kwargs["TimeRangeUpperBound"] = before
    backups: list[rules.Backup] = []
    client = deps.clients.dynamodb
    listing = pacer(deps, "ListBackups")
    while True:
        page = retry_transient(paced(listing, lambda: client.list_backups(**kwargs)), deps.sleep)
        backups.extend(_to_backup(s) for s in page.get("BackupSummaries", []))
        last = page.get("LastEvaluatedBackupArn")
        if not last:
            return [b for b in backups if b.type == "USER"]
        if over is not None and over():
            raise OutOfTime(f"listing cut after {len(backups)} backups")
        kwargs["ExclusiveStartBackupArn"] = last


def run_backups(deps: Deps, started_at: datetime, listed: Iterable[rules.Backup]) -> list[rules.Backup]:
    """The backups of ``listed`` a run started at ``started_at`` made: named by this stage for their table
    at the run's start."""
    prefix = deps.settings.backup_name_prefix
    return [b for b in listed if b.name == rules.backup_name(prefix, b.table, started_at)]


def current_statuses(deps: Deps, run: Run, listed: list[rules.Backup]) -> dict[str, str | None]:
    """Status of each pending backup of the run (None: it no longer exists), from ``listed``
    (the USER backups since the run started) and DescribeBackup for an ARN it lacks."""
    pending = {r.backup_arn for r in run.tables.values() if r.status == "PENDING" and r.backup_arn}
    if not pending:
        return {}
    by_arn = {b.arn: b.status for b in listed}
    statuses: dict[str, str | None] = {arn: by_arn[arn] for arn in pending if arn in by_arn}
    describing = pacer(deps, "DescribeBackup")
    for arn in sorted(pending - statuses.keys()):
        try:
            description = retry_transient(paced(describing, lambda arn=arn: deps.clients.dynamodb.describe_backup(  # type: ignore[misc]
                BackupArn=arn)), deps.sleep)["BackupDescription"]
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
        store.unsettle_table(run.run_id, result)
        raise


def _first_delivery_died(run: Run, poll: int, now: datetime, message_id: str) -> bool:
    """This message's first delivery claimed its poll but never sent the next message: the claim
    is this very message's (another message for the poll, a resent one, is a duplicate) and the
    next message has not been claimed RESEND_AFTER later."""
    own = message_id == run.poll_message if message_id and run.poll_message else not run.poll_queued
    return (run.status in POLLED and poll == run.poll - 1 and own
            and run.advanced_at is not None and now - run.advanced_at > RESEND_AFTER)


def check_run(deps: Deps, body: str, message_id: str = "", seconds_left: Callable[[], float] | None = None) -> str:
    """Process one monitor message; returns what happened (for logs and tests). ``seconds_left``: the
    invocation's time left (Lambda's context), which bounds a finish's retention (``prune``)."""
    settings = deps.settings
    try:
        message = parse_message(body)
    except BadMessage as exc:
        dead_letter(deps, settings.backup_monitor_dlq, "backup-monitor", message_id, str(exc), body)
        return "dead-lettered"
    if isinstance(message, ExportMessage):
        from chalicelib.backups import exports  # an export run's poll
        with about(export_run=message.run_id):
            return exports.poll(deps, message.run_id, message.poll, body, message_id)
    if isinstance(message, RestoreMessage):
        from chalicelib.backups import restore  # a restore's poll (restore on demand)
        with about(restore_id=message.restore_id):
            return restore.check(deps, message, body, message_id)
    with about(run_id=message.run_id):  # every line of this message names its run
        return _check(deps, message, body, message_id, seconds_left)


def _check(deps: Deps, message: MonitorMessage, body: str, message_id: str,
           seconds_left: Callable[[], float] | None) -> str:
    store = RunStore(deps)
    now = deps.clock()
    if not message.watch:
        listed = None
        if message.creating is not None:  # first, whether the poll can go unclaimed
            listed = list_user_backups(deps, message.creating.started_at - LISTING_SKEW)
            if _only_creating(deps, message.creating, listed, now):
                logger.info("backup run polled", extra={"run_id": message.run_id, "poll": message.poll,
                                                        "pending": message.creating.backups})
                _send_poll(deps, message.run_id, message.poll + 1, message.creating)
                return "requeued"
        claimed = store.claim_poll(message.run_id, message.poll, now, message_id)
        if claimed is not None and claimed.status == VERIFYING:
            return verify.poll(deps, store, claimed, message.poll, now)
        if claimed is not None:
            return _poll(deps, store, claimed, message.poll, now, seconds_left, listed)
    return _unclaimed(deps, store, message, body, message_id, now, seconds_left)


def _unclaimed(deps: Deps, store: RunStore, message: MonitorMessage, body: str, message_id: str,
               now: datetime, seconds_left: Callable[[], float] | None = None) -> str:
    """A watch, or a poll message whose number the run is not at: why, and what to do."""
    settings = deps.settings
    run_id, poll = message.run_id, message.poll
    run = store.get(run_id, with_tables=False)
    if run is None:
        dead_letter(deps, settings.backup_monitor_dlq, "backup-monitor", message_id,
                    f"run {run_id!r} not found", body)
        return "dead-lettered"
    lease = timedelta(seconds=settings.backup_run_lease_seconds)
    if message.watch:
        return _watch(deps, store, run, now)
    if run.status == FINISHING:
        # The finisher may have died mid-retention: retry until its lease ends, then take over. One that ran
        # out of time released its claim (``_carry_over``): the next message takes it at once.
        if not store.claim_finish(run_id, -1, now, now - lease):
            raise RetryLater(f"run {run_id} is being finished by another worker")
        store.load_tables(run)
        return _finish(deps, store, run, now, seconds_left=seconds_left)
    if run.status == STARTING:
        raise RetryLater(f"run {run_id} is still starting")
    if _first_delivery_died(run, poll, now, message_id) and store.claim_resend(run_id, run.poll, run.advanced_at, now):
        if run.status == VERIFYING:
            # Its first delivery died in the middle of a verification poll (whose steps each check what is
            # done): this delivery does the poll over, and sends the next message.
            return verify.poll(deps, store, run, poll, now)
        _send_poll(deps, run_id, run.poll, creating_of(run))
        return "resent"
    logger.info("duplicate monitor message ignored", extra={"run_id": run_id, "poll": poll,
                                                             "run_poll": run.poll, "status": run.status})
    return "duplicate"


def _only_creating(deps: Deps, creating: Creating | None, listed: list[rules.Backup], now: datetime) -> bool:
    """Nothing to record: the run may be polled unclaimed (``creating``: see ``messages.creating_of``), every
    backup of the run is listed (as many as it started), all CREATING, and its deadline has not passed."""
    if creating is None or now - creating.started_at > timedelta(minutes=deps.settings.backup_deadline_minutes):
        return False
    ours = run_backups(deps, creating.started_at, listed)
    return len({b.name for b in ours}) >= creating.backups and all(b.status == "CREATING" for b in ours)


def _poll(deps: Deps, store: RunStore, run: Run, poll: int, now: datetime,
          seconds_left: Callable[[], float] | None = None, listed: list[rules.Backup] | None = None) -> str:
    """Poll ``poll``, claimed (``run`` is the run item as the claim left it, at ``poll + 1``; ``listed``: the
    run's backups, if this delivery listed them before its claim)."""
    settings = deps.settings
    run_id = run.run_id
    _measure_overdue(deps, run, now)
    if listed is None:
        listed = list_user_backups(deps, run.started_at - LISTING_SKEW)
    if _only_creating(deps, creating_of(run), listed, now):
        logger.info("backup run polled", extra={"run_id": run_id, "poll": poll, "pending": run.counts["backups"]})
        _send_poll(deps, run_id, poll + 1, creating_of(run))
        return "requeued"

    store.load_tables(run)
    trigger.alert_failed_starts(deps, store, run)  # if the trigger stopped before it could
    deadline = timedelta(minutes=settings.backup_deadline_minutes)
    statuses = current_statuses(deps, run, listed)
    available: dict[int, list[TableResult]] = {}
    for result in run.tables.values():
        if result.status != "PENDING":
            continue
        status = statuses.get(result.backup_arn)
        outcome = rules.outcome(status, run.started_at, now, deadline)
        if outcome is rules.Outcome.PENDING:
            continue
        result.status = outcome.value
        if outcome is rules.Outcome.AVAILABLE:
            available.setdefault(result.page, []).append(result)
            continue
        if outcome is rules.Outcome.FAILED:
            result.error = "backup was deleted" if status == "DELETED" else "backup no longer exists"
        elif outcome is rules.Outcome.STUCK:
            result.error = f"still CREATING after {settings.backup_deadline_minutes} minutes"
        _settle(deps, store, run, result)
    for results in available.values():
        for result in store.settle_available(run_id, results):
            logger.info("backup done", extra={"run_id": run_id, "table": result.table,
                                              "backup_arn": result.backup_arn})

    pending = [r.table for r in run.tables.values() if r.status == "PENDING"]
    logger.info("backup run polled", extra={"run_id": run_id, "poll": poll, "pending": pending})
    if pending:
        _send_poll(deps, run_id, poll + 1, creating_of(run))
        return "requeued"
    lease = timedelta(seconds=settings.backup_run_lease_seconds)
    if not store.claim_finish(run_id, poll + 1, now, now - lease):
        return "duplicate"
    return _finish(deps, store, run, now, (run.started_at - LISTING_SKEW, listed), seconds_left)


def _watch(deps: Deps, store: RunStore, run: Run, now: datetime) -> str:
    """The start watch: a run still STARTING past its lease had its starter die; take the start over."""
    if run.status != STARTING:
        return "watched"
    store.load_tables(run)
    trigger.resume_start(deps, store, run, now, RetryLater, watch_again=False)  # SQS redelivers this one
    return "start resumed"


def _send_poll(deps: Deps, run_id: str, poll: int, creating: Creating | None = None,
               delay: int | None = None) -> None:
    delay = deps.settings.backup_monitor_delay_seconds if delay is None else delay
    send_poll_message(deps, run_id, poll, creating, delay)
    logger.info("monitor queued", extra={"run_id": run_id, "poll": poll, "delay_seconds": delay})


def retention_reserve(seconds: float) -> float:
    """The seconds retention leaves, of an invocation with ``seconds`` left when it starts, for what follows:
    RETENTION_RESERVE, or a quarter of a short invocation's time."""
    return min(RETENTION_RESERVE, max(0.0, seconds) / 4)


@dataclass
class Budget:
    """Retention's share of the invocation: the seconds left when it starts (Lambda's
    ``context.get_remaining_time_in_millis``, injected) less ``retention_reserve``, kept for what follows it.
    The whole listing may take half, the windowed one (when the whole was cut) up to three quarters, and
    deletes go on until only the reserve is left."""

    seconds_left: Callable[[], float]
    reserve: float = field(init=False)
    share: float = field(init=False)

    def __post_init__(self) -> None:
        start = self.seconds_left()
        self.reserve = retention_reserve(start)
        self.share = max(0.0, start - self.reserve)

    def used(self, fraction: float) -> bool:
        """More than ``fraction`` of retention's share has gone."""
        return self.seconds_left() - self.reserve <= self.share * (1 - fraction)

    def spent(self) -> bool:
        return self.seconds_left() <= self.reserve

    def deletes_left(self, rate: float) -> float:
        """The DeleteBackups there is time left for, at ``rate`` a second."""
        return max(0.0, self.seconds_left() - self.reserve) * rate


@dataclass(frozen=True)
class Expiring:
    """What retention deletes now: ``doomed`` (oldest first), exact for every backup created at or after
    ``horizon`` (None: every backup listed); those older were not listed this pass (the listing's time was
    up) and wait for the next."""

    doomed: list[rules.Backup]
    horizon: datetime | None = None


@dataclass(frozen=True)
class Pruned:
    """One retention pass: the backups it deleted, and whether it stopped with more to delete (out of time:
    backups left in its list, or older ones not listed)."""

    deleted: list[rules.Backup]
    more: bool = False
    left: int = 0  # doomed backups listed and not deleted (more may wait past the listing's horizon)
    windowed: bool = False  # the listing was windowed (``_old_backups``): the next pass lists so at once


def _old_backups(deps: Deps, cutoff: datetime, budget: Budget | None, windowed: bool,
                 enough: Callable[[list[rules.Backup]], bool]) -> tuple[list[rules.Backup], datetime | None]:
    """The USER backups created before ``cutoff``, with the horizon from which on all were listed (None: all).

    The whole listing first (what a daily run needs: every page, once), unless the previous pass was
    ``windowed``. When it would take more than half the budget (a backlog: a year of daily backups of
    thousands of tables is thousands of pages), it is dropped and the backups are listed in time windows
    going back from ``cutoff``, newest first, each window whole: a day first, then each sized for about
    WINDOW_BACKUPS backups by the last one's density (4 times wider at most, a quarter at least), until
    three quarters of the budget are used or ``enough`` says the pass has more to delete than time left to
    delete it. Retention decides on those exactly, as every newer backup is listed, and leaves the older
    ones for the next pass."""
    if budget is None:
        return list_user_backups(deps, before=cutoff), None
    if not windowed:
        try:
            return list_user_backups(deps, before=cutoff, over=lambda: budget.used(0.5)), None
        except OutOfTime:
            pass
    listed: list[rules.Backup] = []
    upper, width = cutoff, FIRST_WINDOW
    while upper > BACKUPS_BEGAN:
        lower = max(BACKUPS_BEGAN, upper - width)
        try:
            window = list_user_backups(deps, since=lower, before=upper, over=lambda: budget.used(0.75))
        except OutOfTime:
            return listed, upper
        listed += window
        upper = lower
        width = max(MIN_WINDOW, width * min(4.0, max(0.25, WINDOW_BACKUPS / max(1, len(window)))))
        if budget.used(0.75) or enough(window):
            break
    return listed, (upper if upper > BACKUPS_BEGAN else None)


def expirable_backups(deps: Deps, tables: list[str], now: datetime,
                      listed_since: tuple[datetime, list[rules.Backup]] | None = None,
                      budget: Budget | None = None, windowed: bool = False) -> Expiring:
    """This app's backups of ``tables`` retention deletes now (``rules.backups_to_delete``), listing
    only what it needs: the USER backups created before now - BACKUP_RETENTION_DAYS (the only ones
    that can expire: TimeRangeUpperBound, every page, or within ``budget``: ``_old_backups``), and, when
    one of them is this app's and BACKUP_MIN_KEEP asks for good backups to be kept, the newer ones that
    may be the kept ones (``listed_since``: a listing already made from a time on, which is not asked for
    again). Only a backup older than the cutoff can be deleted; the calendar of BACKUP_RETENTION needs no
    more than the newer ones BACKUP_MIN_KEEP (at least 1) already lists."""
    s = deps.settings
    policy = retention_policy(s)
    cutoff = now - policy.age
    selected = set(tables)
    # At most this many good backups of a table are kept, whatever the listing: a window past them is all
    # to delete, and a pass needs no more than it has time to delete.
    most_kept = s.backup_min_keep + policy.daily + policy.weekly + policy.monthly + policy.yearly

    ours_by_table: Counter[str] = Counter()

    def enough(window: list[rules.Backup]) -> bool:
        """After each window: more of this app's backups listed than can be kept, by as many as time is left
        to delete."""
        ours_by_table.update(b.table for b in window if b.table in selected and rules.is_ours(b, s.backup_name_prefix))
        surely_doomed = sum(max(0, n - most_kept) for n in ours_by_table.values())
        return budget is not None and surely_doomed >= budget.deletes_left(s.backup_delete_rate)

    old, horizon = _old_backups(deps, cutoff, budget, windowed, enough)
    if not any(b.table in selected and rules.is_ours(b, s.backup_name_prefix) for b in old):
        return Expiring([], horizon)
    newer: list[rules.Backup] = []
    if s.backup_min_keep > 0:
        if listed_since is not None and listed_since[0] > cutoff:
            since, listed = listed_since
            newer = list_user_backups(deps, since=cutoff, before=since) + [b for b in listed if b.created >= since]
        else:
            newer = list_user_backups(deps, since=cutoff)
    return Expiring(rules.backups_to_delete(old + newer, now, policy, s.backup_min_keep, s.backup_name_prefix,
                                            tables), horizon)


def prune(deps: Deps, tables: list[str], now: datetime,
          listed_since: tuple[datetime, list[rules.Backup]] | None = None,
          seconds_left: Callable[[], float] | None = None, windowed: bool = False) -> Pruned:
    """Delete this app's expired backups of ``tables``, keeping BACKUP_MIN_KEEP good ones each, within the
    invocation's time (``seconds_left``; None: no bound): the listing within its share (``Budget``), and no
    DeleteBackup started with less than ``retention_reserve`` seconds left. ``more``: it stopped with backups
    to delete (the caller carries them over to another pass, which lists afresh; ``windowed``: the previous
    pass had to list in windows, so this one does at once). A pass that deletes nothing stops (``more``
    False): what it could not list or delete waits for the next run, never a chain of passes that do nothing. A delete still throttled
    after botocore's retries stops retention for this run: the next run deletes the rest."""
    budget = Budget(seconds_left) if seconds_left is not None else None
    expiring = expirable_backups(deps, tables, now, listed_since, budget, windowed)
    # Windowed (a backlog): newest first, so the next pass's windows go quickly past what this one thinned.
    doomed = expiring.doomed[::-1] if expiring.horizon is not None else expiring.doomed
    deleting = pacer(deps, "DeleteBackup")
    deleted: list[rules.Backup] = []
    for i, backup in enumerate(doomed):
        if budget is not None and budget.spent():
            # Out of time: carried over, unless this pass made no progress at all (then the next run goes on).
            return Pruned(deleted, bool(deleted), len(doomed) - i, expiring.horizon is not None)
        try:
            retry_transient(paced(deleting, lambda arn=backup.arn: deps.clients.dynamodb.delete_backup(  # type: ignore[misc]
                BackupArn=arn)), deps.sleep)
        except ClientError as exc:
            if error_code(exc) == "BackupNotFoundException":
                continue  # already gone: a retried finish, or deleted by hand
            if error_code(exc) == "BackupInUseException":
                logger.warning("backup in use, kept for the next run", extra={"backup_arn": backup.arn})
                continue
            if is_rate_limit(exc):
                logger.warning("retention throttled: the rest is kept for the next run", extra={
                    "backup_arn": backup.arn, "left": len(doomed) - len(deleted)})
                break
            raise
        deleted.append(backup)
        logger.info("backup deleted by retention", extra={
            "backup_arn": backup.arn, "table": backup.table, "backup_created": backup.created.isoformat()})
    return Pruned(deleted, expiring.horizon is not None and bool(deleted), 0, expiring.horizon is not None)


def apply_retention(deps: Deps, tables: list[str], now: datetime,
                    listed_since: tuple[datetime, list[rules.Backup]] | None = None) -> list[rules.Backup]:
    """``prune`` with no time bound: the backups it deleted."""
    return prune(deps, tables, now, listed_since).deleted


def _finish(deps: Deps, store: RunStore, run: Run, now: datetime,
            listed_since: tuple[datetime, list[rules.Backup]] | None = None,
            seconds_left: Callable[[], float] | None = None) -> str:
    pruned = prune(deps, sorted(run.tables), now, listed_since, seconds_left, run.retention_windowed)
    if pruned.more:
        return _carry_over(deps, store, run, now, pruned)
    if pruned.windowed:
        logger.warning("retention backlog left for the next run: a windowed pass deleted nothing", extra={
            "run_id": run.run_id, "passes": run.retention_passes + 1})
    deleted = pruned.deleted
    counts = {s: sorted(r.table for r in run.tables.values() if r.status == s)
              for s in ("AVAILABLE", "FAILED", "STUCK")}
    pitr_off = sorted(r.table for r in run.tables.values() if r.pitr == "DISABLED")
    summary: dict[str, Any] = {
        "tables": len(run.tables), "backed_up": len(counts["AVAILABLE"]), "failed": len(counts["FAILED"]),
        "stuck": len(counts["STUCK"]), "deleted": run.retention_deleted + len(deleted), "pitr_off": len(pitr_off),
        "pitr_read": sum(1 for r in run.tables.values() if r.pitr),
        "href": f"/backups/runs/{run.run_id}"}
    if run.retention_passes:
        summary["retention_passes"] = run.retention_passes + 1
    if run.verify_plan:
        summary["verifying"] = len(run.verify_plan)
    settled = store.verifying(run.run_id, now, summary) if run.verify_plan else store.complete(run.run_id, now, summary)
    if settled and run.verify_plan:
        # The monitor's polls go on, verifying restores (verify.py); if this message is lost, the resend
        # of a first delivery that died, or the next trigger's repair, sends it.
        _send_poll(deps, run.run_id, run.poll)
    if settled:
        # Counts, the run's address, and the tables and deleted ARNs, each list cut at ALERT_LIST
        # (at thousands of tables the whole would pass SNS's 256 KB; the run's page has every table).
        retry_transient(lambda: alerts.publish(
            deps,
            f"timekeeper backup run {run.run_id}: {summary['backed_up']} ok, {summary['failed']} failed, "
            f"{summary['stuck']} stuck, {summary['deleted']} deleted",
            {"run_id": run.run_id, "kind": "summary",
             **{k.lower(): v[:ALERT_LIST] for k, v in counts.items()},
             "deleted": [b.arn for b in deleted][:ALERT_LIST], "counts": summary},
            kind="summary"), deps.sleep)
        _measure_complete(deps, run, now, summary)
        if deps.settings.backup_require_pitr and pitr_off:
            retry_transient(lambda: alerts.publish(
                deps, f"timekeeper: {len(pitr_off)} backed-up tables without point-in-time recovery",
                {"run_id": run.run_id, "tables": pitr_off[:ALERT_LIST], "count": len(pitr_off),
                 "reason": "BACKUP_REQUIRE_PITR=true and point-in-time recovery is off",
                 "href": f"/backups/runs/{run.run_id}"}), deps.sleep)
    logger.info("backup run complete", extra={"run_id": run.run_id, **summary})
    return "verifying" if run.verify_plan else "complete"


def _carry_over(deps: Deps, store: RunStore, run: Run, now: datetime, pruned: Pruned) -> str:
    """Retention ran out of the invocation's time with backups still to delete: the run stays FINISHING, its
    claim released at once (with the count deleted so far), and a poll message with no delay hands the
    finish to the next invocation, which takes the claim (``_unclaimed``), lists afresh and goes on. A
    duplicate of that message finds the claim taken (RetryLater) or the run complete (a duplicate)."""
    if store.release_finish(run.run_id, now, len(pruned.deleted), pruned.windowed):
        _send_poll(deps, run.run_id, run.poll, delay=0)
    logger.warning("retention backlog: the rest is carried over to the next invocation", extra={
        "run_id": run.run_id, "deleted": len(pruned.deleted), "left": pruned.left, "windowed": pruned.windowed,
        "deleted_so_far": run.retention_deleted + len(pruned.deleted), "passes": run.retention_passes + 1})
    return "retention continues"


# --- metrics (chalicelib/metrics.py; docs/operations.md) ----------------------------------------------------------

run_deadline = trigger.run_deadline  # when a run should be complete (the trigger's repair reads it too)


def _measure_overdue(deps: Deps, run: Run, now: datetime) -> None:
    if now > run_deadline(deps, run):
        deps.metrics.count(m.BACKUP_RUNS_OVERDUE)


def _measure_complete(deps: Deps, run: Run, now: datetime, summary: dict[str, Any]) -> None:
    """The run's outcome, once (only the delivery that completed the run gets here)."""
    deps.metrics.count(m.BACKUP_RUNS_COMPLETED)
    for name, key in ((m.BACKUP_TABLES_BACKED_UP, "backed_up"), (m.BACKUP_TABLES_FAILED, "failed"),
                      (m.BACKUP_TABLES_STUCK, "stuck"), (m.BACKUPS_DELETED, "deleted")):
        deps.metrics.count(name, summary[key])  # verifications are counted when they end (verify.poll)
    deps.metrics.observe(m.BACKUP_RUN_DURATION, m.SECONDS, (now - run.started_at).total_seconds())

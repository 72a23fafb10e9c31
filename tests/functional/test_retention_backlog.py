"""Retention's backlog, bounded by the invocation's time and carried over, at the stage settings on moto.

A run's finish deletes while the Lambda has time (its context's remaining time, injected here as a clock
reading: every paced call moves the clock), stops with RETENTION_RESERVE seconds left, and hands the finish
on to the next monitor message; the next invocation lists afresh and goes on. Nothing the policy keeps is
deleted at any point, under a lost DeleteBackup answer or a hard error mid-way, and the run's summary counts
every pass's deletes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.backups import monitor, retention, retry, rules, trigger
from chalicelib.backups.store import RunStore
from chalicelib.settings import Calendar
from tests import events
from tests.faults import Faults
from tests.fixtures import ACCOUNT, Aws, FakeClock, use_settings
from tests.functional.backup_support import (
    CallCounter,
    create_tables,
    monitor_messages,
    moto_backups,
)

pytestmark = pytest.mark.usefixtures("attribute_values_fast")  # speed only: tests/moto_fast.py

TABLES = ("orders", "audit")
CALENDAR = Calendar(daily=7, weekly=4, monthly=2)
# The time a monitor invocation has left when the message arrives: far less than the function's 240 s,
# so that a backlog of some thirty backups (at BACKUP_DELETE_RATE's 8/s: 12 an invocation) needs several.
INVOCATION_SECONDS = 2.0
PER_INVOCATION = 12  # (INVOCATION_SECONDS - its reserve, a quarter) * BACKUP_DELETE_RATE


def _stage(deps: Deps) -> rules.Policy:
    use_settings(deps, backup_retention=CALENDAR, backup_retention_days=3, backup_min_keep=2,
                 backup_tables=TABLES)
    return retention.retention_policy(deps.settings)


def _backlog(deps: Deps, days: int, tables: tuple[str, ...] = TABLES) -> None:
    """A daily backup of each table for ``days`` days (made in moto's backend: fast, AVAILABLE)."""
    from moto.dynamodb.models import dynamodb_backends

    backend = dynamodb_backends[ACCOUNT][deps.settings.region]
    prefix = deps.settings.backup_name_prefix
    for day in range(1, days + 1):
        at = deps.clock() - timedelta(days=day, hours=1)
        for table in tables:
            backend.create_backup(table, rules.backup_name(prefix, table, at)).creation_date_time = \
                at.replace(tzinfo=None)


def _kept(deps: Deps, policy: rules.Policy, now: datetime) -> set[str]:
    listed = monitor.list_user_backups(deps)
    return {v.backup.arn for v in rules.retention_verdicts(
        listed, now, policy, deps.settings.backup_name_prefix, TABLES) if not v.deleted}


def _seconds_left(clock: FakeClock, seconds: float) -> Callable[[], float]:
    started = clock.now
    return lambda: seconds - (clock.now - started).total_seconds()


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    lines: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("timekeeper")
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)


def _deliver(aws: Aws, deps: Deps, clock: FakeClock, keep: set[str], faulty: bool,
             queue: list[str] | None = None) -> tuple[list[str], int]:
    """Every monitor message, as SQS and Lambda would: each delivery an invocation with INVOCATION_SECONDS
    left; one that fails is delivered again after the visibility timeout (and the lease of the claim it
    left). (outcomes, failed deliveries)."""
    queue = queue if queue is not None else [body for body, _ in monitor_messages(aws, deps)]
    outcomes, failures = [], 0
    while queue:
        body = queue.pop(0)
        started = clock.now
        try:
            outcomes.append(monitor.check_run(deps, body, "m", _seconds_left(clock, INVOCATION_SECONDS)))
        except monitor.RetryLater:  # the failed pass's claim: SQS delivers it again after the lease
            clock.advance(seconds=deps.settings.backup_run_lease_seconds)
            queue.insert(0, body)
            continue
        except Exception as exc:
            assert "injected fault" in str(exc)
            failures += 1
            clock.advance(seconds=300)  # the queue's visibility timeout
            queue.insert(0, body)
            continue
        finally:
            assert keep <= set(moto_backups(deps))  # nothing the policy keeps, even half-way
        # Within the invocation: the last DeleteBackup started with the reserve left (one pace earlier).
        used = (clock.now - started).total_seconds()
        reserve = monitor.retention_reserve(INVOCATION_SECONDS)
        assert used <= INVOCATION_SECONDS - reserve + 1 / deps.settings.backup_delete_rate or faulty
        queue += [b for b, _ in monitor_messages(aws, deps)]
    return outcomes, failures


def _start_backlogged(deps: Deps, clock: FakeClock) -> tuple[str, set[str], int]:
    """A run over a backlog of more than two invocations' deletes: (run id, the policy's kept set, doomed)."""
    create_tables(deps, TABLES)
    policy = _stage(deps)
    _backlog(deps, 35)
    run_id = trigger.new_run_id(clock.now, "scheduled")
    trigger.start_run(deps, "schedule", run_id=run_id)
    keep = _kept(deps, policy, clock.now)
    doomed = len(moto_backups(deps)) - len(keep)
    assert doomed > 3 * PER_INVOCATION
    return run_id, keep, doomed


def test_a_backlog_larger_than_an_invocation_is_deleted_over_several_each_within_its_time(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, warnings: list[str]) -> None:
    run_id, keep, doomed = _start_backlogged(deps, clock)
    (body, _), = monitor_messages(aws, deps)

    # The function itself: its Lambda context's remaining time (Chalice's test context gives it 3 s) bounds it.
    client.lambda_.invoke("backup_monitor", events.sqs_event(
        events.sqs_record(body, deps.settings.backup_monitor_queue, "m-1")))
    run = RunStore(deps).get(run_id)
    assert run is not None and run.status == "FINISHING" and run.retention_passes == 1
    assert 0 < run.retention_deleted <= 3 * deps.settings.backup_delete_rate
    (handed_on, delay), = aws.sent(deps.settings.backup_monitor_queue)  # the finish handed on at once
    assert json.loads(handed_on)["run_id"] == run_id and delay == 0
    outcomes, _ = _deliver(aws, deps, clock, keep, faulty=False, queue=[handed_on])

    assert len(outcomes) >= 3 and outcomes == ["retention continues"] * (len(outcomes) - 1) + ["complete"]
    assert set(moto_backups(deps)) == keep == _kept(deps, retention.retention_policy(deps.settings), clock.now)
    run = RunStore(deps).get(run_id)
    assert run is not None and run.status == "COMPLETE"
    assert run.summary["deleted"] == doomed and run.summary["retention_passes"] == len(outcomes) + 1
    assert sum("retention backlog" in line for line in warnings) == len(outcomes)
    assert len([a for a in aws.alerts() if a["message"].get("kind") == "summary"]) == 1


def test_a_carried_over_backlog_under_a_lost_delete_answer_and_a_hard_error_ends_with_the_policys_kept_set(
        aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    run_id, keep, doomed = _start_backlogged(deps, clock)
    lost = faults.inject("dynamodb.DeleteBackup", "lost", occurrence=PER_INVOCATION // 2)  # in the first pass
    # In the second: every attempt retry_transient makes fails, the worker's delivery with it.
    error = faults.inject("dynamodb.DeleteBackup", "error", occurrence=PER_INVOCATION * 3 // 2,
                          times=retry.ATTEMPTS)

    outcomes, failures = _deliver(aws, deps, clock, keep, faulty=True)

    assert lost.hits == 1 and error.hits == retry.ATTEMPTS and failures == 1
    assert outcomes[-1] == "complete" and "retention continues" in outcomes
    assert set(moto_backups(deps)) == keep
    run = RunStore(deps).get(run_id)
    assert run is not None and run.status == "COMPLETE"
    # Not counted: the lost answer's delete (made; its retry found it gone) and those of the pass that failed.
    assert doomed - 1 - PER_INVOCATION <= run.summary["deleted"] < doomed


def test_a_pass_whose_whole_listing_would_not_fit_lists_windows_newest_first_and_deletes_only_what_the_policy_does(
        deps: Deps, clock: FakeClock) -> None:
    create_tables(deps, TABLES)
    policy = _stage(deps)
    _backlog(deps, 300)  # 600 backups: 6 ListBackups pages, 1.2 s at 5/s
    keep = _kept(deps, policy, clock.now)
    newest_doomed = max(b.created for b in monitor.list_user_backups(deps) if b.arn not in keep)
    share = 1.5  # half of it is 0.75 s: the whole listing is cut before its last page
    invocation = share * 4 / 3  # the reserve is a quarter

    started = clock.now
    first = monitor.prune(deps, list(TABLES), clock.now, seconds_left=_seconds_left(clock, invocation))
    assert first.windowed and first.more and first.deleted
    assert (clock.now - started).total_seconds() <= share + 1 / deps.settings.backup_delete_rate
    assert keep <= set(moto_backups(deps))
    assert first.deleted[0].created == newest_doomed  # the windows start at the cutoff: newest first

    started = clock.now
    counter = CallCounter().watch(deps.clients.dynamodb)
    second = monitor.prune(deps, list(TABLES), clock.now, windowed=True, seconds_left=_seconds_left(clock, invocation))
    # Windows of 1, 4, 16 and 64 days (2 pages), then the backups since the cutoff: past the 64-day window the
    # listed backups outnumber what the policy can keep by more than there is time to delete: no wider one.
    assert counter.count("dynamodb:ListBackups") == 6
    assert second.deleted and not set(second.deleted) & set(first.deleted)
    assert keep <= set(moto_backups(deps))
    assert len(second.deleted) > len(first.deleted)  # no whole listing tried first: more time to delete

    # An invocation with no time left deletes nothing, and hands nothing on: never a chain of empty passes.
    empty = monitor.prune(deps, list(TABLES), clock.now, seconds_left=lambda: 0.0)
    assert empty.deleted == [] and not empty.more



def test_a_pass_listing_windows_never_deletes_a_tables_oldest_while_a_count_is_not_filled(
        deps: Deps, clock: FakeClock) -> None:
    create_tables(deps, TABLES)
    use_settings(deps, backup_retention=Calendar(daily=7, yearly=3), backup_retention_days=3, backup_min_keep=2,
                 backup_tables=TABLES)
    policy = retention.retention_policy(deps.settings)
    _backlog(deps, 300)  # under a year: yearly=3 not filled, so each table's oldest backup is kept
    keep = _kept(deps, policy, clock.now)
    oldest = {min((b for b in monitor.list_user_backups(deps) if b.table == t), key=lambda b: b.created).arn
              for t in TABLES}
    assert oldest <= keep

    first = monitor.prune(deps, list(TABLES), clock.now, seconds_left=_seconds_left(clock, 2.0))
    assert first.windowed and first.more and first.deleted  # the windows stop short of the oldest ones
    assert keep <= set(moto_backups(deps))  # what a pass takes for a table's oldest is kept, not the real one lost
    monitor.prune(deps, list(TABLES), clock.now)  # a whole listing: exactly the policy
    assert set(moto_backups(deps)) == keep

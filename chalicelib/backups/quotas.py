"""AWS's per-second quotas on the backup calls, kept by pacing each call on the injected clock.

CreateBackup (BACKUP_CREATE_RATE, at most AWS's 50/s), DeleteBackup (BACKUP_DELETE_RATE, at most
10/s), DescribeBackup (10/s) and ListBackups (5/s) are spaced at least 1/rate seconds apart
within a worker: one pacer per operation and clock, kept across the calls of an invocation (a
poll's listing and retention's are one sequence) and across the invocations of a warm container.

Throttling is retried in one layer only: botocore's retry mode (AWS_RETRY_MODE, AWS_MAX_ATTEMPTS
attempts in all). The app's own retries (retry.py) leave rate limits alone, so a throttled call is
made at most AWS_MAX_ATTEMPTS times, not that many times per app-level attempt. CreateBackup is the
exception that keeps the rule: botocore makes it once (it is not idempotent), and the trigger retries
its throttling instead, as often.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from chalicelib.aws import Deps
from chalicelib.throttle import Pacer

T = TypeVar("T")

DESCRIBE_BACKUP_RATE = 10.0  # AWS's quotas, per second
LIST_BACKUPS_RATE = 5.0

_pacers: weakref.WeakKeyDictionary[Any, dict[tuple[str, float], Pacer]] = weakref.WeakKeyDictionary()


def pacer(deps: Deps, operation: str) -> Pacer:
    """The pacer of ``operation`` ("CreateBackup", "DeleteBackup", "DescribeBackup", "ListBackups")
    on ``deps``'s clock."""
    s = deps.settings
    rate = {"CreateBackup": s.backup_create_rate, "DeleteBackup": s.backup_delete_rate,
            "DescribeBackup": DESCRIBE_BACKUP_RATE, "ListBackups": LIST_BACKUPS_RATE}[operation]
    try:
        by_operation = _pacers.setdefault(deps.clock, {})
    except TypeError:  # a clock that takes no weak reference: a pacer for this call's sequence only
        return Pacer(rate, deps.clock, deps.sleep)
    key = (operation, rate)
    if key not in by_operation:
        by_operation[key] = Pacer(rate, deps.clock, deps.sleep)
    found = by_operation[key]
    found.sleep = deps.sleep
    return found


def paced(each: Pacer, call: Callable[[], T]) -> Callable[[], T]:
    """``call``, made only after ``each`` lets it (every attempt of a retried call waits its turn)."""
    def wait_then_call() -> T:
        each.wait()
        return call()
    return wait_then_call

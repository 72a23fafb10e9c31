"""When the executor acts: early arrivals, retry backoff, the next occurrence. Pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from chalicelib import schedule_expr
from chalicelib.tasks.model import Task

MAX_DELAY_SECONDS = 900  # SQS DelaySeconds at most
RETRY_BASE_SECONDS = 1.0
RETRY_CAP_SECONDS = 8.0
MAX_HINT_SECONDS = 20.0  # the longest Retry-After the executor waits out (its function times out at 90 s)


@dataclass(frozen=True)
class Arrival:
    """What to do with a due message now: run it, wait ``seconds`` then run, or re-queue it."""

    kind: str  # "run" | "wait" | "requeue"
    seconds: float = 0.0


def arrival(due: datetime, now: datetime) -> Arrival:
    """Never early: a second or more ahead -> back to the queue (whole seconds, at most 900 a hop,
    rounded down so it comes back just before the time); less -> wait it out here."""
    remaining = (due - now).total_seconds()
    if remaining <= 0:
        return Arrival("run")
    if remaining < 1:
        return Arrival("wait", remaining)
    return Arrival("requeue", min(MAX_DELAY_SECONDS, int(remaining)))


def retry_delay(failed_attempts: int) -> float:
    """Backoff before the next attempt after ``failed_attempts`` failures: 1 s, 2 s, 4 s, ... at most 8 s."""
    return min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * float(2 ** max(0, failed_attempts - 1)))


def hinted_delay(backoff: float, hint: float | None) -> float | None:
    """The delay before the next attempt when the failed one's target asked for ``hint`` seconds (a
    Retry-After): the longer of the two; None when the hint is past MAX_HINT_SECONDS, the retry budget
    (an attempt earlier than asked would only be refused again: the execution fails instead)."""
    if hint is None:
        return backoff
    return max(backoff, hint) if hint <= MAX_HINT_SECONDS else None


def next_due(task: Task, now: datetime) -> datetime | None:
    """The next occurrence of a recurring task after this one (and after now: missed ones are not
    replayed); None for a one-off task or an expression that never fires again."""
    if not task.recurrence:
        return None
    after = max(task.due, now)
    return schedule_expr.next_fire(task.recurrence, after, task.timezone or "UTC", start=task.due)


def claim_held_delay(claimed_at: float, lease_seconds: int, now: datetime) -> int:
    """Seconds until a claim held by another worker goes stale (then this message may take it over)."""
    remaining = claimed_at + lease_seconds - now.timestamp()
    return max(1, min(MAX_DELAY_SECONDS, int(remaining) + 1))

"""When the executor acts: early arrivals, retry backoff, the next occurrence. Pure, no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from chalicelib.tasks.model import RetryPolicy, Task

MAX_DELAY_SECONDS = 900  # SQS DelaySeconds at most
RETRY_BASE_SECONDS = 1.0
RETRY_CAP_SECONDS = 8.0  # a wait up to this long is slept in the delivery; a longer one is a retry later
RETRY_LATER_CAP_SECONDS = 900.0  # the backoff's ceiling: one SQS delay
IN_DELIVERY_SLEEP_SECONDS = 15.0  # at most this much sleeping in one delivery (the executor's timeout is 90 s)
JITTER = 0.5  # the backoff is between (1 - JITTER) and 1 times its ceiling
#: TASK_PRECISION: ``second`` rounds a due message's SQS delay up (it arrives at or just after its due time: the
#: action runs less than a second late, no Lambda billed to wait); ``subsecond`` rounds it down (it arrives up to a
#: second early and the executor sleeps out the rest: on time to the delivery's latency, the sleep billed).
SECOND = "second"
SUBSECOND = "subsecond"
PRECISIONS = (SECOND, SUBSECOND)


@dataclass(frozen=True)
class RetryStep:
    """What follows a failed attempt: ``give_up`` (FAILED; ``reason`` says which limit), ``sleep`` ``seconds``
    then try again in this delivery, or ``later``: settle the execution to be retried ``seconds`` from now."""

    kind: str  # "give_up" | "sleep" | "later"
    seconds: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class Arrival:
    """What to do with a due message now: run it, wait ``seconds`` then run, or re-queue it."""

    kind: str  # "run" | "wait" | "requeue"
    seconds: float = 0.0


def queue_delay(remaining: float, precision: str = SECOND) -> int:
    """SQS DelaySeconds (whole seconds, 0-900) for a message due ``remaining`` seconds from now, at the task
    precision: ``second`` rounds up (it comes back at or after its time, less than a second late), ``subsecond``
    rounds down (it comes back less than a second early, to be waited out). Pure."""
    whole = math.ceil(remaining) if precision == SECOND else math.floor(remaining)
    return max(0, min(MAX_DELAY_SECONDS, whole))


def arrival(due: datetime, now: datetime, precision: str = SECOND) -> Arrival:
    """Never early: a second or more ahead -> back to the queue (``queue_delay``: whole seconds at the
    ``precision``, at most 900 a hop); less -> wait it out here.  A message sent with ``second``'s delay
    arrives at or after its time, so there is nothing left to wait but the skew of the two clocks."""
    remaining = (due - now).total_seconds()
    if remaining <= 0:
        return Arrival("run")
    if remaining < 1:
        return Arrival("wait", remaining)
    return Arrival("requeue", queue_delay(remaining, precision))


def backoff(failed_attempts: int, draw: float) -> float:
    """Backoff before the next attempt after ``failed_attempts`` failures, with jitter: a ceiling of 1 s, 2 s,
    4 s, ... at most 900 s, less up to half of it by ``draw`` (uniform in [0, 1), the injected random source),
    so that tasks failing together do not retry together."""
    ceiling = min(RETRY_LATER_CAP_SECONDS, RETRY_BASE_SECONDS * float(2 ** min(20, max(0, failed_attempts - 1))))
    return ceiling * (1 - JITTER * min(max(draw, 0.0), 1.0))


def next_retry(policy: RetryPolicy, failed_attempts: int, since: datetime, now: datetime, draw: float,
               hint: float | None = None, slept: float = 0.0) -> RetryStep:
    """What to do after the ``failed_attempts``-th failed attempt of an execution whose age counts from
    ``since`` (its due time, or the time it was retried from by the API): give up once ``policy.max_attempts``
    were made or when the next attempt would start later than ``policy.max_age_seconds`` after ``since``;
    else wait the backoff -- at least the action's own ``hint`` (seconds, e.g. a Retry-After) -- in this
    delivery when it is short (``slept`` is what this delivery slept so far), or later. Pure."""
    if failed_attempts >= policy.max_attempts:
        return RetryStep("give_up", reason=f"{failed_attempts} of max_attempts {policy.max_attempts} made")
    delay = backoff(failed_attempts, draw)
    if hint is not None and hint > delay:
        delay = float(hint)
    if now + timedelta(seconds=delay) > since + timedelta(seconds=policy.max_age_seconds):
        return RetryStep("give_up", delay, f"the next attempt in {delay:g} s would be past max_age_seconds "
                                           f"{policy.max_age_seconds}")
    if delay <= RETRY_CAP_SECONDS and slept + delay <= IN_DELIVERY_SLEEP_SECONDS:
        return RetryStep("sleep", delay)
    return RetryStep("later", delay)


def next_due(task: Task, now: datetime, occurrences: int = 0) -> datetime | None:
    """The next occurrence of a recurring task after this one (and after now: missed ones are not
    replayed); None for a one-off task, an expression that never fires again, a task whose ``occurrences``
    (its runs so far, this one included) reached its ``max_occurrences``, or whose next time is past its
    ``end_at``: then this occurrence was its last."""
    if not task.recurrence:
        return None
    if task.max_occurrences is not None and occurrences >= task.max_occurrences:
        return None
    after = max(task.due, now)
    from chalicelib import schedule_fire  # the time-zone database: loaded by a recurring task only (cold start)

    following = schedule_fire.next_fire(task.recurrence, after, task.timezone or "UTC", start=task.due)
    if following is not None and task.end_at is not None and following > task.end_at:
        return None
    return following


#: The grids a flexible window aligns a task's run to: the coarsest that fits in its window (each divides the next, so
#: a coarser grid's boundaries are boundaries of the finer ones too).
WINDOW_GRIDS = (60, 300, 900, 3600, 21600, 86400)


def window_slot(due: datetime, window_seconds: int | None) -> datetime:
    """When a task with a flexible window (``window_seconds``) is sent to run: the first boundary, at or after
    ``due``, of the coarsest of WINDOW_GRIDS that fits in the window -- never early, at most the window late --
    so tasks due close together with like windows arrive together and share the executor's batches.  Without a
    window: ``due``. Pure."""
    if not window_seconds:
        return due
    grid = max((g for g in WINDOW_GRIDS if g <= window_seconds), default=WINDOW_GRIDS[0])
    return datetime.fromtimestamp(math.ceil(due.timestamp() / grid) * grid, due.tzinfo)


def claim_held_delay(claimed_at: float, lease_seconds: int, now: datetime) -> int:
    """Seconds until a claim held by another worker goes stale (then this message may take it over)."""
    remaining = claimed_at + lease_seconds - now.timestamp()
    return max(1, min(MAX_DELAY_SECONDS, int(remaining) + 1))

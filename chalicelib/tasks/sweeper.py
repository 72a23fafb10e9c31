"""The sweeper: exact tasks due past the due queue's horizon, sent to the due queue as they come within reach.

With PAST_HORIZON=sweeper the stream scheduler keeps an exact task due later than
``sweeps_from`` (DIRECT_QUEUE_HORIZON_SECONDS, at least ``SWEEP_FROM_SECONDS``) as one entry in STATE_TABLE
instead of a Scheduler schedule: partition ``SWEEP#YYYY-MM-DD#HH:MM#<shard>`` (the minute ``runs_at`` falls
in, then one of SWEEP_SHARDS by a hash of the task's key, so no partition takes more than 1,000 writes a
second below 1,000 x SWEEP_SHARDS tasks a second due in one minute), sort key ``<runs_at ms>#<key hash>``,
the due message's body and ``runs_at``, expiring (TTL) two days after its minute.  One write a task.

Each tick of the interval processor (``sweep``) takes every minute ("slice") from its progress through the
one starting ``LOOKAHEAD_SECONDS`` from now, queries the slice's shards (a page of each at a time, the pages'
entries sent together, ten to a SendMessageBatch, each with the DelaySeconds left to its ``runs_at``: at most
LOOKAHEAD_SECONDS + SLICE_SECONDS = 660 < 900), and saves the progress (``high_water``, the slice's last
second, in STATE_TABLE at PK "PROCESSOR", SK "sweeper") through the last slice wholly sent, once a run.

- Never early, never skipped: a slice is swept at most LOOKAHEAD_SECONDS before it starts, and the
  progress passes a slice only once all its entries went out; a late tick catches up from the progress
  (at most MAX_SLICES_PER_RUN slices a run); a tick that fails or runs out of time leaves the progress
  where it was, and a shard's place in a large slice (``cursor_<shard>``) after each page sent, so the
  next tick resumes there.  What was sent before a crash is sent again: the executor's claim runs each
  (task, due time) once.
- A task written (created or rescheduled) into a slice the sweeper may already have swept is sent directly:
  ``sweeps`` keeps only tasks due more than SWEEP_FROM_SECONDS ahead, and the stream step checks the
  clock again once the entry is written (``may_be_swept``: a stream stalled for minutes).
- With PAST_HORIZON=scheduler a tick sweeps only once the sweeper has swept before (entries written while
  it was ``sweeper`` are still sent); one eventually consistent read a tick otherwise.
- A task cancelled or moved leaves its entry: its message is skipped by the executor (gone, or another due
  time), as a stale message of the SQS path is.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from chalicelib.aws import Deps
from chalicelib.log import logger, worker_pool
from chalicelib.settings import STATE_TTL_ATTRIBUTE
from chalicelib.tasks import interval, timing
from chalicelib.tasks.buckets import bucket_label
from chalicelib.tasks.model import DueMessage, TaskKey
from chalicelib.throttle import with_backoff

SLICE_SECONDS = 60             # one slice: a minute of runs_at
LOOKAHEAD_SECONDS = 600        # a slice is swept once its start is at most this far ahead
MARGIN_SECONDS = 60            # clock skew and a stream write's wait for visibility, with room to spare
# Tasks due at most this far ahead go to the due queue directly, whatever DIRECT_QUEUE_HORIZON_SECONDS says.
SWEEP_FROM_SECONDS = LOOKAHEAD_SECONDS + SLICE_SECONDS + MARGIN_SECONDS
FIRST_RUN_LOOKBACK_SECONDS = 3600
MAX_SLICES_PER_RUN = 120
STOP_SECONDS_LEFT = 10.0       # a tick stops starting pages with less than this left
ENTRY_KEEP_SECONDS = 2 * 86400
PROGRESS_KEY = {"PK": {"S": "PROCESSOR"}, "SK": {"S": "sweeper"}}
ENTRY_PREFIX = "SWEEP#"
PAGE_LIMIT = 1000              # entries a query page (a few hundred KB)


class SweepFailed(RuntimeError):
    """Some due messages of a slice could not be sent; the progress stays before the slice."""


# --- pure ---------------------------------------------------------------------------------------------

def sweeps(runs_at: datetime, now: datetime, horizon_seconds: int) -> bool:
    """True when a task running at ``runs_at`` waits for the sweeper; False: it goes to the due queue now."""
    return (runs_at - now).total_seconds() > max(horizon_seconds, SWEEP_FROM_SECONDS)


def slice_of(at: datetime | float) -> int:
    """The start (epoch seconds) of the slice ``at`` falls in."""
    epoch = math.floor(at.timestamp() if isinstance(at, datetime) else at)
    return epoch - epoch % SLICE_SECONDS


def may_be_swept(runs_at: datetime, now: datetime) -> bool:
    """True when a sweeper tick at ``now`` (give or take MARGIN_SECONDS) may have swept ``runs_at``'s slice."""
    return slice_of(runs_at) - LOOKAHEAD_SECONDS - MARGIN_SECONDS <= now.timestamp()


def plan_slices(progress: int | None, now: datetime, lookahead: int = LOOKAHEAD_SECONDS,
                lookback: int = FIRST_RUN_LOOKBACK_SECONDS, limit: int = MAX_SLICES_PER_RUN) -> list[int]:
    """The slices (starts, oldest first) a tick at ``now`` sweeps: from the one after the progress (the last
    second swept) through the last one starting at most ``lookahead`` from now, at most ``limit``."""
    first = slice_of(progress + 1) if progress is not None else slice_of(now.timestamp() - lookback)
    last = slice_of(now.timestamp() + lookahead)
    return list(range(first, last + 1, SLICE_SECONDS))[:limit]


def shard_of(key: TaskKey, shards: int) -> int:
    digest = hashlib.sha256(f"{key.source}\x00{key.pk}\x00{key.sk}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def partition(start: int, shard: int) -> str:
    return f"{ENTRY_PREFIX}{bucket_label(datetime.fromtimestamp(start, UTC))}#{shard}"


def entry_item(message: DueMessage, runs_at: datetime, shards: int) -> dict[str, Any]:
    """The entry of a task due at ``runs_at`` (DynamoDB JSON): the same for the same task and time."""
    key = message.key
    digest = hashlib.sha256(f"{key.source}\x00{key.pk}\x00{key.sk}".encode()).hexdigest()[:32]
    millis = round(runs_at.timestamp() * 1000)
    return {"PK": {"S": partition(slice_of(runs_at), shard_of(key, shards))}, "SK": {"S": f"{millis:015d}#{digest}"},
            "body": {"S": message.to_json()}, "runs_at": {"N": f"{millis / 1000:.3f}"},
            STATE_TTL_ATTRIBUTE: {"N": str(slice_of(runs_at) + ENTRY_KEEP_SECONDS)}}


@dataclass(frozen=True)
class Found:
    """One entry read back: its body and when it runs."""

    body: str
    runs_at: float


def read_entry(item: dict[str, Any]) -> Found | None:
    try:
        return Found(str(item["body"]["S"]), float(item["runs_at"]["N"]))
    except (KeyError, TypeError, ValueError):
        return None


def cursor_of(progress_item: dict[str, Any] | None, start: int, shard: int) -> str | None:
    """The sort key a shard of slice ``start`` was sent through, from the progress item (None: from the start)."""
    value = ((progress_item or {}).get(f"cursor_{shard}") or {}).get("S", "")
    slice_text, _, sort_key = str(value).partition("|")
    return sort_key if slice_text == str(start) and sort_key else None


# --- I/O -------------------------------------------------------------------------------------------------

def put_entry(deps: Deps, message: DueMessage, runs_at: datetime) -> bool:
    """Write the task's entry; True when the sweeper may have passed its slice meanwhile (send it directly)."""
    item = entry_item(message, runs_at, deps.settings.sweep_shards)
    with_backoff(lambda: deps.clients.dynamodb.put_item(TableName=deps.settings.state_table, Item=item), deps.sleep)
    return may_be_swept(runs_at, deps.clock())


@dataclass
class SweepRun:
    slices: list[int]
    sent: int = 0
    progress: int | None = None
    stopped: bool = False  # out of time: the next tick resumes


def sweep(deps: Deps, seconds_left: Callable[[], float] | None = None, page_limit: int = PAGE_LIMIT) -> SweepRun:
    """One tick: every slice from the progress through LOOKAHEAD_SECONDS ahead, sent, the progress saved."""
    keeps = deps.settings.past_horizon == "sweeper"
    item = _progress_item(deps, consistent=keeps)
    if item is None and not keeps:
        return SweepRun([])  # a stage that has never kept a task for the sweeper: nothing to sweep
    progress = int(item["high_water"]["N"]) if item and "high_water" in item else None
    run = SweepRun(plan_slices(progress, deps.clock()), progress=progress)
    shards = deps.settings.sweep_shards
    pool = worker_pool(min(shards, 16), "sweeper") if shards > 1 else None
    done = progress
    try:
        for start in run.slices:
            if not _sweep_slice(deps, start, shards, item, run, pool, seconds_left, page_limit):
                run.stopped = True
                break
            done, item = start + SLICE_SECONDS - 1, None
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        if done is not None and done != progress:  # through the last slice wholly sent, the run's failure included
            interval.save_progress(deps, done, PROGRESS_KEY)
            run.progress = done
        if run.sent or run.stopped:  # an idle minute logs nothing at INFO
            logger.info("sweep", extra={"first": run.slices[0], "slices": len(run.slices), "sent": run.sent,
                                        "progress": run.progress, "stopped": run.stopped})
    return run


def _progress_item(deps: Deps, consistent: bool = True) -> dict[str, Any] | None:
    found: dict[str, Any] | None = with_backoff(lambda: deps.clients.dynamodb.get_item(
        TableName=deps.settings.state_table, Key=PROGRESS_KEY, ConsistentRead=consistent), deps.sleep).get("Item")
    return found


def _sweep_slice(deps: Deps, start: int, shards: int, item: dict[str, Any] | None, run: SweepRun,
                 pool: ThreadPoolExecutor | None, seconds_left: Callable[[], float] | None, page_limit: int) -> bool:
    """Send every entry of one slice, a page of each shard at a time; False when out of time first."""
    from chalicelib.tasks.stream import OutgoingDue, send_due_messages  # the stream's batching and retries

    after: dict[int, str | None] = {shard: cursor_of(item, start, shard) for shard in range(shards)}
    while after:
        if seconds_left is not None and seconds_left() < STOP_SECONDS_LEFT:
            return False
        shard_ids = list(after)
        def page_of(shard: int) -> tuple[Sequence[dict[str, Any]], str | None]:
            return _page(deps, start, shard, after[shard], page_limit)

        pages = list(pool.map(page_of, shard_ids)) if pool is not None else [page_of(s) for s in shard_ids]
        now = deps.clock()
        outgoing: list[OutgoingDue] = []
        for items, _ in pages:
            for found in filter(None, map(read_entry, items)):
                due = datetime.fromtimestamp(found.runs_at, UTC)
                outgoing.append(OutgoingDue(found.body, timing.queue_delay((due - now).total_seconds(),
                                                                             deps.settings.task_precision)))
        errors = [e for e in send_due_messages(deps, outgoing, pool) if e is not None]
        if errors:
            raise SweepFailed(f"{len(errors)} due messages of slice {start} not sent: {errors[0]!r}")
        run.sent += len(outgoing)
        for shard, (_, last) in zip(shard_ids, pages, strict=True):
            if last is None:
                del after[shard]
            else:
                after[shard] = last
                _save_cursor(deps, start, shard, last)
    return True


def _page(deps: Deps, start: int, shard: int, after: str | None, limit: int) -> tuple[Sequence[dict[str, Any]], str | None]:
    """One page of a shard's entries after sort key ``after``; and the last sort key when more may follow."""
    kwargs: dict[str, Any] = {"TableName": deps.settings.state_table, "KeyConditionExpression": "PK = :pk",
                              "ExpressionAttributeValues": {":pk": {"S": partition(start, shard)}},
                              "Limit": limit}
    if after is not None:
        kwargs["ExclusiveStartKey"] = {"PK": {"S": partition(start, shard)}, "SK": {"S": after}}
    page = with_backoff(lambda: deps.clients.dynamodb.query(**kwargs), deps.sleep)
    last = page.get("LastEvaluatedKey")
    return page.get("Items", []), (str(last["SK"]["S"]) if last else None)


def _save_cursor(deps: Deps, start: int, shard: int, sort_key: str) -> None:
    """Note that a shard of slice ``start`` was sent through ``sort_key`` (a tick out of time resumes there)."""
    with_backoff(lambda: deps.clients.dynamodb.update_item(
        TableName=deps.settings.state_table, Key=PROGRESS_KEY, UpdateExpression="SET #cursor = :cursor",
        ExpressionAttributeNames={"#cursor": f"cursor_{shard}"},
        ExpressionAttributeValues={":cursor": {"S": f"{start}|{sort_key}"}}), deps.sleep)


def swept_through(deps: Deps) -> datetime | None:
    """The last second the sweeper has sent (None before its first tick): for operators and tests."""
    item = _progress_item(deps)
    return (datetime.fromtimestamp(int(item["high_water"]["N"]), UTC) + timedelta(seconds=1)
            if item and "high_water" in item else None)


def processor_tick(deps: Deps, seconds_left: Callable[[], float] | None = None) -> None:
    """The interval processor's minute: the interval tasks come due, then the sweeper's slices; one failing does
    not hold the other back, and the tick fails (to be retried) after both."""
    failed: Exception | None = None
    for step in (lambda: interval.process_all(deps), lambda: sweep(deps, seconds_left)):
        try:
            step()
        except Exception as exc:
            logger.exception("processor step failed")
            failed = failed or exc
    if failed is not None:
        raise failed

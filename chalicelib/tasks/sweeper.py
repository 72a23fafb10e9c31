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

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from chalicelib.aws import Deps
from chalicelib.log import logger, worker_pool
from chalicelib.tasks import interval, timing
from chalicelib.tasks.sweep_plan import (
    PAGE_LIMIT,
    PROGRESS_KEY,
    SLICE_SECONDS,
    STOP_SECONDS_LEFT,
    SweepFailed,
    cursor_of,
    partition,
    plan_slices,
    read_entry,
)
from chalicelib.throttle import with_backoff


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

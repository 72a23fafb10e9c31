"""The interval processor: every tick, send the interval tasks that have come due to the due queue.

Interval tasks carry a sharded due bucket (``chalicelib.tasks.buckets``) and
``due_epoch``; the GSI BUCKET_INDEX has them as partition and sort key.  A
run queries every shard of every bucket from its progress up to now
(``due_epoch`` from the progress + 1 through now), sends what it finds with
SendMessageBatch, and only then saves the progress: the ``due_epoch``
high-water mark, in STATE_TABLE under PK "PROCESSOR", SK "interval".

- Missed ticks are caught up: the window starts where the last run stopped,
  however long ago (at most MAX_QUERIES_PER_RUN queries per run; the next run
  goes on from there).
- The current bucket is processed up to now; the tasks due later in it are
  picked up next tick, and none is sent twice in normal operation.
- The first run (no progress yet) looks back FIRST_RUN_LOOKBACK_SECONDS.
- After a crash between sending and saving, the next run sends those tasks
  again; the executor's claim runs each (task, due time) once.
- Tasks written with a due time within INTERVAL_DIRECT_SECONDS (or in the past)
  are sent by the stream scheduler instead (see ``schedules``), since the
  window may already have passed them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import Deps
from chalicelib.log import logger
from chalicelib.settings import DUE_EPOCH_ATTRIBUTE
from chalicelib.sources import TaskSource
from chalicelib.tasks.buckets import bucket_label, bucket_starts
from chalicelib.tasks.model import DueMessage, InvalidTask, TaskKey, parse_due
from chalicelib.throttle import backoff_delay, error_code, with_backoff

PROGRESS_KEY = {"PK": {"S": "PROCESSOR"}, "SK": {"S": "interval"}}
FIRST_RUN_LOOKBACK_SECONDS = 3600   # the first run ever sends tasks due in the hour before it
MAX_QUERIES_PER_RUN = 2000          # bucket x shard queries per run; a longer backlog takes several runs
BATCH_SIZE = 10                     # SendMessageBatch limit
SEND_ATTEMPTS = 5                   # tries of a batch's failed entries before the run fails


class SendFailed(RuntimeError):
    """Some due messages could not be sent after retries; the run stops without saving past them."""


@dataclass(frozen=True)
class Window:
    """Due epochs ``first`` .. ``last`` (inclusive) and the bucket starts that cover them."""

    first: int
    last: int
    buckets: list[datetime]


@dataclass
class ProcessorRun:
    window: Window | None
    sent: int = 0
    progress: int | None = None


def plan_window(progress: int | None, now: datetime, minutes: int, shards: int,
                lookback: int = FIRST_RUN_LOOKBACK_SECONDS, max_queries: int = MAX_QUERIES_PER_RUN) -> Window | None:
    """Which due epochs and buckets this run covers (pure); None when there is nothing new."""
    now_epoch = math.floor(now.timestamp())
    first = progress + 1 if progress is not None else now_epoch - lookback
    if first > now_epoch:
        return None
    starts = bucket_starts(_at(first), _at(now_epoch), minutes)
    limit = max(1, max_queries // shards)
    last = now_epoch
    if len(starts) > limit:
        starts = starts[:limit]
        last = int(starts[-1].timestamp()) + minutes * 60 - 1
    return Window(first, last, starts)


def _at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


@dataclass(frozen=True)
class BucketIndex:
    """An index one tick reads bucket by bucket: the tasks table's (sharded, each query bounded by the
    window) or an interval task source's (one partition per bucket, queried whole)."""

    progress_key: dict[str, Any]
    minutes: int
    shards: int
    # The due messages of one bucket (its start) for due epochs low..high.
    due_in: Callable[[datetime, int, int], Iterator[DueMessage]]
    # True: the progress passes a bucket only once it is over (the index is queried whole, not by due epoch).
    whole_buckets: bool = False
    log: dict[str, Any] = field(default_factory=dict)


def process_due(deps: Deps) -> ProcessorRun:
    """One tick: send every interval task due since the last run, then save the progress."""
    settings = deps.settings

    def due_in(start: datetime, low: int, high: int) -> Iterator[DueMessage]:
        for shard in range(settings.bucket_shards):
            for key, due_epoch in _due_in(deps, f"{bucket_label(start)}#{shard}", low, high):
                yield DueMessage(key, _at(due_epoch))

    return run_index(deps, BucketIndex(PROGRESS_KEY, settings.bucket_minutes, settings.bucket_shards, due_in))


def run_index(deps: Deps, index: BucketIndex) -> ProcessorRun:
    """One tick over an index: each bucket from the progress through now, its due messages sent in batches;
    then the progress saved, through the last bucket done (the run's failure included)."""
    progress = load_progress(deps, index.progress_key)
    now = deps.clock()
    window = plan_window(progress, now, index.minutes, index.shards)
    run = ProcessorRun(window=window, progress=progress)
    if window is None:
        return run
    width = index.minutes * 60
    done = window.first - 1
    try:
        for start in window.buckets:
            begin = int(start.timestamp())
            high = min(window.last, begin + width - 1)
            run.sent += send_all(deps, index.due_in(start, max(window.first, begin), high))
            if not index.whole_buckets:
                done = high
            elif begin + width - 1 < now.timestamp():
                done = begin + width - 1
    finally:
        if done >= window.first:
            save_progress(deps, done, index.progress_key)
            run.progress = done
        logger.info("interval run", extra={**index.log, "first": window.first, "last": window.last, "done": done,
                                           "buckets": len(window.buckets), "sent": run.sent})
    return run


def send_all(deps: Deps, messages: Iterable[DueMessage]) -> int:
    """Send the messages to the due queue in batches of BATCH_SIZE, as they come; the count sent."""
    sent = 0
    batch: list[DueMessage] = []
    for message in messages:
        batch.append(message)
        if len(batch) == BATCH_SIZE:
            sent += send_batch(deps, batch)
            batch = []
    return sent + send_batch(deps, batch)


def process_all(deps: Deps) -> list[ProcessorRun]:
    """One tick of the interval processor: the tasks table's buckets, then each interval task source's own
    index.  One source failing does not hold the others back; the tick fails (and is retried) after them."""
    runs = [process_due(deps)]
    failed: Exception | None = None
    for source in deps.settings.task_sources:
        if source.strategy != "interval":
            continue
        try:
            runs.append(process_source(deps, source))
        except Exception as exc:
            logger.exception("interval run of a task source failed", extra={"task_source": source.name})
            failed = exc
    if failed is not None:
        raise failed
    return runs


def source_progress_key(source: TaskSource) -> dict[str, Any]:
    return {"PK": {"S": "PROCESSOR"}, "SK": {"S": f"interval#{source.name}"}}


def process_source(deps: Deps, source: TaskSource) -> ProcessorRun:
    """One tick over an interval source's own index (``bucket_index``, hash key ``bucket_attribute``, one value
    per bucket in the user's ``bucket_format``): every bucket from the progress through the one now running
    is queried whole; the progress (per source) only passes complete buckets, so the running one is queried
    again next tick (the executor's claim runs each (source, key, due) once).  Nothing is written to the
    user's items."""
    return run_index(deps, BucketIndex(
        source_progress_key(source), source.bucket_minutes, 1,
        lambda start, low, high: _source_due_in(deps, source, start), whole_buckets=True,
        log={"task_source": source.name}))


def _source_due_in(deps: Deps, source: TaskSource, start: datetime) -> Iterator[DueMessage]:
    """The due messages of the items in one bucket of a source's index (its key from the index's projection
    of the table key; the due time from the due attribute when projected, else the bucket's start)."""
    kwargs: dict[str, Any] = {
        "TableName": source.table, "IndexName": source.bucket_index,
        "KeyConditionExpression": "#bucket = :bucket",
        "ExpressionAttributeNames": {"#bucket": source.bucket_attribute or ""},
        "ExpressionAttributeValues": {":bucket": {"S": source.bucket_label(start)}},
    }
    while True:
        page = with_backoff(lambda: deps.clients.dynamodb.query(**kwargs), deps.sleep)
        for item in page.get("Items", []):
            try:  # the user's item: anything unreadable is skipped (logged), never a failed run
                key = TaskKey.of_source(source.name, {name: item[name] for name in source.key})
                due_value = item.get(source.due_attribute or "")
                due = parse_due(next(iter(due_value.values())), source.due_attribute or "due") if due_value else start
            except (KeyError, TypeError, ValueError, ArithmeticError, StopIteration, InvalidTask):
                logger.warning("bucket index item without the source's key", extra={
                    "task_source": source.name, "keys": sorted(item)})
                continue
            yield DueMessage(key, due)
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _due_in(deps: Deps, bucket: str, low: int, high: int) -> Iterator[tuple[TaskKey, int]]:
    """(key, due_epoch) of the tasks in one bucket partition with low <= due_epoch <= high."""
    settings = deps.settings
    kwargs: dict[str, Any] = {
        "TableName": settings.tasks_table, "IndexName": settings.bucket_index,
        "KeyConditionExpression": "#bucket = :bucket AND #epoch BETWEEN :low AND :high",
        "ExpressionAttributeNames": {"#bucket": settings.bucket_attribute, "#epoch": DUE_EPOCH_ATTRIBUTE},
        "ExpressionAttributeValues": {":bucket": {"S": bucket}, ":low": {"N": str(low)}, ":high": {"N": str(high)}},
    }
    while True:
        page = with_backoff(lambda: deps.clients.dynamodb.query(**kwargs), deps.sleep)
        for item in page.get("Items", []):
            try:  # another program's item: anything unreadable is skipped, never a failed run
                key = TaskKey(item["PK"]["S"], item["SK"]["S"])
                due_epoch = int(item[DUE_EPOCH_ATTRIBUTE]["N"])
                if not low <= due_epoch <= high:
                    raise ValueError(f"due_epoch {due_epoch} outside the query's range")
            except (KeyError, TypeError, ValueError, ArithmeticError):
                logger.warning("bucket index item without string keys or due_epoch", extra={"item": item})
                continue
            yield key, due_epoch
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def send_batch(deps: Deps, messages: list[DueMessage], rng: random.Random | None = None) -> int:
    """Send up to 10 due messages; entries reported Failed are retried with backoff. Returns the count."""
    if not messages:
        return 0
    if len(messages) > BATCH_SIZE:
        raise ValueError(f"at most {BATCH_SIZE} messages per batch, got {len(messages)}")
    url = deps.queue_url(deps.settings.due_queue)
    pending = {str(i): m.to_json() for i, m in enumerate(messages)}
    for attempt in range(SEND_ATTEMPTS):
        entries: list[Any] = [{"Id": i, "MessageBody": body} for i, body in pending.items()]
        response = with_backoff(partial(deps.clients.sqs.send_message_batch, QueueUrl=url, Entries=entries),
                                deps.sleep)
        failed = response.get("Failed", [])
        if not failed:
            return len(messages)
        failed_ids = {f["Id"] for f in failed}
        pending = {i: body for i, body in pending.items() if i in failed_ids}
        permanent = [f for f in failed if f.get("SenderFault")]
        if permanent:
            raise SendFailed(f"the due queue rejected messages: {permanent}")
        logger.warning("due messages not sent; retrying", extra={"failed": failed, "attempt": attempt + 1})
        rng = rng or random.Random()  # made at the first retry, as throttle.with_backoff's
        deps.sleep(backoff_delay(rng, attempt, base=0.2, cap=5.0))
    raise SendFailed(f"{len(pending)} due messages still failing after {SEND_ATTEMPTS} attempts")


def load_progress(deps: Deps, key: dict[str, Any] | None = None) -> int | None:
    item = with_backoff(lambda: deps.clients.dynamodb.get_item(
        TableName=deps.settings.state_table, Key=key or PROGRESS_KEY, ConsistentRead=True), deps.sleep).get("Item")
    if not item or "high_water" not in item:
        return None
    return int(item["high_water"]["N"])


def save_progress(deps: Deps, high_water: int, key: dict[str, Any] | None = None) -> None:
    """Record that every task due at or before ``high_water`` was sent; never moves backwards."""
    try:
        with_backoff(lambda: deps.clients.dynamodb.put_item(
            TableName=deps.settings.state_table,
            Item={**(key or PROGRESS_KEY), "high_water": {"N": str(high_water)},
                  "high_water_at": {"S": _at(high_water).isoformat()},
                  "saved_at": {"S": deps.clock().isoformat()}},
            ConditionExpression="attribute_not_exists(PK) OR high_water < :hw",
            ExpressionAttributeValues={":hw": {"N": str(high_water)}}), deps.sleep)
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        logger.info("interval progress already past this run's", extra={"high_water": high_water})

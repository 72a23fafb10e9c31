"""The stream scheduler: carries out, per tasks-table stream record, the steps ``schedules.plan`` decides.

``process_records(deps, records)`` takes the raw records of one batch and
returns Lambda's partial-batch response.  Records of different keys run
concurrently (at most STREAM_CONCURRENCY at once); the records of one key run
one after the other in stream order.  A record that cannot be read, or whose
image is not a valid task (whatever reading or planning it raised), whose
action targets a queue or topic the stage does not allow, or that AWS rejects
as invalid, is dead-lettered to TASK_DLQ once and skipped.  A transient failure
(an AWS or network error, after botocore's and the throttle retries) stops that key's records, and the batch reports the
failed record and the later ones of the same key in ``batchItemFailures``:
Lambda (with ReportBatchItemFailures) then retries the shard from the lowest
reported sequence number, so every later record of the batch is seen again.
That is safe because every step is idempotent: a schedule's name comes from
the item key (a replay finds it there and makes it match), bucket and TTL
writes are conditional, and a direct send replayed sends a second message for
the same (key, due) that the executor's claim turns into a no-op.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.deadletter import dead_letter
from chalicelib.log import logger
from chalicelib.settings import DUE_EPOCH_ATTRIBUTE
from chalicelib.tasks import schedules
from chalicelib.tasks.schedules import (
    Change,
    DeadLetter,
    DeleteSchedule,
    InvalidRecord,
    PutSchedule,
    SendDue,
    SetBucket,
    SetTtl,
    Step,
)
from chalicelib.tasks.store import TaskStore
from chalicelib.throttle import error_code, with_backoff

T = TypeVar("T")

SOURCE = "task_stream"

# AWS said the request itself is wrong: retrying the record cannot help, so it is dead-lettered.
PERMANENT_CODES = frozenset({"ValidationException", "SerializationException",
                             "InvalidParameterValue", "MessageTooLong"})  # the last two: SQS

# A due message larger than this (SQS allows 256 KiB, and a re-queued copy grows a little) does not carry the
# item image; the image is kept in the state table and the message says so.
MAX_DUE_MESSAGE_BYTES = 250_000

# A record with two large images would not fit in one SQS message: only its key is kept then.
MAX_DEAD_LETTER_PAYLOAD = 200_000

_queue_arns: dict[str, str] = {}
_queue_arns_lock = threading.Lock()


@dataclass
class BatchResult:
    """Per-batch outcome: sequence numbers to retry, and counts for the log."""

    failed: list[str] = field(default_factory=list)
    processed: int = 0
    dead_lettered: int = 0

    def response(self) -> dict[str, Any]:
        ordered = sorted(set(self.failed), key=lambda s: (len(s), s))  # numeric order of digit strings
        return {"batchItemFailures": [{"itemIdentifier": s} for s in ordered]}


def process_records(deps: Deps, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Handle one stream batch; the return value is Lambda's partial batch response."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for index, record in enumerate(records):
        key = schedules.record_key(record)
        groups.setdefault(key if key is not None else ("unkeyed", index), []).append(record)
    result = BatchResult()
    lock = threading.Lock()

    def run_group(group: list[dict[str, Any]]) -> None:
        outcome = _process_group(deps, group)
        with lock:
            result.failed += outcome.failed
            result.processed += outcome.processed
            result.dead_lettered += outcome.dead_lettered

    workers = max(1, min(deps.settings.stream_concurrency, len(groups)))
    if workers == 1:
        for group in groups.values():
            run_group(group)
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="task-stream") as pool:
            for future in [pool.submit(run_group, g) for g in groups.values()]:
                future.result()
    logger.info("stream batch", extra={"records": len(records), "processed": result.processed,
                                       "dead_lettered": result.dead_lettered, "failed": len(result.failed)})
    return result.response()


def _process_group(deps: Deps, group: list[dict[str, Any]]) -> BatchResult:
    """One key's records in order; on a transient failure, that record and the rest are reported."""
    outcome = BatchResult()
    for position, record in enumerate(group):
        try:
            dead = process_record(deps, record)
        except Exception as exc:  # an AWS or network error (dead-lettering included): Lambda retries it
            logger.warning("stream record failed; will be retried",
                           extra={"event_id": schedules.record_id(record), "error": repr(exc)})
            # A record without a sequence number is reported as "": Lambda then retries the whole batch.
            outcome.failed += [_sequence(r) for r in group[position:]]
            return outcome
        outcome.processed += 1
        outcome.dead_lettered += int(dead)
    return outcome


def _sequence(record: dict[str, Any]) -> str:
    dynamodb = record.get("dynamodb")
    return str(dynamodb.get("SequenceNumber", "")) if isinstance(dynamodb, dict) else ""


def process_record(deps: Deps, record: dict[str, Any]) -> bool:
    """Carry out one record; True when it was dead-lettered. Raises on a transient failure.

    Only AWS and network errors (botocore's) are transient.  Reading and planning are pure, so whatever
    they raise would be raised again by every retry: the record's content is at fault and it is
    dead-lettered, once, with the reason -- as is a step AWS rejects as invalid, or one that fails
    before any AWS call."""
    try:
        change = schedules.change_from_record(record)
        steps = schedules.plan(change, deps.settings, deps.clock())
    except InvalidRecord as exc:
        _dead_letter(deps, record, str(exc))
        return True
    except Exception as exc:  # pure code: the same record fails the same way every time
        _dead_letter(deps, record, f"the record cannot be planned: {type(exc).__name__}: {exc}"[:1000])
        return True
    for step in steps:
        if isinstance(step, DeadLetter):
            _dead_letter(deps, record, step.reason)
            return True
        try:
            _carry_out(deps, change, step)
        except ClientError as exc:
            if error_code(exc) not in PERMANENT_CODES:
                raise
            _dead_letter(deps, record, f"{type(step).__name__} was rejected: {exc}")
            return True
        except BotoCoreError as exc:
            if not isinstance(exc, ParamValidationError):  # connection, timeout, credentials: transient
                raise
            _dead_letter(deps, record, f"{type(step).__name__} was rejected: {exc}"[:1000])
            return True
        except Exception as exc:  # not AWS's: the record's content, not worth a retry
            _dead_letter(deps, record, f"{type(step).__name__} failed: {type(exc).__name__}: {exc}"[:1000])
            return True
    return False


def _dead_letter(deps: Deps, record: dict[str, Any], reason: str) -> None:
    payload: Any = record
    if len(json.dumps(record, default=str)) > MAX_DEAD_LETTER_PAYLOAD:
        found = record.get("dynamodb")
        dynamodb: dict[str, Any] = found if isinstance(found, dict) else {}
        payload = {"eventID": record.get("eventID"), "eventName": record.get("eventName"), "truncated": True,
                   "dynamodb": {k: dynamodb.get(k) for k in ("Keys", "SequenceNumber", "ApproximateCreationDateTime")}}
    dead_letter(deps, deps.settings.task_dlq, SOURCE, schedules.record_id(record), reason, payload)


def _call(deps: Deps, call: Callable[[], T]) -> T:
    """An AWS call, retried on throttling with backoff (on top of botocore's own retries)."""
    return with_backoff(call, deps.sleep)


def _carry_out(deps: Deps, change: Change, step: Step) -> None:
    if isinstance(step, PutSchedule):
        put_schedule(deps, step, schedules.client_token(change))
    elif isinstance(step, DeleteSchedule):
        delete_schedule(deps, step)
    elif isinstance(step, SendDue):
        send_due(deps, step)
    elif isinstance(step, SetBucket):
        set_bucket(deps, step)
    elif isinstance(step, SetTtl):
        set_ttl(deps, step)


# --- steps ---------------------------------------------------------------------

def queue_arn(deps: Deps, name: str) -> str:
    """The ARN of a queue by name (looked up once per queue URL)."""
    url = deps.queue_url(name)
    with _queue_arns_lock:
        known = _queue_arns.get(url)
    if known is None:
        attributes = _call(deps, lambda: deps.clients.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"])
        known = attributes["QueueArn"]
        with _queue_arns_lock:
            _queue_arns[url] = known
    return known


def put_schedule(deps: Deps, step: PutSchedule, token: str) -> None:
    """Create or update the task's schedule so that it fires as wanted, whatever is there now."""
    scheduler = deps.clients.scheduler
    wanted = schedules.schedule_request(step.task, step.fire_at, deps.settings,
                                        queue_arn(deps, deps.settings.due_queue))
    if step.create:
        try:
            _call(deps, lambda: scheduler.create_schedule(ClientToken=token, **wanted))
            return
        except ClientError as exc:
            if error_code(exc) != "ConflictException":
                raise
        # Already there (a replayed record, or created before): make sure it matches.
        current = _call(deps, lambda: scheduler.get_schedule(Name=wanted["Name"], GroupName=wanted["GroupName"]))
        if schedules.schedule_matches(dict(current), wanted):
            return
    try:
        _call(deps, lambda: scheduler.update_schedule(ClientToken=token, **wanted))
    except ClientError as exc:
        if error_code(exc) != "ResourceNotFoundException":
            raise
        # Fired and deleted itself (ActionAfterCompletion DELETE), or never made: make it now.
        try:
            _call(deps, lambda: scheduler.create_schedule(ClientToken=token, **wanted))
        except ClientError as again:
            if error_code(again) != "ConflictException":
                raise
            _call(deps, lambda: scheduler.update_schedule(ClientToken=token, **wanted))


def delete_schedule(deps: Deps, step: DeleteSchedule) -> None:
    try:
        _call(deps, lambda: deps.clients.scheduler.delete_schedule(
            Name=schedules.schedule_name(step.key), GroupName=deps.settings.schedule_group))
    except ClientError as exc:
        if error_code(exc) != "ResourceNotFoundException":
            raise


def send_due(deps: Deps, step: SendDue) -> None:
    """Send the due message; one whose item image would make it too large for SQS keeps the image in the
    state table (a replay writes the same image again) and sends a reference instead."""
    message = step.message
    body = message.to_json()
    if len(body.encode()) > MAX_DUE_MESSAGE_BYTES and message.image is not None:
        image = ddb.binary_as_bytes(message.image)
        store = TaskStore(deps)
        _call(deps, lambda: store.put_image(message.key.task_id, message.due, image, deps.clock()))
        body = replace(message, image=None, image_stored=True).to_json()
        logger.info("item image kept in the state table", extra={"task_id": message.key.task_id,
                                                                 "bytes": len(json.dumps(message.image))})
    url = deps.queue_url(deps.settings.due_queue)
    _call(deps, lambda: deps.clients.sqs.send_message(
        QueueUrl=url, MessageBody=body, DelaySeconds=step.delay_seconds))


def _conditional_update(deps: Deps, key_expr: dict[str, Any], update: str, condition: str,
                        names: dict[str, str], values: dict[str, Any]) -> bool:
    kwargs: dict[str, Any] = {"TableName": deps.settings.tasks_table, "Key": key_expr,
                              "UpdateExpression": update, "ConditionExpression": condition,
                              "ExpressionAttributeNames": names}
    if values:
        kwargs["ExpressionAttributeValues"] = {k: ddb.value(v) for k, v in values.items()}
    try:
        _call(deps, lambda: deps.clients.dynamodb.update_item(**kwargs))
        return True
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return False  # the item changed (or is gone) since the image: its next record decides
        raise


def _seen(placeholder: str, name: str, value: Any, values: dict[str, Any]) -> str:
    """A condition that attribute ``name`` is still ``value`` (absent when None)."""
    if value is None:
        return f"attribute_not_exists({name})"
    values[placeholder] = value
    return f"{name} = {placeholder}"


def set_bucket(deps: Deps, step: SetBucket) -> None:
    settings = deps.settings
    names = {"#due": settings.due_attribute, "#bucket": settings.bucket_attribute, "#epoch": DUE_EPOCH_ATTRIBUTE}
    values: dict[str, Any] = {":bucket": step.bucket, ":epoch": step.due_epoch}
    condition = " AND ".join(["attribute_exists(PK)", _seen(":seen_due", "#due", step.seen_due, values),
                              _seen(":seen_bucket", "#bucket", step.seen_bucket, values)])
    _conditional_update(deps, step.key.dynamo(), "SET #bucket = :bucket, #epoch = :epoch", condition, names, values)


def set_ttl(deps: Deps, step: SetTtl) -> None:
    settings = deps.settings
    names = {"#ttl": settings.ttl_attribute}
    values: dict[str, Any] = {":ttl": step.ttl}
    conditions = ["attribute_exists(PK)", _seen(":seen_ttl", "#ttl", step.seen_ttl, values)]
    if settings.due_attribute != settings.ttl_attribute:
        names["#due"] = settings.due_attribute
        conditions.append(_seen(":seen_due", "#due", step.seen_due, values))
    _conditional_update(deps, step.key.dynamo(), "SET #ttl = :ttl", " AND ".join(conditions), names, values)

"""The stream scheduler: carries out, per tasks-table stream record, the steps ``schedules.plan`` decides.

``process_records(deps, records)`` takes the raw records of one batch and
returns Lambda's partial-batch response.  Records of different keys run
concurrently (at most STREAM_CONCURRENCY at once); the records of one key run
one after the other in stream order.  Due messages (the SQS-delay path) are
sent in batches: every key runs until its next record has a message to send,
the messages of all keys go out together in SendMessageBatch calls (10
entries and 256 KiB a call, the calls concurrent; a message that has no room
beside another goes alone), and each key goes on once its own message is
sent.  So one key's steps keep their order, and a 100-record batch of new
tasks takes a few round trips.  An entry SQS fails on its side (throttling,
an internal error) is sent again a bounded number of times; one it rejects as
the sender's fault (its content) is dead-lettered with the reason.

A record that cannot be read, or whose image is not a valid task (whatever
reading or planning it raised), whose action targets a queue or topic the
stage does not allow, or that AWS rejects as invalid, is dead-lettered to
TASK_DLQ once and skipped, and noted on its task's record
(``stream_dead_letters``): GET shows why, and a retry of the batch that sees
the record again does not dead-letter it again.  A transient failure (an AWS or network error,
after botocore's and the throttle retries) stops that key's records, and the
batch reports the failed record and the later ones of the same key in
``batchItemFailures``: Lambda (with ReportBatchItemFailures) then retries the
shard from the lowest reported sequence number, so every later record of the
batch is seen again.  That is safe because every step is idempotent: a
schedule's name comes from the item key (a replay finds it there and makes it
match), bucket and TTL writes are conditional, and a direct send replayed
sends a second message for the same (key, due) that the executor's claim
turns into a no-op.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.deadletter import dead_letter
from chalicelib.log import about, logger, worker_pool
from chalicelib.metrics import strategy_of_record
from chalicelib.settings import DUE_EPOCH_ATTRIBUTE
from chalicelib.sources import TaskSource
from chalicelib.tasks import items, schedules, stream_dead_letters, sweep_plan
from chalicelib.tasks.model import InvalidTask, TaskKey, iso, read_task
from chalicelib.tasks.schedules import (
    CancelRecord,
    Change,
    DeadLetter,
    DeleteSchedule,
    InvalidRecord,
    NotATask,
    PutSchedule,
    SendDue,
    SetAttribute,
    SetBucket,
    SetTtl,
    Step,
    SweepEntry,
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

# SendMessageBatch: at most 10 entries, and 256 KiB of messages in all.
BATCH_ENTRIES = 10
BATCH_BYTES = 262_144

# Attempts at an entry SQS failed on its side (not the sender's fault), the first one included.
ENTRY_SEND_ATTEMPTS = 3

# SendMessageBatch refused as a whole, for its shape or one entry's content: its messages then go one by one,
# each judged on its own.
BATCH_REFUSED_CODES = PERMANENT_CODES | frozenset({
    "AWS.SimpleQueueService.BatchRequestTooLong", "BatchRequestTooLong",
    "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "TooManyEntriesInBatchRequest",
    "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "BatchEntryIdsNotDistinct",
    "AWS.SimpleQueueService.InvalidBatchEntryId", "InvalidBatchEntryId",
    "AWS.SimpleQueueService.EmptyBatchRequest", "EmptyBatchRequest",
    "InvalidMessageContents"})

_queue_arns: dict[str, str] = {}
_queue_arns_lock = threading.Lock()


@dataclass
class BatchResult:
    """Per-batch outcome: sequence numbers to retry, and counts for the log."""

    failed: list[str] = field(default_factory=list)
    processed: int = 0
    dead_lettered: int = 0

    def add(self, other: BatchResult) -> None:
        self.failed += other.failed
        self.processed += other.processed
        self.dead_lettered += other.dead_lettered

    def response(self) -> dict[str, Any]:
        ordered = sorted(set(self.failed), key=lambda s: (len(s), s))  # numeric order of digit strings
        return {"batchItemFailures": [{"itemIdentifier": s} for s in ordered]}


@dataclass(frozen=True)
class OutgoingDue:
    """A due message ready to go to the due queue: the batch sends it with the others of its round."""

    body: str
    delay_seconds: int


class EntryRejected(Exception):
    """SQS refused one message of a batch as the sender's fault (its content): the record is dead-lettered."""


# A record being carried out: it yields each due message to send and is resumed when it was sent (or the send's
# error is thrown into it); it returns True when the record was dead-lettered.
RecordRun = Generator[OutgoingDue, None, bool]


def process_records(deps: Deps, records: Sequence[dict[str, Any]], source: str = "") -> dict[str, Any]:
    """Handle one stream batch (of the tasks table, or of the task source named ``source``: a user's table);
    the return value is Lambda's partial batch response."""
    declared = deps.settings.source(source) if source else None
    if source and declared is None:  # the stage's configuration changed under a deployed mapping
        raise LookupError(f"no task source {source!r} is declared (TASK_SOURCES)")
    groups: dict[Any, list[dict[str, Any]]] = {}
    for index, record in enumerate(records):
        key = schedules.record_key(record, declared)
        groups.setdefault(key if key is not None else ("unkeyed", index), []).append(record)
    runs = [KeyRun(deps, group, declared) for group in groups.values()]
    workers = max(1, min(deps.settings.stream_concurrency, len(runs)))
    pool = worker_pool(workers, "task-stream") if workers > 1 else None
    try:
        active = runs
        while active:
            _each(pool, [run.advance_about_task for run in active])
            active = [run for run in active if run.waiting is not None]
            if active:
                errors = send_due_messages(deps, [run.waiting for run in active if run.waiting is not None], pool)
                for run, error in zip(active, errors, strict=True):
                    run.sent(error)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    result = BatchResult()
    for run in runs:
        result.add(run.outcome)
    logger.info("stream batch", extra={"task_source": source or "tasks", "records": len(records), "processed": result.processed,
                                       "dead_lettered": result.dead_lettered, "failed": len(result.failed)})
    return result.response()


def _each(pool: ThreadPoolExecutor | None, calls: Sequence[Callable[[], T]]) -> list[T]:
    """Run the calls, on the pool's threads when there is one (and more than one call); their results."""
    if pool is None or len(calls) == 1:
        return [call() for call in calls]
    futures = [pool.submit(call) for call in calls]
    return [future.result() for future in futures]


@dataclass
class KeyRun:
    """One key's records, carried out in stream order; it pauses at each due message (``waiting``), which
    the batch sends with the other keys' before calling ``sent`` and ``advance`` again."""

    deps: Deps
    records: list[dict[str, Any]]
    source: TaskSource | None = None
    outcome: BatchResult = field(default_factory=BatchResult)
    waiting: OutgoingDue | None = None
    _position: int = 0
    _run: RecordRun | None = None
    _error: Exception | None = None  # the waiting message's send failed with this

    def advance(self) -> None:
        """Carry out steps until a due message is to be sent, the records are done, or one failed transiently."""
        while self._position < len(self.records):
            record = self.records[self._position]
            try:
                if self._run is None:
                    self._run = record_run(self.deps, record, self.source)
                    self.waiting = next(self._run)
                elif self._error is not None:
                    error, self._error = self._error, None
                    self.waiting = self._run.throw(error)
                else:
                    self.waiting = self._run.send(None)
                return
            except StopIteration as done:
                self.outcome.processed += 1
                self.outcome.dead_lettered += int(done.value)
            except Exception as exc:  # an AWS or network error (dead-lettering included): Lambda retries it
                logger.warning("stream record failed; will be retried",
                               extra={"event_id": schedules.record_id(record), "error": repr(exc)})
                # A record without a sequence number is reported as "": Lambda then retries the whole batch.
                self.outcome.failed += [_sequence(r) for r in self.records[self._position:]]
                self._run, self.waiting, self._position = None, None, len(self.records)
                return
            self._run, self.waiting = None, None
            self._position += 1

    def advance_about_task(self) -> None:
        """``advance``, every line it logs naming the task of these records (their key)."""
        key = schedules.record_key(self.records[0], self.source) if self.records else None
        with about(task_id=key.task_id if key else ""):
            self.advance()

    def sent(self, error: Exception | None) -> None:
        """The waiting message was sent (``error`` None), or its send failed with ``error``."""
        self.waiting, self._error = None, error


def _sequence(record: dict[str, Any]) -> str:
    dynamodb = record.get("dynamodb")
    return str(dynamodb.get("SequenceNumber", "")) if isinstance(dynamodb, dict) else ""


def record_run(deps: Deps, record: dict[str, Any], source: TaskSource | None = None) -> RecordRun:
    """Carry out one record; yields each due message for the caller to send; returns True when the record was
    dead-lettered.  Raises on a transient failure.

    Only AWS and network errors (botocore's) are transient.  Reading and planning are pure, so whatever
    they raise would be raised again by every retry: the record's content is at fault and it is
    dead-lettered, once, with the reason -- as is a step AWS rejects as invalid, a message SQS rejects as
    the sender's fault, or a step that fails before any AWS call."""
    def dead(reason: str) -> bool:
        return _dead_letter(deps, record, reason if source is None else f"task source {source.name!r}: {reason}"[:1000],
                            source)

    try:
        change = schedules.change_from_record(record, source)
        steps = schedules.plan(change, deps.settings, deps.clock())
    except InvalidRecord as exc:
        return dead(str(exc))
    except Exception as exc:  # pure code: the same record fails the same way every time
        return dead(f"the record cannot be planned: {type(exc).__name__}: {exc}"[:1000])
    for step in steps:
        if isinstance(step, DeadLetter):
            return dead(step.reason)
        try:
            if isinstance(step, SendDue):
                yield OutgoingDue(due_body(deps, step), step.delay_seconds)
            elif isinstance(step, SweepEntry):
                if sweep_plan.put_entry(deps, step.message, step.runs_at):
                    # the sweeper may have passed its slice meanwhile: sent now as well (the claim runs it once)
                    yield OutgoingDue(step.message.to_json(), schedules.delay_seconds(
                        step.runs_at, deps.clock(), deps.settings.task_precision))
            else:
                _carry_out(deps, change, step)
        except EntryRejected as exc:
            return dead(f"{type(step).__name__} was rejected: {exc}"[:1000])
        except ClientError as exc:
            if error_code(exc) not in PERMANENT_CODES:
                raise
            return dead(f"{type(step).__name__} was rejected: {exc}")
        except BotoCoreError as exc:
            if not isinstance(exc, ParamValidationError):  # connection, timeout, credentials: transient
                raise
            return dead(f"{type(step).__name__} was rejected: {exc}"[:1000])
        except Exception as exc:  # not AWS's: the record's content, not worth a retry
            return dead(f"{type(step).__name__} failed: {type(exc).__name__}: {exc}"[:1000])
    return False


def _dead_letter(deps: Deps, record: dict[str, Any], reason: str, source: TaskSource | None = None) -> bool:
    """Dead-letter the record once, and keep a note of it (``stream_dead_letters``): the task shows why, and a
    retry of its batch finds the note and sends nothing again.  False when it was dead-lettered before."""
    event_id, sequence = schedules.record_id(record), stream_dead_letters.sequence_of(record)
    version, run_at = _version_of(deps, record, source)
    key, where = _where_noted(schedules.record_key(record, source), record, version, run_at)
    if where is not None and stream_dead_letters.already_dead_lettered(
            _call(deps, lambda: stream_dead_letters.read_note(deps, where)), sequence):
        logger.info("stream record dead-lettered already; not again", extra={"event_id": event_id})
        return False
    letter_source = SOURCE if source is None else f"{SOURCE}:{source.name}"
    _send_dead_letter(deps, record, reason, letter_source)
    if where is not None:
        note = {"sequence": sequence, "event_id": event_id, "version": version, "run_at": run_at,
                "at": iso(deps.clock()), "reason": reason, "source": letter_source}
        _call(deps, lambda: stream_dead_letters.keep_note(deps, where, key, note))
    return True


def _where_noted(key: TaskKey | None, record: dict[str, Any], version: str | None,
                 run_at: str | None) -> tuple[TaskKey | None, dict[str, str] | None]:
    """(task key, state-table key) where this record's dead letter is remembered: the task's record; or, for a
    record without a key (or the REMOVE of an item that was no task: no record is made for it), its event id's
    marker (task key None); (None, None) when neither fits a DynamoDB key."""
    if key is not None and not (version == stream_dead_letters.GONE and run_at is None):
        where = items.record_key(key.task_id)
        if items.fits_key(where["PK"], where["SK"]):
            return key, where
    event_id = record.get("eventID")
    if isinstance(event_id, str) and event_id:
        where = stream_dead_letters.marker_key(event_id)
        if items.fits_key(where["PK"], where["SK"]):
            return None, where
    return None, None


def _version_of(deps: Deps, record: dict[str, Any], source: TaskSource | None) -> tuple[str | None, str | None]:
    """(version, due time) of the item a record shows (its NewImage; none for a REMOVE), each None when the
    record or its image cannot be read."""
    try:
        change = schedules.change_from_record(record, source)
    except InvalidRecord:
        return None, None
    removed = change.event_name == "REMOVE"
    try:
        due: str | None = iso(read_task((change.old if removed else change.new) or {}, change.key, deps.settings).due)
    except InvalidTask:
        due = None
    return stream_dead_letters.item_version(None if removed else change.new), due


def _send_dead_letter(deps: Deps, record: dict[str, Any], reason: str, letter_source: str) -> None:
    payload: Any = record
    if len(json.dumps(record, default=str)) > MAX_DEAD_LETTER_PAYLOAD:
        found = record.get("dynamodb")
        dynamodb: dict[str, Any] = found if isinstance(found, dict) else {}
        payload = {"eventID": record.get("eventID"), "eventName": record.get("eventName"), "truncated": True,
                   "dynamodb": {k: dynamodb.get(k) for k in ("Keys", "SequenceNumber", "ApproximateCreationDateTime")}}
    dead_letter(deps, deps.settings.task_dlq, letter_source, schedules.record_id(record), reason, payload,
                strategy=strategy_of_record(record))


def _call(deps: Deps, call: Callable[[], T]) -> T:
    """An AWS call, retried on throttling with backoff (on top of botocore's own retries)."""
    return with_backoff(call, deps.sleep)


def _carry_out(deps: Deps, change: Change, step: Step) -> None:
    if isinstance(step, PutSchedule):
        put_schedule(deps, step, schedules.client_token(change))
    elif isinstance(step, DeleteSchedule):
        delete_schedule(deps, step)
    elif isinstance(step, SetBucket):
        set_bucket(deps, step)
    elif isinstance(step, SetTtl):
        set_ttl(deps, step)
    elif isinstance(step, SetAttribute):
        set_attribute(deps, step)
    elif isinstance(step, CancelRecord):
        cancel_record(deps, step)
    elif isinstance(step, NotATask):
        logger.debug("not a task", extra={"event_id": change.event_id, "reason": step.reason})


# --- steps ---------------------------------------------------------------------

def queue_arn(deps: Deps, name: str) -> str:
    """The ARN of a queue by name (from the settings for the due queue; otherwise looked up once per URL)."""
    if name == deps.settings.due_queue and deps.settings.due_queue_arn:
        return deps.settings.due_queue_arn
    url = deps.queue_url(name)
    known = _queue_arns.get(url)
    if known is None:
        with _queue_arns_lock:  # threads that start together wait for the first one's answer
            known = _queue_arns.get(url)
            if known is None:
                known = _call(deps, lambda: deps.clients.sqs.get_queue_attributes(
                    QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])
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


def due_body(deps: Deps, step: SendDue) -> str:
    """The due message's body; one whose item image would make it too large for SQS keeps the image in the
    state table (a replay writes the same image again) and refers to it instead."""
    message = step.message
    body = message.to_json()
    if len(body.encode()) > MAX_DUE_MESSAGE_BYTES and message.image is not None:
        image = ddb.binary_as_bytes(message.image)
        store = TaskStore(deps)
        _call(deps, lambda: store.put_image(message.key.task_id, message.due, image, deps.clock()))
        body = replace(message, image=None, image_stored=True).to_json()
        logger.info("item image kept in the state table", extra={"task_id": message.key.task_id,
                                                                 "bytes": len(json.dumps(message.image))})
    return body


def send_due_messages(deps: Deps, messages: Sequence[OutgoingDue],
                      pool: ThreadPoolExecutor | None = None) -> list[Exception | None]:
    """Send the messages to the due queue, in as few calls as SendMessageBatch's limits allow (concurrent on
    ``pool``); per message, None when it was sent or the error its send ended with."""
    try:
        url = deps.queue_url(deps.settings.due_queue)
    except Exception as exc:  # every message fails the way its own send would have
        return [exc for _ in messages]
    outcomes: list[Exception | None] = [None for _ in messages]

    def send(indexes: list[int]) -> None:
        for index, outcome in zip(indexes, _send_batch(deps, url, [messages[i] for i in indexes]), strict=True):
            outcomes[index] = outcome

    _each(pool, [partial(send, batch) for batch in pack_batches(messages)])
    return outcomes


def pack_batches(messages: Sequence[OutgoingDue]) -> list[list[int]]:
    """The messages' indexes in batches of at most BATCH_ENTRIES and BATCH_BYTES; a message too large to share
    a batch goes alone (and one larger than SQS allows is sent alone, to be rejected on its own)."""
    batches: list[list[int]] = []
    current: list[int] = []
    size = 0
    for index, message in enumerate(messages):
        length = len(message.body.encode())
        if current and (len(current) == BATCH_ENTRIES or size + length > BATCH_BYTES):
            batches.append(current)
            current, size = [], 0
        current.append(index)
        size += length
    if current:
        batches.append(current)
    return batches


def _send_batch(deps: Deps, url: str, messages: list[OutgoingDue]) -> list[Exception | None]:
    """One SendMessageBatch call (SendMessage for a single message), its failed entries sent again; per
    message, None when sent or its error: ``EntryRejected`` for the sender's fault, else a ClientError."""
    if len(messages) == 1:
        return [_outcome(lambda: _send_one(deps, url, messages[0]))]
    outcomes: dict[str, Exception | None] = {}
    pending = {f"m{i}": message for i, message in enumerate(messages)}  # entry Ids, unique in the call
    for attempt in range(ENTRY_SEND_ATTEMPTS):
        entries: list[Any] = [{"Id": entry_id, "MessageBody": m.body, "DelaySeconds": m.delay_seconds}
                              for entry_id, m in pending.items()]
        try:
            response = _call(deps, partial(deps.clients.sqs.send_message_batch, QueueUrl=url, Entries=entries))
        except (ClientError, ParamValidationError) as exc:
            if isinstance(exc, ClientError) and error_code(exc) not in BATCH_REFUSED_CODES:
                outcomes.update({entry_id: exc for entry_id in pending})
                break
            logger.warning("due messages refused as a batch; sending them one by one", extra={"error": repr(exc)})
            outcomes.update({entry_id: _outcome(partial(_send_one, deps, url, m)) for entry_id, m in pending.items()})
            break
        except Exception as exc:  # a network error: every entry of the call failed with it
            outcomes.update({entry_id: exc for entry_id in pending})
            break
        for done in response.get("Successful", []):
            if pending.pop(done["Id"], None) is not None:
                outcomes[done["Id"]] = None
        retry: dict[str, OutgoingDue] = {}
        for failed in response.get("Failed", []):
            message = pending.pop(failed["Id"], None)
            if message is None:
                continue
            code, text = str(failed.get("Code", "")), str(failed.get("Message", ""))
            if failed.get("SenderFault"):
                outcomes[failed["Id"]] = EntryRejected(f"SQS refused the message: {code}: {text}")
            else:
                outcomes[failed["Id"]] = ClientError({"Error": {"Code": code, "Message": text}}, "SendMessageBatch")
                retry[failed["Id"]] = message
        for entry_id, message in pending.items():  # neither in Successful nor in Failed: not known to be sent
            outcomes[entry_id] = ClientError({"Error": {"Code": "MissingEntry", "Message": "no result for the entry"}},
                                             "SendMessageBatch")
            retry[entry_id] = message
        pending = retry
        if not pending:
            break
        if attempt + 1 < ENTRY_SEND_ATTEMPTS:
            logger.warning("due messages not sent; retrying", extra={"failed": len(pending), "attempt": attempt + 1})
            deps.sleep(deps.random() * 0.2 * 2**attempt)  # full jitter, from the injected draw
    return [outcomes[f"m{i}"] for i in range(len(messages))]


def _send_one(deps: Deps, url: str, message: OutgoingDue) -> None:
    _call(deps, lambda: deps.clients.sqs.send_message(
        QueueUrl=url, MessageBody=message.body, DelaySeconds=message.delay_seconds))


def _outcome(call: Callable[[], None]) -> Exception | None:
    try:
        call()
    except Exception as exc:
        return exc
    return None


def _conditional_update(deps: Deps, key_expr: dict[str, Any], update: str, condition: str,
                        names: dict[str, str], values: dict[str, Any], table: str = "") -> bool:
    kwargs: dict[str, Any] = {"TableName": table or deps.settings.tasks_table, "Key": key_expr,
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


def set_attribute(deps: Deps, step: SetAttribute) -> None:
    """One attribute of a source's item, only if the item still is as the image showed it."""
    names = {"#a": step.name, "#k": step.key.key_attribute}
    values: dict[str, Any] = {":v": step.value}
    conditions = ["attribute_exists(#k)"]
    for i, (name, seen) in enumerate(step.seen):
        names[f"#s{i}"] = name
        conditions.append(_seen(f":s{i}", f"#s{i}", seen, values))
    _conditional_update(deps, step.key.dynamo(), "SET #a = :v", " AND ".join(dict.fromkeys(conditions)),
                        names, values, step.table)


def cancel_record(deps: Deps, step: CancelRecord) -> None:
    """Record the task CANCELLED by its item (``TaskStore.cancel_by_item``), unless its record is finished,
    cancelled by the API or running: so GET tells a cancelled task from one that never existed."""
    store = TaskStore(deps)
    _call(deps, lambda: store.cancel_by_item(step.task, step.at, deps.clock()))

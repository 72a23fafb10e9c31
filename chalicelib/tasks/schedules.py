"""What the stream scheduler does for one task-table stream record. Pure, no I/O.

``change_from_record`` reads a raw DynamoDB stream record (as Lambda delivers
it); ``plan`` decides the steps for it; ``schedule_request`` builds the
EventBridge Scheduler parameters of an exact task.  ``chalicelib.tasks.stream``
fetches nothing and only carries the steps out.

The rules, per strategy (see docs/strategies.md):

- exact: due at most DIRECT_QUEUE_HORIZON_SECONDS ahead, the horizon included (or its schedule would fire
  in the past) -> straight to the due queue with DelaySeconds; later -> an entry
  for the sweeper (PAST_HORIZON=sweeper: ``chalicelib.tasks.sweeper``), or a
  one-time schedule ``at(due - SCHEDULE_LEAD_SECONDS)`` in UTC (``scheduler``).  A MODIFY that
  changes the fingerprint (due time, strategy, action) updates it; one that
  changes other attributes does nothing.  A REMOVE (a cancel) or a move to
  another strategy deletes the schedule.  An item's own ``status`` or
  ``attempts`` is the user's data like any other attribute: a task's execution
  is its record's (chalicelib.tasks.lifecycle), never read from its item.
- interval: the item gets its due bucket and ``due_epoch`` (conditional
  write) so the interval processor finds it; one due within
  INTERVAL_DIRECT_SECONDS (or already past) when written goes straight to the
  due queue instead, since the processor may already have passed its time.
- lazy: the item gets a TTL equal to its due time (conditional write);
  DynamoDB's TTL REMOVE (by the service) sends it, with the old image as the
  snapshot, to the due queue.  A lazy item without a due time (one that never
  expires, or whose TTL was removed) is no task: nothing is done, and a task
  it was until then is cancelled.
- every strategy: a user's REMOVE (not the TTL's) of a task records it
  CANCELLED, with the time the app saw it (unless its record says it finished).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from chalicelib import ddb
from chalicelib.settings import DUE_EPOCH_ATTRIBUTE, Settings
from chalicelib.sources import TaskSource
from chalicelib.tasks import timing
from chalicelib.tasks.buckets import bucket_start, due_bucket
from chalicelib.tasks.model import (
    DueMessage,
    InvalidTask,
    NoDueTime,
    Strategy,
    Task,
    TaskKey,
    check_action_target,
    check_callback_targets,
    iso,
    read_task,
    shown,
)
from chalicelib.tasks.sweep_plan import sweeps

# An interval task due sooner than this when its record is processed (or already
# past due) is sent to the due queue directly: the interval processor may have
# moved past its due time already, and a GSI write is visible to its queries only
# after a short propagation delay.  Must exceed that delay (normally < 1 s).
INTERVAL_DIRECT_SECONDS = 30

MAX_DELAY_SECONDS = 900  # SQS DelaySeconds limit

# Scheduler's own retries when the due queue cannot be reached (AWS's maximum).
RETRY_POLICY = {"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 185}

TTL_PRINCIPAL = "dynamodb.amazonaws.com"

_NAME_UNSAFE = re.compile(r"[^0-9a-zA-Z_.-]")
_NAME_READABLE = 30  # 30 readable characters + "-" + 32 hex digits = 63 <= 64


class InvalidRecord(ValueError):
    """A stream record that is not shaped like a DynamoDB stream record of the tasks table."""


@dataclass(frozen=True)
class Change:
    """One stream record, read: the key, both images as plain dicts, and who made it."""

    event_id: str
    event_name: str                      # INSERT | MODIFY | REMOVE
    sequence: str
    key: TaskKey
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    by_ttl: bool                         # a REMOVE made by DynamoDB's TTL process
    source_arn: str = ""
    old_image: dict[str, Any] | None = None  # the OldImage as delivered (DynamoDB JSON), kept exactly

    @property
    def sequence_number(self) -> int:
        return int(self.sequence) if self.sequence.isdigit() else 0


# --- steps -------------------------------------------------------------------

@dataclass(frozen=True)
class PutSchedule:
    """Create (INSERT) or update (MODIFY) the task's one-time schedule; each falls back to the other."""

    task: Task
    fire_at: datetime
    create: bool


@dataclass(frozen=True)
class SweepEntry:
    """Keep the task for the sweeper (PAST_HORIZON=sweeper): its entry, sent to the due queue as it comes near."""

    message: DueMessage
    runs_at: datetime


@dataclass(frozen=True)
class DeleteSchedule:
    key: TaskKey


@dataclass(frozen=True)
class SendDue:
    message: DueMessage
    delay_seconds: int


@dataclass(frozen=True)
class SetBucket:
    """Write the bucket and due_epoch, only if the due time and the bucket are still as seen."""

    key: TaskKey
    bucket: str
    due_epoch: int
    seen_due: Any                        # the due attribute's value in the image (None: absent)
    seen_bucket: Any                     # the bucket attribute's value in the image (None: absent)


@dataclass(frozen=True)
class SetTtl:
    """Write the TTL (epoch seconds), only if the due time and the TTL are still as seen."""

    key: TaskKey
    ttl: int
    seen_due: Any
    seen_ttl: Any


@dataclass(frozen=True)
class SetAttribute:
    """Write one attribute of a source's item (its TTL, or its bucket in the user's format), only if the item
    still has ``seen``'s values (None: absent): never over a value the user wrote since."""

    key: TaskKey
    table: str
    name: str
    value: Any
    seen: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class DeadLetter:
    reason: str


@dataclass(frozen=True)
class NotATask:
    """The item is no task (a lazy item without a due time): nothing to do but say so, at DEBUG."""

    reason: str


@dataclass(frozen=True)
class CancelRecord:
    """The task's record says CANCELLED, at ``at`` (when the app saw its item deleted by a user, or stop being a
    task), with what the task was (``task``: its due time, strategy and action), cancelled by its item: written
    when there is no record yet, it is PENDING, or cancelled by an item before -- never over a finished task or
    the API's cancel."""

    key: TaskKey
    task: Task
    at: str


Step = PutSchedule | SweepEntry | DeleteSchedule | SendDue | SetBucket | SetTtl | SetAttribute | DeadLetter | NotATask | CancelRecord


# --- reading records -----------------------------------------------------------

def record_key(record: Any, source: TaskSource | None = None) -> TaskKey | None:
    """The item key of a raw record (of the tasks table, or of ``source``'s table: any key schema), or None if
    it has none (such a record is dead-lettered)."""
    try:
        keys = record["dynamodb"]["Keys"]
        if source is not None:
            return TaskKey.of_source(source.name, keys)
        pk, sk = keys["PK"]["S"], keys["SK"]["S"]
        return TaskKey(pk, sk) if isinstance(pk, str) and isinstance(sk, str) else None
    except (KeyError, TypeError, ValueError, InvalidTask):
        return None


def record_id(record: Any) -> str:
    if isinstance(record, dict):
        dynamodb = record.get("dynamodb")
        sequence = dynamodb.get("SequenceNumber") if isinstance(dynamodb, dict) else None
        return str(record.get("eventID") or sequence or "?")
    return "?"


def change_from_record(record: Any, source: TaskSource | None = None) -> Change:
    """Read a raw stream record (of the tasks table, or of ``source``'s); InvalidRecord when it is not one."""
    if not isinstance(record, dict) or not isinstance(record.get("dynamodb"), dict):
        raise InvalidRecord("the record has no 'dynamodb' object")
    dynamodb = record["dynamodb"]
    name = record.get("eventName")
    if name not in ("INSERT", "MODIFY", "REMOVE"):
        raise InvalidRecord(f"eventName must be INSERT, MODIFY or REMOVE, got {name!r}")
    sequence = dynamodb.get("SequenceNumber")
    if not isinstance(sequence, str) or not sequence:
        raise InvalidRecord("the record has no dynamodb.SequenceNumber")
    if source is not None and isinstance(dynamodb.get("Keys"), dict):
        try:
            TaskKey.of_source(source.name, dynamodb["Keys"])
        except InvalidTask as exc:
            raise InvalidRecord(f"the record's dynamodb.Keys is not a task's key: {exc.message}") from exc
    key = record_key(record, source)
    if key is None:
        raise InvalidRecord("the record's dynamodb.Keys has no string PK and SK" if source is None else
                            f"the record's dynamodb.Keys is not a key of source {source.name!r}")
    old = _image(dynamodb, "OldImage")
    new = _image(dynamodb, "NewImage")
    if name in ("INSERT", "MODIFY") and new is None:
        raise InvalidRecord(f"a {name} record needs a NewImage (stream view NEW_AND_OLD_IMAGES)")
    if name == "REMOVE" and old is None:
        raise InvalidRecord("a REMOVE record needs an OldImage (stream view NEW_AND_OLD_IMAGES)")
    identity = record.get("userIdentity")
    by_ttl = (isinstance(identity, dict) and identity.get("type") == "Service"
              and identity.get("principalId") == TTL_PRINCIPAL)
    return Change(event_id=str(record.get("eventID") or sequence), event_name=name, sequence=sequence,
                  key=key, old=old, new=new, by_ttl=by_ttl and name == "REMOVE",
                  source_arn=str(record.get("eventSourceARN") or ""),
                  old_image=ddb.binary_as_text(dynamodb["OldImage"]) if old is not None else None)


def _image(dynamodb: dict[str, Any], name: str) -> dict[str, Any] | None:
    """A record's image as a plain dict (None when absent); InvalidRecord naming the attribute that is not
    DynamoDB JSON (a number DynamoDB cannot hold, binary that is not base64, an unknown type...)."""
    if name not in dynamodb:
        return None
    image = dynamodb[name]
    if not isinstance(image, dict):
        raise InvalidRecord(f"the {name} is not DynamoDB JSON: it must be an object")
    try:  # the whole image at once (a quarter of its CPU less: docs/benchmarks.md, P2)...
        # Lambda delivers binary values as base64 text; the deserializer wants bytes.
        return ddb.deserialize(ddb.binary_as_bytes(image))
    except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError, RecursionError):
        pass  # ...and attribute by attribute only to name the one at fault
    plain: dict[str, Any] = {}
    for attribute, value in image.items():
        try:
            plain.update(ddb.deserialize(ddb.binary_as_bytes({attribute: value})))
        except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError, RecursionError) as exc:
            raise InvalidRecord(f"{name} attribute {shown(attribute)} is not DynamoDB JSON: "
                                f"{type(exc).__name__}: {exc}"[:500]) from exc
    return plain


# --- names and requests --------------------------------------------------------

def schedule_name(key: TaskKey) -> str:
    """The task's schedule name: readable prefix + a hash of the key; <= 64 chars of [0-9a-zA-Z_.-]."""
    readable = _NAME_UNSAFE.sub("_", key.task_id)[:_NAME_READABLE].strip("_.-") or "task"
    named = f"{key.source}\x00{key.pk}" if key.source else f"{key.pk}\x00{key.sk}"  # sources never share one
    digest = hashlib.sha256(named.encode()).hexdigest()[:32]
    return f"{readable}-{digest}"


def client_token(change: Change) -> str:
    """Scheduler's ClientToken for this record: the same on a replay of the same record."""
    return hashlib.sha256(f"{change.source_arn}|{change.sequence}|{change.event_id}".encode()).hexdigest()


def at_expression(fire_at: datetime) -> str:
    """``at(yyyy-mm-ddThh:mm:ss)`` in UTC, truncated to the second (never later than ``fire_at``)."""
    return "at(" + fire_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") + ")"


def schedule_request(task: Task, fire_at: datetime, settings: Settings, queue_arn: str) -> dict[str, Any]:
    """The CreateSchedule / UpdateSchedule parameters (without ClientToken) of an exact task."""
    target: dict[str, Any] = {
        "Arn": queue_arn,
        "RoleArn": settings.scheduler_role_arn,
        "Input": DueMessage(task.key, task.due).to_json(),
        "RetryPolicy": dict(RETRY_POLICY),
    }
    if settings.scheduler_dlq_arn:
        target["DeadLetterConfig"] = {"Arn": settings.scheduler_dlq_arn}
    return {
        "Name": schedule_name(task.key),
        "GroupName": settings.schedule_group,
        "ScheduleExpression": at_expression(fire_at),
        "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "ActionAfterCompletion": "DELETE",
        "State": "ENABLED",
        "Description": f"timekeeper task {task.id}"[:512],
        "Target": target,
    }


def schedule_matches(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """True when an existing schedule (GetSchedule) already fires as ``wanted`` would."""
    cur_target, want_target = current.get("Target", {}), wanted["Target"]
    return bool(current.get("ScheduleExpression") == wanted["ScheduleExpression"]
            and current.get("ScheduleExpressionTimezone", "UTC") == wanted["ScheduleExpressionTimezone"]
            and cur_target.get("Arn") == want_target["Arn"]
            and cur_target.get("Input") == want_target["Input"]
            and cur_target.get("RoleArn") == want_target["RoleArn"])


def delay_seconds(due: datetime, now: datetime, precision: str = timing.SECOND) -> int:
    """SQS DelaySeconds for a message due at ``due``: whole seconds, 0-900, at the task precision
    (``timing.queue_delay``: ``second`` brings it less than a second late, ``subsecond`` less than a second early)."""
    return timing.queue_delay((due - now).total_seconds(), precision)


# --- the decision --------------------------------------------------------------

def _task(image: dict[str, Any] | None, key: TaskKey, settings: Settings) -> Task | None:
    return read_task(image, key, settings) if image is not None else None


def _old_task(change: Change, settings: Settings) -> Task | None:
    """The old image's task; None when there is none or it was not a valid task then."""
    try:
        return _task(change.old, change.key, settings)
    except InvalidTask:
        return None


def plan(change: Change, settings: Settings, now: datetime) -> list[Step]:
    """The steps for one record, in order. A record whose image is not a task -> [DeadLetter]; a lazy item
    without a due time is no task -> [NotATask], and its task, if it was one until this record, is cancelled."""
    old = _old_task(change, settings) if change.event_name == "MODIFY" else None
    try:
        if change.event_name == "REMOVE":
            return _plan_remove(change, settings, now)
        new = read_task(change.new or {}, change.key, settings)
    except InvalidTask as exc:
        if _no_lazy_due_time(exc, old):
            cancelled = [CancelRecord(change.key, old, iso(now))] if old is not None else []
            return [NotATask(exc.message), *cancelled]
        image = "OldImage" if change.event_name == "REMOVE" else "NewImage"
        return [DeadLetter(f"{image} is not a valid task: {exc.message} (field {exc.field})")]
    refused = _refused_target(new, settings)
    if refused:
        return [DeadLetter(refused)]

    steps: list[Step] = []
    if old is not None and old.strategy is Strategy.EXACT and new.strategy is not Strategy.EXACT:
        steps.append(DeleteSchedule(change.key))
    changed = old is None or old.fingerprint() != new.fingerprint()
    source = settings.source(change.key.source) if change.key.source else None
    if new.strategy is Strategy.EXACT:
        steps += _plan_exact(change, old, new, changed, settings, now)
    elif source is not None:
        steps += _plan_source(new, source, changed, settings, now)
    elif new.strategy is Strategy.INTERVAL:
        steps += _plan_interval(new, changed, settings, now)
    else:
        steps += _plan_lazy(new, settings)
    return steps


def _refused_target(task: Task, settings: Settings) -> str | None:
    """Why a task may not run: its action sends where the stage does not allow."""
    try:
        check_action_target(task.action, settings)
        check_callback_targets({"on_success": task.on_success, "on_failure": task.on_failure}, settings)
    except InvalidTask as exc:
        return f"the task's action is refused: {exc.message}"
    return None


def _no_lazy_due_time(exc: InvalidTask, old: Task | None) -> bool:
    """True when reading an item failed for want of a due time, and it is (or, until its TTL was removed, was)
    a lazy task: no task, not a bad one.  A due time present but wrong is still a bad item."""
    return isinstance(exc, NoDueTime) and (exc.strategy is Strategy.LAZY
                                           or (old is not None and old.strategy is Strategy.LAZY))


def _plan_remove(change: Change, settings: Settings, now: datetime) -> list[Step]:
    try:
        old = read_task(change.old or {}, change.key, settings)
    except NoDueTime as exc:  # no task when deleted: one it was before was cancelled when it lost its due time
        return [NotATask(exc.message)]
    if change.by_ttl:
        refused = _refused_target(old, settings) if old.strategy is Strategy.LAZY else None
        if refused:
            return [DeadLetter(refused)]
        if old.strategy is Strategy.LAZY:
            return [SendDue(DueMessage(change.key, old.due, image=change.old_image), 0)]
        return []  # a TTL REMOVE of an exact or interval task (housekeeping) is not a due signal
    # A user's delete (or the API's cancel, which has written the record already): the task is cancelled.
    steps: list[Step] = [DeleteSchedule(change.key)] if old.strategy is Strategy.EXACT else []
    return [*steps, CancelRecord(change.key, old, iso(now))]


def _plan_exact(change: Change, old: Task | None, new: Task, changed: bool,
                settings: Settings, now: datetime) -> list[Step]:
    if not changed:
        return []
    runs_at = timing.window_slot(new.due, new.window_seconds)  # its due time, or its window's slot
    fire_at = runs_at - timedelta(seconds=settings.schedule_lead_seconds)
    if settings.past_horizon == "sweeper":
        if sweeps(runs_at, now, settings.direct_queue_horizon_seconds):
            return [SweepEntry(DueMessage(new.key, new.due), runs_at)]
        direct = True
    else:
        direct = (runs_at - now).total_seconds() <= settings.direct_queue_horizon_seconds or fire_at <= now
    if not direct:
        return [PutSchedule(new, fire_at, create=change.event_name == "INSERT" or old is None)]
    due_moved = old is None or old.due_epoch != new.due_epoch or old.strategy is not Strategy.EXACT
    steps: list[Step] = []
    if old is not None and old.strategy is Strategy.EXACT and due_moved:
        steps.append(DeleteSchedule(new.key))  # it may have had a schedule for its old, later time
    if due_moved or (old is not None and old.window_seconds != new.window_seconds):
        steps.append(SendDue(DueMessage(new.key, new.due), delay_seconds(runs_at, now, settings.task_precision)))
    return steps  # only the action changed: the queued message carries the key; the executor reads the item


def _plan_interval(new: Task, changed: bool, settings: Settings, now: datetime) -> list[Step]:
    if new.due_epoch <= now.timestamp() + INTERVAL_DIRECT_SECONDS:
        return [SendDue(DueMessage(new.key, new.due), delay_seconds(new.due, now, settings.task_precision))] if changed else []
    bucket = due_bucket(new.due, settings.bucket_minutes, settings.bucket_shards, new.key)
    item = new.item
    if item.get(settings.bucket_attribute) == bucket and item.get(DUE_EPOCH_ATTRIBUTE) == new.due_epoch:
        return []
    return [SetBucket(new.key, bucket, new.due_epoch, seen_due=item.get(settings.due_attribute),
                      seen_bucket=item.get(settings.bucket_attribute))]


def _plan_lazy(new: Task, settings: Settings) -> list[Step]:
    item = new.item
    current = item.get(settings.ttl_attribute)
    if isinstance(current, int) and not isinstance(current, bool) and current == new.due_epoch:
        return []
    return [SetTtl(new.key, new.due_epoch, seen_due=item.get(settings.due_attribute), seen_ttl=current)]


def _plan_source(new: Task, source: TaskSource, changed: bool, settings: Settings, now: datetime) -> list[Step]:
    """An interval or lazy item of a user's table: the app writes only what the strategy cannot do without,
    never over the user's own value -- the bucket in the user's format when it has none (the user's index
    finds it), the TTL of a lazy item whose due time lives in another attribute."""
    item = new.item
    seen_due = ((source.due_attribute, item.get(source.due_attribute)),) if source.due_attribute else ()
    if new.strategy is Strategy.INTERVAL:
        if new.due_epoch <= now.timestamp() + INTERVAL_DIRECT_SECONDS:
            return [SendDue(DueMessage(new.key, new.due), delay_seconds(new.due, now, settings.task_precision))] if changed else []
        name = source.bucket_attribute or ""
        if item.get(name) is not None:
            return []  # the user's own bucket: the processor finds the item there
        label = source.bucket_label(bucket_start(new.due, source.bucket_minutes))
        return [SetAttribute(new.key, source.table, name, label, (*seen_due, (name, None)))]
    ttl = source.ttl_attribute or ""
    current = item.get(ttl)
    if isinstance(current, int | float) and not isinstance(current, bool) and int(current) == new.due_epoch:
        return []
    if current is not None and not isinstance(current, int | float):
        return [DeadLetter(f"{ttl} is {current!r}, not epoch seconds: the app never rewrites a user's attribute "
                           "in another format")]
    return [SetAttribute(new.key, source.table, ttl, new.due_epoch, (*seen_due, (ttl, current)))]

"""What the task API and the executor write: items, records and views. Pure, no I/O.

The tasks table holds the task item (the contract in ``model``).  The state
table holds, per task, a *record* (``TASK#<id>`` / ``RECORD``) that outlives
the item: it answers GET after a lazy task's item expired or a task was
cancelled, keeps the request fingerprint for idempotent POSTs, and keeps the
execution state (``exec_due``, ``exec_state``, ``exec_owner``, ``claimed_at``,
attempts, the last result or error) that the executor writes instead of the
item.  The records of API tasks carry ``listed`` (``<created_at>#<id>``): with
``status_key`` (``<status>#<shard>``, written with a status the index carries,
removed with one it does not) they are the keys of a sparse GSI, the *status
index* GET /tasks pages through for CANCELLED, FAILED, DEAD_LETTERED and PAUSED;
the index follows a record's status with no write of its own, each status spread
over ``STATUS_SHARDS`` partition keys. A task's ordinary path (PENDING, DONE)
writes no index entry: those two are listed from the state table's own keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import uuid
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from chalicelib.settings import DUE_EPOCH_ATTRIBUTE, STATE_TTL_ATTRIBUTE, Settings
from chalicelib.sources import TaskSource
from chalicelib.tasks import buckets, history, lifecycle
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import (
    TASK_ID,
    InvalidTask,
    Strategy,
    Task,
    TaskKey,
    iso,
    parse_action,
    parse_callback,
    parse_due,
    parse_end,
    parse_recurrence,
    parse_retry,
    parse_timezone,
    parse_window,
    retry_shown,
)

RECORD_PREFIX = "TASK#"
RECORD_SK = "RECORD"
STATUS_INDEX = "task-status-shard-index"  # a sparse GSI of the state table: status_key (hash), listed (range)
REPLACED_STATUS_INDEXES = ("task-status-index",)  # keyed by status alone (a hot key): provision deletes it
STATUS_KEY = "status_key"  # "<status>#<shard>": on a record in an indexed status only, written with it (``status_fields``)
# The statuses the status index carries: those an operator lists at once, none on a task's ordinary path (created or
# claimed PENDING, settled DONE), which so writes no index entry. PENDING and DONE are listed from the state table's
# own keys (``TaskStore.scan_status``). docs/benchmarks.md, "The status index", prices both ways.
INDEXED_STATUSES = frozenset(s.value for s in (State.CANCELLED, State.FAILED, State.DEAD_LETTERED, State.PAUSED))
# Each indexed status's entries are spread over this many partition keys by a stable hash of the task id, so that
# no status is one hot partition key when many tasks fail or are cancelled at once.
STATUS_SHARDS = 32
LISTED = "listed"  # on the records of API tasks only: "<created_at>#<id>", the status index's sort key
IMAGE_PREFIX = "IMAGE#"
LISTED_STATUSES = (State.PENDING, State.DONE, State.FAILED, State.CANCELLED, State.DEAD_LETTERED, State.PAUSED)
# The sort key of a task not made by the API (a task source's, another program's item): "@<source>#<task id>" (the
# source "" for the tasks table's), so the status index lists them after the API's ("<created_at>#<id>", a digit
# first) and one source's together: GET /tasks?source=<name> is a key condition (begins_with), not a filter.
LISTED_SOURCE_MARK = "@"
API_SOURCE = "api"  # GET /tasks?source=api: the API's own tasks; source=items: other programs' in the tasks table
ITEMS_SOURCE = "items"
# On a record the stream marked CANCELLED when it saw the task's item deleted by a user, or lose its due time (the
# API's cancel does not write it): that cancel was of the item then, so an item written again is a task again.
CANCELLED_BY, BY_ITEM = lifecycle.CANCELLED_BY, lifecycle.BY_ITEM
CREATE_FIELDS = frozenset({"id", "run_at", "strategy", "action", "recurrence", "timezone", "retry", "end_at",
                           "max_occurrences", "window_seconds", "on_success", "on_failure"})
PATCH_FIELDS = frozenset({"run_at", "action"})
IMAGE_RETENTION = timedelta(days=14)  # SQS keeps a message at most 14 days
MAX_TOKEN_CHARS = 4096  # a next_token is the base64 of a status and one status-index sort key


@dataclass(frozen=True)
class TaskRequest:
    """A validated POST /tasks body."""

    id: str | None
    due: datetime
    strategy: Strategy
    action: dict[str, Any]
    recurrence: str | None
    timezone: str | None
    retry: dict[str, int] | None = None
    end_at: datetime | None = None
    max_occurrences: int | None = None
    window_seconds: int | None = None
    on_success: dict[str, Any] | None = None
    on_failure: dict[str, Any] | None = None

    def fingerprint(self) -> str:
        """Same request, same fingerprint: whatever spelling the due time had (a request without ``retry`` or
        callbacks has the fingerprint it had before tasks had them)."""
        fields: list[Any] = [iso(self.due), self.strategy.value, self.action, self.recurrence, self.timezone]
        if self.retry is not None:
            fields.append(self.retry)
        if self.end_at is not None or self.max_occurrences is not None:
            fields.append({"end_at": iso(self.end_at) if self.end_at else None, "max_occurrences": self.max_occurrences})
        if self.window_seconds is not None:
            fields.append({"window_seconds": self.window_seconds})
        if self.on_success is not None or self.on_failure is not None:
            fields.append({"on_success": self.on_success, "on_failure": self.on_failure})
        canonical = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()


def parse_request(body: dict[str, Any], settings: Settings) -> TaskRequest:
    """Validate a POST body (unknown fields are rejected by the caller); InvalidTask names the field."""
    task_id = body.get("id")
    if task_id is not None and (not isinstance(task_id, str) or not TASK_ID.fullmatch(task_id)):
        raise InvalidTask("id", "id must be 1-128 characters of letters, digits and _ . : -")
    if "run_at" not in body:
        raise InvalidTask("run_at", "run_at is required: an ISO-8601 time or epoch seconds")
    due = parse_due(body["run_at"], "run_at")
    strategy_text = body.get("strategy") or settings.default_strategy
    try:
        strategy = Strategy(strategy_text)
    except ValueError as exc:
        raise InvalidTask("strategy", f"strategy must be exact, interval or lazy, got {strategy_text!r}") from exc
    if "action" not in body:
        raise InvalidTask("action", "action is required: {\"type\": \"email\" | \"sqs\" | \"sns\", ...}")
    action = parse_action(body["action"])
    timezone = parse_timezone(body.get("timezone"))
    recurrence = parse_recurrence(body.get("recurrence"), timezone)
    end_at, max_occurrences = parse_end(body.get("end_at"), body.get("max_occurrences"), due, recurrence)
    return TaskRequest(task_id, due, strategy, action, recurrence, timezone, parse_retry(body.get("retry")),
                       end_at, max_occurrences, parse_window(body.get("window_seconds"), strategy),
                       parse_callback(body.get("on_success"), "on_success"),
                       parse_callback(body.get("on_failure"), "on_failure"))


def parse_patch(body: dict[str, Any]) -> tuple[datetime | None, dict[str, Any] | None]:
    """(new due time, new action) of a PATCH body; at least one is required."""
    if not body:
        raise InvalidTask("body", "give run_at, action or both")
    due = parse_due(body["run_at"], "run_at") if "run_at" in body else None
    action = parse_action(body["action"]) if "action" in body else None
    return due, action


def check_not_past(due: datetime, now: datetime, grace_seconds: int, field: str = "run_at") -> None:
    if due < now - timedelta(seconds=grace_seconds):
        raise InvalidTask(field, f"{field} {iso(due)} is in the past (now {iso(now)}; "
                                 f"at most {grace_seconds} s ago is accepted)")


def new_task_id() -> str:
    return uuid.uuid4().hex


def format_due(previous: Any, due: datetime) -> Any:
    """The due time written in the form the item already used: epoch number, epoch string or ISO-8601."""
    if isinstance(previous, int | float) and not isinstance(previous, bool):
        return int(due.timestamp()) if due.microsecond == 0 else due.timestamp()
    if isinstance(previous, str) and re.fullmatch(r"\d{9,12}(\.\d+)?", previous.strip()):
        return str(int(due.timestamp()))
    return iso(due)


def due_attributes(key: TaskKey, strategy: Strategy, due: datetime, settings: Settings,
                   previous: Any = None, has_due_attribute: bool = True) -> dict[str, Any]:
    """The attributes that say when a task is due: the due attribute, due_epoch, the bucket or the TTL."""
    attributes: dict[str, Any] = {DUE_EPOCH_ATTRIBUTE: int(due.timestamp())}
    if has_due_attribute:
        attributes[settings.due_attribute] = format_due(previous, due)
    if strategy is Strategy.INTERVAL:
        attributes[settings.bucket_attribute] = buckets.due_bucket(
            due, settings.bucket_minutes, settings.bucket_shards, key)
    if strategy is Strategy.LAZY:
        attributes[settings.ttl_attribute] = int(due.timestamp())
    return attributes


def source_due_changes(task: Task, source: TaskSource, next_due: datetime) -> dict[str, Any]:
    """What a recurring task of a user's table gets written for its next due time: the attribute(s) its due
    time is read from, each in the form the item already used (epoch number or string, ISO-8601; the bucket in
    the user's format) -- nothing else, no attribute of the app's."""
    item, changes = task.item, {}
    if source.due_attribute and item.get(source.due_attribute) is not None:
        changes[source.due_attribute] = format_due(item[source.due_attribute], next_due)
    if task.strategy is Strategy.INTERVAL and source.bucket_attribute and item.get(source.bucket_attribute) is not None:
        changes[source.bucket_attribute] = source.bucket_label(buckets.bucket_start(next_due, source.bucket_minutes))
    if task.strategy is Strategy.LAZY and source.ttl_attribute:
        changes[source.ttl_attribute] = int(next_due.timestamp())
    return changes


def source_due_condition(task: Task, source: TaskSource) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(ConditionExpression, names, values): the source's item is still due when ``task`` was read, by the
    attribute that gave its due time."""
    item = task.item
    names = {"#k": task.key.key_attribute}
    for name in (source.due_attribute, source.ttl_attribute, source.bucket_attribute):
        if name and item.get(name) is not None:
            names["#due"] = name
            return "attribute_exists(#k) AND #due = :due", names, {":due": item[name]}
    return "attribute_exists(#k)", names, {}


def new_item(task_id: str, request: TaskRequest, settings: Settings, now: datetime) -> dict[str, Any]:
    """The tasks-table item of a new API task."""
    key = TaskKey.for_id(task_id)
    item: dict[str, Any] = {
        "PK": key.pk, "SK": key.sk, "strategy": request.strategy.value, "action": request.action,
        "created_at": iso(now),
        **due_attributes(key, request.strategy, request.due, settings),
    }
    if request.recurrence:
        item["recurrence"] = request.recurrence
    if request.timezone:
        item["timezone"] = request.timezone
    item.update(option_fields(request))
    return item


def option_fields(task: TaskRequest | Task) -> dict[str, Any]:
    """A task's own options as its item and its record keep them (only those it has): ``retry``, ``end_at``,
    ``max_occurrences``, ``window_seconds``, ``on_success``, ``on_failure``. Pure."""
    fields: dict[str, Any] = {"retry": task.retry} if task.retry else {}
    fields.update(end_fields(task.end_at, task.max_occurrences))
    if task.window_seconds:
        fields["window_seconds"] = task.window_seconds
    fields.update({name: spec for name, spec in (("on_success", task.on_success), ("on_failure", task.on_failure))
                   if spec is not None})
    return fields


def end_fields(end_at: datetime | None, max_occurrences: int | None) -> dict[str, Any]:
    """A recurring task's ``end_at`` and ``max_occurrences`` as its item, record and view hold them (each only
    when set). Pure."""
    fields: dict[str, Any] = {}
    if end_at is not None:
        fields["end_at"] = iso(end_at)
    if max_occurrences is not None:
        fields["max_occurrences"] = max_occurrences
    return fields


# --- the state table: records, the status index, claims ----------------------

MAX_PARTITION_KEY_BYTES = 2048  # DynamoDB's limits, in UTF-8 bytes of the value as stored
MAX_SORT_KEY_BYTES = 1024


def fits_key(pk: str, sk: str) -> bool:
    """True when DynamoDB takes (pk, sk) as a key: 1-2048 and 1-1024 bytes of UTF-8 (moto takes more)."""
    try:
        return 0 < len(pk.encode()) <= MAX_PARTITION_KEY_BYTES and 0 < len(sk.encode()) <= MAX_SORT_KEY_BYTES
    except UnicodeEncodeError:  # a lone surrogate is no UTF-8
        return False


def record_key(task_id: str) -> dict[str, str]:
    return {"PK": RECORD_PREFIX + task_id, "SK": RECORD_SK}


def image_key(task_id: str, due: datetime) -> dict[str, str]:
    """Where a lazy task's item image too large for a due message is kept until it runs."""
    return {"PK": IMAGE_PREFIX + task_id, "SK": iso(due)}


def due_condition(task: Task, settings: Settings) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(ConditionExpression, names, values): the item is still due when ``task`` was read, by what gave its due
    time -- the due attribute's value; without one, the TTL of a lazy item or the bucket of an interval item.

    Never compares an attribute with a missing value: DynamoDB evaluates ``#a = :v`` false when either is
    absent or NULL (moto is more lenient)."""
    item = task.item
    names = {"#due": settings.due_attribute}
    values: dict[str, Any] = {}
    parts = ["attribute_exists(PK)"]
    if item.get(settings.due_attribute) is not None:
        values[":due"] = item[settings.due_attribute]
        parts.append("#due = :due")
        return " AND ".join(parts), names, values
    if settings.due_attribute in item:  # present as NULL
        values[":null_type"] = "NULL"
        parts.append("attribute_type(#due, :null_type)")
    else:
        parts.append("attribute_not_exists(#due)")
    if task.strategy is Strategy.LAZY:
        names["#ttl"] = settings.ttl_attribute
        values[":ttl"] = item[settings.ttl_attribute]
        parts.append("#ttl = :ttl")
    else:
        # An interval item known by its bucket (the seed's taskDateTime): the value read, or the same minute as
        # filed by the stream scheduler (sharded) in the meantime.
        names["#bucket"] = settings.bucket_attribute
        seen = item[settings.bucket_attribute]
        filed = buckets.due_bucket(task.due, settings.bucket_minutes, settings.bucket_shards, task.key)
        accepted = [seen] + ([filed] if filed != seen and buckets.parse_bucket(filed)[0] == task.due else [])
        for i, label in enumerate(accepted):
            values[f":bucket{i}"] = label
        parts.append("#bucket IN (" + ", ".join(f":bucket{i}" for i in range(len(accepted))) + ")")
    return " AND ".join(parts), names, values


def record_of(task: Task, created_at: str | None, fingerprint: str | None = None,
              **extra: Any) -> dict[str, Any]:
    """The state-table record of a task, PENDING with no attempt (its execution starts here, never from its
    item's own attributes): enough to show it when its item is gone."""
    record: dict[str, Any] = {
        **record_key(task.id), "id": task.id, "task_pk": task.key.pk, "task_sk": task.key.sk,
        **status_fields(task.id, State.PENDING.value), "run_at": iso(task.due), "strategy": task.strategy.value,
        "action": task.action, "attempts": 0,
        "recurrence": task.recurrence, "timezone": task.timezone,
    }
    record.update(option_fields(task))
    if created_at:
        record["created_at"] = created_at
        if task.key == TaskKey.for_id(task.id):  # an API task: listed by GET /tasks
            record[LISTED] = f"{created_at}#{task.id}"
    listed = listed_of(task.key)
    if listed is not None:
        record[LISTED] = listed
    if fingerprint:
        record["fingerprint"] = fingerprint
    record.update(extra)
    return present(record)


def status_shard(task_id: str) -> int:
    """The status-index shard of a task: a stable hash of its id (CRC-32, the same in every process), mod
    ``STATUS_SHARDS``. Pure."""
    return zlib.crc32(task_id.encode("utf-8", "surrogatepass")) % STATUS_SHARDS


def status_key(task_id: str, status: str) -> str | None:
    """The status index's partition key of a task's record in ``status``, ``<status>#<shard>``; None for a status
    the index does not carry (``INDEXED_STATUSES``). Pure."""
    return f"{status}#{status_shard(task_id):02d}" if status in INDEXED_STATUSES else None


def status_keys(status: str) -> list[str]:
    """Every partition key of one indexed status in the status index, the ones ``GET /tasks?status=`` queries. Pure."""
    return [f"{status}#{shard:02d}" for shard in range(STATUS_SHARDS)]


class Absent:
    """The value of an attribute a write removes (``status_fields`` of a status the index does not carry)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = Absent()


def status_fields(task_id: str, status: str) -> dict[str, Any]:
    """What every write of a record's status sets: ``status``, and the status index's ``status_key`` -- ``ABSENT``
    (removed: the record leaves the index) for a status the index does not carry. Pure."""
    key = status_key(task_id, status)
    return {"status": status, STATUS_KEY: ABSENT if key is None else key}


def present(attributes: dict[str, Any]) -> dict[str, Any]:
    """``attributes`` without the ``ABSENT`` ones: what a put of a whole item writes. Pure."""
    return {name: value for name, value in attributes.items() if value is not ABSENT}


def listed_of(key: TaskKey) -> str | None:
    """The status index's sort key of a task not made by the API (``@<source>#<task id>``), or None: an API task
    (its ``listed`` is ``<created_at>#<id>``, written by create) or a key too long for an index key. Pure."""
    if key == TaskKey.for_id(key.task_id):
        return None
    listed = f"{LISTED_SOURCE_MARK}{key.source}#{key.task_id}"
    return listed if len(listed.encode("utf-8", "surrogatepass")) <= MAX_SORT_KEY_BYTES else None


def listed_prefix(source: str) -> str | None:
    """The ``listed`` prefix of one source's tasks (``items``: other programs' in the tasks table), or None for
    the API's own (``api``), whose keys start with their creation time. Pure."""
    return None if source == API_SOURCE else f"{LISTED_SOURCE_MARK}{'' if source == ITEMS_SOURCE else source}#"


def listed_in(listed: str, source: str | None) -> bool:
    """True when a status-index sort key ``listed`` belongs to the listing of ``source`` (None: every task). Pure."""
    if source is None:
        return True
    prefix = listed_prefix(source)
    return not listed.startswith(LISTED_SOURCE_MARK) if prefix is None else listed.startswith(prefix)


def record_expiry(finished: datetime, settings: Settings) -> int:
    """When a finished task's record expires (the state table's TTL, epoch seconds): TASK_RECORD_RETENTION_DAYS
    after it finished. Written by the same write that settles or cancels the task. Pure."""
    return int((finished + timedelta(days=settings.task_record_retention_days)).timestamp())


def expired_record(key: TaskKey, item: dict[str, Any] | None, record: dict[str, Any] | None,
                   now: datetime) -> str | None:
    """Why a task is gone because its record expired (TASK_RECORD_RETENTION_DAYS after it finished), or None.

    Expired but not yet deleted (DynamoDB's TTL deletes within days, not at once): the record's TTL has
    passed. Deleted while the item stays (a one-time API task's item is never written after it ran): an
    API task's item (the API writes its record in the same transaction) whose record is gone. Pure."""
    if record is not None:
        expires, state = record.get(STATE_TTL_ATTRIBUTE), lifecycle.state_of(record)
        if not state.finished or not isinstance(expires, int | float) \
                or isinstance(expires, bool) or expires > now.timestamp():
            return None
        at = datetime.fromtimestamp(float(expires), tz=now.tzinfo)
        return (f"task {key.task_id!r} was {state.value} at {record.get('finished_at')} and its record "
                f"expired at {iso(at)} (TASK_RECORD_RETENTION_DAYS after it finished)")
    if item is not None and key == TaskKey.for_id(key.task_id) and "created_at" in item:
        return (f"task {key.task_id!r} finished and its record expired (TASK_RECORD_RETENTION_DAYS after it "
                "finished)")
    return None


def cancelled_by_item(record: dict[str, Any] | None) -> bool:
    """True when the record was cancelled by the stream, for its item then: an item there now is a task again."""
    return (record or {}).get(CANCELLED_BY) == BY_ITEM


def view_of_task(task: Task, record: dict[str, Any] | None, created_at: str | None = None,
                 now: datetime | None = None, lease_seconds: int = 0) -> dict[str, Any]:
    """What the API shows of a task read from its item, with the execution state its record keeps; RUNNING only
    while a live claim is held at ``now``."""
    record = record or {}
    return {
        "id": task.id, "run_at": iso(task.due), "strategy": task.strategy.value,
        "status": lifecycle.state_of(record, iso(task.due), now, lease_seconds).value,
        "attempts": _count(record.get("attempts", 0)),
        "created_at": record.get("created_at") or created_at or task.item.get("created_at"),
        "action": task.action, "recurrence": task.recurrence, "timezone": task.timezone,
        "last_result": record.get("last_result"), "last_error": record.get("last_error"),
        "finished_at": record.get("finished_at"), **_retry_view(task.retry, record, iso(task.due)),
        **end_fields(task.end_at, task.max_occurrences), **_occurrences_view(task.recurrence, record),
        **({"window_seconds": task.window_seconds} if task.window_seconds else {}),
        **_callback_view(task.on_success, task.on_failure, record), **history.last_execution_view(record),
    }


def _occurrences_view(recurrence: Any, record: dict[str, Any]) -> dict[str, Any]:
    """``occurrences``: the runs a recurring task made so far (its record's count), when it made any. Pure."""
    count = _count(record.get("occurrences", 0))
    return {"occurrences": count} if recurrence and count else {}


def _callback_view(on_success: Any, on_failure: Any, record: dict[str, Any]) -> dict[str, Any]:
    """The task's callbacks, when it has them, and what the last one run came to (``callback``: which, for which
    due time, its result or error). Pure."""
    shown: dict[str, Any] = {name: spec for name, spec in (("on_success", on_success), ("on_failure", on_failure))
                             if isinstance(spec, dict)}
    ran = record.get("callback")
    if isinstance(ran, dict):
        shown["callback"] = {name: ran[name] for name in ("name", "run_at", "status", "result", "error", "at")
                             if name in ran}
    return shown


def _retry_view(policy: dict[str, int] | None, record: dict[str, Any], due: str | None) -> dict[str, Any]:
    """The task's own retry policy (``retry``, when it has one), and when a failed execution is retried next
    (``retry_at``: only while one of its current due time waits). Pure."""
    shown: dict[str, Any] = {}
    if policy:
        shown["retry"] = retry_shown(policy)
    if record.get("exec_state") == "RETRYING" and record.get("retry_due") == due and record.get("retry_at"):
        shown["retry_at"] = record["retry_at"]
    return shown


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 2**31 else 0


def view_of_record(record: dict[str, Any]) -> dict[str, Any]:
    """What the API shows of a task whose item is gone (lazy after expiry, cancelled): its status as the record
    holds it (``State.recorded``: a claimed execution shows PENDING)."""
    return {
        "id": record["id"], "run_at": record.get("run_at"), "strategy": record.get("strategy"),
        "status": lifecycle.state_of(record).recorded, "attempts": _count(record.get("attempts", 0)),
        "created_at": record.get("created_at"), "action": record.get("action"),
        "recurrence": record.get("recurrence"), "timezone": record.get("timezone"),
        "last_result": record.get("last_result"), "last_error": record.get("last_error"),
        "finished_at": record.get("finished_at"),
        **_retry_view(record.get("retry") if isinstance(record.get("retry"), dict) else None, record,
                      record.get("run_at")),
        **{name: record[name] for name in ("end_at", "max_occurrences", "window_seconds")
           if record.get(name) is not None},
        **_occurrences_view(record.get("recurrence"), record),
        **_callback_view(record.get("on_success"), record.get("on_failure"), record),
        **history.last_execution_view(record),
    }


def encode_token(partition: int, status: str, after: str | None) -> str:
    """A next_token: the listing's status (its ``partition``-th) and the ``listed`` of the last task shown in it
    (None: from its start); the status index's shards are each queried from there on."""
    raw = json.dumps({"p": partition, "s": status, "a": after}, sort_keys=True, separators=(",", ":"),
                     ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, partitions: int) -> tuple[int, str, str | None]:
    """(partition index, its status, the ``listed`` to continue after) of a next_token; InvalidTask if it is not
    one of ours."""
    if len(token) > MAX_TOKEN_CHARS:
        raise InvalidTask("next_token", "next_token is not a token from a previous page")
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, binascii.Error, RecursionError) as exc:
        raise InvalidTask("next_token", "next_token is not a token from a previous page") from exc
    if not isinstance(data, dict) or set(data) != {"p", "s", "a"}:
        raise InvalidTask("next_token", "next_token is not a token from a previous page")
    partition, status, after = data["p"], data["s"], data["a"]
    valid_after = after is None or (isinstance(after, str) and fits_key(RECORD_PREFIX, after))
    if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition < partitions \
            or not isinstance(status, str) or not valid_after:
        raise InvalidTask("next_token", "next_token is not a token from a previous page (or the status changed)")
    return partition, status, after


def merge_shards(pages: list[tuple[list[tuple[str, str]], bool]], limit: int) -> tuple[list[str], str | None]:
    """One page of a status from its shards' pages (each: its (listed, task id) rows in order, and whether it
    has more after them): the ``limit`` first by ``listed``, and the ``listed`` to continue after (None: the
    status is done). Rows past the end of a shard that has more are left for the next page: the shard's
    unread rows may come before them. Pure."""
    rows = sorted(row for page, _ in pages for row in page)
    cutoffs = [page[-1][0] for page, more in pages if more and page]
    more = any(more for _, more in pages)
    if cutoffs:
        rows = [row for row in rows if row[0] <= min(cutoffs)]
    more = more or len(rows) > limit
    taken = rows[:limit]
    return [task_id for _, task_id in taken], (taken[-1][0] if more and taken else None)

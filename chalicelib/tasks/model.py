"""The task item contract: what an item in the tasks table means, validated. Pure, no I/O.

Any program may write a task item (string keys PK and SK). What the app reads:

- ``DUE_ATTRIBUTE`` (default ``run_at``; ``REMINDER_TIMESTAMP`` for the seed's
  items): ISO-8601 (no zone means UTC) or epoch seconds.
- ``strategy``: exact | interval | lazy (default DEFAULT_STRATEGY).  Without
  a strategy and a due attribute, an item with a TTL is lazy (due at its TTL)
  and one with a bucket like the interval seed's ``taskDateTime``
  (``2021-12-31#12:00``) is interval (due at the bucket's minute).
- ``action``: ``{"type", <its fields>}`` of a type in ``actions.ACTIONS``, e.g.
  {"type": "email", "to", "subject", "body"} | {"type": "sqs", "queue_url", "message"} |
  {"type": "sns", "topic_arn", "message"} | {"type": "lambda", "function_arn", "payload"} |
  {"type": "eventbridge", "event_bus_arn", "source", "detail_type", "detail"} |
  {"type": "stepfunctions", "state_machine_arn", "input"} (payload, detail and input: JSON objects, a
  DynamoDB map in an item); absent: an email to the item's ``email``
  with the stage's default subject and body.
- ``recurrence``: rate(...) or cron(...); ``timezone``: IANA name (for cron).
- ``end_at`` (a time, as the due time) and ``max_occurrences`` (1 or more), of a recurring task only: its last
  occurrence is the last one due at or before ``end_at``, or its ``max_occurrences``-th run; then it is DONE.
- ``window_seconds``: optional, 60-86400 (EventBridge Scheduler's FlexibleTimeWindow, 1-1440 minutes), of an
  exact task: how late it may run (never early), so tasks due close together share the executor's batches.
- ``on_success``, ``on_failure``: optional actions (any type, validated and allow-listed as ``action``) run
  once after an execution ends DONE or FAILED, given its outcome (executor.py ``_callback``).
- ``retry``: optional ``{"max_retries": 0-185 | "max_attempts": 1-186, "max_age_seconds": 60-86400}``
  (EventBridge Scheduler's limits, which count retries: max_attempts = max_retries + 1; any may be left out):
  the task's retry policy, else the stage's (TASK_MAX_ATTEMPTS, TASK_RETRY_MAX_AGE_SECONDS).  A task source's
  item takes its source's declared ``retry`` (never an attribute of the item).
- Written by the app: ``due_epoch``, the bucket, the TTL (what a strategy needs), a recurring task's next
  due time.  Never read as the task's execution: its status and attempts live only in its record in the state
  table (chalicelib.tasks.lifecycle); an item's own ``status`` or ``attempts`` is the user's data, and neither
  changes whether or how the task runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from chalicelib import ddb, schedule_expr
from chalicelib.settings import DUE_EPOCH_ATTRIBUTE, Settings
from chalicelib.sources import MissingAttribute, TaskSource, render, render_value
from chalicelib.tasks.actions import ACTIONS, EMAIL, JsonObject, OptionalField, PartProblem, action_refusal
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.task_fields import InvalidTask, iso, parse_retry, shown

API_PK_PREFIX = "TASK#"
API_SK = "TASK"
# Always re.fullmatch ("$" would also match before a final newline).  Never only dots: clients normalise the
# path /tasks/.. away, so no URL could carry such an id (openapi.json's TaskRequest.id says the same).
TASK_ID = re.compile(r"(?!\.+\Z)[A-Za-z0-9_.:-]{1,128}")
MIN_EPOCH = 1  # 1970-01-01T00:00:01Z: the first due time a task may have (0 and 0.5 are not)
MAX_EPOCH = 253402300799  # 9999-12-31T23:59:59Z
DUE_RANGE = "1970-01-01T00:00:01Z to 9999-12-31T23:59:59Z"
MAX_SOURCE_RECORD_KEY_BYTES = 2048  # the state table's keys of a source's item: <prefix><source>/<key JSON>
# The longest prefix the state table puts before a task id (items.IMAGE_PREFIX, the image of a lazy item too
# large for its due message; the record's, items.RECORD_PREFIX, is shorter): every key of the item must fit.
LONGEST_STATE_PREFIX = "IMAGE#"
MAX_DUE_TEXT = 64  # no ISO-8601 time or epoch string is longer
EPOCH_TEXT = re.compile(r"[0-9]{9,12}(?:\.[0-9]+)?")  # ASCII digits only: float() also reads other scripts' digits
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# A due bucket (chalicelib.tasks.buckets), or the interval seed's taskDateTime without a shard.
BUCKET_LABEL = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})#([0-9]{2}:[0-9]{2})(?:#[0-9]{1,3})?")


class Strategy(StrEnum):
    EXACT = "exact"
    INTERVAL = "interval"
    LAZY = "lazy"


@dataclass(frozen=True)
class RetryPolicy:
    """How long a failing action is retried: at most ``max_attempts`` attempts in all, none later than
    ``max_age_seconds`` after the execution's due time."""

    max_attempts: int
    max_age_seconds: int

    def to_json(self) -> dict[str, int]:
        return {"max_attempts": self.max_attempts, "max_age_seconds": self.max_age_seconds}


class NoDueTime(InvalidTask):
    """An item without a due time (its due attribute, and its TTL or bucket, absent or NULL).  Of a lazy task
    it is no task at all (an item that never expires, or whose TTL was removed to stop its expiry); of another
    strategy's, a bad item.  ``strategy``: the strategy it was read with."""

    def __init__(self, field: str, message: str, strategy: Strategy) -> None:
        super().__init__(field, message)
        self.strategy = strategy


@dataclass(frozen=True, order=True)
class TaskKey:
    """Which item a task is.  In the tasks table (``source`` empty): its string keys PK and SK.  In a task
    source (a user's table, any key schema): the source's name and ``pk`` the item's whole key as compact
    DynamoDB JSON, sorted, binary values as base64 (``sk`` empty) -- so (source, key) names one item."""

    pk: str
    sk: str
    source: str = ""

    @property
    def task_id(self) -> str:
        """API tasks are known by id; a source's items by ``<source>/<key JSON>``; other items by their key."""
        if self.source:
            return f"{self.source}/{self.pk}"
        if self.pk.startswith(API_PK_PREFIX) and self.sk == API_SK:
            return self.pk[len(API_PK_PREFIX):]
        return f"{self.pk}|{self.sk}"

    def dynamo(self) -> dict[str, Any]:
        """The item's key as boto3's client takes it (DynamoDB JSON, binary as bytes)."""
        if self.source:
            return ddb.binary_as_bytes(json.loads(self.pk))
        return {"PK": {"S": self.pk}, "SK": {"S": self.sk}}

    @property
    def key_attribute(self) -> str:
        """One key attribute's name (every item has all of them): for ``attribute_exists`` conditions."""
        return min(json.loads(self.pk)) if self.source else "PK"

    @classmethod
    def of_source(cls, source: str, keys: dict[str, Any]) -> TaskKey:
        """The key of a source's item from its key attributes in DynamoDB JSON (binary as bytes or base64)."""
        if not isinstance(keys, dict) or not keys or len(keys) > 2:
            raise InvalidTask("key", "a key is one or two attributes")
        for name, value in keys.items():
            if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in ("S", "N", "B"):
                raise InvalidTask("key", f"key attribute {shown(name)} must be a string, number or binary")
            problem = key_value_problem(next(iter(value.items())))
            if problem:
                raise InvalidTask("key", f"key attribute {shown(name)} {problem}")
        # One text per item: a number key however spelled (the API's 42.0, the stream's 42), binary as the bytes
        # it decodes to (base64's unused bits are ignored), names the same task.
        keys = {name: {"N": ddb.canonical_number(value["N"])} if "N" in value else value
                for name, value in ddb.binary_as_bytes(keys).items()}
        text = json.dumps(ddb.binary_as_text(keys), sort_keys=True, separators=(",", ":"))
        if len(f"{LONGEST_STATE_PREFIX}{source}/{text}".encode()) > MAX_SOURCE_RECORD_KEY_BYTES:
            raise InvalidTask("key", f"the item's key ({len(text)} characters as JSON) is too long for a task: the "
                                     f"app's state table keys its execution state by it (at most 2048 bytes)")
        return cls(text, "", source)

    @classmethod
    def for_id(cls, task_id: str) -> TaskKey:
        return cls(API_PK_PREFIX + task_id, API_SK)


@dataclass(frozen=True)
class Task:
    key: TaskKey
    due: datetime                      # aware, UTC
    strategy: Strategy
    action: dict[str, Any]             # validated action spec
    recurrence: str | None = None
    timezone: str | None = None
    action_is_default: bool = False
    item: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    retry: dict[str, int] | None = None  # the task's own retry policy as given (parse_retry); None: the stage's
    end_at: datetime | None = None  # a recurring task's end: no occurrence after it (parse_end)
    max_occurrences: int | None = None  # a recurring task's number of runs (parse_end)
    window_seconds: int | None = None  # an exact task's flexible window (parse_window)
    on_success: dict[str, Any] | None = None  # callbacks (parse_callback): an action run once after DONE
    on_failure: dict[str, Any] | None = None  # ... after FAILED

    def callback(self, status: str) -> tuple[str, dict[str, Any]] | None:
        """(name, action) of the callback an execution ending in ``status`` runs (DONE: ``on_success``, FAILED:
        ``on_failure``), or None."""
        name, spec = {State.DONE.value: ("on_success", self.on_success),
                      State.FAILED.value: ("on_failure", self.on_failure)}.get(status, ("", None))
        return (name, spec) if spec is not None else None

    def retry_policy(self, settings: Settings) -> RetryPolicy:
        """The task's retry policy, what it leaves out taken from the stage's settings."""
        own = self.retry or {}
        return RetryPolicy(own.get("max_attempts", settings.task_max_attempts),
                           own.get("max_age_seconds", settings.task_retry_max_age_seconds))

    @property
    def id(self) -> str:
        return self.key.task_id

    @property
    def due_epoch(self) -> int:
        return int(self.due.timestamp())

    def fingerprint(self) -> str:
        """What a schedule depends on: due time, strategy and action (and its window, when it has one)."""
        window = [self.window_seconds] if self.window_seconds else []
        return json.dumps([self.due_epoch, self.strategy.value, self.action, *window], sort_keys=True)


def key_value_problem(typed: tuple[str, Any]) -> str | None:
    """What is wrong with one key attribute's (type, value) as DynamoDB JSON, or None: a non-empty string, a
    number DynamoDB holds (as its text), non-empty binary (bytes, or base64 text as Lambda delivers it)."""
    kind, raw = typed
    if kind == "S":
        if not isinstance(raw, str) or not raw:
            return "must be a non-empty string"
        try:
            raw.encode()
        except UnicodeEncodeError:
            return "must be UTF-8 text (it holds a lone surrogate)"
        return None
    if kind == "N":
        return None if isinstance(raw, str) and ddb.is_number(raw) else f"must be a DynamoDB number, got {shown(raw)}"
    if isinstance(raw, str):
        try:
            return None if ddb.binary_as_bytes({"k": {"B": raw}})["k"]["B"] else "must be non-empty binary"
        except ValueError:
            return f"must be binary as base64 text, got {shown(raw)}"
    data = getattr(raw, "value", raw)
    return None if isinstance(data, bytes | bytearray) and data else "must be non-empty binary"


def has_control_characters(text: str) -> bool:
    """True when ``text`` holds a control character (NUL, newline, DEL, C1 controls...)."""
    return CONTROL.search(text) is not None


def parse_due(value: Any, field_name: str = "run_at") -> datetime:
    """ISO-8601 (no zone: UTC) or epoch seconds (number or digit string) -> aware UTC datetime.

    Anything else -- another type, a control character, a time before 1970 or after 9999 in UTC (even
    one that only gets there through its offset), a number too large for a float -- is InvalidTask."""
    expected = f"{field_name} must be an ISO-8601 time or epoch seconds, got {shown(value)}"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidTask(field_name, expected)
    if isinstance(value, str) and (len(value) > MAX_DUE_TEXT or has_control_characters(value)):
        raise InvalidTask(field_name, expected)
    if isinstance(value, int | float) or EPOCH_TEXT.fullmatch(value.strip()):
        number = value if isinstance(value, int | float) else float(value.strip())
        check_due_range(number, value, field_name)  # before any float() of a huge int
        return datetime.fromtimestamp(float(number), UTC)
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        at = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except ValueError as exc:
        raise InvalidTask(field_name, expected) from exc
    except OverflowError as exc:  # 9999-12-31T23:59:59-01:00 is in year 10000 in UTC
        raise InvalidTask(field_name, out_of_range(field_name, value)) from exc
    check_due_range(at.timestamp(), value, field_name)
    return at


def out_of_range(field_name: str, value: Any) -> str:
    return f"{field_name} is out of range ({DUE_RANGE}): {shown(value)}"


def check_due_range(epoch: float, value: Any, field_name: str) -> None:
    """The one range check of a due time (``epoch`` seconds, however it was written: ``value``): InvalidTask
    naming the range unless MIN_EPOCH <= epoch <= MAX_EPOCH -- so 0.5 and 1E-130 are refused, as is NaN."""
    if not MIN_EPOCH <= epoch <= MAX_EPOCH:
        raise InvalidTask(field_name, out_of_range(field_name, value))


def _text(spec: dict[str, Any], name: str, where: str, limit: int = 256 * 1024) -> str:
    value = spec.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidTask(f"{where}.{name}", f"{where}.{name} is required and must be a non-empty string")
    if len(value.encode()) > limit:
        raise InvalidTask(f"{where}.{name}", f"{where}.{name} is longer than {limit} bytes")
    return value


def parse_action(spec: Any, where: str = "action") -> dict[str, Any]:
    """Validate an action spec against its type's class in ``actions.ACTIONS``; a clean copy with only its fields."""
    if not isinstance(spec, dict):
        raise InvalidTask(where, f"{where} must be an object with a 'type'")
    kind = spec.get("type")
    action = ACTIONS.get(kind) if isinstance(kind, str) else None
    if action is None:
        raise InvalidTask(f"{where}.type", f"{where}.type must be one of {', '.join(ACTIONS)}, got {kind!r}")
    allowed = {"type", *action.fields}
    for name in sorted(spec):
        if name not in allowed:
            raise InvalidTask(f"{where}.{name}", f"unknown field {where}.{name} for a {kind} action")
    clean: dict[str, Any] = {"type": kind}
    for name, check in action.fields.items():
        if isinstance(check, OptionalField):  # optional: kept only when given
            if name in spec:
                clean[name] = spec[name]
        elif isinstance(check, JsonObject):  # a JSON object: checked whole (kind and size), kept as it is
            if name not in spec:
                raise InvalidTask(f"{where}.{name}", f"{where}.{name} is required and must be a JSON object")
            clean[name] = spec[name]
        elif name not in action.optional or name in spec:
            clean[name] = _text(spec, name, where)
    for name, check in action.fields.items():
        if name not in clean:
            continue
        problem = check(clean[name])
        if problem:
            named = f"{where}.{name}" + (f".{problem.part}" if isinstance(problem, PartProblem) else "")
            raise InvalidTask(named, f"{named} {problem}")
    whole = action.spec_problem(clean)
    if whole is not None:
        raise InvalidTask(f"{where}.{whole[0]}", f"{where}.{whole[0]} {whole[1]}")
    return clean


def check_action_target(action: dict[str, Any], settings: Settings, where: str = "action") -> None:
    """InvalidTask naming the field when ``action`` sends to a queue or topic the stage does not allow (or calls
    a webhook origin, with a secret, it does not allow)."""
    refusal = action_refusal(action, settings)
    if refusal is not None:
        name, problem = refusal
        raise InvalidTask(f"{where}.{name}", f"{where}.{name} {problem}")


def default_action(item: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The stage's default action: an email to the item's ``email`` attribute."""
    to = item.get("email")
    if not isinstance(to, str) or not EMAIL.fullmatch(to):
        raise InvalidTask("action", "the item has no action and no valid 'email' attribute for the default action")
    return {"type": "email", "to": to, "subject": settings.default_email_subject,
            "body": settings.default_email_body}


def parse_recurrence(value: Any, tz: str | None) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or has_control_characters(value):
        raise InvalidTask("recurrence", "recurrence must be a rate(...) or cron(...) expression")
    try:
        schedule_expr.parse(value)
    except schedule_expr.InvalidScheduleExpression as exc:
        raise InvalidTask("recurrence", f"recurrence: {exc}") from exc
    return value.strip()


def retry_shown(policy: dict[str, int]) -> dict[str, int]:
    """A retry policy as the API shows it: with ``max_retries`` (Scheduler's count) beside ``max_attempts``."""
    if "max_attempts" not in policy:
        return dict(policy)
    return {**policy, "max_retries": policy["max_attempts"] - 1}


def parse_end(end_at: Any, max_occurrences: Any, due: datetime, recurrence: str | None) \
        -> tuple[datetime | None, int | None]:
    """(end_at, max_occurrences) of a recurring task (either may be None): when its occurrences end, as
    EventBridge Scheduler's EndDate, and how many runs it makes at most.  InvalidTask names the field: an
    ``end_at`` that is no time or is before the task's due time ``due``, a ``max_occurrences`` that is not a whole
    number of at least 1, either on a task with no ``recurrence``."""
    end = None if end_at is None or end_at == "" else parse_due(end_at, "end_at")
    count = None
    if max_occurrences is not None:
        number = max_occurrences
        if isinstance(number, bool) or not isinstance(number, int | float) or number != int(number) \
                or not 1 <= number <= MAX_OCCURRENCES:
            raise InvalidTask("max_occurrences", f"max_occurrences must be a whole number from 1 to {MAX_OCCURRENCES}, "
                                                 f"got {shown(number)}")
        count = int(number)
    for name, value in (("end_at", end), ("max_occurrences", count)):
        if value is not None and not recurrence:
            raise InvalidTask(name, f"{name} is for a recurring task: this one has no recurrence")
    if end is not None and end < due:
        raise InvalidTask("end_at", f"end_at {iso(end)} is before the task's first due time {iso(due)}")
    return end, count


MAX_OCCURRENCES = 10**9
WINDOW_SECONDS = (60, 86400)  # EventBridge Scheduler's FlexibleTimeWindow: MaximumWindowInMinutes 1-1440


def parse_window(value: Any, strategy: Strategy) -> int | None:
    """An exact task's ``window_seconds`` (60-86400), or None when absent; InvalidTask names ``window_seconds``
    for another number, or for an interval or lazy task (the interval processor's minute and DynamoDB's TTL
    deletion decide when those run)."""
    if value is None:
        return None
    low, high = WINDOW_SECONDS
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or not low <= value <= high:
        raise InvalidTask("window_seconds", f"window_seconds must be a whole number from {low} to {high} (1-1440 "
                                            f"minutes, as EventBridge Scheduler's), got {shown(value)}")
    if strategy is not Strategy.EXACT:
        raise InvalidTask("window_seconds", f"window_seconds is for an exact task; a {strategy.value} task runs when "
                                            "its bucket or its TTL says")
    return int(value)
CALLBACKS = ("on_success", "on_failure")


def parse_callback(value: Any, where: str) -> dict[str, Any] | None:
    """A task's ``on_success`` or ``on_failure``: an action spec of any type (``parse_action``), or None when
    absent.  A callback has no callbacks of its own: one inside it is refused, naming it."""
    if value is None:
        return None
    if isinstance(value, dict):
        for name in CALLBACKS:
            if name in value:
                raise InvalidTask(f"{where}.{name}", f"{where}.{name}: a callback has no callbacks of its own")
    return parse_action(value, where)


def check_callback_targets(callbacks: dict[str, dict[str, Any] | None], settings: Settings) -> None:
    """``check_action_target`` of each callback given, naming it (``on_failure.url``)."""
    for name, spec in callbacks.items():
        if spec is not None:
            check_action_target(spec, settings, name)


def parse_timezone(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidTask("timezone", f"timezone must be an IANA time zone name like 'Europe/Paris', got {shown(value)}")
    problem = schedule_expr.zone_problem(value)
    if problem:
        raise InvalidTask("timezone", f"timezone {problem}")
    return value


def _bucket_due(value: Any) -> int | None:
    """The start (epoch seconds) of a bucket value like '2021-12-31#12:00' or '2021-12-31#12:00#3'."""
    match = BUCKET_LABEL.fullmatch(value) if isinstance(value, str) else None
    if not match:
        return None
    try:
        return int(datetime.fromisoformat(f"{match.group(1)}T{match.group(2)}:00+00:00").timestamp())
    except ValueError:
        return None


def task_from_item(item: dict[str, Any], settings: Settings) -> Task:
    """Read a task from a plain item (see chalicelib.ddb.deserialize); InvalidTask if it is not one.

    Pure: whatever goes wrong reading an item is the item's content, so any error becomes InvalidTask
    (a stream record or due message of it is dead-lettered once, never retried)."""
    try:
        return _task_from_item(item, settings)
    except InvalidTask:
        raise
    except (ArithmeticError, LookupError, TypeError, ValueError, RecursionError) as exc:
        raise InvalidTask("item", f"the item cannot be read as a task: {type(exc).__name__}: {exc}"[:500]) from exc


def _task_from_item(item: dict[str, Any], settings: Settings) -> Task:
    pk, sk = item.get("PK"), item.get("SK")
    if not isinstance(pk, str) or not isinstance(sk, str):
        raise InvalidTask("PK", "a task item needs string keys PK and SK")
    strategy_text = item.get("strategy")
    if not strategy_text:
        # The lazy seed's items carry only a TTL: their expiry is their due time.
        lazy_shaped = settings.due_attribute not in item and settings.ttl_attribute in item
        # The interval seed's items may carry only a bucket (taskDateTime "2021-12-31#12:00"): their due minute.
        bucket_shaped = settings.due_attribute not in item and _bucket_due(item.get(settings.bucket_attribute)) is not None
        strategy_text = (Strategy.LAZY.value if lazy_shaped
                         else Strategy.INTERVAL.value if bucket_shaped else settings.default_strategy)
    if strategy_text not in tuple(Strategy):
        raise InvalidTask("strategy", f"strategy must be exact, interval or lazy, got {shown(strategy_text)}")
    strategy = Strategy(strategy_text)
    due_value = item.get(settings.due_attribute)
    if due_value is None and strategy is Strategy.LAZY and settings.ttl_attribute in item:
        due_value = item[settings.ttl_attribute]
    if due_value is None and strategy is Strategy.INTERVAL:
        due_value = _bucket_due(item.get(settings.bucket_attribute))
    if due_value is None:
        raise NoDueTime(settings.due_attribute, f"the item has no {settings.due_attribute} (due time)", strategy)
    due = parse_due(due_value, settings.due_attribute)
    if "action" in item and item["action"] is not None:
        action, is_default = parse_action(item["action"]), False
    else:
        action, is_default = default_action(item, settings), True
    timezone = parse_timezone(item.get("timezone"))
    recurrence = parse_recurrence(item.get("recurrence"), timezone)
    end_at, max_occurrences = parse_end(item.get("end_at"), item.get("max_occurrences"), due, recurrence)
    return Task(
        key=TaskKey(pk, sk), due=due, strategy=strategy, action=action,
        recurrence=recurrence, timezone=timezone,
        action_is_default=is_default, item=item, retry=parse_retry(item.get("retry")),
        end_at=end_at, max_occurrences=max_occurrences, window_seconds=parse_window(item.get("window_seconds"), strategy),
        on_success=parse_callback(item.get("on_success"), "on_success"),
        on_failure=parse_callback(item.get("on_failure"), "on_failure"))


def read_task(item: dict[str, Any], key: TaskKey, settings: Settings) -> Task:
    """The task of an item read by ``key``: a tasks-table item by the item contract above, a source's item by
    its source's declaration (``task_from_source_item``); InvalidTask if it is not one."""
    if not key.source:
        return task_from_item(item, settings)
    source = settings.source(key.source)
    if source is None:
        raise InvalidTask("source", f"no task source {key.source!r} is declared (TASK_SOURCES)")
    return task_from_source_item(item, key, source, settings)


def task_from_source_item(item: dict[str, Any], key: TaskKey, source: TaskSource, settings: Settings) -> Task:
    """Read a task from an item of a user's table, as its source declares: the due time from the due
    attribute (or the TTL of a lazy source, or the bucket of an interval one), the action from the source's
    templates over the item's attributes.  The item's own status or attempts are never read: the app keeps
    execution state in its state table.  Pure; anything wrong is the item's content: InvalidTask."""
    try:
        return _task_from_source_item(item, key, source, settings)
    except InvalidTask:
        raise
    except (ArithmeticError, LookupError, TypeError, ValueError, RecursionError) as exc:
        raise InvalidTask("item", f"the item cannot be read as a task: {type(exc).__name__}: {exc}"[:500]) from exc


def _task_from_source_item(item: dict[str, Any], key: TaskKey, source: TaskSource, settings: Settings) -> Task:
    strategy = Strategy(source.strategy)
    due_attribute, ttl, bucket = source.due_attribute, source.ttl_attribute, source.bucket_attribute
    if due_attribute and item.get(due_attribute) is not None:
        due = parse_due(item[due_attribute], due_attribute)
    elif strategy is Strategy.LAZY and ttl and item.get(ttl) is not None:
        if isinstance(item[ttl], bool) or not isinstance(item[ttl], int | float):
            raise InvalidTask(ttl, f"{ttl} must be epoch seconds (a number: DynamoDB's TTL), got {shown(item[ttl])}")
        due = parse_due(item[ttl], ttl)
    elif strategy is Strategy.INTERVAL and bucket and item.get(bucket) is not None:
        start = source.bucket_start(item[bucket]) if isinstance(item[bucket], str) else None
        if start is None:
            raise InvalidTask(bucket, f"{bucket} must be a bucket like {source.bucket_format!r}, "
                                      f"got {shown(item[bucket])}")
        check_due_range(start.timestamp(), item[bucket], bucket)
        due = start
    else:
        names = [n for n in (due_attribute, ttl if strategy is Strategy.LAZY else None,
                             bucket if strategy is Strategy.INTERVAL else None) if n]
        raise NoDueTime(names[0] if names else "due", f"the item has no {' or '.join(names)} (its due time)", strategy)
    if source.action is None:
        action, is_default = default_action(item, settings), True
    else:
        try:
            spec = {name: value if name == "type" else render(value, item) if isinstance(value, str)
                    else render_value(value, item) for name, value in source.action.items()}
        except MissingAttribute as exc:
            raise InvalidTask(exc.name, f"the source's action names the attribute {exc.name!r}, "
                                        "which the item does not have") from exc
        action, is_default = parse_action(spec), False
    return Task(key=key, due=due, strategy=strategy, action=action, recurrence=source.recurrence,
                timezone=source.timezone, action_is_default=is_default, item=item,
                retry=dict(source.retry) if source.retry else None)


@dataclass(frozen=True)
class DueMessage:
    """What the due queue carries: the task's key and the due time it was sent for.

    When the item is gone (a lazy task's TTL REMOVE) the message carries the
    item itself, so the executor can run it from the message alone: ``image``,
    the stream record's OldImage exactly as DynamoDB JSON (binary values as
    base64 text, as Lambda delivers them), so sets, binary values and numbers
    survive the trip.  An image too large for an SQS message is kept in the
    state table instead (``image_stored``; ``items.image_key`` of task and due).
    A message from an older version may carry ``snapshot``, the item as plain
    JSON: it is read into ``image``.
    """

    key: TaskKey
    due: datetime
    image: dict[str, Any] | None = None
    image_stored: bool = False
    hops: int = 0  # times re-queued for being early
    not_before: datetime | None = None  # a retry of the execution at ``due``: not to run before this time
    slot: datetime | None = None  # the start its target's rate gave it (chalicelib/tasks/flow.py)

    @property
    def carries_item(self) -> bool:
        """The item is gone: the task is read from the message (or its stored image), not the table."""
        return self.image is not None or self.image_stored

    def to_json(self) -> str:
        body: dict[str, Any] = {"pk": self.key.pk, "sk": self.key.sk, "due": iso(self.due), "hops": self.hops}
        if self.key.source:
            body["source"] = self.key.source
        if self.image is not None:
            body["image"] = ddb.binary_as_text(self.image)
        if self.image_stored:
            body["image_stored"] = True
        if self.not_before is not None:
            body["not_before"] = iso(self.not_before)
        if self.slot is not None:
            body["slot"] = iso(self.slot)
        return json.dumps(body, sort_keys=True)

    @property
    def runs_at(self) -> datetime:
        """When this message may run its execution: its due time, or a retry's later time, or the later start
        its target's rate gave it."""
        first = self.not_before if self.not_before is not None and self.not_before > self.due else self.due
        return self.slot if self.slot is not None and self.slot > first else first

    @classmethod
    def from_json(cls, body: str) -> DueMessage:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:  # not JSON, too deep, or a number of over 4300 digits
            raise InvalidTask("body", f"message body is not JSON: {str(exc)[:200]}") from exc
        if not isinstance(data, dict):
            raise InvalidTask("body", "message body must be a JSON object")
        pk, sk, source = data.get("pk"), data.get("sk"), data.get("source", "")
        if not isinstance(source, str):
            raise InvalidTask("source", "message's source must be a string")
        if not isinstance(pk, str) or not isinstance(sk, str) or not pk or not (sk or source):
            raise InvalidTask("pk", "message needs string pk and sk")
        if source:
            try:
                key = TaskKey.of_source(source, json.loads(pk))
            except (ValueError, RecursionError) as exc:
                raise InvalidTask("pk", f"message's pk is not a source item's key: {str(exc)[:200]}") from exc
        else:
            key = TaskKey(pk, sk)
        image = data.get("image")
        try:
            if image is not None:
                if not isinstance(image, dict):
                    raise ValueError("image must be an object")
                ddb.deserialize(ddb.binary_as_bytes(image))  # well-formed DynamoDB JSON, numbers DynamoDB holds
            elif data.get("snapshot") is not None:  # the plain form of older messages
                snapshot = data["snapshot"]
                if not isinstance(snapshot, dict):
                    raise ValueError("snapshot must be an object")
                image = ddb.binary_as_text(ddb.serialize(snapshot))
        except (ValueError, TypeError, ArithmeticError, RecursionError) as exc:
            raise InvalidTask("image", f"the message's item image is not DynamoDB JSON: {str(exc)[:200]}") from exc
        hops = data.get("hops", 0)
        not_before = parse_due(data["not_before"], "not_before") if data.get("not_before") is not None else None
        slot = parse_due(data["slot"], "slot") if data.get("slot") is not None else None
        return cls(key, parse_due(data.get("due"), "due"), image, data.get("image_stored") is True,
                   hops if isinstance(hops, int) else 0, not_before, slot)


__all__ = ["DUE_EPOCH_ATTRIBUTE", "DueMessage", "InvalidTask", "NoDueTime", "RetryPolicy", "Strategy", "Task", "TaskKey",
           "check_action_target", "check_callback_targets", "default_action", "iso", "parse_action", "parse_callback",
           "parse_due", "parse_end", "parse_retry", "parse_window", "read_task", "retry_shown", "shown",
           "task_from_item", "task_from_source_item"]

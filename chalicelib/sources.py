"""Task sources: the user's own tables whose items become tasks, as the stage declares them. Pure, no I/O.

A stage declares its sources in one environment variable, ``TASK_SOURCES``: a
JSON object of source name -> source.  Each source says which existing table it
watches and how an item of it becomes a task (docs/task-sources.md)::

    {"appointments": {"table": "appointments", "strategy": "exact",
                      "due_attribute": "REMINDER_TIMESTAMP",
                      "action": {"type": "email", "to": "{email}",
                                 "subject": "Reminder", "body": "Your appointment {SK} is due."}}}

- ``table`` (required): the table name.
- ``strategy``: exact | interval | lazy (default exact).
- ``due_attribute``: the item's due time, ISO-8601 or epoch seconds.  Lazy
  sources may use ``ttl_attribute`` instead (the TTL is the due time); interval
  sources may use only their bucket (``bucket_attribute``: the bucket's start).
- ``ttl_attribute`` (lazy, required): the table's TTL attribute (epoch seconds).
- ``action``: ``{"type", <its fields>}`` as for API tasks, each field a
  template: ``{name}`` is replaced by the item's attribute ``name`` (``{{`` and
  ``}}`` are braces).  A JSON field (a lambda payload, an eventbridge detail, a
  stepfunctions input) is a JSON object whose strings are templates; a string
  that is exactly one ``{name}`` takes the attribute's value as it is (a number,
  a map, a list).  Default: an email to ``{email}`` with the stage's subject
  and body.
- ``recurrence`` / ``timezone``: rate(...) or cron(...) and its IANA zone.
- ``limit``: ``{"rate": starts a second, "concurrency": actions at once}`` (either may be left out): the
  source's tasks, together, wait in the due queue beyond it (chalicelib/tasks/flow.py).
- ``retry``: ``{"max_retries": 0-185 | "max_attempts": 1-186, "max_age_seconds": 60-86400}`` (any may be left out), the retry
  policy of every item of the source, as a task's own ``retry`` (chalicelib.tasks.task_fields.parse_retry);
  what it leaves out, and a source without one, the stage's (TASK_MAX_ATTEMPTS, TASK_RETRY_MAX_AGE_SECONDS).
- interval only: ``bucket_index`` (the user's GSI, hash key = the bucket),
  ``bucket_attribute``, ``bucket_format`` (strftime, default ``%Y-%m-%d#%H:%M``)
  and ``bucket_minutes`` (default 1); ``key`` (the table's key attribute names,
  hash first): the index's items are read by the table key.
- deploy opt-ins: ``enable_stream`` and ``enable_ttl`` (default false: make
  deploy checks the table and refuses when it is not set up).

A stage may declare its sources in a JSON file instead, or as well: ``TASK_SOURCES_FILE`` names it, relative
to chalicelib/ (packaged with the app), and the same parser reads it; a source declared in both is refused.

A source's stream ARN is a provisioned value, like TASKS_STREAM_ARN:
``TASK_SOURCE_STREAMS`` is a JSON object of source name -> stream ARN.

The app's own tasks table (the API's) is the built-in source ``tasks``
(``TASKS_SOURCE``); no declared source may take that name.  Every error names
the source and the field: ``SourceError``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from chalicelib import schedule_expr

if TYPE_CHECKING:
    from chalicelib.tasks.flow_limits import Limit

TASKS_SOURCE = "tasks"  # the app's own tasks table
STRATEGIES = ("exact", "interval", "lazy")
DEFAULT_BUCKET_FORMAT = "%Y-%m-%d#%H:%M"
SOURCE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
ATTRIBUTE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,254}")
TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")
STREAM_ARN = re.compile(r"arn:aws[a-zA-Z-]*:dynamodb:[a-z0-9-]+:\d{12}:table/[A-Za-z0-9_.-]{3,255}/stream/.+")
TEMPLATE_PART = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
FIELDS = frozenset({"table", "strategy", "due_attribute", "ttl_attribute", "action", "recurrence", "timezone",
                    "retry", "bucket_index", "bucket_attribute", "bucket_format", "bucket_minutes", "key",
                    "enable_stream", "enable_ttl", "limit"})


class SourceError(ValueError):
    """A task source the app cannot use: ``source`` and ``field`` name the culprit, ``origin`` where it is declared
    (``TASK_SOURCES``, or the file TASK_SOURCES_FILE names: ``chalicelib/<path>``)."""

    def __init__(self, source: str, field_name: str, problem: str, origin: str = "TASK_SOURCES") -> None:
        super().__init__(f"task source {source!r}, field {field_name!r}: {problem}")
        self.source = source
        self.field = field_name
        self.origin = origin


class MissingAttribute(KeyError):
    """A template names an attribute the item does not have."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@dataclass(frozen=True)
class TaskSource:
    """One declared source: a user's table and how its items become tasks."""

    name: str
    table: str
    strategy: str = "exact"
    due_attribute: str | None = None
    ttl_attribute: str | None = None
    action: dict[str, Any] | None = field(default=None, hash=False)  # templates; None: the default email
    recurrence: str | None = None
    timezone: str | None = None
    retry: dict[str, int] | None = field(default=None, hash=False)  # its items' retry policy; None: the stage's
    bucket_index: str | None = None
    bucket_attribute: str | None = None
    bucket_format: str = DEFAULT_BUCKET_FORMAT
    bucket_minutes: int = 1
    key: tuple[str, ...] = ()
    enable_stream: bool = False
    enable_ttl: bool = False
    stream_arn: str = field(default="", compare=False)
    limit: Limit | None = None  # its tasks' rate and concurrency, together (chalicelib/tasks/flow.py)

    @property
    def function_name(self) -> str:
        """The Lambda function of this source's stream (stable: a deploy updates it, never replaces it)."""
        return f"source_{self.name}"

    def bucket_label(self, start: datetime) -> str:
        """The user's own bucket value of a bucket start (UTC)."""
        return start.astimezone(UTC).strftime(self.bucket_format)

    def bucket_start(self, label: str) -> datetime | None:
        """The start (UTC) of a bucket value in the user's format, or None when it is not one."""
        try:
            return datetime.strptime(label, self.bucket_format).replace(tzinfo=UTC)
        except (ValueError, TypeError):
            return None


# --- templates -------------------------------------------------------------------------------------

def template_names(template: str) -> list[str]:
    """The attribute names a template refers to; ValueError when it is not a well-formed template."""
    names: list[str] = []
    for match in TEMPLATE_PART.finditer(template):
        text = match.group(0)
        if text in ("{{", "}}"):
            continue
        name = match.group(1)
        if name is None or not ATTRIBUTE.fullmatch(name):
            raise ValueError(f"{template!r} is not a template: use {{attribute}}, and {{{{ or }}}} for a brace")
        names.append(name)
    return names


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(getattr(value, "value", None), bytes):  # boto3's Binary
        return bytes(value.value).hex()
    return json.dumps(value, sort_keys=True, default=str)


def render(template: str, item: dict[str, Any]) -> str:
    """The template with each ``{name}`` replaced by the item's attribute; MissingAttribute when absent."""
    def replace(match: re.Match[str]) -> str:
        text = match.group(0)
        if text == "{{":
            return "{"
        if text == "}}":
            return "}"
        name = match.group(1) or ""
        if name not in item or item[name] is None:
            raise MissingAttribute(name)
        return _text_of(item[name])
    return TEMPLATE_PART.sub(replace, template)


def render_value(template: Any, item: dict[str, Any]) -> Any:
    """A JSON field's template rendered: each string as ``render`` does, except a string that is exactly one
    ``{name}``, which takes the attribute's value itself; objects and lists member by member."""
    if isinstance(template, str):
        match = TEMPLATE_PART.fullmatch(template)
        if match and match.group(1):
            if item.get(match.group(1)) is None:
                raise MissingAttribute(match.group(1))
            return item[match.group(1)]
        return render(template, item)
    if isinstance(template, dict):
        return {key: render_value(value, item) for key, value in template.items()}
    if isinstance(template, list):
        return [render_value(value, item) for value in template]
    return template


def _json_template_names(template: Any) -> list[str]:
    """The attribute names a JSON field's template refers to (its strings'); ValueError for a bad one."""
    if isinstance(template, str):
        return template_names(template)
    if isinstance(template, dict):
        return [name for value in template.values() for name in _json_template_names(value)]
    if isinstance(template, list):
        return [name for value in template for name in _json_template_names(value)]
    return []


# --- parsing ------------------------------------------------------------------------------------------

def parse_sources(text: str, streams_text: str = "", file_text: str = "", file_name: str = "") -> tuple[TaskSource, ...]:
    """The sources of TASK_SOURCES and of the file TASK_SOURCES_FILE names (``file_text``, read from
    chalicelib/``file_name``; the same JSON object), with their stream ARNs (TASK_SOURCE_STREAMS); SourceError
    names the source, the field and where the source is declared, of the first problem."""
    declared = _json_object(text, "TASK_SOURCES", "source name -> source")
    origins = dict.fromkeys(declared, "TASK_SOURCES")
    if file_name:
        origin = f"chalicelib/{file_name}"
        try:
            from_file = _json_object(file_text, "TASK_SOURCES_FILE", "source name -> source")
        except SourceError as exc:
            exc.origin = origin
            raise
        for name in from_file:
            if name in declared:
                raise SourceError(str(name), "name", f"is declared in both TASK_SOURCES and {origin}: declare it once",
                                  origin)
        declared = {**declared, **from_file}
        origins.update(dict.fromkeys(from_file, origin))
    streams = _streams(streams_text, declared)
    tables: dict[str, str] = {}
    sources = []
    for name, spec in declared.items():
        try:
            source = parse_source(name, spec, streams.get(name, ""))
            if source.table in tables:
                raise SourceError(source.name, "table", f"table {source.table!r} is already the source "
                                                        f"{tables[source.table]!r}: one source per table")
        except SourceError as exc:
            exc.origin = origins[name]
            raise
        tables[source.table] = source.name
        sources.append(source)
    return tuple(sources)


def _json_object(text: str, variable: str, what: str) -> dict[str, Any]:
    """The JSON object a variable holds ({} when empty); SourceError naming the variable otherwise."""
    if not text.strip():
        return {}
    try:
        found = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SourceError("*", variable, f"is not JSON: {exc}") from exc
    if not isinstance(found, dict):
        raise SourceError("*", variable, f"must be a JSON object of {what}")
    return found


def _streams(text: str, declared: dict[str, Any]) -> dict[str, str]:
    streams = _json_object(text, "TASK_SOURCE_STREAMS", "source name -> stream ARN")
    for name, arn in streams.items():
        if name not in declared:
            raise SourceError(str(name), "TASK_SOURCE_STREAMS", "names no declared source")
        if not isinstance(arn, str) or (arn and not STREAM_ARN.fullmatch(arn)):
            raise SourceError(name, "stream_arn", f"must be a DynamoDB stream ARN, got {arn!r}")
    return {str(k): str(v) for k, v in streams.items()}


def parse_source(name: Any, spec: Any, stream_arn: str = "") -> TaskSource:
    """One source, validated; SourceError names the source and the field."""
    shown = str(name)
    if not isinstance(name, str) or not SOURCE_NAME.fullmatch(name):
        raise SourceError(shown, "name", "must be 1-40 characters of a-z, 0-9 and _, starting with a letter")
    if name == TASKS_SOURCE:
        raise SourceError(name, "name", f"{TASKS_SOURCE!r} is the app's own tasks table")
    if not isinstance(spec, dict):
        raise SourceError(name, "source", "must be a JSON object")

    def fail(field_name: str, problem: str) -> SourceError:
        return SourceError(name, field_name, problem)

    for key in sorted(spec):
        if key not in FIELDS:
            raise fail(key, "is not a field of a task source (" + ", ".join(sorted(FIELDS)) + ")")

    def text(field_name: str, pattern: re.Pattern[str] | None, expected: str) -> str | None:
        value = spec.get(field_name)
        if value is None:
            return None
        if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
            raise fail(field_name, f"must be {expected}, got {value!r}")
        return value

    def flag(field_name: str) -> bool:
        value = spec.get(field_name, False)
        if not isinstance(value, bool):
            raise fail(field_name, f"must be true or false, got {value!r}")
        return value

    table = text("table", TABLE_NAME, "a DynamoDB table name")
    if table is None:
        raise fail("table", "is required: the name of the table whose items are tasks")
    strategy = text("strategy", None, "exact, interval or lazy") or "exact"
    if strategy not in STRATEGIES:
        raise fail("strategy", f"must be exact, interval or lazy, got {strategy!r}")
    due = text("due_attribute", ATTRIBUTE, "an attribute name")
    ttl = text("ttl_attribute", ATTRIBUTE, "an attribute name")
    bucket_index = text("bucket_index", TABLE_NAME, "an index name")
    bucket_attribute = text("bucket_attribute", ATTRIBUTE, "an attribute name")
    bucket_format = text("bucket_format", None, "a strftime format") or DEFAULT_BUCKET_FORMAT
    minutes = spec.get("bucket_minutes", 1)
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 1440:
        raise fail("bucket_minutes", f"must be a whole number from 1 to 1440, got {minutes!r}")
    key = spec.get("key", [])
    if (not isinstance(key, list) or len(key) > 2
            or not all(isinstance(k, str) and ATTRIBUTE.fullmatch(k) for k in key) or len(set(key)) != len(key)):
        raise fail("key", f"must be the table's key attribute names, hash first (one or two), got {key!r}")

    if strategy == "lazy":
        if ttl is None:
            raise fail("ttl_attribute", "is required for a lazy source: the table's TTL attribute")
    elif ttl is not None:
        raise fail("ttl_attribute", f"applies to lazy sources only (this one is {strategy})")
    if strategy == "interval":
        if bucket_index is None:
            raise fail("bucket_index", "is required for an interval source: the table's GSI on the bucket")
        if bucket_attribute is None:
            raise fail("bucket_attribute", "is required for an interval source: the index's hash key")
        if not key:
            raise fail("key", "is required for an interval source: the table's key attribute names, hash first")
        _check_bucket_format(name, bucket_format, minutes)
    else:
        for extra in ("bucket_index", "bucket_attribute", "bucket_format", "bucket_minutes"):
            if extra in spec:
                raise fail(extra, f"applies to interval sources only (this one is {strategy})")
    if strategy == "exact" and due is None:
        raise fail("due_attribute", "is required for an exact source: the attribute holding the due time")

    action = _action(name, spec.get("action"))
    timezone = text("timezone", None, "an IANA time zone name")
    zone = schedule_expr.zone_problem(timezone) if timezone is not None else None
    if zone:
        raise fail("timezone", zone)
    recurrence = text("recurrence", None, "a rate(...) or cron(...) expression")
    if recurrence is not None:
        try:
            schedule_expr.parse(recurrence)
        except schedule_expr.InvalidScheduleExpression as exc:
            raise fail("recurrence", str(exc)) from exc
    retry = _retry(name, spec.get("retry"))
    limit = _limit(name, spec.get("limit"))
    writes = strategy in ("lazy", "interval") or recurrence_given(spec)
    if writes and not key:
        raise fail("key", "is required for a lazy, interval or recurring source: the table's key attribute "
                          "names, hash first (IAM lets the app write only the attributes it needs)")
    return TaskSource(name=name, table=table, strategy=strategy, due_attribute=due, ttl_attribute=ttl,
                      action=action, recurrence=recurrence, timezone=timezone, retry=retry, bucket_index=bucket_index,
                      bucket_attribute=bucket_attribute, bucket_format=bucket_format, bucket_minutes=minutes,
                      key=tuple(key), enable_stream=flag("enable_stream"), enable_ttl=flag("enable_ttl"),
                      stream_arn=stream_arn, limit=limit)


def recurrence_given(spec: dict[str, Any]) -> bool:
    return spec.get("recurrence") not in (None, "")


def written_attributes(source: TaskSource) -> tuple[str, ...]:
    """The attributes of a user's item the app may write (and the key and due attributes its conditions read):
    what IAM's ``dynamodb:Attributes`` condition allows.  Empty: the app never writes to the table."""
    if source.strategy == "exact" and not source.recurrence:
        return ()
    names = [*source.key, source.due_attribute, source.ttl_attribute, source.bucket_attribute]
    return tuple(dict.fromkeys(n for n in names if n))


def _check_bucket_format(name: str, fmt: str, minutes: int) -> None:
    """The format must tell one bucket from the next: it reads back to the bucket start it was written from."""
    for at in (datetime(2026, 11, 23, 12, 44, tzinfo=UTC), datetime(2027, 2, 28, 23, 59, tzinfo=UTC)):
        epoch = int(at.timestamp())
        start = datetime.fromtimestamp(epoch - epoch % (minutes * 60), UTC)
        try:
            label = start.strftime(fmt)
            back = datetime.strptime(label, fmt).replace(tzinfo=UTC)
        except ValueError as exc:
            raise SourceError(name, "bucket_format", f"{fmt!r} cannot be read back ({exc})") from exc
        if back != start:
            raise SourceError(name, "bucket_format",
                              f"{fmt!r} does not tell buckets of {minutes} minute(s) apart (it needs the date, "
                              "hour and minute)")


def _retry(name: str, spec: Any) -> dict[str, int] | None:
    """The source's retry policy, read by the task's own parser (one shape for both); SourceError names the
    field (``retry`` or ``retry.<name>``)."""
    if spec is None:
        return None  # its parser is loaded only by a stage whose sources declare a policy (cold start)
    from chalicelib.tasks.task_fields import InvalidTask, parse_retry

    try:
        return parse_retry(spec)
    except InvalidTask as exc:
        problem = exc.message.removeprefix(f"{exc.field} ")
        raise SourceError(name, exc.field, problem) from exc


def _limit(name: str, spec: Any) -> Limit | None:
    """The source's ``limit`` (its tasks' rate and concurrency); SourceError names ``limit.<field>``."""
    if spec is None:
        return None
    from chalicelib.tasks.flow_limits import LimitError, parse_limit

    try:
        return parse_limit(spec)
    except LimitError as exc:
        raise SourceError(name, "limit" if exc.field == "limit" else f"limit.{exc.field}", exc.problem) from exc


def _action(name: str, spec: Any) -> dict[str, Any] | None:
    from chalicelib.tasks.actions import ACTIONS, JsonObject, OptionalField  # imports nothing of the model or settings at run time

    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise SourceError(name, "action", "must be an object with a 'type'")
    kind = spec.get("type")
    action = ACTIONS.get(kind) if isinstance(kind, str) else None
    if action is None:
        raise SourceError(name, "action.type", f"must be one of {', '.join(ACTIONS)}, got {kind!r}")
    clean: dict[str, Any] = {"type": str(kind)}
    for field_name in sorted(spec):
        if field_name != "type" and field_name not in action.fields:
            raise SourceError(name, f"action.{field_name}", f"is not a field of a {kind} action")
    for field_name, check in action.fields.items():
        value = spec.get(field_name)
        if isinstance(check, OptionalField):  # optional, never a template
            if field_name in spec:
                problem = check(value)
                if problem:
                    part = getattr(problem, "part", "")
                    raise SourceError(name, f"action.{field_name}" + (f".{part}" if part else ""), problem)
                clean[field_name] = value
            continue
        if isinstance(check, JsonObject):
            clean[field_name] = _json_field(name, field_name, value, check)
            continue
        if field_name in action.optional and field_name not in spec:
            continue
        if not isinstance(value, str) or not value.strip():
            raise SourceError(name, f"action.{field_name}", "is required: a non-empty string (a template)")
        try:
            names = template_names(value)
        except ValueError as exc:
            raise SourceError(name, f"action.{field_name}", str(exc)) from exc
        if not names:  # a fixed value: checked now, not at the first due item
            problem = check(render(value, {}))
            if problem:
                raise SourceError(name, f"action.{field_name}", problem)
        clean[field_name] = value
    whole = action.spec_problem(clean)
    if whole is not None:
        raise SourceError(name, f"action.{whole[0]}", whole[1])
    return clean


def _json_field(name: str, field_name: str, value: Any, check: Any) -> Any:
    """A JSON field's template: an object whose strings are templates (checked whole now when it names no
    attribute, else at each item)."""
    if not isinstance(value, dict):
        raise SourceError(name, f"action.{field_name}", "is required: a JSON object (its strings templates)")
    try:
        names = _json_template_names(value)
    except ValueError as exc:
        raise SourceError(name, f"action.{field_name}", str(exc)) from exc
    problem = check(render_value(value, {})) if not names else check(value)
    if problem:
        raise SourceError(name, f"action.{field_name}", problem)
    return value

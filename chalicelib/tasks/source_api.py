"""``GET /tasks/{source}/{key}``: the task of an item in a user's table (a task source), as the app sees it.

``key`` is the item's key as JSON (URL-encoded): plain values (``{"PK": "USER#ada", "SK": "REMINDER#1"}``,
``{"id": 42}``), or DynamoDB JSON for binary keys (``{"id": {"B": "<base64>"}}``).  A source whose
declaration names a one-attribute string ``key`` also takes the bare value.  The answer shows the source,
the key and the task: its due time, state and last outcome (execution state is the app's own, in its
state table; the item is never written for it).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from botocore.exceptions import ClientError

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.sources import TaskSource
from chalicelib.tasks import items, stream_dead_letters
from chalicelib.tasks.model import InvalidTask, NoDueTime, TaskKey, read_task
from chalicelib.tasks.store import TaskStore
from chalicelib.throttle import error_code
from chalicelib.web import bad_request, not_found

MAX_KEY_TEXT = 4096


def parse_key(text: str, source: TaskSource) -> TaskKey:
    """The item key of a URL's ``key``; InvalidTask (field ``key``) when it is not one."""
    raw = text if _json_object(text) else unquote(text)
    if len(raw) > MAX_KEY_TEXT:
        raise InvalidTask("key", f"key is longer than {MAX_KEY_TEXT} characters")
    data = _json_object(raw)
    if data is None:
        if len(source.key) != 1:
            raise InvalidTask("key", 'key must be the item\'s key as a JSON object, e.g. {"PK": "a", "SK": "b"}')
        data = {source.key[0]: raw}
    keys: dict[str, Any] = {}
    for name, value in data.items():
        if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("S", "N", "B"):
            keys[name] = value
        elif isinstance(value, str):
            keys[name] = {"S": value}
        elif isinstance(value, int | float) and not isinstance(value, bool):
            keys[name] = {"N": str(value)}
        else:
            raise InvalidTask("key", f"key attribute {name!r} must be a string, a number or DynamoDB JSON")
    try:
        key = TaskKey.of_source(source.name, ddb.binary_as_bytes(keys))
    except ValueError as exc:
        raise InvalidTask("key", f"key is not valid: {exc}") from exc
    for name, value in ddb.binary_as_bytes(keys).items():
        kind, raw = next(iter(value.items()))
        size = len(raw) if kind == "B" else len(str(raw).encode("utf-8", "surrogatepass"))
        if not 0 < size <= items.MAX_PARTITION_KEY_BYTES:
            raise InvalidTask("key", f"key attribute {name!r} must be 1-{items.MAX_PARTITION_KEY_BYTES} bytes")
    record = items.record_key(key.task_id)
    if not items.fits_key(record["PK"], record["SK"]):
        raise InvalidTask("key", "key is too long to be a task source item's key")
    if source.key and set(keys) != set(source.key):
        raise InvalidTask("key", f"key must name exactly {', '.join(source.key)}")
    return key


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def key_of(deps: Deps, source_name: str, key_text: str) -> TaskKey:
    """The key of a source's item from a URL's ``source`` and ``key``: 404 for a source the stage does not
    declare, 400 for a key that is not one."""
    source = deps.settings.source(unquote(source_name))
    if source is None:
        raise not_found("task source", source_name, "source")
    try:
        return parse_key(key_text, source)
    except InvalidTask as exc:
        raise bad_request(exc.field, exc.message) from exc


def show(deps: Deps, source_name: str, key_text: str) -> tuple[int, dict[str, Any]]:
    key = key_of(deps, source_name, key_text)
    source = deps.settings.source(key.source)
    assert source is not None
    store = TaskStore(deps)
    try:
        item = store.get_item(key)
    except ClientError as exc:
        if error_code(exc) != "ValidationException":
            raise
        raise bad_request("key", f"key does not match the key schema of table {source.table!r}") from exc
    record = store.get_record(key.task_id)
    if item is None and record is None:
        raise not_found("task", key.task_id, "key")
    shown: dict[str, Any]
    if item is None:  # ran and gone (a lazy item), or deleted by a user (CANCELLED): its record tells
        assert record is not None
        shown = items.view_of_record(record)
    else:
        try:
            shown = items.view_of_task(read_task(item, key, deps.settings), record, now=deps.clock(),
                                       lease_seconds=deps.settings.task_claim_lease_seconds)
        except NoDueTime as exc:  # a lazy item that no longer expires: the task it was, if any, was cancelled
            shown = items.view_of_record(record) if record is not None else _invalid(key, exc)
        except InvalidTask as exc:
            shown = _invalid(key, exc)
    stream_dead_letters.show_in(shown, stream_dead_letters.shown(record, item, shown))
    return 200, {"source": source.name, "key": json.loads(key.pk), "task": shown}


def _invalid(key: TaskKey, exc: InvalidTask) -> dict[str, Any]:
    return {"id": key.task_id, "status": None, "created_at": None,
            "error": f"the item is not a valid task: {exc.message}", "field": exc.field}

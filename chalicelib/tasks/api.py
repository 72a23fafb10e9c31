"""The task routes' domain side: create, show, list, cancel and reschedule tasks.

Each function returns (HTTP status, body) or raises ``ApiError``; an
``InvalidTask`` from the model becomes a 400 naming its field.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote

from chalicelib.aws import Deps
from chalicelib.log import logger
from chalicelib.settings import DUE_EPOCH_ATTRIBUTE, STATE_TTL_ATTRIBUTE
from chalicelib.tasks import history, items, lifecycle, stream_dead_letters
from chalicelib.tasks.items import LISTED, LISTED_STATUSES
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import (
    TASK_ID,
    InvalidTask,
    NoDueTime,
    Strategy,
    Task,
    TaskKey,
    check_action_target,
    check_callback_targets,
    iso,
    task_from_item,
)
from chalicelib.tasks.store import TaskStore, delete, put, set_attributes, update
from chalicelib.web import ApiError, bad_request, not_found, reject_unknown

T = TypeVar("T")

LIST_LIMIT_DEFAULT = 20
LIST_LIMIT_MAX = 50
WHOLE_NUMBER = re.compile(r"[0-9]{1,6}")  # ASCII digits only: str.isdigit() also takes "²", which int() refuses


def _valid(call: Callable[[], T]) -> T:
    try:
        return call()
    except InvalidTask as exc:
        raise bad_request(exc.field, exc.message) from exc


def conflict(message: str, field: str = "id") -> ApiError:
    return ApiError(409, message, field)


def _key_of(task_id: str) -> TaskKey | None:
    """The item key of a task id: ``<id>`` for API tasks, ``<PK>|<SK>`` for items written by other programs.

    The id is URL-decoded once more: depending on the front end a path parameter arrives encoded or not,
    and an API id never contains ``%``."""
    task_id = unquote(task_id)
    if TASK_ID.fullmatch(task_id):
        return TaskKey.for_id(task_id)
    pk, sep, sk = task_id.partition("|")
    key = TaskKey(pk, sk) if sep and pk and sk else None
    # DynamoDB refuses a key over its limits (measured in UTF-8 bytes) with a ValidationException: such an
    # item, or its record in the state table, cannot exist.
    record = items.record_key(key.task_id) if key is not None else {}
    if key is None or not items.fits_key(key.pk, key.sk) or not items.fits_key(record["PK"], record["SK"]):
        return None
    return key


def _view(deps: Deps, task_id: str, item: dict[str, Any] | None, record: dict[str, Any] | None) -> dict[str, Any]:
    view = _plain_view(deps, task_id, item, record)
    stuck = _dead_letter(record, view)
    if stuck is not None:
        view["dead_letter"] = stuck
        return view
    return stream_dead_letters.show_in(view, stream_dead_letters.shown(record, item, view))


def _dead_letter(record: dict[str, Any] | None, view: dict[str, Any]) -> dict[str, Any] | None:
    """Why a task ``view`` shows PENDING or RUNNING will not run (its due message was dead-lettered,
    ``chalicelib.tasks.dead_letters``), or None: the note is of its current due time only."""
    note = (record or {}).get("dead_letter")
    if not isinstance(note, dict) or note.get("run_at") != view.get("run_at") or str(view.get("status")) not in (
            State.PENDING.value, State.RUNNING.value, State.DEAD_LETTERED.value):
        return None
    return {k: note.get(k) for k in ("run_at", "at", "reason", "receive_count", "claim")}


def _plain_view(deps: Deps, task_id: str, item: dict[str, Any] | None,
                record: dict[str, Any] | None) -> dict[str, Any]:
    if record is not None and (item is None or (lifecycle.state_of(record) is State.CANCELLED
                                                and not items.cancelled_by_item(record))):
        return items.view_of_record(record)
    assert item is not None
    created_at = record.get("created_at") if record else None
    try:
        return items.view_of_task(task_from_item(item, deps.settings), record, now=deps.clock(),
                                  lease_seconds=deps.settings.task_claim_lease_seconds)
    except InvalidTask as exc:
        if isinstance(exc, NoDueTime) and record is not None:  # a lazy item that no longer expires: its record
            return items.view_of_record(record)
        return {"id": task_id, "status": shown_status(record, None), "created_at": created_at,
                "error": f"the item is not a valid task: {exc.message}", "field": exc.field}


def create(deps: Deps, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
    if body is None:
        raise bad_request("body", "a JSON object body is required")
    reject_unknown(body, set(items.CREATE_FIELDS))
    settings, store = deps.settings, TaskStore(deps)
    request = _valid(lambda: items.parse_request(body, settings))
    _valid(lambda: check_action_target(request.action, settings))
    _valid(lambda: check_callback_targets({"on_success": request.on_success, "on_failure": request.on_failure},
                                          settings))
    fingerprint = request.fingerprint()
    if request.id is not None:
        replay = _replay(deps, store, request.id, fingerprint)
        if replay is not None:
            return replay
    now = deps.clock()
    _valid(lambda: items.check_not_past(request.due, now, settings.past_due_grace_seconds))
    task_id = request.id or items.new_task_id()
    item = items.new_item(task_id, request, settings, now)
    task = task_from_item(item, settings)
    record = items.record_of(task, item["created_at"], fingerprint)
    if store.transact([put(store.tasks_table, item, "attribute_not_exists(PK)"), store.create(record)]):
        logger.info("task created", extra={"task_id": task_id, "strategy": task.strategy.value,
                                            "run_at": iso(task.due)})
        return 201, items.view_of_task(task, record)
    replay = _replay(deps, store, task_id, fingerprint)
    if replay is not None:
        return replay
    raise conflict(f"an item with key {TaskKey.for_id(task_id).pk!r} exists already and was not created by the API")


def _replay(deps: Deps, store: TaskStore, task_id: str, fingerprint: str) -> tuple[int, dict[str, Any]] | None:
    """200 and the task for a repeated POST; 409 if the id is taken by another body; None if it is free."""
    record = store.get_record(task_id)
    if record is None:
        return None
    if record.get("fingerprint") != fingerprint:
        raise conflict(f"task {task_id!r} exists with a different body")
    return 200, _view(deps, task_id, store.get_item(TaskKey.for_id(task_id)), record)


def _lookup(deps: Deps, task_id: str) -> tuple[TaskKey, dict[str, Any] | None, dict[str, Any] | None]:
    """(key, item, record) of a known task; 404 when neither the item nor its record exists."""
    key = _key_of(task_id)
    if key is None:
        raise not_found("task", task_id)
    store = TaskStore(deps)
    item, record = store.get_item(key), store.get_record(key.task_id)
    if item is None and record is None:
        raise not_found("task", task_id)
    expired = items.expired_record(key, item, record, deps.clock())
    if expired is not None:
        raise ApiError(404, expired, "id")
    return key, item, record


def show(deps: Deps, task_id: str) -> tuple[int, dict[str, Any]]:
    key, item, record = _lookup(deps, task_id)
    return 200, _view(deps, key.task_id, item, record)


def show_history(deps: Deps, task_id: str, query: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """``GET /tasks/{id}/history``: the task's executions and the operator's changes, oldest first, as its record
    keeps them (``chalicelib.tasks.history``); 404 for a task that does not exist."""
    reject_unknown(query or {}, set())
    key, _, record = _lookup(deps, task_id)
    return 200, history.shown(record, key.task_id)


def list_tasks(deps: Deps, query: dict[str, str] | None) -> tuple[int, dict[str, Any]]:
    query = query or {}
    reject_unknown(query, {"status", "limit", "next_token", "source"})
    statuses: tuple[State, ...] = LISTED_STATUSES
    if "status" in query:
        # ASCII only: str.upper() also makes "PENDING" of "pend\u0131ng" (a dotless i), which the document refuses.
        wanted = query["status"].upper() if query["status"].isascii() else ""
        if wanted not in {s.value for s in LISTED_STATUSES}:
            raise bad_request("status", "status must be one of " + ", ".join(s.value for s in LISTED_STATUSES)
                              + " (running tasks are listed as PENDING)")
        statuses = (State(wanted),)
    source = query.get("source")
    if source is not None and source not in (items.API_SOURCE, items.ITEMS_SOURCE) \
            and deps.settings.source(source) is None:
        raise bad_request("source", f"source must be {items.API_SOURCE} (the API's tasks), {items.ITEMS_SOURCE} "
                                    "(other programs' items in the tasks table) or a task source the stage declares"
                                    " (TASK_SOURCES)")
    limit = LIST_LIMIT_DEFAULT
    if "limit" in query:
        if not WHOLE_NUMBER.fullmatch(query["limit"]) or not 1 <= int(query["limit"]) <= LIST_LIMIT_MAX:
            raise bad_request("limit", f"limit must be a whole number from 1 to {LIST_LIMIT_MAX}")
        limit = int(query["limit"])
    partition, after = 0, None
    if query.get("next_token"):
        partition, status, after = _valid(lambda: items.decode_token(query["next_token"], len(statuses)))
        if status != statuses[partition].value:
            raise bad_request("next_token", "next_token belongs to a listing with another status")
        if after is not None and statuses[partition].value in items.INDEXED_STATUSES \
                and not items.listed_in(after, source):
            raise bad_request("next_token", "next_token belongs to a listing of another source")
    store = TaskStore(deps)
    ids: list[str] = []
    next_token: str | None = None
    while partition < len(statuses) and len(ids) < limit:
        page, last = store.list_status(statuses[partition], after, limit - len(ids), source)
        ids.extend(page)
        if last is not None:
            after = last
            if len(ids) >= limit:
                next_token = items.encode_token(partition, statuses[partition].value, last)
        else:
            partition, after = partition + 1, None
            if len(ids) >= limit and partition < len(statuses):
                next_token = items.encode_token(partition, statuses[partition].value, None)
    ids = list(dict.fromkeys(ids))  # a task that moved to a later status while the statuses were read: once
    found_items, found_records = store.get_many(ids)
    now = deps.clock()
    tasks = [_listed_view(deps, i, found_items.get(i), found_records.get(i))
             for i in ids if (i in found_items or i in found_records)
             and items.expired_record(TaskKey.for_id(i), found_items.get(i), found_records.get(i), now) is None]
    return 200, {"tasks": tasks, "next_token": next_token}


def _listed_view(deps: Deps, task_id: str, item: dict[str, Any] | None, record: dict[str, Any] | None) -> dict[str, Any]:
    """A listed task: an API task as GET /tasks/{id} shows it; a task not made by the API (a source's, another
    program's) as its record says, with its ``source`` and why it is DEAD_LETTERED (its item is not read: the
    listing reads one table)."""
    if record is not None and record.get(LISTED, "").startswith(items.LISTED_SOURCE_MARK):
        listed = str(record[LISTED])
        view = {**items.view_of_record(record), "source": listed[1:listed.index("#")] or items.ITEMS_SOURCE}
        stuck = _dead_letter(record, view)
        if stuck is not None:
            view["dead_letter"] = stuck
            return view
        return stream_dead_letters.show_in(view, stream_dead_letters.listed(record))
    return _view(deps, task_id, item, record)


def _current(deps: Deps, task_id: str) -> tuple[TaskKey, dict[str, Any] | None, dict[str, Any] | None, Task | None]:
    """(key, item, record, task); the task is None when the item is gone or is not a valid task.

    An item that is not a valid task and was not made by the API (no record) is no task to change: 400,
    naming the item's attribute at fault."""
    key, item, record = _lookup(deps, task_id)
    task = None
    if item is not None:
        try:
            task = task_from_item(item, deps.settings)
        except InvalidTask as exc:
            if record is None:
                raise bad_request(exc.field, f"the item {key.task_id!r} is not a valid task: {exc.message}") from exc
    return key, item, record, task


def shown_status(record: dict[str, Any] | None, task: Task | None) -> str:
    """The task's status as the API shows it (``lifecycle.state_of`` at its item's due time); without a valid
    item, its record's, a claim shown PENDING (its due time cannot be checked) and no record PENDING."""
    if task is not None:
        return lifecycle.state_of(record, iso(task.due)).value
    return lifecycle.state_of(record).recorded or State.PENDING.value


def cancel(deps: Deps, task_id: str, by: str = "api") -> tuple[int, dict[str, Any]]:
    """Delete the item (the stream deletes its schedule) and record the task as CANCELLED (``by``: the caller,
    kept in the task's history)."""
    key, item, record, task = _current(deps, task_id)
    status = shown_status(record, task)
    if status == State.CANCELLED.value:
        return 200, _view(deps, key.task_id, item, record)
    if status == State.RUNNING.value:
        raise conflict(f"task {key.task_id!r} is running; try again when it has finished")
    if status not in lifecycle.allowed_from("cancel"):
        raise conflict(f"task {key.task_id!r} is {status} and can no longer be cancelled")
    stuck = status == State.DEAD_LETTERED.value
    store, now = TaskStore(deps), deps.clock()
    new_record = dict(record or {})
    if task is not None:
        new_record.update(items.record_of(task, new_record.get("created_at") or task.item.get("created_at"),
                                          new_record.get("fingerprint")))
    new_record.update({**items.status_fields(key.task_id, State.CANCELLED.value), "finished_at": iso(now),
                       STATE_TTL_ATTRIBUTE: items.record_expiry(now, deps.settings),
                       **history.appended(record, history.operator_entry(history.CANCEL, by, now))})
    new_record.pop(items.CANCELLED_BY, None)  # the API's cancel stops a due message in flight, whatever came before
    if not store.transact([delete(store.tasks_table, {"PK": key.pk, "SK": key.sk}),
                           store.cancel(new_record, stuck)]):
        raise conflict(f"task {key.task_id!r} changed while being cancelled; read it and try again")
    logger.info("task cancelled", extra={"task_id": key.task_id})
    return 200, items.view_of_record(new_record)


def reschedule(deps: Deps, task_id: str, body: dict[str, Any] | None, by: str = "api") -> tuple[int, dict[str, Any]]:
    """Move the due time and/or replace the action of a pending task (the stream re-schedules it; ``by``: the
    caller, kept in the task's history)."""
    if body is None:
        raise bad_request("body", "a JSON object body is required: {run_at?, action?}")
    reject_unknown(body, set(items.PATCH_FIELDS))
    due, action = _valid(lambda: items.parse_patch(body))
    if action is not None:
        _valid(lambda: check_action_target(action, deps.settings))
    key, item, record, task = _current(deps, task_id)
    status = shown_status(record, task)
    stuck = status == State.DEAD_LETTERED.value
    if status not in lifecycle.allowed_from("reschedule"):
        hint = "; resume it first (POST /tasks/{id}/resume)" if status == State.PAUSED.value else ""
        raise conflict(f"task {key.task_id!r} is {status}; only a PENDING or DEAD_LETTERED task can be changed{hint}",
                       "status")
    if item is None:
        raise conflict(f"task {key.task_id!r} is due and being run; it can no longer be changed", "status")
    if task is None:
        raise conflict(f"the item of task {key.task_id!r} is not a valid task; write it again", "id")
    settings, store, now = deps.settings, TaskStore(deps), deps.clock()
    changes: dict[str, Any] = {}
    if due is not None:
        _valid(lambda: items.check_not_past(due, now, settings.past_due_grace_seconds))
        has_due = settings.due_attribute in item or task.strategy is not Strategy.LAZY
        changes.update(items.due_attributes(key, task.strategy, due, settings,
                                            item.get(settings.due_attribute), has_due))
    if action is not None:
        changes["action"] = action
    still_due, due_names, due_values = items.due_condition(task, settings)
    expression, names, values = set_attributes(changes)
    ops = [update(store.tasks_table, {"PK": key.pk, "SK": key.sk}, expression, still_due,
                  {**names, **due_names}, {**values, **due_values})]
    if due is not None and task.end_at is not None and due > task.end_at:
        raise bad_request("run_at", f"run_at {iso(due)} is after the task's end_at {iso(task.end_at)}")
    updated = task_from_item({**item, **changes}, settings)
    record_changes = {"run_at": iso(updated.due), "action": updated.action, "id": key.task_id,
                      "task_pk": key.pk, "task_sk": key.sk, **items.status_fields(key.task_id, State.PENDING.value)}
    listed = items.listed_of(key)
    if listed is not None:
        record_changes[items.LISTED] = listed
    record_changes.update(history.appended(record, history.operator_entry(history.RESCHEDULE, by, now,
                                                                           iso(updated.due))))
    ops.append(store.reschedule(key, record_changes, iso(task.due), stuck))
    if not store.transact(ops):
        raise conflict(f"task {key.task_id!r} changed while being rescheduled; read it and try again")
    logger.info("task rescheduled", extra={"task_id": key.task_id, "run_at": iso(updated.due),
                                            DUE_EPOCH_ATTRIBUTE: updated.due_epoch})
    return 200, items.view_of_task(updated, {**(record or {}), **record_changes, "moved_from": iso(task.due)})


# For the operator's routes (chalicelib.tasks.operations): a task's key, its view, and what it is now.
key_of = _key_of
view = _view
current = _current

__all__ = ["cancel", "create", "current", "key_of", "list_tasks", "reschedule", "show", "show_history", "view"]

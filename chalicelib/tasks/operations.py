"""The operator's routes: run a failed task again, pause and resume a recurring one.

- ``POST /tasks/{id}/retry`` (and ``/tasks/{source}/{key}/retry``) with ``{"retry_id"?, "run_at"?}``: a FAILED
  or DEAD_LETTERED task runs its failed due time again, once, as a fresh execution (its attempts counted anew,
  its retry policy's age from the retry's time), now or at ``run_at``.  The record is written first
  (``TaskStore.redrive``: PENDING, RETRYING until ``run_at``, ``retry_id`` kept), then the due message is sent
  (``not_before`` ``run_at``).  The same ``retry_id`` again (a response lost, two requests at once) answers 200
  and changes nothing, whatever became of the retry (the redrive's condition refuses a record carrying it); it
  sends the message again while the retry is not yet claimed (``awaits_retry``): the claim lets one delivery
  run it.  A task PENDING or RUNNING
  (or DONE, CANCELLED, PAUSED) is refused with 409.
- ``POST /tasks/{id}/pause``: a recurring task's occurrences are skipped (the executor's claim refuses a PAUSED
  record), none queued up; 409 for a one-time task (it has no occurrences to skip: cancel or reschedule it).
- ``POST /tasks/{id}/resume``: PENDING again from the next occurrence after now (the item's due time moves to it,
  in one transaction with the record, and the stream schedules it); an occurrence still ahead is kept.

Each returns (HTTP status, body) or raises ``ApiError``, as ``chalicelib.tasks.api`` does.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from chalicelib.aws import Deps
from chalicelib.log import logger
from chalicelib.tasks import api, history, items, lifecycle, source_api, timing
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import (
    DueMessage,
    InvalidTask,
    Strategy,
    Task,
    TaskKey,
    iso,
    parse_due,
    read_task,
    task_from_item,
)
from chalicelib.tasks.store import Execution, TaskStore, awaits_retry, set_attributes, update
from chalicelib.web import bad_request, not_found, reject_unknown

T = TypeVar("T")

RETRY_FIELDS = frozenset({"retry_id", "run_at"})
RETRY_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
RETRYABLE = lifecycle.allowed_from("retry")  # FAILED, DEAD_LETTERED


def retry(deps: Deps, task_id: str, body: dict[str, Any] | None, by: str = "api") -> tuple[int, dict[str, Any]]:
    """``POST /tasks/{id}/retry`` (``by``: the caller, ``auth.caller``, kept in the task's history)."""
    key = api.key_of(task_id)
    if key is None:
        raise not_found("task", task_id)
    return _retry(deps, key, body, by)


def retry_source(deps: Deps, source_name: str, key_text: str, body: dict[str, Any] | None,
                 by: str = "api") -> tuple[int, dict[str, Any]]:
    """``POST /tasks/{source}/{key}/retry``: the same, for the task of an item in a user's table."""
    return _retry(deps, source_api.key_of(deps, source_name, key_text), body, by)


def _retry(deps: Deps, key: TaskKey, body: dict[str, Any] | None, by: str) -> tuple[int, dict[str, Any]]:
    body = body or {}
    reject_unknown(body, set(RETRY_FIELDS))
    retry_id = body.get("retry_id") or uuid.uuid4().hex
    if not isinstance(retry_id, str) or not RETRY_ID.fullmatch(retry_id):
        raise bad_request("retry_id", "retry_id must be 1-128 characters of letters, digits and _ . : -")
    store, now = TaskStore(deps), deps.clock()
    record = store.get_record(key.task_id)
    if record is not None and record.get("retry_id") == retry_id:
        return _resend(deps, key, record, retry_id, "this retry was made already")
    item = store.get_item(key)
    if item is None and record is None:
        raise not_found("task", key.task_id)
    task = _task(deps, key, item)
    status = _status_of(deps, task, record)
    if status not in RETRYABLE or record is None:
        raise api.conflict(f"task {key.task_id!r} is {status}; only a FAILED or DEAD_LETTERED task can be retried",
                           "status")
    if task is None:
        raise api.conflict(f"the item of task {key.task_id!r} is gone or no longer a task; write it again", "id")
    due = parse_due(record.get("run_at"), "run_at")
    run_at = now
    if body.get("run_at") is not None:
        run_at = _field(lambda: parse_due(body["run_at"], "run_at"))
        _field(lambda: items.check_not_past(run_at, now, deps.settings.past_due_grace_seconds))
    if task.due != due:
        raise api.conflict(f"task {key.task_id!r} is due at {iso(task.due)} now, not at the time that failed "
                           f"({iso(due)}); it runs then", "id")
    run_at = max(run_at, due)
    kept = history.appended(record, history.operator_entry(history.RETRY, by, now, iso(due), run_at))
    if not store.redrive(key, due, run_at, retry_id, uuid.uuid4().hex, now, deps.settings.task_claim_lease_seconds,
                         kept):
        record = store.get_record(key.task_id)
        if record is not None and record.get("retry_id") == retry_id:  # a repeat of this retry got there first
            return _resend(deps, key, record, retry_id, "this retry was made already")
        if lifecycle.state_of(record) is State.DEAD_LETTERED and lifecycle.claim_is_live(
                record or {}, now, deps.settings.task_claim_lease_seconds):
            raise api.conflict(f"task {key.task_id!r} is DEAD_LETTERED with the claim its message left still live (a "
                               "worker may still be running its action); retry it once that claim's lease "
                               "(TASK_CLAIM_LEASE_SECONDS) has ended", "status")
        raise api.conflict(f"task {key.task_id!r} changed while being retried; read it and try again", "status")
    record = store.get_record(key.task_id) or {}
    logger.info("task retried", extra={"task_id": key.task_id, "retry_id": retry_id, "run_at": iso(run_at)})
    return _resend(deps, key, record, retry_id, "")


def _resend(deps: Deps, key: TaskKey, record: dict[str, Any], retry_id: str, note: str) -> tuple[int, dict[str, Any]]:
    """Send the retry's due message while the record is as the retry left it (``awaits_retry``: again, for a
    repeated request, so a lost message is recovered; the claim lets one delivery run it), and answer with the
    task as it is: 202 for the request whose write made the retry, 200 (``note``) for a repeat."""
    found = Execution.of(record)
    if awaits_retry(record, retry_id) and found.retry_due is not None and found.retry_at_ms is not None:
        run_at = datetime.fromtimestamp(found.retry_at_ms / 1000, deps.clock().tzinfo)
        message = DueMessage(key, parse_due(found.retry_due, "run_at"), not_before=run_at)
        delay = max(0, min(timing.MAX_DELAY_SECONDS, int((run_at - deps.clock()).total_seconds())))
        deps.clients.sqs.send_message(QueueUrl=deps.queue_url(deps.settings.due_queue),
                                      MessageBody=message.to_json(), DelaySeconds=delay)
    view = items.view_of_record(record)
    view["retry_id"] = record.get("retry_id")
    if note:
        view["note"] = note
    return (200 if note else 202), view


def pause(deps: Deps, task_id: str, by: str = "api") -> tuple[int, dict[str, Any]]:
    """``POST /tasks/{id}/pause`` (``by``: the caller, kept in the task's history)."""
    key, item, record, task = _recurring(deps, task_id, "paused")
    status = _status_of(deps, task, record)
    if status == State.PAUSED.value:
        return 200, api.view(deps, key.task_id, item, record)
    if status not in lifecycle.allowed_from("pause"):
        raise api.conflict(f"task {key.task_id!r} is {status}; only a PENDING task can be paused", "status")
    new_record = items.record_of(task, (record or {}).get("created_at") or task.item.get("created_at"))
    kept = history.appended(record, history.operator_entry(history.PAUSE, by, deps.clock()))
    if not TaskStore(deps).pause(key, new_record, iso(task.due), deps.clock(), kept):
        raise api.conflict(f"task {key.task_id!r} is running or changed while being paused; read it and try again",
                           "status")
    logger.info("task paused", extra={"task_id": key.task_id})
    store = TaskStore(deps)
    return 200, api.view(deps, key.task_id, store.get_item(key), store.get_record(key.task_id))


def resume(deps: Deps, task_id: str, by: str = "api") -> tuple[int, dict[str, Any]]:
    """``POST /tasks/{id}/resume``: from the next occurrence after now (``by``: the caller, kept in the task's
    history)."""
    key, item, record, task = _recurring(deps, task_id, "resumed")
    status = _status_of(deps, task, record)
    if status not in lifecycle.allowed_from("resume"):
        if status == State.PENDING.value:
            return 200, api.view(deps, key.task_id, item, record)
        raise api.conflict(f"task {key.task_id!r} is {status}; only a PAUSED task can be resumed", "status")
    now, store, settings = deps.clock(), TaskStore(deps), deps.settings
    runs = int((record or {}).get("occurrences", 0) or 0)  # a recurring task's runs so far (max_occurrences)
    next_due = task.due if task.due > now else timing.next_due(task, now, runs)
    if next_due is None:
        raise api.conflict(f"task {key.task_id!r} has no occurrence after now; cancel it", "recurrence")
    ops: list[dict[str, Any]] = []
    moved_from = None
    if next_due != task.due:
        moved_from = iso(task.due)
        has_due = settings.due_attribute in task.item or task.strategy is not Strategy.LAZY
        changes = items.due_attributes(key, task.strategy, next_due, settings, task.item.get(settings.due_attribute),
                                       has_due)
        still_due, due_names, due_values = items.due_condition(task, settings)
        expression, names, values = set_attributes(changes)
        ops.append(update(store.tasks_table, {"PK": key.pk, "SK": key.sk}, expression, still_due,
                          {**names, **due_names}, {**values, **due_values}))
    kept = history.appended(record, history.operator_entry(history.RESUME, by, now, iso(next_due)))
    ops.append(store.resume(key, iso(next_due), moved_from, kept))
    if not store.transact(ops):
        raise api.conflict(f"task {key.task_id!r} changed while being resumed; read it and try again", "status")
    logger.info("task resumed", extra={"task_id": key.task_id, "run_at": iso(next_due)})
    return 200, api.view(deps, key.task_id, store.get_item(key), store.get_record(key.task_id))


def _recurring(deps: Deps, task_id: str, verb: str) -> tuple[TaskKey, dict[str, Any], dict[str, Any] | None, Task]:
    """(key, item, record, task) of a recurring task in the tasks table; 409 for a one-time task, whose one
    occurrence cannot be skipped and come back: cancel it, or move it (PATCH)."""
    key, item, record, task = api.current(deps, task_id)
    if item is None or task is None:
        raise api.conflict(f"task {key.task_id!r} has no item to be {verb} (it ran, expired or was cancelled)", "id")
    if not task.recurrence:
        raise api.conflict(f"task {key.task_id!r} is a one-time task: only a recurring task's occurrences can be "
                           f"{verb} (cancel a one-time task, or move it with PATCH)", "recurrence")
    return key, item, record, task


def _task(deps: Deps, key: TaskKey, item: dict[str, Any] | None) -> Task | None:
    if item is None:
        return None
    try:
        return read_task(item, key, deps.settings) if key.source else task_from_item(item, deps.settings)
    except InvalidTask:
        return None


def _status_of(deps: Deps, task: Task | None, record: dict[str, Any] | None) -> str:
    if task is None:
        return api.shown_status(record, None)
    return lifecycle.state_of(record, iso(task.due), deps.clock(), deps.settings.task_claim_lease_seconds).value


def _field(call: Callable[[], T]) -> T:
    try:
        return call()
    except InvalidTask as exc:
        raise bad_request(exc.field, exc.message) from exc


__all__ = ["pause", "resume", "retry", "retry_source"]

"""The executor: runs each due task once, on time, from the due queue.

For every message (``model.DueMessage``):

1. Never early: a message a second or more ahead goes back to the queue with
   the remaining delay (at most 900 s a hop); under a second, it is waited out.
2. The task is read from its item, or from the message's ``snapshot`` when the
   item is gone (a lazy task's TTL deleted it).  Skipped: a task cancelled,
   finished, or rescheduled (its due time no longer matches the message's; the
   new time has its own message).
3. The execution (task, due time) is claimed with a conditional write in the
   state table: a duplicate delivery finds the claim and stops; a claim held by
   a live worker sends the message back until its lease ends, then it may be
   taken over.
4. The action runs, retried with backoff up to TASK_MAX_ATTEMPTS.  The outcome
   is written to the item (and record, and status index) in one transaction: a
   recurring task gets its next due time (which re-schedules it through the
   stream), a failed one is FAILED, dead-lettered and alerted.

An unreadable message is dead-lettered, not failed; a message whose handling
raised is reported in ``batchItemFailures`` so only it is redelivered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from chalicelib import alerts
from chalicelib.aws import Deps
from chalicelib.deadletter import dead_letter
from chalicelib.log import logger
from chalicelib.settings import Settings
from chalicelib.tasks import actions, items, timing
from chalicelib.tasks.model import DueMessage, InvalidTask, Status, Strategy, Task, iso, task_from_item
from chalicelib.tasks.store import TaskStore, delete, put, set_attributes, update

SOURCE = "task_executor"


def run_batch(deps: Deps, records: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, str]]]:
    """Process an SQS batch; the ids of the messages to redeliver, as Lambda's partial batch response."""
    failures: list[dict[str, str]] = []
    for record in records:
        message_id = str(record.get("messageId", ""))
        try:
            outcome = execute(deps, str(record.get("body", "")), message_id)
            logger.info("due message handled", extra={"message_id": message_id, "outcome": outcome})
        except Exception:
            logger.exception("due message failed; it will be redelivered", extra={"message_id": message_id})
            failures.append({"itemIdentifier": message_id})
    return {"batchItemFailures": failures}


def skip_reason(task: Task, message: DueMessage, record: dict[str, Any] | None) -> str | None:
    """Why a due message must not run its task, or None. Pure.

    Due times match to the second: the interval processor sends ``due_epoch`` (whole seconds)."""
    if task.due_epoch != int(message.due.timestamp()):
        return "rescheduled"
    due = iso(task.due)
    if record is not None and record.get("status") == Status.CANCELLED.value and record.get("run_at") == due:
        return "cancelled"
    if task.status.finished:
        return task.status.value.lower()
    if message.snapshot is not None and record is not None and record.get("run_at") == due \
            and record.get("status") in (Status.DONE.value, Status.FAILED.value):
        return str(record["status"]).lower()
    return None


def execute(deps: Deps, body: str, message_id: str) -> str:
    """Handle one due message; returns what happened (for the log and the tests)."""
    settings = deps.settings
    try:
        message = DueMessage.from_json(body)
    except InvalidTask as exc:
        dead_letter(deps, settings.task_dlq, SOURCE, message_id, f"unreadable due message: {exc.message}", body)
        return "dead-lettered"
    arrival = timing.arrival(message.due, deps.clock())
    if arrival.kind == "requeue":
        _send_back(deps, message, int(arrival.seconds))
        return "requeued"
    if arrival.kind == "wait":
        deps.sleep(arrival.seconds)
    store = TaskStore(deps)
    item = message.snapshot if message.snapshot is not None else store.get_item(message.key)
    if item is None:
        return "skipped: gone"
    try:
        task = task_from_item(item, settings)
    except InvalidTask as exc:
        dead_letter(deps, settings.task_dlq, SOURCE, message_id,
                    f"task {message.key.task_id} is not a valid task: {exc.message}", _payload(body))
        return "dead-lettered"
    record = store.get_record(task.id)
    reason = skip_reason(task, message, record)
    if reason:
        return "skipped: " + reason
    early = (task.due - deps.clock()).total_seconds()
    if early > 0:  # the message's time was rounded down to the second
        deps.sleep(early)
    claim = store.claim(task.id, task.due, deps.clock(), settings.task_claim_lease_seconds)
    if not claim.won:
        if claim.state == Status.RUNNING.value:
            _send_back(deps, message, timing.claim_held_delay(
                claim.claimed_at, settings.task_claim_lease_seconds, deps.clock()))
            return "requeued: claimed by another worker"
        return "skipped: " + (claim.state.lower() or "claimed")
    if message.snapshot is None and not _mark_running(deps, store, task):
        store.settle_claim(task.id, task.due, "SKIPPED", 0)
        return "skipped: changed"
    result, error, attempts = _run_with_retries(deps, task)
    status = Status.DONE if error is None else Status.FAILED
    _record_outcome(deps, store, task, message, record, status, attempts, result, error)
    store.settle_claim(task.id, task.due, status.value, attempts)
    if status is Status.FAILED:
        dead_letter(deps, settings.task_dlq, SOURCE, message_id,
                    f"task {task.id} failed after {attempts} attempts: {error}", _payload(body))
        alerts.publish(deps, f"Task {task.id} failed after {attempts} attempts", {
            "task_id": task.id, "due": iso(task.due), "action": task.action["type"],
            "attempts": attempts, "error": error})
        return "failed"
    return "done"


def _payload(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body


def _send_back(deps: Deps, message: DueMessage, delay: int) -> None:
    deps.clients.sqs.send_message(
        QueueUrl=deps.queue_url(deps.settings.due_queue),
        MessageBody=replace(message, hops=message.hops + 1).to_json(), DelaySeconds=delay)


def _due_condition(settings: Settings, task: Task) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The item still has the due value this task was read with."""
    name = settings.due_attribute if settings.due_attribute in task.item else settings.ttl_attribute
    return "attribute_exists(PK) AND #due = :due", {"#due": name}, {":due": task.item.get(name)}


def _mark_running(deps: Deps, store: TaskStore, task: Task) -> bool:
    condition, names, values = _due_condition(deps.settings, task)
    return store.update_item(
        task.key, {"status": Status.RUNNING.value},
        condition + " AND (attribute_not_exists(#s) OR #s IN (:pending, :running))",
        {**names, "#s": "status"}, {**values, ":pending": Status.PENDING.value, ":running": Status.RUNNING.value})


def _run_with_retries(deps: Deps, task: Task) -> tuple[dict[str, Any] | None, str | None, int]:
    """(result, None, attempts) on success; (None, last error, attempts) when every attempt failed."""
    limit = deps.settings.task_max_attempts
    error = ""
    for attempt in range(1, limit + 1):
        try:
            return actions.run_action(deps, task.action), None, attempt
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            logger.warning("task action failed", extra={"task_id": task.id, "attempt": attempt, "error": error})
            if attempt < limit:
                deps.sleep(timing.retry_delay(attempt))
    return None, error, limit


def outcome_changes(task: Task, status: Status, attempts: int, result: dict[str, Any] | None,
                    error: str | None, next_due: datetime | None, now: datetime,
                    settings: Settings) -> tuple[dict[str, Any], list[str]]:
    """(attributes to set, attributes to remove) on the item after a run. Pure."""
    if status is Status.DONE and next_due is not None:
        has_due = settings.due_attribute in task.item or task.strategy is not Strategy.LAZY
        changes: dict[str, Any] = {
            "status": Status.PENDING.value, "attempts": 0, "last_result": result, "last_run_at": iso(now),
            **items.due_attributes(task.key, task.strategy, next_due, settings,
                                   task.item.get(settings.due_attribute), has_due)}
        return changes, ["last_error"]
    changes = {"status": status.value, "attempts": attempts, "finished_at": iso(now), "last_run_at": iso(now)}
    if result is not None:
        changes["last_result"] = result
    if error is not None:
        changes["last_error"] = error
    # A finished interval task leaves the sparse bucket index, so the processor never reads it again.
    return changes, [settings.bucket_attribute]


def _record_outcome(deps: Deps, store: TaskStore, task: Task, message: DueMessage,
                    record: dict[str, Any] | None, status: Status, attempts: int,
                    result: dict[str, Any] | None, error: str | None) -> None:
    settings, now = deps.settings, deps.clock()
    next_due = timing.next_due(task, now) if status is Status.DONE else None
    changes, removed = outcome_changes(task, status, attempts, result, error, next_due, now, settings)
    after = {k: v for k, v in {**task.item, **changes}.items() if k not in removed}
    ops: list[dict[str, Any]] = []
    if message.snapshot is None:
        condition, names, values = _due_condition(settings, task)
        expression, set_names, set_values = set_attributes(changes, removed)
        ops.append(update(store.tasks_table, {"PK": task.key.pk, "SK": task.key.sk}, expression,
                          condition, {**names, **set_names}, {**values, **set_values}))
    elif next_due is not None:  # a lazy task recurs: its item comes back with the next TTL
        ops.append(put(store.tasks_table, after, "attribute_not_exists(PK)"))
    if record is not None or task.strategy is Strategy.LAZY:
        updated = task_from_item(after, settings)
        created_at = (record or {}).get("created_at") or task.item.get("created_at")
        new_record = items.record_of(updated, created_at, (record or {}).get("fingerprint"),
                                     last_result=result, last_error=error, last_run_at=iso(now))
        if updated.status.finished:
            new_record["finished_at"] = iso(now)
        ops.append(put(store.state_table, new_record, "attribute_not_exists(PK) OR NOT (#s = :cancelled AND run_at = :due)",
                       {"#s": "status"}, {":cancelled": Status.CANCELLED.value, ":due": iso(task.due)}))
        if created_at and record is not None and record.get("status") == Status.PENDING.value \
                and updated.status.finished:
            ops.append(delete(store.state_table, items.index_key(Status.PENDING, created_at, task.id)))
            ops.append(put(store.state_table, {**items.index_key(updated.status, created_at, task.id), "id": task.id}))
    if ops and not store.transact(ops):
        logger.warning("task changed while it ran; its outcome was not recorded",
                       extra={"task_id": task.id, "status": status.value})


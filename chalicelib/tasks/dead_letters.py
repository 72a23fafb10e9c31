"""Due messages SQS gave up on: the task shows why, an alert goes out once, a human gets the message.

After MAX_RECEIVE_COUNT failed deliveries SQS moves a due message from the due
queue to DUE_DLQ (deploy/provision.py).  For each such message:

1. Moot?  The message no longer stands for a waiting execution when the
   execution of its due time is settled on the task's record (DONE, FAILED:
   another delivery ran it), a later due time was claimed since (an older
   occurrence's message), the item is gone, or the task was rescheduled,
   cancelled or finished (the executor's ``skip_reason``).  It is only
   forwarded.
2. Otherwise one alert goes out (with a ``dedupe_id``),
3. the message is forwarded to TASK_DLQ with the reason, for a human, and
4. the task's record in the state table (``TASK#<id>`` / ``RECORD``; made for
   a task written by another program) gets ``dead_letter``: the due time,
   when, the receive count SQS reported, the state its claim was left in
   (RUNNING: a worker claimed it and failed or died; none: it never got that
   far), the reason and the message id.  ``GET /tasks/{id}`` shows it, and
   such a task can be cancelled or rescheduled even when its item says
   RUNNING.

A redelivery that finds the note of its own message does nothing; another
message for the same execution is only forwarded.  A worker that died (or
failed) after sending and before noting leaves its redelivery to send the
alert and the forward again, with the same ``dedupe_id`` -- the window
docs/executor.md's "Dead-lettered due messages" documents.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from chalicelib import alerts
from chalicelib.aws import Deps
from chalicelib.deadletter import dead_letter
from chalicelib.log import about, logger
from chalicelib.tasks.executor import skip_reason
from chalicelib.tasks.model import DueMessage, InvalidTask, Status, iso, read_task
from chalicelib.tasks.store import SETTLED, Execution, TaskStore, due_ms

SOURCE = "due_dead_letter"


def run_batch(deps: Deps, records: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, str]]]:
    """Handle an SQS batch of DUE_DLQ; the ids of the messages to redeliver (partial batch response)."""
    failures: list[dict[str, str]] = []
    for record in records:
        with about(task_id=_task_id_of(record)):  # every line of this message names its task
            failures += _handle_record(deps, record)
    return {"batchItemFailures": failures}


def _task_id_of(record: dict[str, Any]) -> str:
    try:
        return DueMessage.from_json(str(record.get("body", ""))).key.task_id
    except InvalidTask:
        return ""


def _handle_record(deps: Deps, record: dict[str, Any]) -> list[dict[str, str]]:
    message_id = str(record.get("messageId", ""))
    attributes = record.get("attributes")
    receives = (attributes or {}).get("ApproximateReceiveCount", "") if isinstance(attributes, dict) else ""
    try:
        outcome = handle(deps, str(record.get("body", "")), message_id, str(receives))
        logger.info("dead-lettered due message handled", extra={"message_id": message_id, "outcome": outcome})
        return []
    except Exception:
        logger.exception("dead-lettered due message failed; it will be redelivered",
                         extra={"message_id": message_id})
        return [{"itemIdentifier": message_id}]


def handle(deps: Deps, body: str, message_id: str, receive_count: str = "") -> str:
    """One dead-lettered due message; returns what happened (for the log and the tests)."""
    task_dlq = deps.settings.task_dlq
    try:
        message = DueMessage.from_json(body)
    except InvalidTask as exc:
        dead_letter(deps, task_dlq, SOURCE, message_id, f"a dead-lettered due message is unreadable: {exc.message}",
                    body)
        return "forwarded: unreadable"
    store = TaskStore(deps)
    task_id, due = message.key.task_id, iso(message.due)
    dedupe_id = f"due-dead-lettered:{task_id}:{due}"
    payload = _payload(body)
    record = store.get_record(task_id)
    execution = Execution.of(record)
    moot = _moot(deps, store, message, record, execution)
    if moot:
        dead_letter(deps, task_dlq, SOURCE, message_id, f"due message of task {task_id} for {due} dead-lettered "
                    f"after the execution no longer waited for it ({moot})", payload, dedupe_id=dedupe_id)
        return "forwarded: " + moot
    state = execution.state if execution.of_due(due) and execution.state else "none"
    reason = (f"the due message of task {task_id} for {due} failed every delivery (SQS receive count "
              f"{receive_count or 'unknown'}); its claim was left {state}; see the task_executor logs")
    found = (record or {}).get("dead_letter")
    noted = found if isinstance(found, dict) and found.get("run_at") == due else None
    if noted is not None and noted.get("message_id") == message_id:
        return "already handled"  # a redelivery of a message handled in full
    if noted is None:
        alerts.publish(deps, f"Task {task_id} will not run: its due message was dead-lettered", {
            "task_id": task_id, "due": due, "receive_count": receive_count, "claim": state, "reason": reason,
            "dedupe_id": dedupe_id})
    dead_letter(deps, task_dlq, SOURCE, message_id, reason, payload, dedupe_id=dedupe_id)
    if noted is None:
        store.note_dead_letter(message.key, message.due, {
            "run_at": due, "at": iso(deps.clock()), "receive_count": receive_count, "claim": state,
            "reason": reason, "message_id": message_id})
    return "noted" if noted is None else "forwarded: noted already"


def _moot(deps: Deps, store: TaskStore, message: DueMessage, record: dict[str, Any] | None,
          execution: Execution) -> str | None:
    """Why no execution waits for this message any more, or None when its task is stuck on it."""
    due = iso(message.due)
    if execution.of_due(due) and execution.state in SETTLED:
        return f"its execution is {execution.state.lower()}"
    if execution.due_ms is not None and execution.due_ms > due_ms(message.due):
        return "a later due time was claimed since"
    if record is not None and record.get("run_at") == due and record.get("status") == Status.CANCELLED.value:
        return "cancelled"
    if execution.moved_from == due:
        return "rescheduled"
    if message.carries_item:
        if record is not None and record.get("run_at") == due and Status(record.get("status", "PENDING")).finished:
            return str(record["status"]).lower()
        return None
    if message.key.source and deps.settings.source(message.key.source) is None:
        return None  # a source the stage no longer declares: shown as stuck
    item = store.get_item(message.key)
    if item is None:
        return "the task is gone"
    try:
        task = read_task(item, message.key, deps.settings)
    except InvalidTask:
        return None  # shown as stuck: the item needs writing again
    return skip_reason(task, message)


def _payload(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body

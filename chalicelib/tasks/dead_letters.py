"""Due messages SQS gave up on: the task shows why, an alert goes out once, a human gets the message.

After MAX_RECEIVE_COUNT failed deliveries SQS moves a due message from the due
queue to DUE_DLQ (deploy/provision.py).  For each such message:

1. Moot?  The message no longer stands for a waiting execution when the
   execution of its due time is settled on the task's record (DONE, FAILED:
   another delivery ran it), a later due time was claimed since (an older
   occurrence's message), the item is gone, or the task was rescheduled,
   cancelled or finished (the executor's ``skip_reason``).  It is only
   forwarded.
2. Otherwise one alert goes out (with a ``dedupe_id``; for a task that settles once,
   ``executor.settles_once``, with no claim to tell, it says the action may have run),
3. the message is forwarded to TASK_DLQ with the reason, for a human, and
4. the task's record in the state table (``TASK#<id>`` / ``RECORD``; made for
   a task written by another program) gets ``dead_letter``: the due time,
   when, the receive count SQS reported, the state its claim was left in
   (RUNNING: a worker claimed it and failed or died; none: it never got that
   far; for a task that settles once, which has no claim, its ``attempts``
   become the deliveries, each of which may have run the action), the reason
   and the message id.  ``GET /tasks/{id}`` shows it, and
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
from chalicelib.tasks import lifecycle
from chalicelib.tasks.executor import settles_once, skip_reason
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import DueMessage, InvalidTask, Task, iso, read_task
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
    moot, task = _moot(deps, store, message, record, execution)
    if moot:
        dead_letter(deps, task_dlq, SOURCE, message_id, f"due message of task {task_id} for {due} dead-lettered "
                    f"after the execution no longer waited for it ({moot})", payload, dedupe_id=dedupe_id)
        return "forwarded: " + moot
    state = execution.state if execution.of_due(due) and execution.state else "none"
    unclaimed = state == "none" and task is not None and settles_once(task, message)
    deliveries = deliveries_of(receive_count) if unclaimed else None
    reason = (f"the due message of task {task_id} for {due} failed every delivery (SQS receive count "
              f"{receive_count or 'unknown'}); its claim was left {state}; see the task_executor logs")
    subject = f"Task {task_id} will not run: its due message was dead-lettered"
    if unclaimed:  # one write, no claim: each delivery ran the action before its settle failed or it died
        reason = (f"the due message of task {task_id} for {due} failed every delivery (SQS receive count "
                  f"{receive_count or 'unknown'}); the action may have run (up to once a delivery, "
                  f"{deliveries if deliveries is not None else 'unknown'}: it runs without a claim, its target "
                  "drops a repeat) but no outcome was recorded; see the task_executor logs")
        subject = f"Task {task_id} may have run, its outcome unrecorded: its due message was dead-lettered"
    found = (record or {}).get("dead_letter")
    noted = found if isinstance(found, dict) and found.get("run_at") == due else None
    if noted is not None and noted.get("message_id") == message_id:
        return "already handled"  # a redelivery of a message handled in full
    if noted is None:
        alerts.publish(deps, subject, {
            "task_id": task_id, "due": due, "receive_count": receive_count, "claim": state, "reason": reason,
            "dedupe_id": dedupe_id})
    dead_letter(deps, task_dlq, SOURCE, message_id, reason, payload, dedupe_id=dedupe_id)
    if noted is None:
        store.note_dead_letter(message.key, message.due, {
            "run_at": due, "at": iso(deps.clock()), "receive_count": receive_count, "claim": state,
            "reason": reason, "message_id": message_id}, attempts=deliveries)
    return "noted" if noted is None else "forwarded: noted already"


def deliveries_of(receive_count: str) -> int | None:
    """The due queue's deliveries of a message DUE_DLQ's consumer received with ``receive_count`` (SQS keeps the
    count when it moves a message, and counts this receive too), or None when SQS did not say. Pure."""
    return max(1, int(receive_count) - 1) if receive_count.isdigit() else None


def _moot(deps: Deps, store: TaskStore, message: DueMessage, record: dict[str, Any] | None,
          execution: Execution) -> tuple[str | None, Task | None]:
    """(why no execution waits for this message any more, or None when its task is stuck on it; the task read
    from its item, when it was read)."""
    due = iso(message.due)
    if execution.of_due(due) and execution.state in SETTLED:
        return f"its execution is {execution.state.lower()}", None
    if execution.due_ms is not None and execution.due_ms > due_ms(message.due):
        return "a later due time was claimed since", None
    recorded = lifecycle.state_of(record)
    if record is not None and record.get("run_at") == due and recorded is State.CANCELLED:
        return "cancelled", None
    if execution.moved_from == due:
        return "rescheduled", None
    if message.carries_item:
        if record is not None and record.get("run_at") == due and recorded.finished:
            return recorded.value.lower(), None
        return None, None
    if message.key.source and deps.settings.source(message.key.source) is None:
        return None, None  # a source the stage no longer declares: shown as stuck
    item = store.get_item(message.key)
    if item is None:
        return "the task is gone", None
    try:
        task = read_task(item, message.key, deps.settings)
    except InvalidTask:
        return None, None  # shown as stuck: the item needs writing again
    return skip_reason(task, message), task


def _payload(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body

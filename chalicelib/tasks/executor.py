"""The executor: runs each due task once, on time, from the due queue.

For every message (``model.DueMessage``):

1. Never early: a message a second or more ahead goes back to the queue with
   the remaining delay (at most 900 s a hop); under a second, it is waited out.
2. The task is read from its item, or from the item image the message carries
   (or kept in the state table) when the item is gone (a lazy task's TTL
   deleted it).  Skipped: a task cancelled, finished, or rescheduled (its due
   time no longer matches the message's; the new time has its own message).
3. The execution (task, due time) is claimed with a conditional write in the
   state table: a duplicate delivery finds the claim and stops; a claim held by
   a live worker sends the message back until its lease ends, then it may be
   taken over.
4. The action runs, retried with backoff up to TASK_MAX_ATTEMPTS.  Its outcome
   is first kept on the claim (state ACTED): from then on a takeover never runs
   the action again, it only finishes recording it.
5. A failure is dead-lettered and alerted (each noted on the claim, so neither
   is lost nor repeated by a takeover); then the outcome is written to the item
   (and record, and status index) in one transaction -- a recurring task gets
   its next due time, which re-schedules it through the stream -- and the claim
   is settled.  A worker that cannot finish releases its claim, so the
   redelivery takes it over at once.

An unreadable message is dead-lettered, not failed; a message whose handling
raised is reported in ``batchItemFailures`` so only it is redelivered.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib import alerts, ddb
from chalicelib.aws import Deps
from chalicelib.deadletter import dead_letter
from chalicelib.log import logger
from chalicelib.settings import Settings
from chalicelib.tasks import actions, items, timing
from chalicelib.tasks.model import DueMessage, InvalidTask, Status, Strategy, Task, iso, task_from_item
from chalicelib.tasks.store import ACTED, Claim, Outcome, TaskStore, delete, put, put_raw, set_attributes, update

SOURCE = "task_executor"

T = TypeVar("T")


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
    if message.carries_item and record is not None and record.get("run_at") == due \
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
    image = _image_of(store, message)
    if message.carries_item and image is None:
        dead_letter(deps, settings.task_dlq, SOURCE, message_id,
                    f"the item image kept for task {message.key.task_id} is gone", _payload(body))
        return "dead-lettered"
    item = ddb.deserialize(image) if image is not None else store.get_item(message.key)
    if item is None:
        return "skipped: gone"
    try:
        task = task_from_item(item, settings)
    except InvalidTask as exc:
        dead_letter(deps, settings.task_dlq, SOURCE, message_id,
                    f"task {message.key.task_id} is not a valid task: {exc.message}", _payload(body),
                    smaller=_without_image(message))
        return "dead-lettered"
    record = store.get_record(task.id)
    reason = skip_reason(task, message, record)
    if reason:
        return "skipped: " + reason
    early = (task.due - deps.clock()).total_seconds()
    if early > 0:  # the message's time was rounded down to the second
        deps.sleep(early)
    owner = uuid.uuid4().hex  # this attempt's token on the claim: its own writes are recognised on a re-read
    claim = store.claim(task.id, task.due, deps.clock(), settings.task_claim_lease_seconds, owner)
    if not claim.won:
        if claim.state in (Status.RUNNING.value, ACTED):
            _send_back(deps, message, timing.claim_held_delay(
                claim.claimed_at, settings.task_claim_lease_seconds, deps.clock()))
            return "requeued: claimed by another worker"
        return "skipped: " + (claim.state.lower() or "claimed")
    outcome = claim.outcome  # taken over after the action ran: only its outcome is left to record
    if outcome is None:
        with _released_on_error(store, task, owner):  # nothing ran yet: the redelivery takes over at once
            still_due = message.carries_item or _mark_running(deps, store, task)
            if not still_due:
                store.settle_claim(task.id, task.due, "SKIPPED", 0)
        if not still_due:
            return "skipped: changed"
        outcome = _run_with_retries(deps, task)
        # The one write between the action and a second run of it: retried, never released (see README).
        acted = _persisted(deps, "the action's outcome on its claim",
                           lambda: store.record_acted(task.id, task.due, owner, outcome))
        if not acted:
            return "skipped: taken over by another worker"
    with _released_on_error(store, task, owner):  # the redelivery finishes from the outcome kept on the claim
        _finish(deps, store, task, message, image, record, claim, owner, outcome, message_id, body)
    return "failed" if outcome.status is Status.FAILED else "done"


# Writes after the action ran are retried this many times in all, with backoff on the injected sleep
# (0.5 + 1 + 2 + 4 s): a hard error the app sees after botocore's own retries is usually brief.
WRITE_ATTEMPTS = 5
WRITE_BACKOFF_SECONDS = 0.5


def _persisted(deps: Deps, what: str, write: Callable[[], T]) -> T:
    """``write``, retried on an AWS error (bounded, with backoff) before giving up with that error."""
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            return write()
        except (ClientError, BotoCoreError) as exc:
            if attempt == WRITE_ATTEMPTS:
                raise
            logger.warning("write failed; retrying", extra={"what": what, "attempt": attempt, "error": repr(exc)})
            deps.sleep(WRITE_BACKOFF_SECONDS * 2 ** (attempt - 1))
    raise AssertionError("unreachable")


@contextmanager
def _released_on_error(store: TaskStore, task: Task, owner: str) -> Iterator[None]:
    try:
        yield
    except Exception:
        try:
            store.release_claim(task.id, task.due, owner)
        except Exception:
            logger.exception("could not release the claim; it is taken over when its lease ends",
                             extra={"task_id": task.id})
        raise


def _image_of(store: TaskStore, message: DueMessage) -> dict[str, Any] | None:
    """The item a message carries (DynamoDB JSON, binary as bytes): inline, or kept in the state table."""
    if message.image is not None:
        return ddb.binary_as_bytes(message.image)
    if message.image_stored:
        return store.get_image(message.key.task_id, message.due)
    return None


def _finish(deps: Deps, store: TaskStore, task: Task, message: DueMessage, image: dict[str, Any] | None,
            record: dict[str, Any] | None, claim: Claim, owner: str, outcome: Outcome, message_id: str,
            body: str) -> None:
    """After the action ran (its outcome kept on the claim): dead-letter and alert a failure, then record the
    outcome and settle the claim in one transaction.  Each send is noted on the claim right after it, so a
    takeover after a crash redoes only what is left; both carry ``dedupe_id`` (one per task and due time) for
    the one case where a send is repeated (README: "Fail loudly")."""
    if outcome.status is Status.FAILED:
        dedupe_id = f"task-failed:{task.id}:{iso(task.due)}"
        if not claim.dead_lettered:
            dead_letter(deps, deps.settings.task_dlq, SOURCE, message_id,
                        f"task {task.id} failed after {outcome.attempts} attempts: {outcome.error}", _payload(body),
                        smaller=_without_image(message), dedupe_id=dedupe_id)
            _persisted(deps, "dead_lettered on the claim", lambda: store.mark_claim(task.id, task.due, "dead_lettered"))
        if not claim.alerted:
            alerts.publish(deps, f"Task {task.id} failed after {outcome.attempts} attempts", {
                "task_id": task.id, "due": iso(task.due), "action": task.action["type"],
                "attempts": outcome.attempts, "error": outcome.error, "dedupe_id": dedupe_id})
            _persisted(deps, "alerted on the claim", lambda: store.mark_claim(task.id, task.due, "alerted"))
    _persisted(deps, "the task's outcome",
               lambda: _record_outcome(deps, store, task, message, image, record, owner, outcome))


def _payload(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body


def _without_image(message: DueMessage) -> dict[str, Any]:
    """A due message's payload for the dead-letter queue when the item it carries is too large to go with it."""
    return {**json.loads(replace(message, image=None, image_stored=False).to_json()),
            "image_omitted": message.carries_item}


def _send_back(deps: Deps, message: DueMessage, delay: int) -> None:
    deps.clients.sqs.send_message(
        QueueUrl=deps.queue_url(deps.settings.due_queue),
        MessageBody=replace(message, hops=message.hops + 1).to_json(), DelaySeconds=delay)


def _mark_running(deps: Deps, store: TaskStore, task: Task) -> bool:
    condition, names, values = items.due_condition(task, deps.settings)
    return store.update_item(
        task.key, {"status": Status.RUNNING.value},
        condition + " AND (attribute_not_exists(#s) OR #s IN (:pending, :running))",
        {**names, "#s": "status"}, {**values, ":pending": Status.PENDING.value, ":running": Status.RUNNING.value})


def _run_with_retries(deps: Deps, task: Task) -> Outcome:
    """DONE with the result on success; FAILED with the last error when every attempt failed."""
    limit = deps.settings.task_max_attempts
    error = ""
    for attempt in range(1, limit + 1):
        try:
            return Outcome(Status.DONE, attempt, actions.run_action(deps, task.action))
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            logger.warning("task action failed", extra={"task_id": task.id, "attempt": attempt, "error": error})
            if attempt < limit:
                deps.sleep(timing.retry_delay(attempt))
    return Outcome(Status.FAILED, limit, None, error)


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
    if task.strategy is Strategy.INTERVAL and task.item.get(settings.due_attribute) is None:
        # Known by its bucket alone (the interval seed's taskDateTime): it keeps its due time when the bucket goes.
        changes[settings.due_attribute] = iso(task.due)
    # A finished interval task leaves the sparse bucket index, so the processor never reads it again.
    return changes, [settings.bucket_attribute]


def _record_outcome(deps: Deps, store: TaskStore, task: Task, message: DueMessage, image: dict[str, Any] | None,
                    record: dict[str, Any] | None, owner: str, outcome: Outcome) -> None:
    """Write the outcome to the item (and record, and status index) and settle this worker's claim, in one
    transaction.  When a condition fails, the claim is re-read: settled already means an earlier attempt of this
    transaction was applied (its response lost); still ACTED means the task changed while it ran (rescheduled,
    cancelled, deleted): its outcome is not written over the change, and the claim is settled alone."""
    settings, now = deps.settings, deps.clock()
    status, attempts, result, error = outcome.status, outcome.attempts, outcome.result, outcome.error
    next_due = timing.next_due(task, now) if status is Status.DONE else None
    changes, removed = outcome_changes(task, status, attempts, result, error, next_due, now, settings)
    after = {k: v for k, v in {**task.item, **changes}.items() if k not in removed}
    ops: list[dict[str, Any]] = [store.settle_op(task.id, task.due, owner, status.value, attempts)]
    if not message.carries_item:
        condition, names, values = items.due_condition(task, settings)
        expression, set_names, set_values = set_attributes(changes, removed)
        ops.append(update(store.tasks_table, {"PK": task.key.pk, "SK": task.key.sk}, expression,
                          condition, {**names, **set_names}, {**values, **set_values}))
    elif next_due is not None and image is not None:
        # A lazy task recurs: its item comes back exactly as it was (sets, binary, numbers), with the next TTL.
        exact = {k: v for k, v in image.items() if k not in removed}
        ops.append(put_raw(store.tasks_table, {**exact, **ddb.serialize(changes)}, "attribute_not_exists(PK)"))
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
    if store.transact(ops):
        return
    claim = store.get_claim(task.id, task.due) or {}
    if claim.get("owner") == owner and claim.get("state") == ACTED:
        logger.warning("task changed while it ran; its outcome was not recorded",
                       extra={"task_id": task.id, "status": status.value})
        store.settle_claim(task.id, task.due, status.value, attempts)


"""The executor: runs each due task once, on time, from the due queue.

The messages of a batch are handled concurrently (at most EXECUTOR_CONCURRENCY
at once), so one message waiting out its last second or retrying its action
holds no other.  For every message (``model.DueMessage``):

1. Never early: a message a second or more ahead goes back to the queue with
   the remaining delay (at most 900 s a hop; rounded up or down by
   TASK_PRECISION, ``timing.queue_delay``); under a second, it is waited out.
2. Read what is due: the task's item (one GetItem), or the item image the
   message carries (or keeps in the state table) when the item is gone (a lazy
   task's TTL deleted it).  Skipped: a task gone, or rescheduled (its due
   time no longer matches the message's; the new time has its own message).
   A task whose target or source has a limit passes its gate (``flow.admit``): over its rate or
   concurrency, the message goes back to wait, unclaimed (no attempt spent).
3. Claim the execution (task, due time) on the task's record in the state
   table: one conditional UpdateItem.  A duplicate delivery finds it settled
   and stops; an occurrence older than the one claimed last is skipped; a
   claim held by a live worker sends the message back until its lease ends,
   then it may be taken over, at most TASK_MAX_TAKEOVERS times (past that the
   execution is FAILED without running again); a task cancelled at that
   time, or moved from it by the API since step 2, is skipped.
4. The action runs, retried by the task's retry policy (its ``retry``, else
   TASK_MAX_ATTEMPTS and TASK_RETRY_MAX_AGE_SECONDS) with backoff and jitter,
   no sooner than an ``actions.ActionRetryHint`` asks; a short wait is slept
   here, a longer one settles the execution to be retried later (its message
   comes back then); a permanent error (a refused target) fails it at once.
5. Settle: the outcome (status, attempts, result or error; a recurring task's
   next due time; the execution's entry in the task's history,
   ``chalicelib.tasks.history``) goes on the record, with one conditional UpdateItem.  That is
   the one write between the action and a second run of it: retried, never
   released (docs/executor.md).  A one-time task's item is never written.
6. A failure is dead-lettered and alerted, each noted on the record after it,
   so a redelivery that finds the claim FAILED does only what is left; a
   recurring task's item gets its next due time (which re-schedules it through
   the stream), and a redelivery that finds the claim DONE with the item still
   at the old time writes it.

So a one-time task costs three AWS calls besides its action: read, claim and
settle.  One whose action's target drops a repeat (``settles_once``: a Standard
state machine, a webhook receiver that honours the webhook-id, as the task
declares) costs two: no claim, the action, then one conditional settle
(docs/executor.md, "One write").  An unreadable message is dead-lettered, not failed; a message whose
handling raised is reported in ``batchItemFailures`` so only it is redelivered.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib import alerts, ddb
from chalicelib import metrics as m
from chalicelib.aws import Deps
from chalicelib.deadletter import dead_letter
from chalicelib.invocation import REQUEST_ID
from chalicelib.log import about, line_fields, logger, worker_pool
from chalicelib.settings import Settings
from chalicelib.tasks import actions, buckets, flow, history, items, timing
from chalicelib.tasks.lifecycle import RETRYING, State
from chalicelib.tasks.model import DueMessage, InvalidTask, Strategy, Task, TaskKey, iso, parse_due, read_task
from chalicelib.tasks.store import Claim, Execution, Outcome, TaskStore

SOURCE = "task_executor"

T = TypeVar("T")


class Kind(Enum):
    """What became of a due message (``Handled``); the value is the outcome's text on the log line."""
    DONE = "done"
    FAILED = "failed"
    RETRY_LATER = "retry later"
    FINISHED = "finished"  # a settled execution's follow-ups, left undone, done by this delivery
    REQUEUED = "requeued"
    SKIPPED = "skipped"
    RAN_AFTER = "ran after"  # the action ran; the API changed the task after it was read
    DEAD_LETTERED = "dead-lettered"


@dataclass(frozen=True)
class Handled:
    """The outcome of one due message: its kind and, for some, why (``text``: the log line's ``outcome``)."""
    kind: Kind
    reason: str | None = None

    @property
    def text(self) -> str:
        return self.kind.value if self.reason is None else f"{self.kind.value}: {self.reason}"

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Context:
    """One execution, as steps 3 to 6 are given it: the task read, the message that brought it, the item image it
    carries (a lazy task's), this attempt's ``owner`` token on the claim, and what the delivery's line and its
    dead-letter record need (``measured``, ``message_id``, ``body``)."""
    deps: Deps
    store: TaskStore
    task: Task
    message: DueMessage
    image: dict[str, Any] | None
    owner: str
    message_id: str
    body: str
    measured: m.LinePoints
    seconds_left: Callable[[], float] | None = None


def run_batch(deps: Deps, records: Sequence[dict[str, Any]],
              seconds_left: Callable[[], float] | None = None) -> dict[str, list[dict[str, str]]]:
    """Process an SQS batch, its messages at once (bounded); the ids of the messages to redeliver, as Lambda's
    partial batch response.  The items of the messages due now are read together first (one BatchGetItem).
    ``seconds_left``: the invocation's time left, when known (it bounds a webhook's call)."""
    items_read = _read_due_items(deps, records)

    def handle(record: dict[str, Any]) -> str | None:
        message_id = str(record.get("messageId", ""))
        measured = m.LinePoints()
        try:
            outcome = execute(deps, str(record.get("body", "")), message_id, items_read, measured=measured,
                              seconds_left=seconds_left)
            _log_handled(deps, message_id, outcome, measured)
            return None
        except Exception:  # an execution settled before the error is counted on this line (its redelivery is not)
            logger.exception("due message failed; it will be redelivered",
                             extra={"message_id": message_id, **measured.fields(deps.metrics.stage)})
            return message_id

    def handle_group(group: list[dict[str, Any]]) -> list[str | None]:
        key = _task_of(group[0])
        with about(task_id=key.task_id if key else ""):  # every line of these messages names their task
            return [handle(record) for record in group]

    # The messages of one task one after the other (a duplicate then finds the first one's claim settled, not
    # running); different tasks at once.
    groups: dict[Any, list[dict[str, Any]]] = {}
    for index, record in enumerate(records):
        groups.setdefault(_task_of(record) or index, []).append(record)
    workers = max(1, min(deps.settings.executor_concurrency, len(groups)))
    if workers == 1:
        failed = [m for group in groups.values() for m in handle_group(group)]
    else:
        with worker_pool(workers, "task-executor") as pool:
            failed = [m for ids in pool.map(handle_group, groups.values()) for m in ids]
    return {"batchItemFailures": [{"itemIdentifier": m} for m in failed if m is not None]}


def _task_of(record: dict[str, Any]) -> TaskKey | None:
    try:
        return DueMessage.from_json(str(record.get("body", ""))).key
    except InvalidTask:
        return None


def _read_due_items(deps: Deps, records: Sequence[dict[str, Any]]) -> Mapping[TaskKey, dict[str, Any] | None]:
    """The items of the batch's messages that are due now (or within the second) and do not carry their item,
    read in one BatchGetItem when there are two or more; {} when that read fails (each reads its own then)."""
    now = deps.clock()
    keys = []
    for record in records:
        try:
            message = DueMessage.from_json(str(record.get("body", "")))
        except InvalidTask:
            continue
        if not message.carries_item and not message.key.source and timing.arrival(message.due, now).kind != "requeue":
            keys.append(message.key)
    if len(set(keys)) < 2:
        return {}
    try:
        return TaskStore(deps).get_items(keys)
    except (ClientError, BotoCoreError) as exc:
        logger.warning("could not read the batch's items at once; each message reads its own",
                       extra={"error": repr(exc)})
        return {}


def _log_handled(deps: Deps, message_id: str, outcome: Handled, measured: m.LinePoints) -> None:
    """One INFO line per execution, with its outcome (and its task: ``about``) and the fields of its line metrics
    (``measured``: TaskLateness, TasksExecuted; chalicelib/metrics.py ``LINE_METRICS``), which the metric filters
    on the executor's log group read; ingested logs are billed by the byte, so the message's id (the task names
    it) is on the DEBUG line of a message only sent back for being early, which is no execution, and the first
    execution line of an invocation is written at its end, on the invocation's EMF document when it has one
    (``Metrics.carry``): a lone task's line and metrics are one JSON line."""
    if outcome.kind is Kind.REQUEUED:
        logger.debug("due message handled", extra={"message_id": message_id, "outcome": outcome.text})
        return
    fields = {"outcome": outcome.text, **measured.fields(deps.metrics.stage)}
    line = line_fields(logging.INFO, "due message handled", **fields)
    if line is not None and not (line.get(REQUEST_ID) and deps.metrics.carry(line)):  # no flush without one
        logger.info("due message handled", extra=fields)


def skip_reason(task: Task, message: DueMessage, bucket_minutes: int | None = None) -> str | None:
    """Why a due message must not run its task, as read from the item (or the image it carries), or None. Pure.

    Due times match to the second: the interval processor sends ``due_epoch`` (whole seconds).  An interval
    source's processor sends the start of the item's bucket (``bucket_minutes`` wide) when the user's index
    does not project the due attribute: that message is for the task due later in the bucket (``retimed``)."""
    if task.due_epoch != int(message.due.timestamp()) and not retimed(task, message, bucket_minutes):
        return "rescheduled"
    return None


def retimed(task: Task, message: DueMessage, bucket_minutes: int | None) -> bool:
    """True when ``message`` was sent at the start of the bucket of an interval source's task due later in it
    (the processor could not read the due time from the index): it runs the task at its own time. Pure."""
    return (bucket_minutes is not None and task.key.source != "" and task.strategy is Strategy.INTERVAL
            and message.due < task.due and buckets.bucket_start(task.due, bucket_minutes) == message.due)


def _source_bucket_minutes(task: Task, settings: Settings) -> int | None:
    source = settings.source(task.key.source) if task.key.source else None
    return source.bucket_minutes if source is not None and source.strategy == Strategy.INTERVAL.value else None


def execute(deps: Deps, body: str, message_id: str,
            items_read: Mapping[TaskKey, dict[str, Any] | None] | None = None, *,
            measured: m.LinePoints | None = None, seconds_left: Callable[[], float] | None = None) -> Handled:
    """Handle one due message; returns what happened (for the log and the tests).  ``items_read``: the batch's
    items read at once, by key (a key not there is read here); ``measured`` takes the execution's line metrics
    (its log line carries them: ``_log_handled``)."""
    settings = deps.settings
    measured = m.LinePoints() if measured is None else measured
    try:
        message = DueMessage.from_json(body)
    except InvalidTask as exc:
        dead_letter(deps, settings.task_dlq, SOURCE, message_id, f"unreadable due message: {exc.message}", body)
        return Handled(Kind.DEAD_LETTERED)
    if message.key.source and settings.source(message.key.source) is None:
        dead_letter(deps, settings.task_dlq, SOURCE, message_id,
                    f"the due message names task source {message.key.source!r}, which the stage does not declare "
                    "(TASK_SOURCES)", body)
        return Handled(Kind.DEAD_LETTERED)
    arrival = timing.arrival(message.runs_at, deps.clock(), settings.task_precision)
    if arrival.kind == "requeue":
        _send_back(deps, message, int(arrival.seconds))
        return Handled(Kind.REQUEUED)
    if arrival.kind == "wait":
        deps.sleep(arrival.seconds)
    store = TaskStore(deps)
    image = _image_of(store, message)
    if message.carries_item and image is None:
        dead_letter(deps, settings.task_dlq, SOURCE, message_id,
                    f"the item image kept for task {message.key.task_id} is gone", _payload(body))
        return Handled(Kind.DEAD_LETTERED)
    item: dict[str, Any] | None
    if image is not None:
        item = ddb.deserialize(image)
    elif items_read is not None and message.key in items_read:
        item = items_read[message.key]
    else:
        item = store.get_item(message.key)
    if item is None:  # deleted: cancelled by the API or by its own program (the message does not say its strategy)
        deps.metrics.task(m.TASKS_SKIPPED_CANCELLED, None)
        return Handled(Kind.SKIPPED, "gone")
    try:
        task = read_task(item, message.key, settings)
    except InvalidTask as exc:
        dead_letter(deps, settings.task_dlq, SOURCE, message_id,
                    f"task {message.key.task_id} is not a valid task: {exc.message}", _payload(body),
                    smaller=_without_image(message))
        return Handled(Kind.DEAD_LETTERED)
    bucket_minutes = _source_bucket_minutes(task, settings)
    reason = skip_reason(task, message, bucket_minutes)
    if reason:
        _measure_skip(deps, task, reason)
        return Handled(Kind.SKIPPED, reason)
    if retimed(task, message, bucket_minutes):
        message = replace(message, due=task.due)  # never early: at the task's own time, in the bucket
        later = timing.arrival(task.due, deps.clock(), settings.task_precision)
        if later.kind == "requeue":
            _send_back(deps, message, int(later.seconds))
            return Handled(Kind.REQUEUED, "due later in its bucket")
    early = (task.due - deps.clock()).total_seconds()
    if early > 0:  # the message's time was rounded down to the second
        deps.sleep(early)
    owner = uuid.uuid4().hex  # this attempt's token on the claim: its own writes are recognised
    gate = _gate(deps, task, message, owner, seconds_left)
    if gate.wait is not None:  # over its target's rate or concurrency: it waits, unclaimed (no attempt spent)
        _send_back(deps, replace(message, slot=gate.slot), timing.queue_delay(gate.wait, settings.task_precision))
        deps.metrics.task(m.TASKS_PACED, task.strategy.value)
        return Handled(Kind.REQUEUED, gate.reason)
    with flow.holding(deps, gate):
        return _run(Context(deps, store, task, message, image, owner, message_id, body, measured, seconds_left))


def _gate(deps: Deps, task: Task, message: DueMessage, owner: str,
          seconds_left: Callable[[], float] | None) -> flow.Gate:
    """Flow control (chalicelib/tasks/flow.py): the start the message carries, if it is still this run's; a
    lease held no longer than the invocation can run."""
    slot = message.slot if flow.slot_valid(message.slot, replace(message, slot=None).runs_at) else None
    lease = seconds_left() + 1 if seconds_left is not None else deps.settings.task_claim_lease_seconds
    return flow.admit(deps, task.action, task.key.source, slot, owner, lease)


def _run(ctx: Context) -> Handled:
    """Steps 3 to 6: the claim, the action, the settle and what follows."""
    deps, store, task, owner = ctx.deps, ctx.store, ctx.task, ctx.owner
    settings = deps.settings
    shape = {"strategy": task.strategy.value, "action": task.action}
    if settles_once(task, ctx.message):
        return _execute_once(ctx, shape)
    claimed = deps.clock()
    claim = store.claim(task.key, task.due, claimed, settings.task_claim_lease_seconds, owner, shape=shape)
    if not claim.won:
        _measure_skip(deps, task, claim.lost)
        return _claim_lost(ctx, claim)
    given_up = _given_up(deps, task, claim.takeovers)
    due_text = iso(task.due)
    # a retry's own due time (a redrive's run_at, a retry's first): its age and its lateness count from it
    since = parse_due(claim.found.retry_from) if claim.found.retry_due == due_text and claim.found.retry_from else task.due
    if given_up is None and claim.found.attempts_before(due_text) == 0:
        _measure_lateness(deps, task, ctx.measured, since=since)
    outcome = given_up or _run_with_retries(deps, task, claim.found.attempts_before(due_text), since, ctx.seconds_left)
    occurrences = _runs_before(claim.found) + 1 if task.recurrence and outcome.status is State.DONE else None
    next_due = timing.next_due(task, deps.clock(), occurrences or 0) if outcome.status is State.DONE else None
    kept = claim.found.with_entry(_history_entry(task, outcome, claimed, deps.clock(), since, claim.takeovers))
    settled = _persisted(deps, "the task's outcome", lambda: store.settle(
        task.key, task.due, owner, outcome, deps.clock(), next_due, occurrences=occurrences, kept=kept))
    if not settled:
        logger.warning("the claim was taken over while the action ran; its outcome is the other worker's",
                       extra={"task_id": task.id, "status": outcome.status.value})
        return Handled(Kind.SKIPPED, "taken over by another worker")
    return _settled(ctx, outcome, next_due, retried=given_up is None)


def _settled(ctx: Context, outcome: Outcome, next_due: datetime | None, retried: bool = True) -> Handled:
    """What follows this worker's settle: a retry's message sent back, or the outcome measured and its follow-ups
    (``_after``)."""
    deps, task = ctx.deps, ctx.task
    if outcome.retry_at is not None:  # settle_retry: the same due message comes back at the retry time
        _send_back(deps, replace(ctx.message, not_before=outcome.retry_at),
                   _delay_until(outcome.retry_at, deps.clock()))
        deps.metrics.task(m.TASKS_RETRIED, task.strategy.value)
        return Handled(Kind.RETRY_LATER)
    _measure_outcome(deps, task, outcome, ctx.measured, retried=retried)
    _after(ctx, Execution(iso(task.due), outcome.status.value, ctx.owner), next_due, outcome)
    return Handled(Kind.FAILED if outcome.status is State.FAILED else Kind.DONE)


def _runs_before(found: Execution) -> int:
    """A recurring task's runs before this one (``max_occurrences``): its record's count, unless the record was
    finished before this claim -- an item written again after its task ended is a new task, counted anew. Pure."""
    return 0 if found.recorded.finished else found.occurrences


def settles_once(task: Task, message: DueMessage) -> bool:
    """True when the execution runs with one write and no claim (docs/executor.md, "One write"): the task's action
    declares that its target drops a repeat (``actions.deduplicated_by_target``: a Standard state machine, a
    webhook receiver that honours the webhook-id), the task is a one-time one read from its item (a recurring
    task's pause and a lazy task's cancel live on its record alone, which only the claim reads), and the message
    is the execution's first, not a retry's (``not_before``: a retry or a redrive takes the claim, which counts
    its attempts). Pure."""
    return (actions.deduplicated_by_target(task.action) and task.recurrence is None
            and task.strategy is not Strategy.LAZY and not message.carries_item and message.not_before is None)


def _execute_once(ctx: Context, shape: dict[str, Any]) -> Handled:
    """Steps 3 to 5 for a task that ``settles_once``: the action runs (retried as step 4 says), then its outcome
    is written with one conditional UpdateItem (``TaskStore.settle_once``).  A settle refused because the
    execution is settled already is a duplicate delivery (the target dropped its repeat): what the settled one
    left undone is finished.  Refused because the API cancelled the task or moved it after the read: the action
    ran all the same; logged and counted (``TasksRanAfterChange``), the record left as the API wrote it."""
    deps, store, task = ctx.deps, ctx.store, ctx.task
    started = deps.clock()
    outcome = _run_with_retries(deps, task, seconds_left=ctx.seconds_left)
    lease = deps.settings.task_claim_lease_seconds
    entry = _history_entry(task, outcome, started, deps.clock(), task.due)
    settled = _persisted(deps, "the task's outcome", lambda: store.settle_once(
        task.key, task.due, ctx.owner, outcome, deps.clock(), lease, shape, entry=entry))
    if settled.won:
        _measure_lateness(deps, task, ctx.measured, started)
        return _settled(ctx, outcome, None)
    found, lost = settled.found, settled.lost
    if lost in ("done", "failed"):
        if _after(ctx, found, None, None):
            return Handled(Kind.FINISHED, lost)
        return Handled(Kind.SKIPPED, lost)
    if lost in ("cancelled", "rescheduled", "paused"):
        logger.warning("the action ran, but the task was changed after it was read; its outcome is not recorded",
                       extra={"task_id": task.id, "change": lost, "status": outcome.status.value})
        deps.metrics.task(m.TASKS_RAN_AFTER_CHANGE, task.strategy.value)
        return Handled(Kind.RAN_AFTER, lost)
    logger.info("the action ran again; the execution is another delivery's",
                extra={"task_id": task.id, "found": lost})
    return Handled(Kind.SKIPPED, lost)


def _history_entry(task: Task, outcome: Outcome, started: datetime, finished: datetime, since: datetime,
                   takeovers: int = 0) -> dict[str, Any]:
    """The history entry of this execution (``chalicelib.tasks.history``), written by its settle. Pure."""
    status = RETRYING if outcome.retry_at is not None else outcome.status.value
    return history.run_entry(task.due, started, finished, outcome.attempts, status, outcome.error,
                             runs_from=since, retry_at=outcome.retry_at, takeovers=takeovers)


def _given_up(deps: Deps, task: Task, takeovers: int) -> Outcome | None:
    """FAILED, without running the action again, when this claim took the execution over more than
    TASK_MAX_TAKEOVERS times: each worker before died between claiming it and settling it (a crash after the
    action, every time, would otherwise run it forever, each takeover's message starting SQS's count anew)."""
    limit = deps.settings.task_max_takeovers
    if takeovers <= limit:
        return None
    error = (f"TakeoverLimit: the worker running this execution stopped before recording its outcome "
             f"{takeovers} times (each claim's lease of TASK_CLAIM_LEASE_SECONDS ran out), more than "
             f"TASK_MAX_TAKEOVERS ({limit}); not run again (the action may have run up to {takeovers} times: "
             "see the task_executor logs)")
    logger.error("execution given up after too many takeovers", extra={"task_id": task.id, "takeovers": takeovers})
    return Outcome(State.FAILED, takeovers, None, error)


def _claim_lost(ctx: Context, claim: Claim) -> Handled:
    """A duplicate or late delivery: wait for a live claim, finish what a settled one left undone, or stop."""
    deps, message, found = ctx.deps, ctx.message, claim.found
    if claim.lost in ("running", "released"):
        _send_back(deps, message, timing.claim_held_delay(
            found.claimed_at, deps.settings.task_claim_lease_seconds, deps.clock()))
        return Handled(Kind.REQUEUED, "claimed by another worker")
    if claim.lost == "retrying" and found.retry_at_ms is not None:  # a copy of the retry's message: it waits too
        retry_at = datetime.fromtimestamp(found.retry_at_ms / 1000, UTC)
        _send_back(deps, replace(message, not_before=retry_at), _delay_until(retry_at, deps.clock()))
        return Handled(Kind.REQUEUED, "to be retried later")
    if claim.lost in ("done", "failed"):
        next_due = parse_due(found.next_run_at) if found.next_run_at else None
        if _after(ctx, found, next_due, None):
            return Handled(Kind.FINISHED, claim.lost)
    return Handled(Kind.SKIPPED, claim.lost)


def _after(ctx: Context, execution: Execution, next_due: datetime | None, outcome: Outcome | None) -> bool:
    """What follows a settled execution: a failure dead-lettered and alerted (each noted on the record right
    after it, so a redelivery redoes only what is left; both carry ``dedupe_id``, one per task and due time,
    for the one case where a send is repeated: docs/executor.md "Fail loudly"), a recurring task's next due time written
    to its item.  True when something was left to do."""
    deps, store, task = ctx.deps, ctx.store, ctx.task
    did = False
    if execution.state == State.FAILED.value:
        dedupe_id = f"task-failed:{task.id}:{iso(task.due)}"
        error = outcome.error if outcome else execution.error
        attempts = outcome.attempts if outcome else execution.attempts
        if not execution.dead_lettered:
            dead_letter(deps, deps.settings.task_dlq, SOURCE, ctx.message_id,
                        f"task {task.id} failed after {attempts} attempts: {error}", _payload(ctx.body),
                        smaller=_without_image(ctx.message), dedupe_id=dedupe_id, strategy=task.strategy.value)
            _persisted(deps, "dead_lettered on the record", lambda: store.mark(task.key, "dead_lettered"))
            did = True
        if not execution.alerted:
            alerts.publish(deps, f"Task {task.id} failed after {attempts} attempts", {
                "task_id": task.id, "due": iso(task.due), "action": task.action["type"],
                "attempts": attempts, "error": error, "dedupe_id": dedupe_id})
            _persisted(deps, "alerted on the record", lambda: store.mark(task.key, "alerted"))
            did = True
    elif execution.state == State.DONE.value and next_due is not None:
        did = _persisted(deps, "the next due time", lambda: _recur(ctx, next_due))
    return _callback(ctx, execution, outcome) or did


def callback_outcome(task: Task, name: str, execution: Execution, outcome: Outcome | None) -> dict[str, Any]:
    """What a callback is given of the execution it follows: the task's id, the due time, the attempts, the
    status and the result or the error. Pure."""
    given: dict[str, Any] = {"callback": name, "task_id": task.id, "due": iso(task.due),
                             "attempt": outcome.attempts if outcome else execution.attempts,
                             "status": execution.state}
    if execution.state == State.DONE.value:
        given["result"] = outcome.result if outcome else execution.result
    else:
        given["error"] = outcome.error if outcome else execution.error
    return given


def _callback(ctx: Context, execution: Execution, outcome: Outcome | None) -> bool:
    """The task's ``on_success`` after a DONE execution (each occurrence of a recurring task), its ``on_failure``
    after a FAILED one, run once: then noted on the record (``mark_callback``: the execution, by its due time and
    owner), so a redelivery that finds it noted does not run it again; the window of "Fail loudly" applies (run,
    then noted: a worker that dies in between leaves it to be run again, with the same idempotency key).  Its
    action is given the outcome (``actions.with_outcome``), allow-listed as the task's own, and retried by the
    task's retry policy within this delivery only (a wait the delivery cannot make gives up).  Its failure is
    logged, alerted and noted; it never changes the task's outcome.  True when it ran."""
    deps, task = ctx.deps, ctx.task
    chosen = task.callback(execution.state)
    if chosen is None or execution.callback_ran():
        return False
    name, spec = chosen
    given = callback_outcome(task, name, execution, outcome)
    ran = _run_with_retries(deps, replace(task, action=actions.with_outcome(spec, given)), since=deps.clock(),
                            callback=name)
    note: dict[str, Any] = {"name": name, "status": State.DONE.value if ran.status is State.DONE else
                            State.FAILED.value, "attempts": ran.attempts, "at": iso(deps.clock())}
    if ran.status is State.DONE:
        note["result"] = ran.result
        logger.info("task callback ran", extra={"task_id": task.id, "callback": name})
    else:
        note["error"] = ran.error
        logger.error("task callback failed; the task's outcome stands",
                     extra={"task_id": task.id, "callback": name, "error": ran.error})
        alerts.publish(deps, f"Task {task.id}: its {name} callback failed after {ran.attempts} attempts", {
            "task_id": task.id, "due": iso(task.due), "callback": name, "action": spec["type"],
            "attempts": ran.attempts, "error": ran.error, "dedupe_id": f"task-callback-failed:{task.id}:{iso(task.due)}"})
    _persisted(deps, "the callback on the record", lambda: ctx.store.mark_callback(
        task.key, execution.due or iso(task.due), execution.owner, note))
    return True


def _recur(ctx: Context, next_due: datetime) -> bool:
    """Write a recurring task's next due time: on its item, if it still is at this due time; a lazy task's item
    comes back exactly as it was (sets, binary, numbers), with the next TTL.  False when the item moved on."""
    task, store, image = ctx.task, ctx.store, ctx.image
    settings = ctx.deps.settings
    source = settings.source(task.key.source) if task.key.source else None
    if source is not None:
        changes = items.source_due_changes(task, source, next_due)
    else:
        has_due = settings.due_attribute in task.item or task.strategy is not Strategy.LAZY
        changes = items.due_attributes(task.key, task.strategy, next_due, settings,
                                       task.item.get(settings.due_attribute), has_due)
    if ctx.message.carries_item:
        if image is None:
            return False
        return store.put_back(image, ddb.serialize(changes), task.key)
    condition, names, values = (items.source_due_condition(task, source) if source is not None
                                else items.due_condition(task, settings))
    return store.update_item(task.key, changes, condition, names, values)


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


def _image_of(store: TaskStore, message: DueMessage) -> dict[str, Any] | None:
    """The item a message carries (DynamoDB JSON, binary as bytes): inline, or kept in the state table."""
    if message.image is not None:
        return ddb.binary_as_bytes(message.image)
    if message.image_stored:
        return store.get_image(message.key.task_id, message.due)
    return None


def _payload(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body


def _without_image(message: DueMessage) -> dict[str, Any]:
    """A due message's payload for the dead-letter queue when the item it carries is too large to go with it."""
    return {**json.loads(replace(message, image=None, image_stored=False).to_json()),
            "image_omitted": message.carries_item}


def _delay_until(at: datetime, now: datetime) -> int:
    """An SQS delay (whole seconds, 0-900) that brings a message back no later than ``at`` (further: it hops)."""
    return max(0, min(timing.MAX_DELAY_SECONDS, math.ceil((at - now).total_seconds())))


def _send_back(deps: Deps, message: DueMessage, delay: int) -> None:
    deps.clients.sqs.send_message(
        QueueUrl=deps.queue_url(deps.settings.due_queue),
        MessageBody=replace(message, hops=message.hops + 1).to_json(), DelaySeconds=delay)


def _run_with_retries(deps: Deps, task: Task, attempts_before: int = 0, since: datetime | None = None,
                      seconds_left: Callable[[], float] | None = None, callback: str = "") -> Outcome:
    """DONE with the result on success; FAILED with the last error when the task's retry policy
    (``Task.retry_policy``: attempts, age since ``since``) is spent, or at once with a permanent error
    (``actions.PermanentActionError``: retrying cannot help); PENDING with ``retry_at`` when the next attempt
    is too far off to wait for in this delivery (``timing.next_retry``: backoff with jitter from ``deps.random``,
    at least an ``actions.ActionRetryHint``'s ``retry_after_seconds``).  ``attempts_before``: the attempts
    earlier deliveries made of this execution.  ``callback``: the task's callback runs (its own idempotency key),
    and a wait this delivery cannot make gives it up (FAILED) instead of a retry later."""
    policy = task.retry_policy(deps.settings)
    attempt, slept, error = attempts_before, 0.0, ""
    while True:
        attempt += 1
        try:
            return Outcome(State.DONE, attempt, actions.run_action(
                deps, task.action, actions.Attempt(task.id, task.due, attempt, seconds_left, callback)))
        except actions.PermanentActionError as exc:  # a refused target, an unknown type: no attempt can succeed
            error = f"{type(exc).__name__}: {exc}"
            logger.warning("task action refused; not retried", extra={"task_id": task.id, "error": error})
            return Outcome(State.FAILED, attempt, None, error)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            hint = exc.retry_after_seconds if isinstance(exc, actions.ActionRetryHint) else None
            now = deps.clock()
            step = timing.next_retry(policy, attempt, since or task.due, now, deps.random(), hint, slept)
            logger.warning("task action failed", extra={"task_id": task.id, "attempt": attempt, "error": error,
                                                        "next": step.kind, "delay_seconds": step.seconds})
            if step.kind == "give_up" or (callback and step.kind == "later"):
                reason = step.reason if step.kind == "give_up" else "a callback retries within its delivery only"
                return Outcome(State.FAILED, attempt, None, f"{error} (not retried: {reason})"
                               if attempt < policy.max_attempts else error)
            if step.kind == "later":
                return Outcome(State.PENDING, attempt, None, error, retry_at=now + timedelta(seconds=step.seconds))
            deps.sleep(step.seconds)
            slept += step.seconds


# --- metrics (chalicelib/metrics.py; docs/operations.md) ----------------------------------------------------------

def _measure_lateness(deps: Deps, task: Task, measured: m.LinePoints, started: datetime | None = None,
                      since: datetime | None = None) -> None:
    """The action starts now (or started at ``started``): how late, in ms, from the execution's own due time
    (``since``: a retry's time, for an operator's retry; else the task's due time) -- executed minus due, never
    negative, as it waits out early: the metric filter reads values from 0 -- on the execution's line."""
    late = max(0.0, ((started or deps.clock()) - (since or task.due)).total_seconds() * 1000)
    measured.record(m.TASK_LATENESS, task.strategy.value, late)


def _measure_outcome(deps: Deps, task: Task, outcome: Outcome, measured: m.LinePoints, retried: bool = True) -> None:
    """``retried``: False for an execution given up after its takeovers, whose attempts are claims, not retries.
    TasksExecuted is on the execution's line; the others are EMF."""
    measured.record(m.TASKS_EXECUTED, task.strategy.value)
    if retried and outcome.attempts > 1:
        deps.metrics.task(m.TASKS_RETRIED, task.strategy.value, outcome.attempts - 1)
    if outcome.status is State.FAILED:
        deps.metrics.task(m.TASKS_FAILED, task.strategy.value)


def _measure_skip(deps: Deps, task: Task, reason: str) -> None:
    """A due message that does not run its task because the task was cancelled or moved since it was sent."""
    name = {"cancelled": m.TASKS_SKIPPED_CANCELLED, "rescheduled": m.TASKS_SKIPPED_RESCHEDULED}.get(reason)
    if name:
        deps.metrics.task(name, task.strategy.value)

"""The life of a task's execution, declared once: its states and the transitions between them. Pure, no I/O.

A task's record (state table, ``TASK#<id>`` / ``RECORD``) is the one place its
execution lives.  Its state is read from the record alone (``state_of``):

- ``none``: no record yet (a task of another program nobody has claimed, noted or changed);
- PENDING: waiting for its due time (``run_at``);
- RUNNING: an executor claimed the execution of ``run_at`` (``exec_state`` RUNNING at ``exec_due`` =
  ``run_at``, status PENDING) and has not settled it (an action whose target drops a repeat runs unclaimed
  and is settled from PENDING: ``settle_once_*``);
- DONE, FAILED: a one-time task's outcome (a recurring task that succeeds goes back to PENDING at its next
  due time, DONE after its last occurrence by ``end_at`` or ``max_occurrences``; one that fails stops);
- CANCELLED: ``DELETE /tasks/{id}``, or the task's item deleted by a user (``cancelled_by: "item"``);
- DEAD_LETTERED: SQS gave up on the due message of its current due time (``dead_letter`` says why); it waits
  for ``POST /tasks/{id}/retry`` (``redrive``), a cancel or a reschedule; or the stream dead-lettered a write of
  its item (``stream_dead_letter`` says why) and it waits for the item written again and claimed;
- PAUSED: a recurring task whose occurrences are skipped until ``POST /tasks/{id}/resume``.

A PENDING record may be waiting to retry a failed execution (``exec_state`` RETRYING, ``retry_at``): a PENDING
with a time, not a state of its own.

Every write of the record is one transition below, made by the one function of
``chalicelib.tasks.store`` that ``WRITERS`` names (the API's three are items of
its transactions, built by the store).  ``docs/executor.md`` draws this table
(``mermaid()``), and ``tests/unit/test_execution_states.py`` checks the
drawing against it and walks every transition against the code.

A transition whose ``target`` is None keeps the state (a note or a flag: a
dead letter, an alert, a takeover's new owner); from ``none`` it makes a
PENDING record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class State(StrEnum):
    NONE = "none"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    DEAD_LETTERED = "DEAD_LETTERED"
    PAUSED = "PAUSED"


ANY = frozenset(State)


@dataclass(frozen=True)
class Transition:
    name: str
    sources: frozenset[State]
    target: State | None  # None: the state stays (from ``none``: PENDING)
    meaning: str

    def edges(self) -> list[tuple[State, State]]:
        """(from, to) of each state this transition leaves."""
        return [(s, self.target or (State.PENDING if s is State.NONE else s)) for s in sorted(self.sources, key=_order)]


def _order(state: State) -> int:
    return list(State).index(state)


def _states(*states: State) -> frozenset[State]:
    return frozenset(states)


P, R, D, F, C, N = State.PENDING, State.RUNNING, State.DONE, State.FAILED, State.CANCELLED, State.NONE
DL, PA = State.DEAD_LETTERED, State.PAUSED
ONCE = _states(N, P, R, D, F, C, DL)  # a claim's sources: settle_once has the claim's condition for a new execution

TRANSITIONS: tuple[Transition, ...] = (
    Transition("create", _states(N), P, "POST /tasks: the record with the item, in one transaction"),
    Transition("claim", _states(N, P, R, D, F, C, DL), R,
               "the executor claims the execution of a due time later than any claimed before (from RUNNING: "
               "an earlier due time whose worker died; from DONE, FAILED or CANCELLED: another program's item "
               "written again with a new due time, or with the same one after cancel_by_item; from DEAD_LETTERED: "
               "another copy of the due message), or of a retry from its retry time on (PENDING, RETRYING); never "
               "a PAUSED task's"),
    Transition("takeover", _states(R, DL), R,
               "the claim's lease ran out (its worker died): a new owner, exec_takeovers + 1 (from DEAD_LETTERED: "
               "a copy of the dead-lettered message takes the claim it left over)"),
    Transition("settle_done", _states(R, DL), D, "a one-time task's action succeeded (or a recurring task's last)"),
    Transition("settle_next", _states(R, DL), P, "a recurring task's action succeeded: PENDING at its next due time"),
    Transition("settle_retry", _states(R, DL), P,
               "the action failed and the task's retry policy leaves an attempt later than the delivery can wait: "
               "PENDING at the same due time, RETRYING until retry_at (its due message comes back then)"),
    Transition("settle_failed", _states(R, DL), F,
               "the retry policy is spent (max_attempts, max_age_seconds), a permanent error, or more takeovers "
               "than TASK_MAX_TAKEOVERS"),
    Transition("settle_once_done", ONCE, D,
               "a one-time task whose action's target drops a repeat (target_deduplicates) ran, settled without a "
               "claim by one write on the claim's condition for a new execution (from the states a claim leaves; "
               "recurring and lazy tasks keep the claim)"),
    Transition("settle_once_retry", ONCE, P,
               "as settle_once_done, the action failed with an attempt left for later: RETRYING until retry_at (the "
               "retry takes the claim)"),
    Transition("settle_once_failed", ONCE, F, "as settle_once_done, the action failed for good"),
    Transition("mark_dead_lettered", _states(F), None, "the failure was sent to TASK_DLQ"),
    Transition("mark_alerted", _states(F), None, "the failure was sent to ALERT_TOPIC_ARN"),
    Transition("mark_callback", _states(P, D, F), None,
               "the task's on_success or on_failure ran after the execution it follows (from PENDING: a recurring "
               "task's occurrence), on the condition that the record still holds that execution as settled"),
    Transition("cancel", _states(N, P, DL, PA), C,
               "DELETE /tasks/{id}, with the item's delete in one transaction (from DEAD_LETTERED: even with the "
               "claim its message left RUNNING)"),
    Transition("reschedule", _states(N, P, DL), P,
               "PATCH /tasks/{id}, with the item's update in one transaction (from DEAD_LETTERED: even with the "
               "claim its message left RUNNING; it runs again at its new time)"),
    Transition("cancel_by_item", _states(N, P, C), C,
               "the stream saw the task's item deleted by a user, or a lazy item lose its TTL: CANCELLED with "
               "cancelled_by item (from CANCELLED: only one cancelled by an item before; not from RUNNING: the "
               "claim settles it); an item written again with that due time is claimed again"),
    Transition("note_dead_letter", _states(N, P, R), DL,
               "DUE_DLQ's handler: the due message SQS gave up on (a settled execution's is only forwarded)"),
    Transition("note_stream_dead_letter", _states(N, P, DL), DL,
               "the stream scheduler dead-lettered a write of the task's item (listed DEAD_LETTERED with the reason "
               "until a claim, a cancel or a reschedule)"),
    Transition("note_stream_dead_letter_kept", ANY - {N, P, DL}, None,
               "as note_stream_dead_letter, of a task running, finished or paused: the note only"),
    Transition("redrive", _states(F, DL), P,
               "POST /tasks/{id}/retry (or /tasks/{source}/{key}/retry): a fresh execution of the due time that "
               "failed, RETRYING until run_at, its due message sent; once per retry_id"),
    Transition("pause", _states(N, P), PA, "POST /tasks/{id}/pause of a recurring task: its occurrences are skipped"),
    Transition("resume", _states(PA), P,
               "POST /tasks/{id}/resume, with the item's next occurrence after now in one transaction"),
)

# The one function of chalicelib.tasks.store that makes each transition.
WRITERS: Mapping[str, str] = {
    "create": "TaskStore.create", "claim": "TaskStore.claim", "takeover": "TaskStore.claim",
    "settle_done": "TaskStore.settle", "settle_next": "TaskStore.settle", "settle_retry": "TaskStore.settle",
    "settle_failed": "TaskStore.settle",
    "settle_once_done": "TaskStore.settle_once", "settle_once_retry": "TaskStore.settle_once",
    "settle_once_failed": "TaskStore.settle_once",
    "mark_dead_lettered": "TaskStore.mark", "mark_alerted": "TaskStore.mark", "mark_callback": "TaskStore.mark_callback",
    "cancel": "TaskStore.cancel", "reschedule": "TaskStore.reschedule", "cancel_by_item": "TaskStore.cancel_by_item",
    "note_dead_letter": "TaskStore.note_dead_letter", "note_stream_dead_letter": "TaskStore.note_stream_dead_letter",
    "note_stream_dead_letter_kept": "TaskStore.note_stream_dead_letter",
    "redrive": "TaskStore.redrive", "pause": "TaskStore.pause", "resume": "TaskStore.resume",
}

# The operator's operations (the API's routes) and the transition each makes; pause and resume take a recurring
# task only.  The API refuses an operation outside its transition's sources (``allowed_from``), and the console
# offers only the operations a task's status allows (chalicelib/console writes this map into app.js).
OPERATIONS: Mapping[str, str] = {"cancel": "cancel", "reschedule": "reschedule", "retry": "redrive",
                                 "pause": "pause", "resume": "resume"}


def allowed_from(operation: str) -> frozenset[str]:
    """The statuses, as the API shows them, a task may be in for ``operation`` (``OPERATIONS``): its transition's
    sources, ``none`` shown as PENDING (a task without a record)."""
    transition = next(t for t in TRANSITIONS if t.name == OPERATIONS[operation])
    return frozenset(State.PENDING.value if s is State.NONE else s.value for s in transition.sources)


def edges() -> set[tuple[str, State, State]]:
    """Every (transition, from, to) the declaration allows."""
    return {(t.name, a, b) for t in TRANSITIONS for a, b in t.edges()}


def allows(source: State, target: State) -> bool:
    """True when some transition goes from ``source`` to ``target``."""
    return any(a is source and b is target for _, a, b in edges())


def state_of(record: Mapping[str, Any] | None) -> State:
    """The state a task's record is in (None or empty: no record). Pure."""
    if not record:
        return State.NONE
    status = str(record.get("status") or State.PENDING.value)
    if status != State.PENDING.value:  # DONE, FAILED, CANCELLED, DEAD_LETTERED, PAUSED
        return State(status)
    running = record.get("exec_state") == State.RUNNING.value and record.get("exec_due") == record.get("run_at")
    return State.RUNNING if running else State.PENDING


def mermaid() -> str:
    """The declaration as a Mermaid ``stateDiagram-v2`` (docs/executor.md holds this text)."""
    lines = ["stateDiagram-v2"]
    for t in TRANSITIONS:
        for a, b in t.edges():
            lines.append(f"    {_node(a)} --> {_node(b)}: {t.name}")
    lines.append("    DONE --> [*]")
    lines.append("    FAILED --> [*]")
    lines.append("    CANCELLED --> [*]")
    return "\n".join(lines)


def _node(state: State) -> str:
    return "[*]" if state is State.NONE else state.value


def parse_mermaid(text: str) -> set[tuple[str, State, State]]:
    """The labelled transitions of a Mermaid ``stateDiagram-v2`` (``A --> B: name``; ``[*]`` is ``none``), for
    the test that the drawing is the declaration. Unlabelled arrows (the ends) are not transitions."""
    found: set[tuple[str, State, State]] = set()
    for line in text.splitlines():
        arrow, sep, label = line.partition(":")
        if "-->" not in arrow or not sep:
            continue
        left, _, right = arrow.partition("-->")
        found.add((label.strip(), _state(left.strip()), _state(right.strip())))
    return found


def _state(node: str) -> State:
    return State.NONE if node == "[*]" else State(node)


__all__ = ["OPERATIONS", "TRANSITIONS", "WRITERS", "State", "Transition", "allowed_from", "allows", "edges", "mermaid",
           "parse_mermaid", "state_of"]

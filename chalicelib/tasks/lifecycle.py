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
its transactions, built by the store).  A transition declares its write's
``guard`` (the condition, ``chalicelib.expression``) and the ``status`` and
``exec_state`` it sets; the store builds each write from here
(``store.record_write``: the rest of the write is its data), so it makes no
transition this table lacks.  ``docs/executor.md`` draws its main path
(``mermaid_main()``: the edges ``MAIN_PATH`` keeps) and the whole table
(``mermaid()``), and ``tests/unit/test_execution_states.py`` checks the
drawings against it; ``tests/functional/test_execution_walk.py`` walks every
transition against the code.

A transition whose ``target`` is None keeps the state (a note or a flag: a
dead letter, an alert, a takeover's new owner); from ``none`` it makes a
PENDING record.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from chalicelib.expression import Attr, Condition, Param, all_of, any_of, attr, param, value, when


class State(StrEnum):
    NONE = "none"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    DEAD_LETTERED = "DEAD_LETTERED"  # its due message was dead-lettered: waits for a retry, a cancel or a change
    PAUSED = "PAUSED"  # a recurring task whose occurrences are skipped until it is resumed

    @property
    def finished(self) -> bool:
        return self in (State.DONE, State.FAILED, State.CANCELLED)

    @property
    def recorded(self) -> str | None:
        """The ``status`` a record in this state holds (None: no record): RUNNING's is PENDING, a claim being the
        ``exec_state`` of a PENDING record."""
        if self is State.NONE:
            return None
        return State.PENDING.value if self is State.RUNNING else self.value


ANY = frozenset(State)


@dataclass(frozen=True)
class Transition:
    name: str
    sources: frozenset[State]
    target: State | None  # None: the state stays (from ``none``: PENDING)
    meaning: str
    guard: Condition | None = None  # the condition of its write (``chalicelib.expression``; None: unconditional)
    exec_state: str | None = None  # the ``exec_state`` its write sets (None: left as it is)

    def status(self) -> str | None:
        """The ``status`` its write sets (None: left as it is): its target's, PENDING for RUNNING (a claimed
        execution is a PENDING record whose ``exec_state`` is RUNNING at ``exec_due`` = ``run_at``)."""
        return None if self.target is None else self.target.recorded

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

# The record's attributes the guards read, and the values they compare with.
RETRYING = "RETRYING"  # exec_state of an execution waiting for its retry (PENDING at its due time, ``retry_at``)
CANCELLED_BY, BY_ITEM = "cancelled_by", "item"  # a cancel by the stream, of the item then: a new item runs again
STREAM_NOTE = "stream_dead_letter"  # the stream's note of a write of the task's item it dead-lettered
_STATUS, _RUN_AT, _PK = attr("status"), attr("run_at"), attr("PK")
_EXEC_DUE, _EXEC_DUE_MS, _EXEC_STATE = attr("exec_due"), attr("exec_due_ms"), attr("exec_state")
_EXEC_OWNER, _CLAIMED_AT, _MOVED_FROM = attr("exec_owner"), attr("claimed_at"), attr("moved_from")


def _is(state: State) -> Condition:
    return _STATUS.eq(value(state.value))


def _unless(path: Attr, v: str | Param) -> Condition:
    """``path`` is missing or not ``v``."""
    return any_of(path.missing(), path.ne(value(v) if isinstance(v, str) else v))


_DUE = param("due")
_NOT_CLAIMED_AT_RUN_AT = any_of(_EXEC_STATE.missing(), _EXEC_STATE.ne(value(State.RUNNING.value)),
                                _EXEC_DUE.ne(_RUN_AT))  # not RUNNING (lifecycle.state_of)
# A claim is new when the task was neither cancelled at its due time (but by the stream, for an item deleted
# then: one written again runs) nor moved away from it by the API (PATCH) since it was read.
_NOT_CANCELLED_OR_MOVED = all_of(
    any_of(_STATUS.missing(), _STATUS.ne(value(State.CANCELLED.value)), _RUN_AT.missing(), _RUN_AT.ne(_DUE),
           attr(CANCELLED_BY).eq(value(BY_ITEM))),
    _unless(_MOVED_FROM, _DUE))
# ... and the record has no execution of this due time nor of a later one (an earlier due time than the one
# claimed last is an old occurrence's message coming back: it never runs again), the task not paused.
_NEW_EXECUTION = all_of(any_of(_EXEC_DUE.missing(), _EXEC_DUE_MS.lt(param("due_ms"))),
                        _unless(_STATUS, State.PAUSED.value), _NOT_CANCELLED_OR_MOVED)
# A claim: a new execution, or a retry of the execution at this due time from its retry time on.
_CLAIMABLE = all_of(
    any_of(_EXEC_DUE.missing(), _EXEC_DUE_MS.lt(param("due_ms")),
           all_of(_EXEC_DUE.eq(_DUE), _EXEC_STATE.eq(value(RETRYING)), attr("retry_due").eq(_DUE),
                  attr("retry_at_ms").le(param("now_ms")))),
    _unless(_STATUS, State.PAUSED.value), _NOT_CANCELLED_OR_MOVED)
# A takeover: the execution of this due time RUNNING under a lease that ran out, still held by the worker the
# claim found (so two takers cannot both win).
_TAKEOVER = all_of(_EXEC_DUE.eq(_DUE), _EXEC_STATE.eq(value(State.RUNNING.value)), _CLAIMED_AT.lt(param("stale")),
                   _EXEC_OWNER.eq(param("previous")), _NOT_CANCELLED_OR_MOVED)
# A settle: RUNNING (``state_of``) at this due time under this worker's claim -- not cancelled or moved by the API
# since (which it may do to a claim its dead-lettered due message left RUNNING).
_SETTLEABLE = all_of(_EXEC_DUE.eq(_DUE), _EXEC_OWNER.eq(param("me")), _EXEC_STATE.eq(value(State.RUNNING.value)),
                     _STATUS.is_in(value(State.PENDING.value), value(State.DEAD_LETTERED.value)), _RUN_AT.eq(_DUE))


def _not_executing(due: Param, stuck: bool = True) -> Condition:
    """No executor claimed the execution at ``due`` (or it waits for a retry of it) -- or, with the parameter
    ``stuck`` (the task DEAD_LETTERED when read), the claim its dead-lettered due message left RUNNING."""
    free = any_of(_PK.missing(), _EXEC_DUE.missing(), _EXEC_DUE.ne(due), _EXEC_STATE.eq(value(RETRYING)))
    if not stuck:
        return free
    return any_of(free, when("stuck", all_of(_EXEC_STATE.eq(value(State.RUNNING.value)), _is(State.DEAD_LETTERED))))


_NEWER_NOTE = any_of(attr(STREAM_NOTE).missing(), attr(STREAM_NOTE, "sequence").lt(param("sequence")))

TRANSITIONS: tuple[Transition, ...] = (
    Transition("create", _states(N), P, "POST /tasks: the record with the item, in one transaction",
               guard=_PK.missing()),
    Transition("claim", _states(N, P, R, D, F, C, DL), R,
               "the executor claims the execution of a due time later than any claimed before (from RUNNING: "
               "an earlier due time whose worker died; from DONE, FAILED or CANCELLED: another program's item "
               "written again with a new due time, or with the same one after cancel_by_item; from DEAD_LETTERED: "
               "another copy of the due message), or of a retry from its retry time on (PENDING, RETRYING); never "
               "a PAUSED task's",
               guard=_CLAIMABLE, exec_state=State.RUNNING.value),
    Transition("takeover", _states(R, DL), R,
               "the claim's lease ran out (its worker died): a new owner, exec_takeovers + 1 (from DEAD_LETTERED: "
               "a copy of the dead-lettered message takes the claim it left over)",
               guard=_TAKEOVER),
    Transition("settle_done", _states(R, DL), D, "a one-time task's action succeeded (or a recurring task's last)",
               guard=_SETTLEABLE, exec_state=State.DONE.value),
    Transition("settle_next", _states(R, DL), P, "a recurring task's action succeeded: PENDING at its next due time",
               guard=_SETTLEABLE, exec_state=State.DONE.value),
    Transition("settle_retry", _states(R, DL), P,
               "the action failed and the task's retry policy leaves an attempt later than the delivery can wait: "
               "PENDING at the same due time, RETRYING until retry_at (its due message comes back then)",
               guard=_SETTLEABLE, exec_state=RETRYING),
    Transition("settle_failed", _states(R, DL), F,
               "the retry policy is spent (max_attempts, max_age_seconds), a permanent error, or more takeovers "
               "than TASK_MAX_TAKEOVERS",
               guard=_SETTLEABLE, exec_state=State.FAILED.value),
    Transition("settle_once_done", ONCE, D,
               "a one-time task whose action's target drops a repeat (target_deduplicates) ran, settled without a "
               "claim by one write on the claim's condition for a new execution (from the states a claim leaves; "
               "recurring and lazy tasks keep the claim)",
               guard=_NEW_EXECUTION, exec_state=State.DONE.value),
    Transition("settle_once_retry", ONCE, P,
               "as settle_once_done, the action failed with an attempt left for later: RETRYING until retry_at (the "
               "retry takes the claim)",
               guard=_NEW_EXECUTION, exec_state=RETRYING),
    Transition("settle_once_failed", ONCE, F, "as settle_once_done, the action failed for good",
               guard=_NEW_EXECUTION, exec_state=State.FAILED.value),
    Transition("mark_dead_lettered", _states(F), None, "the failure was sent to TASK_DLQ"),
    Transition("mark_alerted", _states(F), None, "the failure was sent to ALERT_TOPIC_ARN"),
    Transition("mark_callback", _states(P, D, F), None,
               "the task's on_success or on_failure ran after the execution it follows (from PENDING: a recurring "
               "task's occurrence), on the condition that the record still holds that execution as settled",
               guard=all_of(_EXEC_DUE.eq(_DUE), _EXEC_OWNER.eq(param("owner")),
                            _STATUS.is_in(*(value(s.value) for s in (P, D, F))))),
    Transition("cancel", _states(N, P, DL, PA), C,
               "DELETE /tasks/{id}, with the item's delete in one transaction (from DEAD_LETTERED: even with the "
               "claim its message left RUNNING)",
               guard=_not_executing(_DUE)),
    Transition("reschedule", _states(N, P, DL), P,
               "PATCH /tasks/{id}, with the item's update in one transaction (from DEAD_LETTERED: even with the "
               "claim its message left RUNNING; it runs again at its new time)",
               guard=_not_executing(param("old_due"))),
    Transition("cancel_by_item", _states(N, P, C), C,
               "the stream saw the task's item deleted by a user, or a lazy item lose its TTL: CANCELLED with "
               "cancelled_by item (from CANCELLED: only one cancelled by an item before; not from RUNNING: the "
               "claim settles it); an item written again with that due time is claimed again",
               guard=any_of(_PK.missing(), all_of(_is(P), _NOT_CLAIMED_AT_RUN_AT),
                            all_of(_is(C), attr(CANCELLED_BY).eq(value(BY_ITEM))))),
    Transition("note_dead_letter", _states(N, P, R), DL,
               "DUE_DLQ's handler: the due message SQS gave up on (a settled execution's is only forwarded)"),
    Transition("note_stream_dead_letter", _states(N, P, DL), DL,
               "the stream scheduler dead-lettered a write of the task's item (listed DEAD_LETTERED with the reason "
               "until a claim, a cancel or a reschedule)",
               guard=all_of(_NEWER_NOTE, any_of(_STATUS.missing(), _is(DL), all_of(_is(P), _NOT_CLAIMED_AT_RUN_AT))),),
    Transition("note_stream_dead_letter_kept", ANY - {N, P, DL}, None,
               "as note_stream_dead_letter, of a task running, finished or paused: the note only",
               guard=_NEWER_NOTE),
    Transition("redrive", _states(F, DL), P,
               "POST /tasks/{id}/retry (or /tasks/{source}/{key}/retry): a fresh execution of the due time that "
               "failed, RETRYING until run_at, its due message sent; once per retry_id",
               guard=all_of(any_of(all_of(_is(F), _EXEC_DUE.eq(_DUE)),
                                   all_of(_is(DL), _RUN_AT.eq(_DUE), any_of(
                                       _EXEC_STATE.missing(), _EXEC_STATE.ne(value(State.RUNNING.value)),
                                       _EXEC_DUE.ne(_DUE), _CLAIMED_AT.lt(param("stale"))))),
                            _unless(attr("retry_id"), param("retry_id"))), exec_state=RETRYING),
    Transition("pause", _states(N, P), PA, "POST /tasks/{id}/pause of a recurring task: its occurrences are skipped",
               guard=all_of(any_of(_STATUS.missing(), _is(P)), _not_executing(_DUE, stuck=False))),
    Transition("resume", _states(PA), P,
               "POST /tasks/{id}/resume, with the item's next occurrence after now in one transaction",
               guard=_is(PA)),
)

_BY_NAME: Mapping[str, Transition] = {t.name: t for t in TRANSITIONS}


class UndeclaredTransition(KeyError):
    """A write of a task's record named by no transition of ``TRANSITIONS``."""


def transition(name: str) -> Transition:
    """The declared transition ``name``; UndeclaredTransition when there is none (the store builds every write of
    a record from here, so it makes no transition the declaration lacks)."""
    found = _BY_NAME.get(name)
    if found is None:
        raise UndeclaredTransition(f"no transition {name!r} is declared (chalicelib.tasks.lifecycle.TRANSITIONS)")
    return found


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


def state_of(record: Mapping[str, Any] | None, due: str | None = None, now: datetime | None = None,
             lease_seconds: int = 0) -> State:
    """The state a task's record is in (None or empty: no record), the one reading of it (the API and its listing,
    the operations, the dead letters, the store's ``Execution``, the walk, the tests; ``tests/unit/test_state_reads.py``
    fails on another module reading ``status``). Pure.

    With ``due`` (the due time its item holds now, ``iso``), the state of the task as the API shows it: the
    record's when it is PAUSED or CANCELLED (but by the stream for its item then, when an item is there now), when
    it is DEAD_LETTERED for that due time, or finished at it; RUNNING while an executor holds the claim of that
    due time -- with ``now``, only while that claim is live (``claim_is_live``): a claim whose lease ended is
    PENDING, as its execution waits for the next delivery to take it over (docs/executor.md); PENDING
    otherwise (a recurring task done goes on PENDING at its next time; an item moved since: PENDING)."""
    state = _recorded(record)
    if due is None:
        return state
    record = record or {}
    if state is State.PAUSED or (state is State.CANCELLED and record.get(CANCELLED_BY) != BY_ITEM):
        return state
    note = record.get("dead_letter")
    if state is State.DEAD_LETTERED and isinstance(note, dict) and note.get("run_at") == due:
        return state  # its due message was dead-lettered: it waits for a retry
    if record.get("exec_due") == due:
        executing = record.get("exec_state")
        if executing == State.RUNNING.value:
            live = now is None or claim_is_live(record, now, lease_seconds)
            return State.RUNNING if live else State.PENDING
        if executing in (State.DONE.value, State.FAILED.value) and state.value == executing:
            return state  # a one-time task's end
    return State.PENDING


def _recorded(record: Mapping[str, Any] | None) -> State:
    """The state of the record alone."""
    if not record:
        return State.NONE
    status = str(record.get("status") or State.PENDING.value)
    if status != State.PENDING.value:  # DONE, FAILED, CANCELLED, DEAD_LETTERED, PAUSED
        return State(status)
    running = record.get("exec_state") == State.RUNNING.value and record.get("exec_due") == record.get("run_at")
    return State.RUNNING if running else State.PENDING


def claim_is_live(record: Mapping[str, Any], now: datetime, lease_seconds: int) -> bool:
    """True while the claim on a task's record is within its lease: claimed (``claimed_at``, epoch seconds) no
    more than ``lease_seconds`` (TASK_CLAIM_LEASE_SECONDS) before ``now``, the executor's own test
    (``store.lost_reason``): past it, its worker counts as dead and the next delivery takes the claim over. Pure."""
    claimed_at = record.get("claimed_at")
    if not isinstance(claimed_at, int | float) or isinstance(claimed_at, bool):
        return False
    return float(claimed_at) >= now.timestamp() - lease_seconds


# The main path of an execution, docs/executor.md's first drawing: (transition, from) of the declaration, each
# drawn to the state the declaration gives it -- created, claimed, done or at its next occurrence, retried,
# failed, dead-lettered, cancelled.
MAIN_PATH: tuple[tuple[str, State], ...] = (
    ("create", State.NONE), ("claim", State.PENDING), ("settle_done", State.RUNNING), ("settle_next", State.RUNNING),
    ("settle_retry", State.RUNNING), ("settle_failed", State.RUNNING), ("note_dead_letter", State.RUNNING),
    ("cancel", State.PENDING))


def main_path(kept: tuple[tuple[str, State], ...] = MAIN_PATH) -> list[tuple[str, State, State]]:
    """The edges ``kept`` (``MAIN_PATH``), each as the declaration has it (KeyError for one it lacks)."""
    declared = {(name, a): b for name, a, b in edges()}
    return [(name, a, declared[(name, a)]) for name, a in kept]


def mermaid_main() -> str:
    """The main path as a Mermaid ``stateDiagram-v2`` (docs/executor.md's first drawing)."""
    return "\n".join(["stateDiagram-v2", *(f"    {_node(a)} --> {_node(b)}: {name}" for name, a, b in main_path())])


def mermaid() -> str:
    """The declaration as a Mermaid ``stateDiagram-v2`` (docs/executor.md's full drawing): one edge per
    transition, from its one source or from a node listing its sources (``from_<i>``, shared by the transitions
    that leave the same states); a loop keeps the state."""
    lines = ["stateDiagram-v2"]
    groups: dict[frozenset[State], str] = {}
    for t in TRANSITIONS:
        if len(t.sources) == 1:
            (source,) = t.sources
            lines.append(f"    {_node(source)} --> {_node(t.target or source)}: {t.name}")
            continue
        if t.sources not in groups:
            groups[t.sources] = f"from_{len(groups) + 1}"
            listed = ", ".join(s.value for s in sorted(t.sources, key=_order))
            lines.append(f'    state "{listed}" as {groups[t.sources]}')
        group = groups[t.sources]
        lines.append(f"    {group} --> {group if t.target is None else _node(t.target)}: {t.name}")
    lines.append("    DONE --> [*]")
    lines.append("    FAILED --> [*]")
    lines.append("    CANCELLED --> [*]")
    return "\n".join(lines)


def _node(state: State) -> str:
    return "[*]" if state is State.NONE else state.value


def parse_mermaid(text: str) -> set[tuple[str, State, State]]:
    """The labelled transitions of a Mermaid ``stateDiagram-v2`` (``A --> B: name``; ``[*]`` is ``none``; a node
    ``state "A, B" as g`` stands for each of its states, and a loop on it for each keeping its own), for the test
    that the drawing is the declaration. Unlabelled arrows (the ends) are not transitions."""
    groups: dict[str, list[State]] = {}
    found: set[tuple[str, State, State]] = set()
    for line in text.splitlines():
        named = re.fullmatch(r'\s*state "([^"]*)" as (\w+)\s*', line)
        if named:
            groups[named.group(2)] = [State(v.strip()) for v in named.group(1).split(",")]
            continue
        arrow, sep, label = line.partition(":")
        if "-->" not in arrow or not sep:
            continue
        left, _, right = (part.strip() for part in arrow.partition("-->"))
        for source in groups.get(left) or [_state(left)]:
            kept = left == right and left in groups
            target = (State.PENDING if source is State.NONE else source) if kept else _state(right)
            found.add((label.strip(), source, target))
    return found


def _state(node: str) -> State:
    return State.NONE if node == "[*]" else State(node)


__all__ = [
    "BY_ITEM",
    "CANCELLED_BY",
    "MAIN_PATH",
    "OPERATIONS",
    "RETRYING",
    "STREAM_NOTE",
    "TRANSITIONS",
    "WRITERS",
    "State",
    "Transition",
    "UndeclaredTransition",
    "allowed_from",
    "allows",
    "claim_is_live",
    "edges",
    "main_path",
    "mermaid",
    "mermaid_main",
    "parse_mermaid",
    "state_of",
    "transition",
]

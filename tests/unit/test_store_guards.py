"""The guards of the task store's writes, built from the declaration (chalicelib/tasks/lifecycle.py), accept and
refuse the very records the hand-written condition strings they replaced did: both judged by DynamoDB's rules
(moto's evaluator) over records each guard accepts and all their one-attribute neighbours.  And the store
builds no write of a transition the declaration lacks."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from moto.dynamodb.comparisons import get_filter_expression
from moto.dynamodb.models.dynamo_type import DynamoType, Item

from chalicelib import ddb
from chalicelib.expression import render
from chalicelib.tasks import lifecycle, store
from chalicelib.tasks.lifecycle import UndeclaredTransition

D1, D2 = "2026-11-22T12:00:00.000Z", "2026-11-22T13:00:00.000Z"
PARAMS: dict[str, Any] = {"due": D1, "due_ms": 2, "now_ms": 2, "stale": 3, "previous": "other", "me": "me",
                          "owner": "me", "old_due": D1, "sequence": 2, "retry_id": "r1"}
_NCM = ("(attribute_not_exists(#s) OR #s <> :cancelled OR attribute_not_exists(run_at) OR run_at <> :due"
        " OR cancelled_by = :by_item) AND (attribute_not_exists(moved_from) OR moved_from <> :due)")
_NOT_EXECUTING = ("attribute_not_exists(PK) OR attribute_not_exists(exec_due) OR exec_due <> :due"
                  " OR exec_state = :retrying")
_STUCK = " OR (exec_state = :running AND #nx_status = :dead_lettered)"
_CONSTANTS = {":cancelled": "CANCELLED", ":by_item": "item", ":paused": "PAUSED", ":retrying": "RETRYING",
              ":running": "RUNNING", ":pending": "PENDING", ":dead_lettered": "DEAD_LETTERED", ":done": "DONE",
              ":failed": "FAILED", ":r_failed": "FAILED", ":r_dead": "DEAD_LETTERED", ":r_running": "RUNNING",
              ":p_pending": "PENDING", ":p_paused": "PAUSED", ":by_item_c": "item", ":cancelled_c": "CANCELLED"}
_NAMES = {"#s": "status", "#ed": "exec_due", "#eo": "exec_owner", "#es": "exec_state", "#st": "status",
          "#ra": "run_at", "#nx_status": "status", "#ps": "status", "#rs": "status", "#rr": "run_at", "#rd": "exec_due",
          "#re": "exec_state", "#rc": "claimed_at", "#ri": "retry_id", "#n": "stream_dead_letter", "#q": "sequence"}
_VALUES = {":due": D1, ":due_ms": 2, ":now_ms": 2, ":stale": 3, ":previous": "other", ":me": "me", ":owner": "me",
           ":q": 2, ":r_due": D1, ":r_stale": 3, ":r_id": "r1", **_CONSTANTS}
_NEWER = "(attribute_not_exists(#n) OR #n.#q < :q)"
_NOT_RUNNING = "(attribute_not_exists(#es) OR #es <> :running OR #ed <> #ra)"
# The store's conditions as they were written by hand, before they were built from the declaration.
OLD: dict[tuple[str, bool], str] = {
    ("claim", False): "(attribute_not_exists(exec_due) OR exec_due_ms < :due_ms OR (exec_due = :due AND exec_state = "
                      ":retrying AND retry_due = :due AND retry_at_ms <= :now_ms)) AND (attribute_not_exists(#s) OR "
                      "#s <> :paused) AND " + _NCM,
    ("settle_once_done", False): "(attribute_not_exists(exec_due) OR exec_due_ms < :due_ms) AND "
                                 "(attribute_not_exists(#s) OR #s <> :paused) AND " + _NCM,
    ("settle_done", False): "#ed = :due AND #eo = :me AND #es = :running AND #st IN (:pending, :dead_lettered)"
                            " AND #ra = :due",
    ("takeover", False): "exec_due = :due AND exec_state = :running AND claimed_at < :stale AND exec_owner = :previous"
                         " AND " + _NCM,
    ("mark_callback", False): "exec_due = :due AND exec_owner = :owner AND #s IN (:pending, :done, :failed)",
    ("cancel", False): _NOT_EXECUTING,
    ("cancel", True): _NOT_EXECUTING + _STUCK,
    ("pause", False): f"(attribute_not_exists(#ps) OR #ps = :p_pending) AND ({_NOT_EXECUTING})",
    ("resume", False): "#ps = :p_paused",
    ("cancel_by_item", False): "attribute_not_exists(PK) OR (#st = :pending AND (attribute_not_exists(#es) OR "
                               "#es <> :running OR #ed <> #ra)) OR (#st = :cancelled_c AND cancelled_by = :by_item_c)",
    ("note_stream_dead_letter", False): f"{_NEWER} AND (attribute_not_exists(#s) OR #s = :dead_lettered OR (#s = "
                                        ":pending AND (attribute_not_exists(exec_state) OR exec_state <> :running"
                                        " OR exec_due <> run_at)))",
    ("note_stream_dead_letter_kept", False): _NEWER,
    ("redrive", False): "((#rs = :r_failed AND #rd = :r_due) OR (#rs = :r_dead AND #rr = :r_due AND "
                        "(attribute_not_exists(#re) OR #re <> :r_running OR #rd <> :r_due OR #rc < :r_stale)))"
                        " AND (attribute_not_exists(#ri) OR #ri <> :r_id)",
    ("create", False): "attribute_not_exists(PK)",
}
OLD[("reschedule", False)], OLD[("reschedule", True)] = OLD[("cancel", False)], OLD[("cancel", True)]
SAME_GUARD = {"settle_once_done": ("settle_once_retry", "settle_once_failed"),
              "settle_done": ("settle_next", "settle_retry", "settle_failed")}


POOLS: dict[str, list[Any]] = {
    "PK": ["TASK#t"], "status": ["PENDING", "DEAD_LETTERED", "DONE", "FAILED", "CANCELLED", "PAUSED"],
    "exec_state": ["RUNNING", "RETRYING", "DONE", "FAILED"], "exec_due": [D1, D2], "exec_due_ms": [1, 2, 3],
    "run_at": [D1, D2], "retry_due": [D1, D2], "retry_at_ms": [1, 2, 3], "exec_owner": ["me", "other"],
    "claimed_at": [1, 3, 5], "moved_from": [D1, D2], "cancelled_by": ["item", "api"], "retry_id": ["r1", "r2"],
    "stream_dead_letter": [{"sequence": 1}, {"sequence": 2}, {"sequence": 3}],
}
_RUNNING = {"PK": "TASK#t", "status": "PENDING", "exec_due": D1, "exec_due_ms": 2, "exec_state": "RUNNING",
            "run_at": D1}
# Records each guard accepts (some on a clause no other takes).
WITNESSES: list[dict[str, Any]] = [
    {}, {"PK": "TASK#t", "status": "PENDING", "run_at": D1},
    {**_RUNNING, "exec_state": "RETRYING", "retry_due": D1, "retry_at_ms": 2},
    {"PK": "TASK#t", "status": "CANCELLED", "run_at": D1, "cancelled_by": "item", "exec_due": D2, "exec_due_ms": 1},
    {**_RUNNING, "claimed_at": 1, "exec_owner": "other"}, {**_RUNNING, "exec_owner": "me", "claimed_at": 5},
    {**_RUNNING, "status": "DEAD_LETTERED", "exec_owner": "me"},
    {"PK": "TASK#t", "status": "DONE", "exec_due": D1, "exec_owner": "me", "exec_state": "DONE"},
    {"PK": "TASK#t", "status": "PAUSED", "run_at": D1}, {"PK": "TASK#t", "status": "PENDING", "exec_due": D2},
    {**_RUNNING, "run_at": D2, "stream_dead_letter": {"sequence": 1}},
    {"PK": "TASK#t", "status": "DEAD_LETTERED", "stream_dead_letter": {"sequence": 3}},
    {"PK": "TASK#t", "status": "FAILED", "exec_due": D1, "exec_state": "FAILED", "retry_id": "r2"},
    {**_RUNNING, "status": "DEAD_LETTERED", "claimed_at": 1, "exec_owner": "other", "retry_id": "r1"},
]


def neighbours() -> list[dict[str, Any]]:
    """Each witness, and each with one attribute removed or changed to another value of its pool: the records on
    either side of every clause of the guards."""
    found: list[dict[str, Any]] = []
    for witness in WITNESSES:
        found.append(witness)
        for name, pool in POOLS.items():
            for other in (None, *pool):
                if witness.get(name) != other:
                    found.append({**witness, name: other})
    return found


def _parsed(condition: str, names: dict[str, str], values: dict[str, Any]) -> Any:
    """DynamoDB's reading of a condition (moto's parser), to judge records by."""
    used_names = {k: v for k, v in names.items() if k in condition}
    used_values = {k: ddb.value(v) for k, v in values.items() if k in condition}
    return get_filter_expression(condition, used_names or None, used_values or None)


@cache
def pairs() -> list[tuple[str, Any, Any]]:
    """(transition, its built guard, the hand-written condition), each parsed once."""
    found = []
    for (name, stuck), old in OLD.items():
        transition = lifecycle.transition(name)
        assert transition.guard is not None
        built = render(condition=transition.guard, params={**PARAMS, "stuck": stuck})
        assert built.condition is not None
        found.append((name, _parsed(built.condition, built.names, built.values), _parsed(old, _NAMES, _VALUES)))
        for same in SAME_GUARD.get(name, ()):
            assert lifecycle.transition(same).guard == transition.guard
    return found


def test_each_built_guard_accepts_and_refuses_the_records_its_hand_written_condition_did() -> None:
    for record in neighbours():
        item = Item(DynamoType({"S": "TASK#t"}), None, ddb.serialize({k: v for k, v in record.items() if v is not None}))
        for name, built, old in pairs():  # (a record without PK is no record: every condition reads it as empty)
            assert bool(built.expr(item)) == bool(old.expr(item)), (name, record)


def test_a_write_of_a_transition_the_declaration_lacks_is_refused() -> None:
    with pytest.raises(UndeclaredTransition, match="settle_sideways"):
        store.record_write("settle_sideways", "t")
    assert store.record_write("settle_done", "t", params={"due": D1, "me": "me"}).condition is not None


def record_writes(source: str) -> set[str]:
    """The transitions a store module's text writes: each ``record_write``'s or ``record_item``'s name (a literal,
    or a literal prefix joined to the outcome: ``"settle_" + name``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("record_write", "record_item"):
            first = node.args[0]
            if isinstance(first, ast.Constant):
                found.add(str(first.value))
            elif isinstance(first, ast.BinOp) and isinstance(first.left, ast.Constant):
                found.add(str(first.left.value) + "*")
            elif isinstance(first, ast.Name):
                found.add("<" + first.id + ">")
    return found


def _declared(name: str) -> bool:
    names = {t.name for t in lifecycle.TRANSITIONS}
    if name.endswith("*"):
        return any(n.startswith(name[:-1]) for n in names)
    return name in names or name.startswith("<")


def test_every_write_the_store_builds_is_of_a_declared_transition_and_one_added_only_to_the_store_fails() -> None:
    text = Path(store.__file__).read_text()
    writes = record_writes(text)
    assert {"create", "claim", "takeover", "redrive", "cancel_by_item", "settle_*"} <= writes
    assert all(_declared(name) for name in writes), sorted(n for n in writes if not _declared(n))
    sneaked = text + '\n\ndef sneak(key: str) -> object:\n    return record_write("settle_sideways", key)\n'
    assert [n for n in record_writes(sneaked) if not _declared(n)] == ["settle_sideways"]

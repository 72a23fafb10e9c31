"""The backups' records' state machines as declared (chalicelib/backups/lifecycle.py): the drawing in
docs/backups-guarantees.md is ``RUN``'s, every writer exists, and the expressions built from a transition hold
its states and fields and no placeholder they do not use. The walk of every edge against the store under moto is
tests/functional/test_backup_lifecycle_walk.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from chalicelib.backups import lifecycle
from chalicelib.backups.lifecycle import MACHINES, RESTORE, RUN, TABLE, VERIFICATION, Machine, Transition
from chalicelib.backups.restore_store import RestoreStore
from chalicelib.backups.store import RunStore
from chalicelib.expression import Rendered

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "backups-guarantees.md"
PARAMS: dict[str, Any] = {  # a value for every parameter a transition names
    "now": "2026-11-22T12:00:00+00:00", "stale": "2026-11-22T11:45:00+00:00", "claimed": "c", "expired": "e",
    "tables": {"count": 1}, "plan": ["orders"], "summary": {"backed_up": 1}, "poll": 2, "next": 3, "seen": "s",
    "message": "m", "n": 4, "windowed": True, "counts": {"verified": 1, "verify_failed": 0}, "table": "orders",
    "error": "", "alerted": False, "problems": [], "recorded": 1, "restored": 1, "scan_complete": True,
    "comparison": {}, "settings": {}, "applied": [], "skipped": ""}
STORES = {"RunStore": RunStore, "RestoreStore": RestoreStore}


def drawn() -> str:
    blocks = [b for b in re.findall(r"```mermaid\n(.*?)```", DOC.read_text(), re.S) if "stateDiagram-v2" in b]
    assert len(blocks) == 1, "docs/backups-guarantees.md draws the run's states once"
    return str(blocks[0])


def test_the_drawing_is_the_run_as_declared() -> None:
    assert drawn().strip() == RUN.mermaid().strip()
    assert lifecycle.parse_mermaid(drawn()) == RUN.edges()


def test_a_drawing_with_an_edge_the_declaration_lacks_is_told_apart() -> None:
    extra = RUN.mermaid() + "\n    COMPLETE --> RUNNING: started"
    assert lifecycle.parse_mermaid(extra) - RUN.edges() == {("started", "COMPLETE", "RUNNING")}


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_each_transition_names_a_store_method_that_exists_and_every_state_is_reached(machine: Machine) -> None:
    assert set(machine.writers) == {t.name for t in machine.transitions}
    assert all(callable(getattr(STORES[machine.store], w, None)) for w in machine.writers.values())
    reached = {b for _, _, b in machine.edges()} | set(machine.entries)
    assert reached == set(machine.states) - {lifecycle.NONE}


def writes(machine: Machine, t: Transition) -> list[Rendered]:
    """The write of ``t`` from each of its sources (the one the caller names) to each of its targets."""
    sources = t.sources if t.source_named else ("",)
    targets = t.targets if len(t.targets) > 1 else ("",)
    return [machine.write((t.name,), PARAMS, source=s, target=g).render() for s in sources for g in targets]


ALL = [(m, t) for m in MACHINES for t in m.transitions if t.name != "create"]


@pytest.mark.parametrize(("machine", "transition"), ALL, ids=[f"{m.name}.{t.name}" for m, t in ALL])
def test_every_placeholder_a_write_carries_is_used_and_every_one_it_uses_is_carried(
        machine: Machine, transition: Transition) -> None:
    """DynamoDB refuses an unused ExpressionAttributeNames or ExpressionAttributeValues entry (moto does not)."""
    for write in writes(machine, transition):
        used = set(re.findall(r"[#:]\w+", f"{write.update} {write.condition or ''}"))
        assert used == set(write.names) | set(write.values), (transition.name, write)


def test_a_write_holds_the_states_it_leaves_and_sets_its_target() -> None:
    started = RUN.write(("started",), PARAMS).render()
    assert started.condition == "#status = :STARTING AND #claimed_at = :claimed"
    assert str(started.update).startswith("SET #status = :RUNNING,") and started.values[":RUNNING"] == "RUNNING"
    every = RUN.write(("mark_queued",), PARAMS).render()  # it leaves every state: no condition on the status
    assert every.condition == "#poll = :poll" and "#status" not in every.names
    assert RUN.condition("create", {}).condition == "attribute_not_exists(#PK)"
    unabandon = RUN.write(("unabandon",), PARAMS).render()
    assert unabandon.update == "SET #status = :STARTING REMOVE #finished_at"


def test_a_write_of_two_transitions_holds_when_either_does() -> None:
    claim = RUN.write(("finish", "take_finish"), PARAMS).render()
    assert claim.condition == ("(#status = :RUNNING AND #poll = :poll) OR "
                               "(#status = :FINISHING AND #claimed_at < :stale)")
    with pytest.raises(ValueError, match="not one write"):
        RUN.write(("finish", "complete"), PARAMS)


def test_a_target_or_source_the_caller_names_must_be_declared() -> None:
    settled = TABLE.write(("settle_table",), PARAMS, target="STUCK").render()
    assert settled.values[":status"] == "STUCK" and settled.names["#table"] == "orders"
    with pytest.raises(ValueError, match="RUNNING"):
        TABLE.write(("settle_table",), PARAMS, target="RUNNING")
    with pytest.raises(ValueError, match="SKIPPED"):
        VERIFICATION.write(("unsettle_verification",), PARAMS, source="SKIPPED")


def test_several_records_of_one_item_in_one_write_each_have_their_own_names() -> None:
    write = TABLE.write_each("settle_available", [{"table": "a"}, {"table": "b"}]).render()
    assert write.update == "SET #tables.#table0.#status = :AVAILABLE, #tables.#table1.#status = :AVAILABLE"
    assert write.condition == "#tables.#table0.#status = :PENDING AND #tables.#table1.#status = :PENDING"
    assert write.names == {"#tables": "tables", "#table0": "a", "#table1": "b", "#status": "status"}


def test_a_transition_the_declaration_lacks_is_refused() -> None:
    with pytest.raises(lifecycle.UndeclaredTransition, match="reopen"):
        RUN.write(("reopen",), PARAMS)


@pytest.mark.parametrize(("module", "store", "puts"), [
    ("store.py", "RunStore", {"put_item": {"create"}}), ("restore_store.py", "RestoreStore",
                                                         {"transact_write_items": {"create"}})])
def test_every_conditional_write_of_a_store_goes_through_its_one_writer(
        module: str, store: str, puts: dict[str, set[str]]) -> None:
    """Only the store's ``_write`` calls the conditional updates (built from the declaration); the put of a new
    record is ``create``'s, whose condition is the declaration's too."""
    tree = ast.parse((ROOT / "chalicelib" / "backups" / module).read_text())
    found = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == store)
    callers: dict[str, set[str]] = {}
    for method in found.body:
        if isinstance(method, ast.FunctionDef):
            for node in ast.walk(method):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and \
                        node.value.attr in ("_items", "_ddb") and node.attr in (
                        "apply", "update", "update_item", "put_item", "transact_write_items"):
                    callers.setdefault(node.attr, set()).add(method.name)
    assert callers == {"apply": {"_write"}, **puts}


def test_a_restore_claimed_again_by_the_message_that_claimed_it() -> None:
    again = RESTORE.write(("claim_poll", "claim_poll_again"), PARAMS).render()
    assert again.condition == ("(#status = :RESTORING AND #poll = :poll) OR "
                               "(#status = :RESTORING AND #poll = :next AND #poll_message = :message)")


def test_a_count_of_a_summary_must_be_a_plain_attribute_name() -> None:
    with pytest.raises(ValueError, match="not a plain attribute name"):
        RUN.write(("verified",), {**PARAMS, "counts": {"x.y": 1}})

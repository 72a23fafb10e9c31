"""The drawing in docs/executor.md is the execution's state machine as declared (chalicelib/tasks/lifecycle.py).

The walk of every declared transition against the code, under moto, is tests/functional/test_execution_walk.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chalicelib.tasks import lifecycle
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.store import TaskStore

DOC = Path(__file__).resolve().parents[2] / "docs" / "executor.md"


def drawings() -> list[str]:
    blocks = [b for b in re.findall(r"```mermaid\n(.*?)```", DOC.read_text(), re.S) if "stateDiagram-v2" in b]
    assert len(blocks) == 2, "docs/executor.md draws the main path, then every transition"
    return [str(b) for b in blocks]


def drawn() -> str:
    return drawings()[1]


def test_the_diagram_in_the_docs_has_the_declared_transitions_and_no_other() -> None:
    shown = lifecycle.parse_mermaid(drawn())
    declared = lifecycle.edges()
    assert shown - declared == set(), "drawn but not declared"
    assert declared - shown == set(), "declared but not drawn"


def test_the_diagram_is_the_one_the_declaration_draws_one_edge_per_transition() -> None:
    assert drawn().strip() == lifecycle.mermaid().strip()
    labelled = [line for line in drawn().splitlines() if "-->" in line and ":" in line]
    assert sorted(line.rpartition(": ")[2] for line in labelled) == sorted(t.name for t in lifecycle.TRANSITIONS)


def test_the_main_path_drawn_first_is_the_declarations_own_edges_at_most_eight() -> None:
    main = drawings()[0]
    assert main.strip() == lifecycle.mermaid_main().strip()
    shown = lifecycle.parse_mermaid(main)
    assert shown <= lifecycle.edges() and len(main.strip().splitlines()) - 1 == len(shown) <= 8
    assert {name for name, _, _ in shown} == {"create", "claim", "settle_done", "settle_next", "settle_retry",
                                              "settle_failed", "note_dead_letter", "cancel"}


def test_a_main_path_edge_the_declaration_lacks_is_refused() -> None:
    with pytest.raises(KeyError):
        lifecycle.main_path((*lifecycle.MAIN_PATH, ("settle_done", State.PAUSED)))


def test_a_diagram_with_an_edge_the_declaration_lacks_is_told_apart() -> None:
    extra = lifecycle.mermaid() + "\n    DONE --> PENDING: settle_done"
    assert lifecycle.parse_mermaid(extra) - lifecycle.edges() == {("settle_done", State.DONE, State.PENDING)}
    grouped = 'stateDiagram-v2\n    state "none, FAILED" as g\n    g --> g: note\n    g --> DONE: done'
    assert lifecycle.parse_mermaid(grouped) == {("note", State.NONE, State.PENDING), ("note", State.FAILED, State.FAILED),
                                                ("done", State.NONE, State.DONE), ("done", State.FAILED, State.DONE)}


def test_each_transition_names_a_store_method_that_exists() -> None:
    assert set(lifecycle.WRITERS) == {t.name for t in lifecycle.TRANSITIONS}
    for writer in lifecycle.WRITERS.values():
        owner, _, method = writer.partition(".")
        assert owner == "TaskStore" and callable(getattr(TaskStore, method, None)), writer


@pytest.mark.parametrize(("record", "state"), [
    (None, State.NONE),
    ({}, State.NONE),
    ({"run_at": "2026-11-22T12:00:00Z"}, State.PENDING),  # a record without status (PATCH of another program's)
    ({"status": "PENDING", "run_at": "2026-11-22T12:00:00Z"}, State.PENDING),
    ({"status": "PENDING", "run_at": "2026-11-22T12:00:00Z", "exec_due": "2026-11-22T12:00:00Z",
      "exec_state": "RUNNING"}, State.RUNNING),
    ({"status": "PENDING", "run_at": "2026-11-22T13:00:00Z", "exec_due": "2026-11-22T12:00:00Z",
      "exec_state": "RUNNING"}, State.PENDING),  # rescheduled away from a claim its dead-lettered message left
    ({"status": "PENDING", "run_at": "2026-11-23T12:00:00Z", "exec_due": "2026-11-22T12:00:00Z",
      "exec_state": "DONE"}, State.PENDING),  # a recurring task at its next due time
    ({"status": "DONE", "exec_state": "DONE"}, State.DONE),
    ({"status": "FAILED", "exec_state": "FAILED"}, State.FAILED),
    ({"status": "CANCELLED", "exec_state": "RUNNING"}, State.CANCELLED),
    ({"status": "DEAD_LETTERED", "exec_state": "RUNNING", "run_at": "2026-11-22T12:00:00Z",
      "exec_due": "2026-11-22T12:00:00Z"}, State.DEAD_LETTERED),  # the claim its dead-lettered message left
    ({"status": "PAUSED", "run_at": "2026-11-22T12:00:00Z"}, State.PAUSED),
    ({"status": "PENDING", "run_at": "2026-11-22T12:00:00Z", "exec_due": "2026-11-22T12:00:00Z",
      "exec_state": "RETRYING"}, State.PENDING),  # a failed execution waiting for its retry
])
def test_the_state_is_read_from_the_record_alone(record: dict[str, str] | None, state: State) -> None:
    assert lifecycle.state_of(record) is state


def test_every_state_but_none_is_reached_and_every_finished_one_is_left_only_by_a_new_execution_a_retry_or_a_note(
        ) -> None:
    targets = {b for _, _, b in lifecycle.edges()}
    assert targets == set(State) - {State.NONE}
    for name, a, b in lifecycle.edges():
        if a in (State.DONE, State.FAILED, State.CANCELLED) and a is not b:
            assert name == "claim" or name.startswith("settle_once_") or (name, a) == ("redrive", State.FAILED), (
                name, a, b)


def test_an_unclaimed_settle_leaves_exactly_the_states_a_claim_leaves_and_never_a_paused_task() -> None:
    claim = next(t for t in lifecycle.TRANSITIONS if t.name == "claim")
    once = [t for t in lifecycle.TRANSITIONS if t.name.startswith("settle_once_")]
    assert {t.target for t in once} == {State.DONE, State.PENDING, State.FAILED}
    assert all(t.sources == claim.sources and State.PAUSED not in t.sources for t in once)


def test_a_paused_task_is_never_claimed_and_only_the_api_leaves_the_pause() -> None:
    assert not any(a is State.PAUSED and b is State.RUNNING for _, a, b in lifecycle.edges())
    assert {name for name, a, b in lifecycle.edges() if a is State.PAUSED and b is not State.PAUSED} == {
        "resume", "cancel"}

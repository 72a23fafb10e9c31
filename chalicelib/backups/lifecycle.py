"""The backups' records' lives, declared once: their states and the conditional writes between them. Pure, no I/O.

``RUN`` is a backup run's item (store.py), ``TABLE`` one table's result in a page of the run (or in the run item,
for runs recorded before pages), ``VERIFICATION`` one restore verification of the run, ``RESTORE`` a restore
on demand's record (restore_store.py). Each conditional write of one of them is one or more transitions below,
by the one store method ``writers`` names, and its ConditionExpression and UpdateExpression are built from them
(``Machine.write``): the status in the transition's sources (none when it leaves every state) and its
``guard``, then the status set to its target and its ``sets`` and ``removes``. A write of several transitions
holds when one of them does. A name the declaration lacks is refused (``UndeclaredTransition``).

docs/backups-guarantees.md draws ``RUN`` (``mermaid``); tests/unit/test_backup_lifecycle.py checks the drawing
and tests/functional/test_backup_lifecycle_walk.py walks every edge against the stores under moto. Pages and
verifications are written whole by the run's claimant, not by a transition (``entries``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chalicelib.backups.expression_builder import (
    Added,
    All,
    Compare,
    Cond,
    Each,
    Either,
    Exists,
    In,
    Operand,
    Update,
    Value,
    both,
    build,
    const,
    merge,
    param,
)

NONE = "none"  # no record yet
STARTING, RUNNING, FINISHING, VERIFYING, COMPLETE = "STARTING", "RUNNING", "FINISHING", "VERIFYING", "COMPLETE"
PENDING, AVAILABLE, FAILED, STUCK = "PENDING", "AVAILABLE", "FAILED", "STUCK"
RESTORING, PASSED, SKIPPED, ACTIVE = "RESTORING", "PASSED", "SKIPPED", "ACTIVE"
RELEASED = datetime(1970, 1, 1, tzinfo=UTC)  # a FINISHING claim handed on: older than any lease


class UndeclaredTransition(KeyError):
    """A write names a transition its machine does not declare."""


@dataclass(frozen=True)
class Transition:
    name: str
    sources: tuple[str, ...]
    targets: tuple[str, ...]  # (): the state stays; several: the caller names one (``:status``)
    meaning: str
    guard: Cond | None = None
    sets: tuple[tuple[str, Operand], ...] = ()
    removes: tuple[str, ...] = ()
    source_named: bool = False  # the caller names which of the sources (``#s = :status``)

    def edges(self) -> list[tuple[str, str]]:
        """(from, to) of each state it leaves."""
        return [(s, t) for s in self.sources for t in (self.targets or (s,))]


@dataclass(frozen=True)
class Machine:
    name: str
    status: str  # the status's path in the item
    states: tuple[str, ...]
    store: str  # the store class that writes the records
    transitions: tuple[Transition, ...]
    writers: Mapping[str, str]  # its method that makes each transition
    entries: tuple[str, ...] = ()  # the states a record is written whole in (not a transition)
    ends: tuple[str, ...] = ()

    def transition(self, name: str) -> Transition:
        for t in self.transitions:
            if t.name == name:
                return t
        raise UndeclaredTransition(f"{self.name} declares no transition {name!r}")

    def write(self, names: Sequence[str], params: Mapping[str, Any], source: str = "", target: str = "",
              suffix: str = "") -> Update:
        """The expressions of one write making one of the transitions ``names`` (their targets and fields the
        same), with the caller's ``params``; ``source``/``target``: the one of several the caller names."""
        chosen = [self.transition(n) for n in names]
        first = chosen[0]
        if any((t.targets, t.sets, t.removes) != (first.targets, first.sets, first.removes) for t in chosen):
            raise ValueError(f"{names} set different fields: not one write")
        values = dict(params)
        sets: list[tuple[str, Operand]] = []
        if first.targets:
            sets.append((self.status, self._state_value(first.targets, target, values)))
        return build([*sets, *first.sets], first.removes, self._condition(chosen, source, values), values, suffix)

    def condition(self, name: str, params: Mapping[str, Any]) -> Update:
        """Only the condition of transition ``name`` (of a write that puts the record whole: ``create``)."""
        values = dict(params)
        return build([], (), self._condition([self.transition(name)], "", values), values)

    def _condition(self, chosen: Sequence[Transition], source: str, values: dict[str, Any]) -> Cond | None:
        conditions = [both(self._from(t, source, values), t.guard) for t in chosen]
        parts = tuple(c for c in conditions if c is not None)
        if len(conditions) == 1:
            return conditions[0]
        return Either(parts) if len(parts) == len(conditions) else None

    def write_each(self, name: str, params: Sequence[Mapping[str, Any]]) -> Update:
        """One write making transition ``name`` of several records of one item (a page's tables), all or none."""
        return merge([self.write([name], p, suffix=str(i)) for i, p in enumerate(params)])

    def _state_value(self, states: tuple[str, ...], named: str, values: dict[str, Any]) -> Value:
        if len(states) == 1 and not named:
            return const(":" + states[0].lower(), states[0])
        if named not in states or values.get("status", named) != named:
            raise ValueError(f"{named!r} is not one of {states}")
        values["status"] = named
        return param("status")

    def _from(self, t: Transition, source: str, values: dict[str, Any]) -> Cond | None:
        if t.source_named:
            return Compare(self.status, "=", self._state_value(t.sources, source, values))
        if t.sources == (NONE,):
            return Exists("PK", present=False)
        if set(t.sources) == set(self.states) - {NONE}:
            return None
        if len(t.sources) == 1:
            return Compare(self.status, "=", const(":" + t.sources[0].lower(), t.sources[0]))
        return In(self.status, tuple(const(":" + s.lower(), s) for s in t.sources))

    def edges(self) -> set[tuple[str, str, str]]:
        """Every (transition, from, to) the declaration allows."""
        return {(t.name, a, b) for t in self.transitions for a, b in t.edges()}

    def mermaid(self) -> str:
        """The declaration as a Mermaid ``stateDiagram-v2``: ``[*]`` is ``none``; unlabelled arrows are the
        states a record is written whole in, and its ends."""
        lines = ["stateDiagram-v2"]
        lines += [f"    [*] --> {s}" for s in self.entries]
        lines += [f"    {_node(a)} --> {_node(b)}: {t.name}" for t in self.transitions for a, b in t.edges()]
        lines += [f"    {s} --> [*]" for s in self.ends]
        return "\n".join(lines)


def _node(state: str) -> str:
    return "[*]" if state == NONE else state


def parse_mermaid(text: str) -> set[tuple[str, str, str]]:
    """The labelled transitions of a Mermaid ``stateDiagram-v2`` (``A --> B: name``; ``[*]`` is ``none``)."""
    found: set[tuple[str, str, str]] = set()
    for line in text.splitlines():
        arrow, sep, label = line.partition(":")
        if "-->" in arrow and sep:
            left, _, right = (NONE if n.strip() == "[*]" else n.strip() for n in arrow.partition("-->"))
            found.add((label.strip(), left, right))
    return found


T, F, ZERO, ONE = const(":t", True), const(":f", False), const(":zero", 0), const(":one", 1)
NOW = param("now")
CLAIMED = Compare("claimed_at", "=", param("claimed"))  # the claim this worker holds
LIVE = (STARTING, RUNNING, FINISHING, VERIFYING, COMPLETE)
POLL_SETS: tuple[tuple[str, Operand], ...] = (
    ("poll", param("next")), ("poll_queued", F), ("advanced_at", NOW), ("poll_message", param("message")))

RUN = Machine("run", "status", (NONE, *LIVE), "RunStore", (
    Transition("create", (NONE,), (STARTING,), "the trigger's first write, before its tables are chosen"),
    Transition("reclaim_start", (STARTING,), (), "take over a start whose claim is stale or was let go",
               Either((Compare("claimed_at", "<", param("stale")), Compare("released", "=", T))),
               (("claimed_at", NOW), ("handed_off", F), ("released", F))),
    Transition("record_tables", (STARTING,), (), "the tables chosen: counts and verification plan", CLAIMED,
               (("tables", param("tables")), ("verify_plan", param("plan")))),
    Transition("release_start", (STARTING,), (), "a try that failed lets its claim go, the failure counted",
               CLAIMED, (("released", T), ("start_failures", Added(ONE, ZERO)))),
    Transition("hand_off", (STARTING,), (), "a starter out of time lets its claim lapse, marked handed off",
               CLAIMED, (("claimed_at", param("expired")), ("handed_off", T))),
    Transition("take_handoff", (STARTING,), (), "the watch claims a run handed off",
               All((CLAIMED, Compare("handed_off", "=", T))), (("claimed_at", NOW), ("handed_off", F))),
    Transition("started", (STARTING,), (RUNNING,), "the backups started: monitor message 0 expected", CLAIMED,
               (("tables", param("tables")), ("poll", ZERO), ("poll_queued", F), ("advanced_at", NOW))),
    Transition("abandon", (STARTING,), (COMPLETE,), "a start that stopped (or failed three times) closed",
               CLAIMED, (("finished_at", NOW), ("summary", param("summary")))),
    Transition("unabandon", (COMPLETE,), (STARTING,), "abandon undone: its alert could not be sent", CLAIMED,
               removes=("finished_at",)),
    Transition("claim_stale_poll", (RUNNING, VERIFYING), (), "a poll that stopped moving: the trigger sends it again",
               All((Compare("poll", "=", param("poll")), Compare("advanced_at", "=", param("seen")))),
               (("advanced_at", NOW), ("poll_queued", F))),
    Transition("mark_queued", LIVE, (), "the message of the poll is in the queue",
               Compare("poll", "=", param("poll")), (("poll_queued", T),)),
    Transition("claim_resend", LIVE, (), "send the poll's message for a worker that advanced to it and died",
               All((Compare("poll", "=", param("poll")), Compare("poll_queued", "=", F),
                    Compare("advanced_at", "=", param("seen")))), (("advanced_at", NOW),)),
    Transition("claim_poll", (RUNNING,), (), "a monitor message claims its poll (or a later one)",
               Compare("poll", "<=", param("poll")), POLL_SETS),
    Transition("claim_verifying_poll", (VERIFYING,), (), "a verification's monitor message claims its poll",
               Compare("poll", "=", param("poll")), POLL_SETS),
    Transition("finish", (RUNNING,), (FINISHING,), "the poll that settled every table claims the finish",
               Compare("poll", "=", param("poll")), (("claimed_at", NOW),)),
    Transition("take_finish", (FINISHING,), (FINISHING,), "take over a finish whose claim is stale",
               Compare("claimed_at", "<", param("stale")), (("claimed_at", NOW),)),
    Transition("release_finish", (FINISHING,), (), "retention out of time: the claim released, the pass counted",
               CLAIMED, (("claimed_at", const(":released", RELEASED.isoformat())),
                         ("retention_deleted", Added(param("n"), ZERO)), ("retention_passes", Added(ONE, ZERO)),
                         ("retention_windowed", param("windowed")))),
    Transition("complete", (STARTING, FINISHING), (COMPLETE,),
               "retention done and no verification planned (from STARTING: no table to back up)", None,
               (("finished_at", NOW), ("summary", param("summary")))),
    Transition("verifying", (FINISHING,), (VERIFYING,), "retention done: restore verification starts", None,
               (("summary", param("summary")), ("advanced_at", NOW), ("poll_queued", F))),
    Transition("verified", (VERIFYING,), (COMPLETE,), "every verification done, counted in the summary", None,
               (("finished_at", NOW), ("summary", Each("counts")))),
), {"create": "create", "reclaim_start": "reclaim_start", "record_tables": "record_tables",
    "release_start": "release_start", "hand_off": "hand_off", "take_handoff": "take_handoff", "started": "started",
    "abandon": "abandon", "unabandon": "unabandon", "claim_stale_poll": "claim_stale_poll",
    "mark_queued": "mark_queued", "claim_resend": "claim_resend", "claim_poll": "claim_poll",
    "claim_verifying_poll": "claim_poll", "finish": "claim_finish", "take_finish": "claim_finish",
    "release_finish": "release_finish", "complete": "complete", "verifying": "verifying", "verified": "verified"},
    ends=(COMPLETE,))

IN_TABLE = "tables.{table}."
TABLE = Machine("table", IN_TABLE + "status", (PENDING, AVAILABLE, FAILED, STUCK), "RunStore", (
    Transition("settle_table", (PENDING,), (AVAILABLE, FAILED, STUCK), "the table's outcome, once", None,
               ((IN_TABLE + "error", param("error")), (IN_TABLE + "alerted", param("alerted")))),
    Transition("settle_available", (PENDING,), (AVAILABLE,), "a page's tables whose backups are AVAILABLE"),
    Transition("claim_alert", (FAILED,), (), "the alert of a table that failed to start, claimed once",
               Compare(IN_TABLE + "alerted", "=", F), ((IN_TABLE + "alerted", T),)),
    Transition("release_alert", (PENDING, AVAILABLE, FAILED, STUCK), (), "claim_alert undone: the alert failed",
               Exists("PK"), ((IN_TABLE + "alerted", F),)),
    Transition("unsettle_table", (PENDING, AVAILABLE, FAILED, STUCK), (PENDING,),
               "settle_table undone: its alert failed", Exists("PK"), ((IN_TABLE + "alerted", F),)),
), {"settle_table": "settle_table", "settle_available": "settle_available", "claim_alert": "claim_alert",
    "release_alert": "release_alert", "unsettle_table": "unsettle_table"}, entries=(PENDING, FAILED))

VERIFICATION = Machine("verification", "status", (RESTORING, PASSED, FAILED, SKIPPED), "RunStore", (
    Transition("settle_verification", (RESTORING,), (PASSED, FAILED), "what the restored table showed", None,
               (("error", param("error")), ("problems", param("problems")), ("recorded_items", param("recorded")),
                ("restored_items", param("restored")), ("scan_complete", param("scan_complete")))),
    Transition("unsettle_verification", (PASSED, FAILED), (RESTORING,), "settle undone: its alert failed",
               source_named=True),
    Transition("restore_table_deleted", (RESTORING, PASSED, FAILED, SKIPPED), (),
               "its temporary table deleted", Exists("PK"), (("table_deleted", T),)),
), {"settle_verification": "settle_verification", "unsettle_verification": "unsettle_verification",
    "restore_table_deleted": "restore_table_deleted"}, entries=(RESTORING, SKIPPED))

POLL_CLAIM: tuple[tuple[str, Operand], ...] = (
    ("poll", param("next")), ("poll_message", param("message")), ("polled_at", NOW))
RESTORE = Machine("restore", "status", (NONE, RESTORING, ACTIVE, FAILED), "RestoreStore", (
    Transition("create", (NONE,), (RESTORING,), "POST /backups/restores: the record, its listing and its target's "
               "claim in one transaction"),
    Transition("claim_poll", (RESTORING,), (), "a monitor message claims its poll",
               Compare("poll", "=", param("poll")), POLL_CLAIM),
    Transition("claim_poll_again", (RESTORING,), (), "a redelivery of the message that claimed it claims it again",
               All((Compare("poll", "=", param("next")), Compare("poll_message", "=", param("message")))),
               POLL_CLAIM),
    Transition("settle", (RESTORING,), (ACTIVE, FAILED), "the outcome, once: its winner alerts", None,
               (("finished_at", NOW), ("error", param("error")), ("comparison", param("comparison")),
                ("settings", param("settings")), ("settings_applied", param("applied")),
                ("settings_skipped", param("skipped")))),
    Transition("unsettle", (ACTIVE, FAILED), (RESTORING,), "settle undone: its alert failed", source_named=True,
               removes=("finished_at",)),
), {"create": "create", "claim_poll": "claim_poll", "claim_poll_again": "claim_poll", "settle": "settle",
    "unsettle": "unsettle"}, ends=(ACTIVE, FAILED))

MACHINES = (RUN, TABLE, VERIFICATION, RESTORE)

__all__ = ["MACHINES", "RESTORE", "RUN", "TABLE", "VERIFICATION", "Machine", "Transition", "UndeclaredTransition",
           "parse_mermaid"]

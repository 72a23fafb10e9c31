"""The backups' records' lives, declared once: their states and the conditional writes between them. Pure, no I/O.

``RUN`` is a backup run's item (store.py), ``TABLE`` one table's result in a page of the run (or in the run item,
for runs recorded before pages), ``VERIFICATION`` one restore verification of the run, ``RESTORE`` a restore
on demand's record (restore_store.py). Each conditional write of one of them is one or more transitions below,
by the one store method ``writers`` names, and its ConditionExpression and UpdateExpression are built from them
(``Machine.write``, with chalicelib/expression.py): the status in the transition's sources (none when it leaves every state) and its
``guard``, then the status set to its target and its ``sets`` and ``removes``. A write of several transitions
holds when one of them does. A name the declaration lacks is refused (``UndeclaredTransition``).

docs/backups-guarantees.md draws ``RUN`` (``mermaid``); tests/unit/test_backup_lifecycle.py checks the drawing
and tests/functional/test_backup_lifecycle_walk.py walks every edge against the stores under moto. Pages and
verifications are written whole by the run's claimant, not by a transition (``entries``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chalicelib.expression import (
    Attr,
    Condition,
    Operand,
    Param,
    Rendered,
    Update,
    all_of,
    any_of,
    attr,
    conditions,
    param,
    render,
    suffixed,
    value,
)

NONE = "none"  # no record yet
STARTING, RUNNING, FINISHING, VERIFYING, COMPLETE = "STARTING", "RUNNING", "FINISHING", "VERIFYING", "COMPLETE"
PENDING, AVAILABLE, FAILED, STUCK = "PENDING", "AVAILABLE", "FAILED", "STUCK"
RESTORING, PASSED, SKIPPED, ACTIVE = "RESTORING", "PASSED", "SKIPPED", "ACTIVE"
RELEASED = datetime(1970, 1, 1, tzinfo=UTC)  # a FINISHING claim handed on: older than any lease


class UndeclaredTransition(KeyError):
    """A write names a transition its machine does not declare."""


def at(path: str) -> Attr:
    """The attribute at a dotted ``path``; a segment in braces is a map key the caller gives (``tables.{table}``)."""
    return attr(*(Param(p.strip("{}")) if p.startswith("{") else p for p in path.split(".")))


@dataclass(frozen=True)
class Added:
    """A count that starts at zero, added ``by`` (``ADD``)."""

    by: Operand


@dataclass(frozen=True)
class Each:
    """``path.<key>`` set to its value for each key of the caller's map ``name``."""

    name: str


Field = Operand | Added | Each
_KEY = re.compile(r"^[a-z_]+$")  # a map key an ``Each`` writes


@dataclass(frozen=True)
class Write:
    """One UpdateItem's update, under ``condition``, with the caller's ``params``."""

    update: Update
    condition: Condition | None
    params: Mapping[str, Any]

    def render(self) -> Rendered:
        return render(self.update, self.condition, self.params)


@dataclass(frozen=True)
class Transition:
    name: str
    sources: tuple[str, ...]
    targets: tuple[str, ...]  # (): the state stays; several: the caller names one (``:status``)
    meaning: str
    guard: Condition | None = None
    sets: tuple[tuple[str, Field], ...] = ()
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

    def write(self, names: Sequence[str], params: Mapping[str, Any], source: str = "", target: str = "") -> Write:
        """The write making one of the transitions ``names`` (their targets and fields the same), with the
        caller's ``params``; ``source``/``target``: the one of several the caller names."""
        chosen = [self.transition(n) for n in names]
        first = chosen[0]
        if any((t.targets, t.sets, t.removes) != (first.targets, first.sets, first.removes) for t in chosen):
            raise ValueError(f"{names} set different fields: not one write")
        values = dict(params)
        update = Update()
        if first.targets:
            update = update.set(at(self.status), self._state_value(first.targets, target, values))
        for path, operand in first.sets:
            if isinstance(operand, Added):
                update = update.add(at(path), operand.by)
            elif isinstance(operand, Each):
                for key, v in values[operand.name].items():
                    if not _KEY.fullmatch(key):
                        raise ValueError(f"{key!r} is not a plain attribute name")
                    update = update.set(at(f"{path}.{key}"), value(v))
            else:
                update = update.set(at(path), operand)
        return Write(update.remove(*(at(p) for p in first.removes)), self._condition(chosen, source, values), values)

    def condition(self, name: str, params: Mapping[str, Any]) -> Rendered:
        """Only the condition of transition ``name`` (of a write that puts the record whole: ``create``)."""
        values = dict(params)
        return render(condition=self._condition([self.transition(name)], "", values), params=values)

    def _condition(self, chosen: Sequence[Transition], source: str, values: dict[str, Any]) -> Condition | None:
        found = [conditions([self._from(t, source, values), t.guard]) for t in chosen]
        parts = [c for c in found if c is not None]
        if len(found) == 1:
            return found[0]
        return any_of(*parts) if len(parts) == len(found) else None

    def write_each(self, name: str, params: Sequence[Mapping[str, Any]]) -> Write:
        """One write making transition ``name`` of several records of one item (a page's tables), all or none:
        each record's parameters their own (``suffixed``)."""
        writes = [self.write([name], p) for p in params]
        update, condition = Update(), None
        for i, w in enumerate(writes):
            update = update.then(suffixed(w.update, str(i)))
            condition = conditions([condition, suffixed(w.condition, str(i))])
        return Write(update, condition, {f"{k}{i}": v for i, w in enumerate(writes) for k, v in w.params.items()})

    def _state_value(self, states: tuple[str, ...], named: str, values: dict[str, Any]) -> Operand:
        if len(states) == 1 and not named:
            return value(states[0])
        if named not in states or values.get("status", named) != named:
            raise ValueError(f"{named!r} is not one of {states}")
        values["status"] = named
        return param("status")

    def _from(self, t: Transition, source: str, values: dict[str, Any]) -> Condition | None:
        if t.source_named:
            return at(self.status).eq(self._state_value(t.sources, source, values))
        if t.sources == (NONE,):
            return attr("PK").missing()
        if set(t.sources) == set(self.states) - {NONE}:
            return None
        if len(t.sources) == 1:
            return at(self.status).eq(value(t.sources[0]))
        return at(self.status).is_in(*(value(s) for s in t.sources))

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


T, F, ZERO, ONE = value(True), value(False), value(0), value(1)
NOW = param("now")
CLAIMED = at("claimed_at").eq(param("claimed"))  # the claim this worker holds
LIVE = (STARTING, RUNNING, FINISHING, VERIFYING, COMPLETE)
POLL_SETS: tuple[tuple[str, Field], ...] = (
    ("poll", param("next")), ("poll_queued", F), ("advanced_at", NOW), ("poll_message", param("message")))

RUN = Machine("run", "status", (NONE, *LIVE), "RunStore", (
    Transition("create", (NONE,), (STARTING,), "the trigger's first write, before its tables are chosen"),
    Transition("reclaim_start", (STARTING,), (), "take over a start whose claim is stale or was let go",
               any_of(at("claimed_at").lt(param("stale")), at("released").eq(T)),
               (("claimed_at", NOW), ("handed_off", F), ("released", F))),
    Transition("record_tables", (STARTING,), (), "the tables chosen: counts and verification plan", CLAIMED,
               (("tables", param("tables")), ("verify_plan", param("plan")))),
    Transition("release_start", (STARTING,), (), "a try that failed lets its claim go, the failure counted",
               CLAIMED, (("released", T), ("start_failures", Added(ONE)))),
    Transition("hand_off", (STARTING,), (), "a starter out of time lets its claim lapse, marked handed off",
               CLAIMED, (("claimed_at", param("expired")), ("handed_off", T))),
    Transition("take_handoff", (STARTING,), (), "the watch claims a run handed off",
               all_of(CLAIMED, at("handed_off").eq(T)), (("claimed_at", NOW), ("handed_off", F))),
    Transition("started", (STARTING,), (RUNNING,), "the backups started: monitor message 0 expected", CLAIMED,
               (("tables", param("tables")), ("poll", ZERO), ("poll_queued", F), ("advanced_at", NOW))),
    Transition("abandon", (STARTING,), (COMPLETE,), "a start that stopped (or failed three times) closed",
               CLAIMED, (("finished_at", NOW), ("summary", param("summary")))),
    Transition("unabandon", (COMPLETE,), (STARTING,), "abandon undone: its alert could not be sent", CLAIMED,
               removes=("finished_at",)),
    Transition("claim_stale_poll", (RUNNING, VERIFYING), (), "a poll that stopped moving: the trigger sends it again",
               all_of(at("poll").eq(param("poll")), at("advanced_at").eq(param("seen"))),
               (("advanced_at", NOW), ("poll_queued", F))),
    Transition("mark_queued", LIVE, (), "the message of the poll is in the queue",
               at("poll").eq(param("poll")), (("poll_queued", T),)),
    Transition("claim_resend", LIVE, (), "send the poll's message for a worker that advanced to it and died",
               all_of(at("poll").eq(param("poll")), at("poll_queued").eq(F),
                      at("advanced_at").eq(param("seen"))), (("advanced_at", NOW),)),
    Transition("claim_poll", (RUNNING,), (), "a monitor message claims its poll (or a later one)",
               at("poll").le(param("poll")), POLL_SETS),
    Transition("claim_verifying_poll", (VERIFYING,), (), "a verification's monitor message claims its poll",
               at("poll").eq(param("poll")), POLL_SETS),
    Transition("finish", (RUNNING,), (FINISHING,), "the poll that settled every table claims the finish",
               at("poll").eq(param("poll")), (("claimed_at", NOW),)),
    Transition("take_finish", (FINISHING,), (FINISHING,), "take over a finish whose claim is stale",
               at("claimed_at").lt(param("stale")), (("claimed_at", NOW),)),
    Transition("release_finish", (FINISHING,), (), "retention out of time: the claim released, the pass counted",
               CLAIMED, (("claimed_at", value(RELEASED.isoformat())),
                         ("retention_deleted", Added(param("n"))), ("retention_passes", Added(ONE)),
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
               at(IN_TABLE + "alerted").eq(F), ((IN_TABLE + "alerted", T),)),
    Transition("release_alert", (PENDING, AVAILABLE, FAILED, STUCK), (), "claim_alert undone: the alert failed",
               attr("PK").exists(), ((IN_TABLE + "alerted", F),)),
    Transition("unsettle_table", (PENDING, AVAILABLE, FAILED, STUCK), (PENDING,),
               "settle_table undone: its alert failed", attr("PK").exists(), ((IN_TABLE + "alerted", F),)),
), {"settle_table": "settle_table", "settle_available": "settle_available", "claim_alert": "claim_alert",
    "release_alert": "release_alert", "unsettle_table": "unsettle_table"}, entries=(PENDING, FAILED))

VERIFICATION = Machine("verification", "status", (RESTORING, PASSED, FAILED, SKIPPED), "RunStore", (
    Transition("settle_verification", (RESTORING,), (PASSED, FAILED), "what the restored table showed", None,
               (("error", param("error")), ("problems", param("problems")), ("recorded_items", param("recorded")),
                ("restored_items", param("restored")), ("scan_complete", param("scan_complete")))),
    Transition("unsettle_verification", (PASSED, FAILED), (RESTORING,), "settle undone: its alert failed",
               source_named=True),
    Transition("restore_table_deleted", (RESTORING, PASSED, FAILED, SKIPPED), (),
               "its temporary table deleted", attr("PK").exists(), (("table_deleted", T),)),
), {"settle_verification": "settle_verification", "unsettle_verification": "unsettle_verification",
    "restore_table_deleted": "restore_table_deleted"}, entries=(RESTORING, SKIPPED))

POLL_CLAIM: tuple[tuple[str, Field], ...] = (
    ("poll", param("next")), ("poll_message", param("message")), ("polled_at", NOW))
RESTORE = Machine("restore", "status", (NONE, RESTORING, ACTIVE, FAILED), "RestoreStore", (
    Transition("create", (NONE,), (RESTORING,), "POST /backups/restores: the record, its listing and its target's "
               "claim in one transaction"),
    Transition("claim_poll", (RESTORING,), (), "a monitor message claims its poll",
               at("poll").eq(param("poll")), POLL_CLAIM),
    Transition("claim_poll_again", (RESTORING,), (), "a redelivery of the message that claimed it claims it again",
               all_of(at("poll").eq(param("next")), at("poll_message").eq(param("message"))),
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

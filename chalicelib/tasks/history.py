"""A task's history: its executions and the operator's changes, kept on its record. Pure, no I/O.

The history lives on the task's record (state table, ``TASK#<id>`` / ``RECORD``), so it is kept as long as the
record is, and costs no write of its own: each entry goes on the record in the write its event makes already
(``TaskStore.settle``, ``settle_once``, ``redrive``, ``pause``, ``resume``, ``cancel``, ``reschedule``).  A claim
writes none: the settle's entry carries the claim's time.

Stored compactly (every byte of the record is paid at each of its writes, in write units, and kept, in storage):
``h`` is the list of the last ``KEEP`` entries, oldest first, within ``MAX_BYTES``; ``hn`` counts every entry ever
written, so ``hn - len(h)`` older entries were dropped.  An entry is a map of one-letter names (``NAMES``), times as
epoch milliseconds, an error cut to ``TEXT_CHARS``.  A result is not stored in the history: the newest execution's
is the record's ``last_result``, shown with its entry; an older execution's result is not kept (an action's result,
a message id, would otherwise be half of an entry, and a recurring task's record past a write unit).
``GET /tasks/{id}/history`` shows them with their long names (``shown``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

HISTORY = "h"  # the entries kept, oldest first
COUNT = "hn"  # entries ever written
KEEP = 10  # entries kept per task
MAX_BYTES = 300  # and at most this many bytes of them (DynamoDB's measure), the oldest dropped first: with the
# rest of a record (about 700 B for an email task) one write unit a write
TEXT_CHARS = 100  # of an error (and of the result shown)

# Kinds of entry: an execution (its outcome: DONE, FAILED, or RETRYING -- an attempt failed, another comes later),
# and the operator's changes.
RUN, RETRY, PAUSE, RESUME, CANCEL, RESCHEDULE = "run", "retry", "pause", "resume", "cancel", "reschedule"
KINDS = (RUN, RETRY, PAUSE, RESUME, CANCEL, RESCHEDULE)
OPERATOR_KINDS = (RETRY, PAUSE, RESUME, CANCEL, RESCHEDULE)

# Stored name -> shown name.
NAMES: Mapping[str, str] = {
    "k": "kind",
    "d": "due",  # the execution's due time (the task's); for a reschedule, the new one; for a retry, the one retried
    "w": "runs_from",  # an execution's own due time when not ``due``: a retry's time (lateness counts from it)
    "c": "claimed_at",  # when the execution started (its claim)
    "f": "finished_at",
    "a": "attempt",  # the last attempt this execution made (counted across its deliveries)
    "s": "status",  # DONE, FAILED, RETRYING
    "r": "result",
    "x": "error",
    "n": "retry_at",  # RETRYING: when the next attempt comes
    "o": "takeovers",  # claims taken over from workers that died
    "b": "by",  # who made an operator's change
    "t": "at",  # when
}
TIMES = frozenset({"d", "w", "c", "f", "n", "t"})

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms(at: datetime) -> int:
    """Epoch milliseconds of ``at``."""
    return (at.astimezone(UTC) - _EPOCH) // timedelta(milliseconds=1)


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS - 1] + "…"


def run_entry(due: datetime, started: datetime, finished: datetime, attempt: int, status: str,
              error: str | None = None, runs_from: datetime | None = None,
              retry_at: datetime | None = None, takeovers: int = 0) -> dict[str, Any]:
    """The entry of one execution: due, started (claimed), finished, the attempt it ended on, its status and its
    error (cut); ``runs_from``: a retry's own time, when not the due time."""
    entry: dict[str, Any] = {"k": RUN, "d": ms(due), "c": ms(started), "f": ms(finished), "a": attempt, "s": status}
    if runs_from is not None and ms(runs_from) != entry["d"]:
        entry["w"] = ms(runs_from)
    if error:
        entry["x"] = _cut(error)
    if retry_at is not None:
        entry["n"] = ms(retry_at)
    if takeovers:
        entry["o"] = takeovers
    return entry


def operator_entry(kind: str, by: str, at: datetime, due: str | None = None,
                   runs_from: datetime | None = None) -> dict[str, Any]:
    """The entry of an operator's change (``OPERATOR_KINDS``): who (``by``) and when; ``due``: the due time it
    concerns (retried, moved to), ``runs_from``: when a retry runs."""
    entry: dict[str, Any] = {"k": kind, "b": _cut(by) or "api", "t": ms(at)}
    if due:
        entry["d"] = ms(datetime.fromisoformat(due.replace("Z", "+00:00")))
    if runs_from is not None:
        entry["w"] = ms(runs_from)
    return entry


def size(value: Any) -> int:
    """Bytes of a value as DynamoDB measures them (numbers: 1 + a byte per two digits; maps and lists: 3 + a byte
    an element, plus their elements; a map's names count)."""
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, (int, float)):
        return 1 + (len(str(abs(value)).replace(".", "")) + 1) // 2
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, Mapping):
        return 3 + sum(1 + len(str(k).encode("utf-8")) + size(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 3 + sum(1 + size(v) for v in value)
    return len(str(value).encode("utf-8"))


def entries_of(record: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The entries kept on a record, oldest first (none: [])."""
    found = (record or {}).get(HISTORY)
    return [dict(e) for e in found if isinstance(e, Mapping)] if isinstance(found, list) else []


def count_of(record: Mapping[str, Any] | None) -> int:
    """Entries ever written on a record (at least those kept)."""
    raw = (record or {}).get(COUNT)
    counted = int(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else 0
    return max(counted, len(entries_of(record)))


def appended(record: Mapping[str, Any] | None, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The record's history attributes (``HISTORY``, ``COUNT``) with ``entry`` added: the last ``KEEP`` entries
    within ``MAX_BYTES`` (the oldest dropped first; the new one always kept), and the count of all."""
    kept = [*entries_of(record), dict(entry)]
    kept = kept[-KEEP:]
    while len(kept) > 1 and size(kept) > MAX_BYTES:
        kept.pop(0)
    return {HISTORY: kept, COUNT: count_of(record) + 1}


def _iso(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return (_EPOCH + timedelta(milliseconds=int(value))).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def shown_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry with its long names, times as ISO 8601 UTC, and an execution's ``duration_ms``."""
    shown: dict[str, Any] = {}
    for short, long in NAMES.items():
        if short in entry:
            value = entry[short]
            shown[long] = _iso(value) if short in TIMES else (int(value) if short in ("a", "o") else value)
    if isinstance(entry.get("c"), (int, float)) and isinstance(entry.get("f"), (int, float)):
        shown["duration_ms"] = int(entry["f"]) - int(entry["c"])
    return shown


def shown(record: Mapping[str, Any] | None, task_id: str) -> dict[str, Any]:
    """What ``GET /tasks/{id}/history`` answers: the entries kept (oldest first), how many were written, how many
    older ones were dropped, and the bound."""
    entries = entries_of(record)
    total = count_of(record)
    shown_entries = [shown_entry(e) for e in entries]
    newest = last_run(entries)
    result = (record or {}).get("last_result")
    if newest is not None and newest.get("s") == "DONE" and result is not None:  # the settle wrote both
        at = max(i for i, e in enumerate(entries) if e is newest)
        shown_entries[at]["result"] = _cut(json.dumps(result, separators=(",", ":"), ensure_ascii=False, default=str))
    return {"id": task_id, "entries": shown_entries, "total": total, "dropped": total - len(entries), "keep": KEEP}


def lateness_from(entry: Mapping[str, Any]) -> int | None:
    """The ms an execution started after its own due time (a retry's time for a retry), or None for an entry
    that is no execution."""
    if entry.get("k") != RUN or not isinstance(entry.get("c"), (int, float)):
        return None
    own = entry.get("w", entry.get("d"))
    return max(0, int(entry["c"]) - int(own)) if isinstance(own, (int, float)) else None


def last_run(entries: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The newest execution among ``entries``."""
    return next((e for e in reversed(entries) if e.get("k") == RUN), None)


def last_execution_view(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """``last_execution`` of a task's view, when its record keeps one: the newest execution's times, attempt and
    status, and its ``lateness_ms`` from its own due time (a retry's time for an operator's retry)."""
    entry = last_run(entries_of(record))
    if entry is None:
        return {}
    view = {k: v for k, v in shown_entry(entry).items() if k not in ("kind", "result", "error")}
    lateness = lateness_from(entry)
    if lateness is not None:
        view["lateness_ms"] = lateness
    return {"last_execution": view}


__all__ = ["COUNT", "HISTORY", "KEEP", "KINDS", "MAX_BYTES", "NAMES", "OPERATOR_KINDS", "TEXT_CHARS", "appended", "count_of",
           "entries_of", "last_execution_view", "last_run", "lateness_from", "ms", "operator_entry", "run_entry", "shown", "shown_entry",
           "size"]

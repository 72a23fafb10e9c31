"""What the stream scheduler dead-lettered, kept once per record: the task shows why, a retry sends nothing again.

When the stream dead-letters a record (an item that is not a valid task, an
action refused by the stage, a step AWS rejected: ``chalicelib.tasks.stream``),
it keeps a note, ``stream_dead_letter``, on the task's record in the state
table (``TASK#<id>`` / ``RECORD``; made for an item of another program, as
the executor's dead-letter note is): the record's sequence number and event
id, the version of the item it read (a hash of its image; ``gone`` for a
REMOVE), its due time when it has one, when, the reason and the dead letter's
source.  One conditional UpdateItem, written only over an older record's note; it makes a
task that is not running, finished or paused DEAD_LETTERED, so ``GET /tasks?status=DEAD_LETTERED``
lists it (with the note: ``listed``) until a claim, a cancel or a reschedule.

- ``GET /tasks/{id}`` and ``GET /tasks/{source}/{key}`` show it as
  ``dead_letter`` (and a task waiting to run DEAD_LETTERED) while it concerns the item as it is now (the same version
  and due time) and the task is not finished: an item written again, right,
  after the bad write no longer shows the old reason.
- Lambda retries a batch from its lowest failed record, so a record
  dead-lettered before another one failed is seen again: a note of this record
  (or of a later one of the same key: the records of a key are carried out in
  order) says it was dead-lettered already, and it is skipped.  A record
  without a key (never one of DynamoDB's) is remembered by its event id in the
  state table for two days (longer than a stream keeps a record).

The dead letter is sent before the note is written: a worker that dies
between the two leaves the retry to send it again (at least once, never lost).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from botocore.exceptions import ClientError

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.settings import STATE_TTL_ATTRIBUTE
from chalicelib.tasks import lifecycle
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import TaskKey
from chalicelib.tasks.store import TaskStore
from chalicelib.throttle import error_code

NOTE = lifecycle.STREAM_NOTE
GONE = "gone"  # the version of an item that was removed
MARKER_PREFIX = "STREAM#"  # the state table's memory of a keyless record: STREAM#<event id> / DEAD_LETTER
MARKER_SK = "DEAD_LETTER"
MARKER_RETENTION = timedelta(days=2)  # a DynamoDB stream keeps a record 24 hours
SEQUENCE_DIGITS = 40  # a stream sequence number has 21 to 40 digits: zero-padded, text compares as numbers
FINISHED = frozenset(s.value for s in State if s.finished)
DEAD_LETTERED = State.DEAD_LETTERED.value


# --- pure ------------------------------------------------------------------------

def item_version(item: Mapping[str, Any] | None) -> str:
    """A short hash of an item's content (a plain item, ``ddb.deserialize``'s), the same for the stream's image
    and GetItem's answer of one version; GONE when there is no item."""
    if item is None:
        return GONE
    text = json.dumps(item, sort_keys=True, separators=(",", ":"), default=_json_of)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _json_of(value: Any) -> str:
    data = getattr(value, "value", value)  # boto3's Binary
    if isinstance(data, bytes | bytearray):
        return "b64:" + base64.b64encode(bytes(data)).decode()
    return repr(value)


def sequence_of(record: Any) -> str:
    """The record's sequence number zero-padded to compare as text ("" when it has none)."""
    dynamodb = record.get("dynamodb") if isinstance(record, dict) else None
    sequence = dynamodb.get("SequenceNumber") if isinstance(dynamodb, dict) else None
    return sequence.zfill(SEQUENCE_DIGITS) if isinstance(sequence, str) and sequence.isdigit() else ""


def marker_key(event_id: str) -> dict[str, str]:
    """Where a record without a key is remembered: by its event id."""
    return {"PK": f"{MARKER_PREFIX}{event_id}", "SK": MARKER_SK}


def already_dead_lettered(note: Any, sequence: str) -> bool:
    """True when ``note`` is of this record, or of a later one of its key (so this one was carried out before)."""
    if not isinstance(note, dict) or not sequence:
        return False
    noted = note.get("sequence")
    return isinstance(noted, str) and noted >= sequence


def shown(record: Mapping[str, Any] | None, item: Mapping[str, Any] | None,
          view: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``GET`` shows of the stream's note (the ``dead_letter`` of a task the executor's note does not
    concern), or None: only while the note is of the item as it is now and the task is not finished. Pure."""
    note = (record or {}).get(NOTE)
    if (not isinstance(note, dict) or note.get("version") != item_version(item)
            or note.get("run_at") != view.get("run_at") or view.get("status") in FINISHED):
        return None
    return _view(note)


def listed(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the listing shows of the stream's note on a task it shows from its record alone (a task not made by
    the API): the note while the record is DEAD_LETTERED by it (``TaskStore.note_stream_dead_letter``), else None.
    Pure."""
    note = record.get(NOTE)
    if not isinstance(note, dict) or lifecycle.state_of(record) is not State.DEAD_LETTERED:
        return None
    return _view(note)


def show_in(view: dict[str, Any], note: Mapping[str, Any] | None) -> dict[str, Any]:
    """``view`` with the stream's ``note`` (``shown`` or ``listed``) as its ``dead_letter``: a task waiting to run
    (PENDING, or an item that is no task) is DEAD_LETTERED then. Pure."""
    if note is not None:
        view["dead_letter"] = dict(note)
        if view.get("status") in (State.PENDING.value, None):
            view["status"] = DEAD_LETTERED
    return view


def _view(note: Mapping[str, Any]) -> dict[str, Any]:
    return {"run_at": note.get("run_at"), "at": note.get("at"), "reason": note.get("reason"), "receive_count": None,
            "claim": None, "source": note.get("source"), "event_id": note.get("event_id")}


# --- the state table ------------------------------------------------------------------

def read_note(deps: Deps, where: Mapping[str, str]) -> Any:
    """The note kept at ``where`` (None when there is none)."""
    response = deps.clients.dynamodb.get_item(
        TableName=deps.settings.state_table, Key=ddb.serialize(where), ConsistentRead=True,
        ProjectionExpression="#n", ExpressionAttributeNames={"#n": NOTE})
    return ddb.deserialize(response.get("Item", {})).get(NOTE)


def keep_note(deps: Deps, where: Mapping[str, str], key: TaskKey | None, note: Mapping[str, Any]) -> None:
    """Write ``note`` at ``where``, unless a note of a later record is there: one conditional UpdateItem.  On a
    task's record (``key``) it is the store's ``note_stream_dead_letter`` (it makes the record when there is
    none: an item of another program, as the executor's dead-letter note does); a keyless record's marker
    expires."""
    if key is not None:
        TaskStore(deps).note_stream_dead_letter(key, note)
        return
    names = {"#n": NOTE, "#q": "sequence", "#ttl": STATE_TTL_ATTRIBUTE}
    values: dict[str, Any] = {":note": dict(note), ":q": note["sequence"],
                              ":ttl": int((deps.clock() + MARKER_RETENTION).timestamp())}
    try:
        deps.clients.dynamodb.update_item(
            TableName=deps.settings.state_table, Key=ddb.serialize(where), UpdateExpression="SET #n = :note, #ttl = :ttl",
            ConditionExpression="attribute_not_exists(#n) OR #n.#q < :q", ExpressionAttributeNames=names,
            ExpressionAttributeValues={k: ddb.value(v) for k, v in values.items()})
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise

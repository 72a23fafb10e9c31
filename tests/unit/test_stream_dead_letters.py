"""The stream's dead-letter note: which item version it concerns, when GET shows it, when a record is seen again."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib import ddb
from chalicelib.tasks import stream_dead_letters as notes

NOTE = {"sequence": "300".zfill(40), "event_id": "e1", "version": "", "run_at": "2026-11-22T15:00:00Z",
        "at": "2026-11-22T12:00:00Z", "reason": "refused", "source": "task_stream"}
ITEM = {"PK": "USER#ada", "SK": "REMINDER#x", "run_at": "2026-11-22T15:00:00Z", "tags": ["b", "a"]}


def record_with(item: dict[str, Any] | None, **note: Any) -> dict[str, Any]:
    return {"PK": "TASK#USER#ada|REMINDER#x", notes.NOTE: {**NOTE, "version": notes.item_version(item), **note}}


def test_an_items_version_is_the_same_from_its_stream_image_and_from_get_item_whatever_the_set_order() -> None:
    image = {"PK": {"S": "p"}, "tags": {"SS": ["b", "a", "c"]}, "n": {"N": "42"}, "blob": {"B": "AAE="}}
    from_stream = ddb.deserialize(ddb.binary_as_bytes(image))
    from_get_item = ddb.deserialize({**ddb.binary_as_bytes(image), "tags": {"SS": ["c", "a", "b"]}})
    assert notes.item_version(from_stream) == notes.item_version(from_get_item)
    assert notes.item_version({**from_stream, "n": 43}) != notes.item_version(from_stream)
    assert notes.item_version(None) == notes.GONE


@pytest.mark.parametrize("view, shown", [
    ({"run_at": "2026-11-22T15:00:00Z", "status": "PENDING"}, True),
    ({"run_at": "2026-11-22T15:00:00Z", "status": "RUNNING"}, True),
    ({"run_at": "2026-11-22T15:00:00Z", "status": "DONE"}, False),       # finished: the note is moot
    ({"run_at": "2026-11-22T15:00:00Z", "status": "CANCELLED"}, False),
    ({"run_at": "2026-11-22T16:00:00Z", "status": "PENDING"}, False),    # another due time
])
def test_get_shows_the_note_of_the_item_as_it_is_while_the_task_is_not_finished(
        view: dict[str, Any], shown: bool) -> None:
    found = notes.shown(record_with(ITEM), ITEM, view)
    assert (found is not None) is shown
    if found is not None:
        assert (found["reason"], found["source"], found["event_id"]) == ("refused", "task_stream", "e1")


def test_get_does_not_show_the_note_of_another_version_of_the_item() -> None:
    view = {"run_at": "2026-11-22T15:00:00Z", "status": "PENDING"}
    assert notes.shown(record_with(ITEM), {**ITEM, "action": {"type": "email"}}, view) is None
    assert notes.shown(record_with(None), ITEM, view) is None       # a REMOVE's note, the item written since
    assert notes.shown(record_with(ITEM), None, view) is None       # the item's note, the item gone since
    assert notes.shown(record_with(None), None, view) is not None   # a REMOVE's note, still gone
    assert notes.shown(record_with(ITEM, version=None), ITEM, view) is None  # an unreadable record's


@pytest.mark.parametrize("noted, seen, again", [
    ("300", "300", True),    # this very record
    ("400", "300", True),    # a later record of its key: this one was carried out before
    ("200", "300", False),   # an earlier record's note
    (None, "300", False),
])
def test_a_record_is_dead_lettered_already_when_its_own_or_a_later_records_note_is_there(
        noted: str | None, seen: str, again: bool) -> None:
    note = {**NOTE, "sequence": noted.zfill(40)} if noted else None
    record = {"dynamodb": {"SequenceNumber": seen}}
    assert notes.already_dead_lettered(note, notes.sequence_of(record)) is again


def test_sequence_numbers_of_different_lengths_compare_as_numbers() -> None:
    short, long = notes.sequence_of({"dynamodb": {"SequenceNumber": "9" * 21}}), notes.sequence_of(
        {"dynamodb": {"SequenceNumber": "1" + "0" * 39}})
    assert short < long
    assert notes.sequence_of({"dynamodb": {}}) == "" and not notes.already_dead_lettered(NOTE, "")

"""What the stream scheduler decides for a source's item (pure): it writes to a user's item only what the
strategy cannot do without, in the user's own format, and never over a value of another form."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from chalicelib import ddb
from chalicelib.settings import Settings
from chalicelib.tasks import items, schedules
from chalicelib.tasks.model import InvalidTask, TaskKey, read_task
from chalicelib.tasks.schedules import DeadLetter, SendDue, SetAttribute

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SOURCES = {
    "reminders": {"table": "reminders", "strategy": "lazy", "ttl_attribute": "ttl", "due_attribute": "due",
                  "key": ["id"]},
    "slots": {"table": "slots", "strategy": "interval", "bucket_index": "by-minute", "bucket_attribute": "taskDateTime",
              "due_attribute": "at", "key": ["id"]},
}
SETTINGS = Settings.from_env({"TASK_SOURCES": json.dumps(SOURCES)})


def plan(source: str, item: dict[str, Any]) -> list[Any]:
    record = {"eventID": "e1", "eventName": "INSERT", "dynamodb": {
        "Keys": ddb.serialize({"id": item["id"]}), "NewImage": ddb.serialize(item), "SequenceNumber": "1"}}
    change = schedules.change_from_record(record, SETTINGS.source(source))
    return schedules.plan(change, SETTINGS, NOW)


def test_a_lazy_item_with_its_due_time_elsewhere_gets_a_ttl_only_if_the_user_wrote_none_since() -> None:
    [step] = plan("reminders", {"id": "a", "due": "2026-11-22T13:00:00Z", "email": "a@example.com"})
    assert isinstance(step, SetAttribute)
    assert (step.table, step.name, step.value) == ("reminders", "ttl", 1795352400)
    assert dict(step.seen) == {"due": "2026-11-22T13:00:00Z", "ttl": None}


def test_a_ttl_in_another_form_is_never_rewritten() -> None:
    [step] = plan("reminders", {"id": "a", "due": "2026-11-22T13:00:00Z", "ttl": "soon", "email": "a@example.com"})
    assert isinstance(step, DeadLetter) and "never rewrites" in step.reason


def test_an_interval_item_with_its_own_bucket_is_left_as_it_is() -> None:
    assert plan("slots", {"id": "s", "at": "2026-11-22T13:00:30Z", "taskDateTime": "2026-11-22#13:00",
                          "email": "a@example.com"}) == []


def test_an_interval_item_without_a_bucket_gets_one_in_the_users_format() -> None:
    [step] = plan("slots", {"id": "s", "at": "2026-11-22T13:00:30Z", "email": "a@example.com"})
    assert isinstance(step, SetAttribute) and (step.name, step.value) == ("taskDateTime", "2026-11-22#13:00")


def test_an_interval_item_due_within_30_seconds_goes_straight_to_the_due_queue() -> None:
    [step] = plan("slots", {"id": "s", "at": "2026-11-22T12:00:20Z", "email": "a@example.com"})
    assert isinstance(step, SendDue) and step.message.key.source == "slots"


@pytest.mark.parametrize(("item", "field"), [
    ({"id": "a", "email": "a@example.com"}, "due"),
    ({"id": "a", "due": "tomorrow", "email": "a@example.com"}, "due"),
    ({"id": "a", "due": "2026-11-22T13:00:00Z"}, "action"),
])
def test_an_item_that_is_no_task_names_the_attribute(item: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidTask) as error:
        read_task(item, TaskKey.of_source("reminders", ddb.serialize({"id": "a"})), SETTINGS)
    assert error.value.field == field


def test_a_lazy_sources_item_without_a_due_time_is_no_task_and_no_dead_letter() -> None:
    assert [type(s) for s in plan("reminders", {"id": "a", "email": "a@example.com"})] == [schedules.NotATask]


def test_the_same_key_in_two_sources_is_two_tasks() -> None:
    keys = ddb.serialize({"id": "same"})
    first, second = TaskKey.of_source("reminders", keys), TaskKey.of_source("slots", keys)
    assert first != second and first.task_id != second.task_id
    assert schedules.schedule_name(first) != schedules.schedule_name(second)


def test_an_item_whose_key_is_too_long_for_the_state_table_is_no_task() -> None:
    record = {"eventID": "e1", "eventName": "INSERT", "dynamodb": {
        "Keys": ddb.serialize({"id": "x" * 2040}), "NewImage": ddb.serialize({"id": "x" * 2040}),
        "SequenceNumber": "1"}}
    with pytest.raises(schedules.InvalidRecord, match="too long"):
        schedules.change_from_record(record, SETTINGS.source("reminders"))


def test_every_state_table_key_of_the_longest_source_key_fits_dynamodb() -> None:
    def takes(length: int) -> bool:
        try:
            TaskKey.of_source("reminders", {"id": {"S": "k" * length}})
        except InvalidTask:
            return False
        return True

    longest = TaskKey.of_source("reminders", {"id": {"S": "k" * max(n for n in range(1900, 2100) if takes(n))}})
    due = datetime(2026, 11, 22, 13, 0, tzinfo=UTC)
    for key in (items.record_key(longest.task_id), items.image_key(longest.task_id, due)):
        assert items.fits_key(key["PK"], key["SK"]), len(key["PK"].encode())


@pytest.mark.parametrize(("spelled", "stored"), [
    ({"N": "42.0"}, {"N": "42"}), ({"N": "4.2E1"}, {"N": "42"}), ({"N": "-0"}, {"N": "0"}),
    ({"B": "QR=="}, {"B": b"A"}), ({"B": "QQ=="}, {"B": b"A"}),  # unused base64 bits: the same byte
])
def test_a_key_value_names_one_task_however_it_is_spelled(spelled: dict[str, Any], stored: dict[str, Any]) -> None:
    assert TaskKey.of_source("reminders", {"id": spelled}) == TaskKey.of_source("reminders", {"id": stored})

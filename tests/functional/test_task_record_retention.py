"""A finished task's record (DONE, FAILED, CANCELLED) expires TASK_RECORD_RETENTION_DAYS after it finished.

The expiry (the state table's TTL attribute) is written by the write that settles or cancels the task; GET
of a task whose record expired answers 404 saying so, whether DynamoDB has deleted the record yet or not.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.settings import STATE_TTL_ATTRIBUTE
from chalicelib.tasks import items, lifecycle
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import TaskKey, parse_due
from tests.faults import Faults
from tests.fixtures import FakeClock, use_settings
from tests.functional.task_support import EMAIL_ACTION, deliver, due_body, post_task, record_of

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now
KEY = TaskKey.for_id("standup")


def _run(client: Client, clock: FakeClock, **changes: Any) -> None:
    assert post_task(client, {"id": "standup", "run_at": RUN_AT, "action": EMAIL_ACTION, **changes}).status_code == 201
    clock.advance(minutes=10)
    assert deliver(client, due_body(KEY, parse_due(RUN_AT))) == set()


def test_a_finished_tasks_record_gets_its_expiry_in_the_write_that_settles_it(
        client: Client, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    _run(client, clock)

    record = record_of(deps, KEY)
    assert record is not None and lifecycle.state_of(record) is State.DONE
    assert record[STATE_TTL_ATTRIBUTE] == int((clock.now + timedelta(days=30)).timestamp())
    assert faults.calls["dynamodb.UpdateItem"] == 2  # the claim and the settle: no write of its own


def test_get_of_a_task_whose_record_expired_says_so_before_and_after_dynamodb_deletes_it(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    _run(client, clock)
    clock.advance(days=30, seconds=-1)
    assert client.http.get("/tasks/standup").json_body["status"] == "DONE"
    assert [t["id"] for t in client.http.get("/tasks?status=DONE").json_body["tasks"]] == ["standup"]

    clock.advance(seconds=2)  # expired; TTL deletes it within days
    expired = client.http.get("/tasks/standup")
    assert expired.status_code == 404 and expired.json_body["field"] == "id"
    assert "expired" in expired.json_body["error"] and "DONE" in expired.json_body["error"]
    assert client.http.get("/tasks?status=DONE").json_body["tasks"] == []

    deps.clients.dynamodb.delete_item(TableName=deps.settings.state_table,  # what TTL does; the item stays
                                      Key=ddb.serialize(items.record_key(KEY.task_id)))
    deleted = client.http.get("/tasks/standup")
    assert deleted.status_code == 404 and "expired" in deleted.json_body["error"]


def test_a_cancelled_tasks_record_expires_task_record_retention_days_after_the_cancel(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    use_settings(deps, task_record_retention_days=2)
    assert post_task(client, {"id": "standup", "run_at": RUN_AT, "action": EMAIL_ACTION}).status_code == 201
    assert client.http.delete("/tasks/standup").status_code == 200

    record = record_of(deps, KEY)
    assert record is not None and record[STATE_TTL_ATTRIBUTE] == int((clock.now + timedelta(days=2)).timestamp())
    clock.advance(days=2)
    assert client.http.get("/tasks/standup").status_code == 404


def test_a_recurring_task_that_goes_on_keeps_its_record(client: Client, deps: Deps, clock: FakeClock) -> None:
    _run(client, clock, recurrence="rate(1 day)")

    record = record_of(deps, KEY)
    assert record is not None and lifecycle.state_of(record) is State.PENDING and STATE_TTL_ATTRIBUTE not in record
    clock.advance(days=60)
    assert client.http.get("/tasks/standup").status_code == 200

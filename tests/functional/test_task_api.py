"""The task API: create (idempotent), show, list, cancel, reschedule, and every rejection."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks import items, lifecycle
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import TaskKey, parse_due
from chalicelib.tasks.schedules import schedule_name
from chalicelib.tasks.store import TaskStore
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.stream_support import TableStream, stream
from tests.functional.task_support import (
    EMAIL_ACTION,
    StrictConditions,
    delete_item,
    deliver,
    due_body,
    emails_sent,
    get_item,
    patch_task,
    post_task,
    put_item,
    seed_item,
)

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now


def body(**changes: Any) -> dict[str, Any]:
    return {"id": "standup", "run_at": RUN_AT, "action": EMAIL_ACTION, **changes}


# --- create ------------------------------------------------------------------

def test_a_new_task_answers_201_and_writes_the_item_any_program_could_have_written(
        client: Client, deps: Deps) -> None:
    response = post_task(client, body(run_at="2026-11-22T13:10:00+01:00"))
    assert response.status_code == 201, response.body
    task = response.json_body
    assert task["id"] == "standup"
    assert task["run_at"] == RUN_AT
    assert (task["strategy"], task["status"], task["attempts"]) == ("exact", "PENDING", 0)
    assert task["created_at"] == "2026-11-22T12:00:00Z"
    item = get_item(deps, TaskKey.for_id("standup"))
    assert item is not None
    assert (item["PK"], item["SK"], item["run_at"], item["due_epoch"]) == (
        "TASK#standup", "TASK", RUN_AT, int(parse_due(RUN_AT).timestamp()))
    assert item["action"] == EMAIL_ACTION


@pytest.mark.parametrize("given", [{}, {"id": None}], ids=["absent", "null"])
def test_without_an_id_the_api_picks_one(client: Client, given: dict[str, Any]) -> None:
    """As the OpenAPI document says: an id absent or null is made by the app."""
    response = post_task(client, {**given, "run_at": RUN_AT, "action": EMAIL_ACTION})
    assert response.status_code == 201
    assert re.fullmatch(r"[0-9a-f]{32}", response.json_body["id"])
    assert client.http.get(f"/tasks/{response.json_body['id']}").status_code == 200


def test_the_due_time_goes_under_due_attribute_so_seed_items_and_api_items_agree(
        client: Client, deps: Deps) -> None:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP")
    assert post_task(client, body()).status_code == 201
    item = get_item(deps, TaskKey.for_id("standup"))
    assert item is not None
    assert item["REMINDER_TIMESTAMP"] == RUN_AT
    assert "run_at" not in item


def test_an_interval_task_is_filed_under_its_due_bucket(client: Client, deps: Deps) -> None:
    assert post_task(client, body(strategy="interval")).status_code == 201
    item = get_item(deps, TaskKey.for_id("standup"))
    assert item is not None
    assert item["due_bucket"].startswith("2026-11-22#12:10#")


def test_a_lazy_task_expires_at_its_due_time(client: Client, deps: Deps) -> None:
    assert post_task(client, body(strategy="lazy")).status_code == 201
    item = get_item(deps, TaskKey.for_id("standup"))
    assert item is not None
    assert item["expires_at"] == item["due_epoch"] == int(parse_due(RUN_AT).timestamp())


def test_epoch_seconds_are_accepted_and_shown_in_utc(client: Client) -> None:
    response = post_task(client, body(run_at=int(parse_due(RUN_AT).timestamp())))
    assert response.status_code == 201
    assert response.json_body["run_at"] == RUN_AT


def test_a_repeated_post_answers_200_with_the_same_task(client: Client) -> None:
    first = post_task(client, body(recurrence="rate(1 day)"))
    again = post_task(client, body(recurrence="rate(1 day)", run_at="2026-11-22T12:10:00+00:00"))
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json_body == first.json_body


def test_a_repeated_post_still_answers_200_after_the_due_time(client: Client, clock: FakeClock) -> None:
    assert post_task(client, body()).status_code == 201
    clock.advance(hours=2)
    assert post_task(client, body()).status_code == 200


def test_the_same_id_with_another_body_is_a_conflict(client: Client) -> None:
    assert post_task(client, body()).status_code == 201
    response = post_task(client, body(run_at="2026-11-22T12:20:00Z"))
    assert response.status_code == 409
    assert response.json_body["field"] == "id"


def test_an_id_taken_by_an_item_from_another_program_is_a_conflict(client: Client, deps: Deps) -> None:
    put_item(deps, {"PK": "TASK#standup", "SK": "TASK", "run_at": RUN_AT, "email": "x@example.com"})
    assert post_task(client, body()).status_code == 409


@pytest.mark.parametrize(("changes", "field"), [
    ({"run_at": "tomorrow"}, "run_at"),
    ({"run_at": "2026-11-22T11:58:59Z"}, "run_at"),          # beyond the 60 s grace
    ({"run_at": None}, "run_at"),
    ({"strategy": "soon"}, "strategy"),
    ({"action": {"type": "fax", "to": "123"}}, "action.type"),
    ({"action": {"type": "email", "to": "ada@example.com", "subject": "hi"}}, "action.body"),
    ({"action": {"type": "email", "to": "not-an-address", "subject": "s", "body": "b"}}, "action.to"),
    ({"action": {"type": "sns", "topic_arn": "arn:aws:sqs:nope", "message": "m"}}, "action.topic_arn"),
    ({"action": {"type": "sqs", "queue_url": "ftp://q", "message": "m"}}, "action.queue_url"),
    ({"action": {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs.fifo",
                 "message": "m"}}, "action.queue_url"),
    ({"action": {"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:people.fifo", "message": "m"}},
     "action.topic_arn"),
    ({"action": {**EMAIL_ACTION, "cc": "x@example.com"}}, "action.cc"),
    ({"action": "email"}, "action"),
    ({"recurrence": "every tuesday"}, "recurrence"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"id": "has spaces"}, "id"),
    # Clients and browsers normalise /tasks/. and /tasks/.. away: no path could open or cancel such a task.
    ({"id": "."}, "id"),
    ({"id": ".."}, "id"),
    ({"id": "." * 128}, "id"),
    ({"priority": "high"}, "priority"),
])
def test_a_bad_body_is_rejected_naming_the_field(client: Client, changes: dict[str, Any], field: str) -> None:
    response = post_task(client, body(**changes))
    assert response.status_code == 400, response.body
    assert response.json_body["field"] == field
    assert response.json_body["error"]


def test_missing_run_at_and_action_are_named(client: Client) -> None:
    assert post_task(client, {"action": EMAIL_ACTION}).json_body["field"] == "run_at"
    assert post_task(client, {"run_at": RUN_AT}).json_body["field"] == "action"


def test_a_body_that_is_not_a_json_object_is_rejected(client: Client) -> None:
    for raw in ("", "[1]", "{nope"):
        response = post_task(client, raw)
        assert response.status_code == 400
        assert response.json_body["field"] == "body"


def test_a_body_over_64_kb_is_too_large(client: Client) -> None:
    response = post_task(client, body(action={**EMAIL_ACTION, "body": "x" * 70_000}))
    assert response.status_code == 413
    assert response.json_body["field"] == "body"


# --- show --------------------------------------------------------------------

def test_an_unknown_id_is_404(client: Client) -> None:
    for path in ("/tasks/nope", "/tasks/no%20such"):
        response = client.http.get(path)
        assert response.status_code == 404
        assert response.json_body["field"] == "id"


def test_a_lazy_task_still_answers_after_its_item_expired(client: Client, deps: Deps, clock: FakeClock) -> None:
    assert post_task(client, body(strategy="lazy")).status_code == 201
    key = TaskKey.for_id("standup")
    snapshot = get_item(deps, key)
    delete_item(deps, key)  # TTL
    shown = client.http.get("/tasks/standup")
    assert shown.status_code == 200
    assert (shown.json_body["status"], shown.json_body["run_at"]) == ("PENDING", RUN_AT)
    clock.advance(minutes=10)
    assert deliver(client, due_body(key, parse_due(RUN_AT), snapshot)) == set()
    shown = client.http.get("/tasks/standup")
    assert (shown.json_body["status"], shown.json_body["attempts"]) == ("DONE", 1)
    assert len(emails_sent()) == 1


def test_an_item_written_by_another_program_is_shown_by_its_keys(client: Client, deps: Deps) -> None:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP")
    put_item(deps, seed_item("2026-11-22T12:03:00"))
    response = client.http.get("/tasks/USER%23ada%7CREMINDER%23standup")
    assert response.status_code == 200, response.body
    assert response.json_body["run_at"] == "2026-11-22T12:03:00Z"
    assert response.json_body["action"]["to"] == "ada@example.com"


# --- list --------------------------------------------------------------------

def test_the_list_pages_through_every_task_once(client: Client, clock: FakeClock) -> None:
    for i in range(5):
        assert post_task(client, body(id=f"t{i}")).status_code == 201
        clock.advance(seconds=1)
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        query = "/tasks?limit=2" + (f"&next_token={token}" if token else "")
        response = client.http.get(query)
        assert response.status_code == 200, response.body
        seen += [t["id"] for t in response.json_body["tasks"]]
        token = response.json_body["next_token"]
        pages += 1
        if not token:
            break
    assert seen == ["t0", "t1", "t2", "t3", "t4"]
    assert pages <= 4


def test_the_list_filters_by_status(client: Client) -> None:
    for i in range(3):
        post_task(client, body(id=f"t{i}"))
    assert client.http.delete("/tasks/t1").status_code == 200
    cancelled = client.http.get("/tasks?status=CANCELLED").json_body["tasks"]
    pending = client.http.get("/tasks?status=pending").json_body["tasks"]
    assert [t["id"] for t in cancelled] == ["t1"]
    assert [t["id"] for t in pending] == ["t0", "t2"]


def _listed(client: Client, query: str) -> list[str]:
    return [task_id for page in _pages(client, query) for task_id in page]


def _pages(client: Client, query: str) -> list[list[str]]:
    pages: list[list[str]] = []
    token: str | None = None
    while True:
        response = client.http.get(f"/tasks?{query}" + (f"&next_token={token}" if token else ""))
        assert response.status_code == 200, response.body
        pages.append([t["id"] for t in response.json_body["tasks"]])
        token = response.json_body["next_token"]
        if not token:
            return pages


def test_the_list_merges_the_status_index_shards_in_order_page_by_page(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    api_ids = [f"t{i}" for i in range(9)]
    for task_id in api_ids:
        assert post_task(client, body(id=task_id)).status_code == 201
        clock.advance(seconds=1)
    foreign = [TaskKey("USER#x", f"R#{i}") for i in range(7)]
    store = TaskStore(deps)
    for key in [*foreign, TaskKey.for_id("t4")]:
        store.note_dead_letter(key, parse_due(RUN_AT), {"reason": "test"})
    assert len({items.status_shard(i) for i in api_ids}) > 3  # spread over shards: the pages are merged
    pending = [i for i in api_ids if i != "t4"]
    dead = ["t4", *sorted(k.task_id for k in foreign)]
    assert _pages(client, "status=PENDING&limit=3") == [pending[:3], pending[3:6], pending[6:]]
    assert _listed(client, "status=DEAD_LETTERED&limit=2") == dead
    assert _listed(client, "status=DEAD_LETTERED&source=items&limit=2") == dead[1:]
    assert _listed(client, "status=DEAD_LETTERED&source=api&limit=1") == ["t4"]
    every = _pages(client, "limit=4")
    assert [i for page in every for i in page] == pending + dead and all(len(page) == 4 for page in every[:4]), every


def test_pending_and_done_are_listed_from_the_records_in_full_pages_and_no_token_past_the_end(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    api_ids = ["m1", "c2", "x3", "a4", "q5"]  # created in this order, not the table's key order
    for task_id in api_ids:
        assert post_task(client, body(id=task_id)).status_code == 201
        clock.advance(seconds=1)
    foreign = sorted(TaskKey("USER#x", f"R#{i}").task_id for i in range(3))
    store = TaskStore(deps)
    for i in range(3):  # another program's items, claimed: PENDING records
        assert store.claim(TaskKey("USER#x", f"R#{i}"), parse_due(RUN_AT), deps.clock(), 60, "me").won
    clock.advance(minutes=10)
    for task_id in ("c2", "q5"):
        deliver(client, due_body(TaskKey.for_id(task_id), parse_due(RUN_AT)))
    pending = ["m1", "x3", "a4"]
    assert [sorted(page) for page in _pages(client, "status=PENDING&source=api&limit=3")] == [sorted(pending)]
    pages = _pages(client, "status=PENDING&limit=2")
    assert [len(page) for page in pages] == [2, 2, 2]  # full pages; the last one gives no token
    assert sorted(i for page in pages for i in page) == sorted(pending + foreign)
    assert sorted(_listed(client, "status=PENDING&source=items&limit=1")) == foreign
    assert _pages(client, "status=DONE&source=items") == [[]]
    assert [len(page) for page in _pages(client, "status=DONE&limit=1")] == [1, 1]
    assert sorted(_listed(client, "status=DONE&limit=1")) == ["c2", "q5"]
    every = _listed(client, "limit=3")  # each status in turn
    assert sorted(every[:6]) == sorted(pending + foreign) and sorted(every[6:]) == ["c2", "q5"]


@pytest.mark.parametrize(("query", "field"), [
    ("status=SOON", "status"), ("limit=0", "limit"), ("limit=500", "limit"), ("limit=x", "limit"),
    ("limit=%C2%B2", "limit"), ("limit=%D9%A3", "limit"),  # "²" and an Arabic-Indic 3: digits to isdigit()
    ("next_token=garbage", "next_token"), ("sort=asc", "sort"),
])
def test_bad_list_parameters_are_rejected(client: Client, query: str, field: str) -> None:
    response = client.http.get(f"/tasks?{query}")
    assert response.status_code == 400
    assert response.json_body["field"] == field


# --- cancel ------------------------------------------------------------------

def test_cancel_deletes_the_item_and_the_task_shows_cancelled(client: Client, deps: Deps) -> None:
    post_task(client, body())
    response = client.http.delete("/tasks/standup")
    assert response.status_code == 200
    assert response.json_body["status"] == "CANCELLED"
    assert get_item(deps, TaskKey.for_id("standup")) is None
    assert client.http.get("/tasks/standup").json_body["status"] == "CANCELLED"
    assert client.http.delete("/tasks/standup").status_code == 200  # a repeated DELETE


def test_a_cancelled_tasks_message_does_not_run(client: Client, clock: FakeClock) -> None:
    post_task(client, body())
    client.http.delete("/tasks/standup")
    clock.advance(minutes=10)
    assert deliver(client, due_body(TaskKey.for_id("standup"), parse_due(RUN_AT))) == set()
    assert emails_sent() == []


def test_a_finished_task_cannot_be_cancelled(client: Client, clock: FakeClock) -> None:
    post_task(client, body())
    clock.advance(minutes=10)
    deliver(client, due_body(TaskKey.for_id("standup"), parse_due(RUN_AT)))
    response = client.http.delete("/tasks/standup")
    assert response.status_code == 409
    assert client.http.get("/tasks?status=DONE").json_body["tasks"][0]["id"] == "standup"


def test_cancel_deletes_the_schedule_through_the_tables_own_stream(client: Client, deps: Deps) -> None:
    use_settings(deps, past_horizon="scheduler")  # the sweeper's cancel: test_sweeper.py
    scheduler, group = deps.clients.scheduler, deps.settings.schedule_group
    name = schedule_name(TaskKey.for_id("standup"))
    table_stream = TableStream(deps)
    assert post_task(client, body(run_at="2026-11-22T15:00:00Z")).status_code == 201
    created = table_stream.new_records()
    assert [r["eventName"] for r in created] == ["INSERT"]
    assert stream(client, *created) == []
    assert scheduler.get_schedule(Name=name, GroupName=group)["ScheduleExpression"] == "at(2026-11-22T14:59:00)"

    assert client.http.delete("/tasks/standup").status_code == 200
    removed = table_stream.new_records()
    assert [r["eventName"] for r in removed] == ["REMOVE"]
    assert stream(client, *removed) == []
    with pytest.raises(scheduler.exceptions.ResourceNotFoundException):
        scheduler.get_schedule(Name=name, GroupName=group)


def test_cancelling_an_unknown_task_is_404(client: Client) -> None:
    assert client.http.delete("/tasks/nope").status_code == 404


# --- reschedule --------------------------------------------------------------

def test_patch_moves_the_due_time_on_the_item(client: Client, deps: Deps) -> None:
    post_task(client, body(strategy="interval"))
    response = patch_task(client, "standup", {"run_at": "2026-11-22T15:00:00Z"})
    assert response.status_code == 200, response.body
    assert response.json_body["run_at"] == "2026-11-22T15:00:00Z"
    item = get_item(deps, TaskKey.for_id("standup"))
    assert item is not None
    assert item["run_at"] == "2026-11-22T15:00:00Z"
    assert item["due_epoch"] == int(parse_due("2026-11-22T15:00:00Z").timestamp())
    assert item["due_bucket"].startswith("2026-11-22#15:00#")
    assert client.http.get("/tasks/standup").json_body["run_at"] == "2026-11-22T15:00:00Z"


def test_patch_replaces_the_action(client: Client, deps: Deps) -> None:
    post_task(client, body())
    sns = {"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:people", "message": "hi"}
    assert patch_task(client, "standup", {"action": sns}).json_body["action"] == sns


def test_the_old_message_of_a_rescheduled_task_is_skipped(client: Client, clock: FakeClock) -> None:
    post_task(client, body())
    patch_task(client, "standup", {"run_at": "2026-11-22T15:00:00Z"})
    clock.advance(minutes=10)
    deliver(client, due_body(TaskKey.for_id("standup"), parse_due(RUN_AT)))
    assert emails_sent() == []
    assert client.http.get("/tasks/standup").json_body["status"] == "PENDING"


@pytest.mark.parametrize(("patch", "field"), [
    ({"run_at": "2020-01-01T00:00:00Z"}, "run_at"), ({"run_at": "later"}, "run_at"),
    ({"action": {"type": "fax"}}, "action.type"), ({"strategy": "lazy"}, "strategy"), ({}, "body"),
])
def test_a_bad_patch_is_rejected_naming_the_field(client: Client, patch: dict[str, Any], field: str) -> None:
    post_task(client, body())
    response = patch_task(client, "standup", patch)
    assert response.status_code == 400
    assert response.json_body["field"] == field


def test_patching_an_unknown_task_is_404_and_a_finished_one_409(client: Client, clock: FakeClock) -> None:
    assert patch_task(client, "nope", {"run_at": RUN_AT}).status_code == 404
    post_task(client, body())
    clock.advance(minutes=10)
    deliver(client, due_body(TaskKey.for_id("standup"), parse_due(RUN_AT)))
    assert patch_task(client, "standup", {"run_at": "2026-11-23T00:00:00Z"}).status_code == 409


def test_the_state_table_keeps_one_record_and_files_it_in_the_status_index_only_once_cancelled(
        client: Client, aws: Aws, deps: Deps) -> None:
    post_task(client, body())
    rows = [ddb.deserialize(i) for i in aws.clients.dynamodb.scan(TableName=deps.settings.state_table)["Items"]]
    assert [(r["PK"], r["SK"], r["status"], r.get("status_key"), r["listed"]) for r in rows] == [
        ("TASK#standup", "RECORD", "PENDING", None, "2026-11-22T12:00:00Z#standup")]  # PENDING: no index entry
    assert json.dumps(rows)  # plain JSON values only
    assert client.http.delete("/tasks/standup").status_code == 200
    shard = items.status_shard("standup")
    indexed = aws.clients.dynamodb.query(
        TableName=deps.settings.state_table, IndexName="task-status-shard-index", KeyConditionExpression="#k = :k",
        ExpressionAttributeNames={"#k": "status_key"},
        ExpressionAttributeValues={":k": {"S": f"CANCELLED#{shard:02d}"}})["Items"]
    assert [i["PK"]["S"] for i in indexed] == ["TASK#standup"]


def test_a_finished_tasks_record_keeps_no_claim_lease(client: Client, clock: FakeClock, deps: Deps) -> None:
    post_task(client, body())
    clock.advance(minutes=10)
    deliver(client, due_body(TaskKey.for_id("standup"), parse_due(RUN_AT)))
    record = TaskStore(deps).get_record("standup") or {}
    assert lifecycle.state_of(record) is State.DONE and record["exec_owner"]
    assert not {"claimed_at", "exec_takeovers", "status_key"} & set(record)  # kept 30 days: each byte is billed


def test_a_fifo_target_is_rejected_saying_why(client: Client) -> None:
    fifo = {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs.fifo", "message": "m"}
    response = post_task(client, body(action=fifo))
    assert response.status_code == 400
    assert "FIFO" in response.json_body["error"]


# --- items written by other programs -------------------------------------------

FOREIGN = "USER%23bob%7CREMINDER%23x"  # USER#bob|REMINDER#x


def test_cancelling_an_item_that_is_not_a_valid_task_is_400_naming_its_field(client: Client, deps: Deps) -> None:
    put_item(deps, {"PK": "USER#bob", "SK": "REMINDER#x", "email": "bob@example.com"})  # no due time
    response = client.http.delete(f"/tasks/{FOREIGN}")
    assert response.status_code == 400, response.body
    assert response.json_body["field"] == "run_at"
    assert get_item(deps, TaskKey("USER#bob", "REMINDER#x")) is not None  # left alone
    assert patch_task(client, FOREIGN, {"run_at": "2026-11-22T15:00:00Z"}).status_code == 400


def test_patch_moves_a_bucket_only_item_where_dynamodb_never_matches_a_missing_value(
        client: Client, deps: Deps) -> None:
    use_settings(deps, bucket_attribute="taskDateTime")
    strict = StrictConditions(deps)
    put_item(deps, {"PK": "USER#bob", "SK": "REMINDER#x", "taskDateTime": "2026-11-22#12:30",
                    "email": "bob@example.com"})  # the interval seed's item: no due attribute
    response = patch_task(client, FOREIGN, {"run_at": "2026-11-22T15:00:00Z"})
    assert response.status_code == 200, response.body
    assert strict.refused == []
    item = get_item(deps, TaskKey("USER#bob", "REMINDER#x"))
    assert item is not None
    assert item["run_at"] == "2026-11-22T15:00:00Z"
    assert item["taskDateTime"].startswith("2026-11-22#15:00#")

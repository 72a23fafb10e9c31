"""What the stream dead-letters shows in GET, with the reason, as the executor's dead letters do -- for the item as
it is now only: an item written again, right, no longer shows it; a retry of the record sends nothing again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks.model import TaskKey
from tests import events
from tests.fixtures import Aws, FakeClock
from tests.functional.source_support import create_table, load_app
from tests.functional.stream_support import Table, stream
from tests.functional.task_support import EMAIL_ACTION

FOREIGN_QUEUE = "https://sqs.us-east-1.amazonaws.com/999999999999/theirs"
MALLORY = TaskKey("USER#mallory", "REMINDER#x")
PATH = "/tasks/" + quote(MALLORY.task_id, safe="")


def item(clock: FakeClock, **changes: Any) -> dict[str, Any]:
    """An item of another program, due in three hours (a Scheduler schedule), its action refused by the stage."""
    return {"PK": MALLORY.pk, "SK": MALLORY.sk, "run_at": (clock.now + timedelta(hours=3)).isoformat(),
            "action": {"type": "sqs", "queue_url": FOREIGN_QUEUE, "message": "m"}, **changes}


def dead_letters(aws: Aws, deps: Deps) -> list[dict[str, Any]]:
    return [json.loads(body) for body, _ in aws.sent(deps.settings.task_dlq)]


def test_an_item_whose_target_the_stage_refuses_shows_dead_lettered_with_the_reason(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    record = Table(deps).put(item(clock))
    assert stream(client, record) == []
    [letter] = dead_letters(aws, deps)
    shown = client.http.get(PATH).json_body
    assert shown["status"] == "DEAD_LETTERED"
    note = shown["dead_letter"]
    assert note["reason"] == letter["reason"] and "TASK_ACTION_TARGET_ARNS" in note["reason"]
    assert (note["source"], note["event_id"], note["run_at"]) == ("task_stream", record["eventID"], shown["run_at"])


def test_an_item_that_is_no_task_shows_the_stream_dead_letter_beside_its_error(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    assert stream(client, Table(deps).put(item(clock, run_at="tomorrow"))) == []
    shown = client.http.get(PATH).json_body
    assert shown["field"] == "run_at" and "run_at" in shown["dead_letter"]["reason"]


def test_an_item_written_again_right_no_longer_shows_the_old_reason(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    table = Table(deps)
    bad = table.put(item(clock))
    fixed = table.put(item(clock, action=EMAIL_ACTION))  # the same due time, an action the stage takes
    assert stream(client, bad, fixed) == []
    shown = client.http.get(PATH).json_body
    assert shown["status"] == "PENDING" and "dead_letter" not in shown
    assert stream(client, bad) == []  # a retry of the bad record: neither sent again nor noted over the fix
    assert len(dead_letters(aws, deps)) == 1
    assert "dead_letter" not in client.http.get(PATH).json_body


def test_the_same_bad_content_written_again_is_dead_lettered_and_shown_again(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    table = Table(deps)
    first = table.put(item(clock, action=EMAIL_ACTION))
    bad = table.put(item(clock, notes="a"))
    worse = table.put(item(clock, notes="b"))
    assert stream(client, first, bad, worse) == []
    assert [letter["event_id"] for letter in dead_letters(aws, deps)] == [bad["eventID"], worse["eventID"]]
    assert client.http.get(PATH).json_body["dead_letter"]["event_id"] == worse["eventID"]


def test_a_task_the_api_cancels_no_longer_shows_it(aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    assert stream(client, Table(deps).put(item(clock))) == []
    cancelled = client.http.delete(PATH)
    assert cancelled.status_code == 200, cancelled.body
    shown = client.http.get(PATH).json_body
    assert shown["status"] == "CANCELLED" and "dead_letter" not in shown


# --- a task source: GET /tasks/{source}/{key} --------------------------------------------------------------

ORDERS = {"orders": {"table": "orders", "strategy": "exact", "due_attribute": "at",
                     "action": {"type": "sqs", "queue_url": "{queue}", "message": "Order {id} is due."}}}


@pytest.fixture
def orders(aws: Aws, deps: Deps, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """A stage declaring the task source ``orders`` (a user's table), whose action sends to each item's queue."""
    module = load_app(monkeypatch, deps, ORDERS, {"orders": create_table(deps, "orders", [("id", "S")])})
    with Client(module.app) as client:
        yield client
    module.container.use(None)


def test_a_source_item_whose_target_the_stage_refuses_shows_the_reason(
        aws: Aws, deps: Deps, clock: FakeClock, orders: Client) -> None:
    new = {"id": "o-1", "at": int((clock.now + timedelta(hours=3)).timestamp()), "queue": FOREIGN_QUEUE}
    deps.clients.dynamodb.put_item(TableName="orders", Item=ddb.serialize(new))
    record = events.stream_record("INSERT", ddb.serialize({"id": "o-1"}), new_image=ddb.serialize(new),
                                  source_arn=deps.settings.source("orders").stream_arn)  # type: ignore[union-attr]
    response = orders.lambda_.invoke("source_orders", events.stream_event(record)).payload
    assert response == {"batchItemFailures": []}
    [letter] = dead_letters(aws, deps)
    task = orders.http.get("/tasks/orders/" + quote(json.dumps({"id": "o-1"}), safe="")).json_body["task"]
    assert task["status"] == "DEAD_LETTERED"
    assert task["dead_letter"]["reason"] == letter["reason"]
    assert task["dead_letter"]["source"] == "task_stream:orders"


def _listed(client: Client, status: str, source: str = "") -> list[dict[str, Any]]:
    query = f"/tasks?status={status}" + (f"&source={source}" if source else "")
    response = client.http.get(query)
    assert response.status_code == 200, response.body
    tasks: list[dict[str, Any]] = response.json_body["tasks"]
    return tasks


@pytest.mark.parametrize("due", ["in three hours", "not a time"])
def test_a_source_item_the_stream_dead_letters_is_listed_dead_lettered_with_the_reason(
        aws: Aws, deps: Deps, clock: FakeClock, orders: Client, due: str) -> None:
    at: Any = int((clock.now + timedelta(hours=3)).timestamp()) if due == "in three hours" else "soon"
    new = {"id": "o-1", "at": at, "queue": FOREIGN_QUEUE}
    deps.clients.dynamodb.put_item(TableName="orders", Item=ddb.serialize(new))
    record = events.stream_record("INSERT", ddb.serialize({"id": "o-1"}), new_image=ddb.serialize(new),
                                  source_arn=deps.settings.source("orders").stream_arn)  # type: ignore[union-attr]
    assert orders.lambda_.invoke("source_orders", events.stream_event(record)).payload == {"batchItemFailures": []}
    [letter] = dead_letters(aws, deps)

    assert _listed(orders, "PENDING") == [] and _listed(orders, "PENDING", "orders") == []
    for listing in (_listed(orders, "DEAD_LETTERED"), _listed(orders, "DEAD_LETTERED", "orders")):
        [task] = listing
        assert (task["source"], task["status"]) == ("orders", "DEAD_LETTERED"), task
        assert task["dead_letter"]["reason"] == letter["reason"] and task["dead_letter"]["event_id"] == record["eventID"]
    shown = orders.http.get("/tasks/orders/" + quote(json.dumps({"id": "o-1"}), safe="")).json_body["task"]
    assert shown["status"] == "DEAD_LETTERED" and shown["dead_letter"] == task["dead_letter"]


def test_the_delete_of_an_item_that_was_no_task_is_dead_lettered_once_and_makes_no_task(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    table = Table(deps)
    table.put(item(clock, run_at="tomorrow"))  # its INSERT never reached the stream function
    removed = table.delete(MALLORY)
    assert stream(client, removed) == []
    assert stream(client, removed) == []  # delivered again
    assert len(dead_letters(aws, deps)) == 1
    assert client.http.get(PATH).status_code == 404

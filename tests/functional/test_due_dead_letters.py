"""Due messages SQS dead-letters after their last failed delivery: the task shows why, one alert, cancellable."""

from __future__ import annotations

import json
from typing import Any

from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks import lifecycle
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import DueMessage, TaskKey, parse_due
from chalicelib.tasks.store import due_ms
from deploy.provision import MAX_RECEIVE_COUNT
from tests import events
from tests.faults import Faults
from tests.fixtures import Aws, FakeClock
from tests.functional.stream_support import TableStream, stream
from tests.functional.task_support import (
    EMAIL_ACTION,
    deliver,
    deliver_until_dead_lettered,
    emails_sent,
    hand_dead_letter_over,
    patch_task,
    post_task,
    record_of,
)

DUE = "2026-11-22T12:02:00Z"  # two minutes after the FakeClock's now
KEY = TaskKey.for_id("standup")


def create(client: Client) -> DueMessage:
    created = post_task(client, {"id": "standup", "run_at": DUE, "action": EMAIL_ACTION})
    assert created.status_code == 201, created.json_body
    return DueMessage(KEY, parse_due(DUE))


def dead_letter(client: Client, aws: Aws, body: str, message_id: str = "dlq-1") -> set[str] | None:
    """Invoke due_dead_letter with one message of DUE_DLQ."""
    record = events.sqs_record(body, aws.settings.due_dlq, message_id, receive_count=MAX_RECEIVE_COUNT + 1)
    response = client.lambda_.invoke("due_dead_letter", events.sqs_event(record))
    return events.batch_item_failures(response.payload)


def forwarded(aws: Aws) -> list[dict[str, Any]]:
    return [json.loads(m["Body"]) for m in aws.drain(aws.settings.task_dlq)]


def set_execution(deps: Deps, **state: Any) -> None:
    """Write execution state on the task's record, as an executor would have."""
    names = {f"#a{i}": name for i, name in enumerate(state)}
    deps.clients.dynamodb.update_item(
        TableName=deps.settings.state_table, Key=ddb.serialize({"PK": f"TASK#{KEY.task_id}", "SK": "RECORD"}),
        UpdateExpression="SET " + ", ".join(f"#a{i} = :a{i}" for i in range(len(state))),
        ExpressionAttributeNames=names,
        ExpressionAttributeValues={f":a{i}": ddb.value(v) for i, v in enumerate(state.values())})


def stuck_running(deps: Deps, clock: FakeClock) -> None:
    """What a worker that claimed the task and then failed every time leaves: its claim RUNNING."""
    set_execution(deps, exec_due=DUE, exec_due_ms=due_ms(parse_due(DUE)), exec_state="RUNNING", exec_owner="a-worker",
                  claimed_at=clock.now.timestamp())


def test_a_due_message_sqs_gave_up_on_reaches_its_own_queue_and_the_task_shows_why(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    message = create(client)
    clock.advance(minutes=2)
    # The executor cannot read the task's item (DynamoDB keeps failing for it): every delivery fails.
    faults.inject("dynamodb.GetItem", "error", times=1000, match=lambda p: p["Key"]["SK"]["S"] == "TASK")
    deliver_until_dead_lettered(client, aws, deps, message.to_json())
    faults.calm()
    hand_dead_letter_over(client, aws, deps)

    shown = client.http.get("/tasks/standup").json_body
    assert shown["status"] == "DEAD_LETTERED"
    assert shown["dead_letter"]["run_at"] == DUE
    assert shown["dead_letter"]["claim"] == "none"  # it never got as far as its claim
    assert "failed every delivery" in shown["dead_letter"]["reason"]
    [alert] = aws.alerts()
    assert alert["message"]["task_id"] == "standup" and "dead-lettered" in alert["subject"]
    [human] = forwarded(aws)
    assert (human["source"], human["payload"]["pk"]) == ("due_dead_letter", KEY.pk)


def test_a_dead_lettered_task_left_running_can_be_cancelled(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    message = create(client)
    clock.advance(minutes=2)
    stuck_running(deps, clock)
    assert client.http.delete("/tasks/standup").status_code == 409  # running, and nothing says it is stuck
    assert dead_letter(client, aws, message.to_json()) == set()
    shown = client.http.get("/tasks/standup").json_body
    assert (shown["status"], shown["dead_letter"]["claim"]) == ("DEAD_LETTERED", "RUNNING")
    cancelled = client.http.delete("/tasks/standup")
    assert (cancelled.status_code, cancelled.json_body["status"]) == (200, "CANCELLED")
    listed = client.http.get("/tasks?status=CANCELLED").json_body["tasks"]
    assert [t["id"] for t in listed] == ["standup"]


def test_a_dead_lettered_task_left_running_can_be_rescheduled_and_then_runs(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    message = create(client)
    clock.advance(minutes=2)
    stuck_running(deps, clock)
    assert dead_letter(client, aws, message.to_json()) == set()
    changes = TableStream(deps)
    changes.new_records()
    moved = patch_task(client, "standup", {"run_at": "2026-11-22T12:10:00Z"})
    assert (moved.status_code, moved.json_body["status"]) == (200, "PENDING")
    assert "dead_letter" not in client.http.get("/tasks/standup").json_body
    assert stream(client, *changes.new_records()) == []
    [(body, delay)] = aws.sent(deps.settings.due_queue)
    clock.advance(seconds=delay)
    payload = client.lambda_.invoke("task_executor", events.sqs_event(
        events.sqs_record(body, deps.settings.due_queue))).payload
    assert events.batch_item_failures(payload) == set()
    assert len(emails_sent()) == 1
    assert client.http.get("/tasks/standup").json_body["status"] == "DONE"


def test_a_dead_lettered_task_is_not_retried_while_the_claim_its_message_left_is_live(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    message = create(client)
    clock.advance(minutes=2)
    stuck_running(deps, clock)  # its worker may still be running the action
    assert dead_letter(client, aws, message.to_json()) == set()
    retry = {"headers": {"Content-Type": "application/json"}, "body": json.dumps({"retry_id": "r-1"})}
    refused = client.http.post("/tasks/standup/retry", **retry)
    assert (refused.status_code, refused.json_body.get("field")) == (409, "status")
    assert "still live" in refused.json_body["error"]
    assert aws.sent(deps.settings.due_queue) == []
    record = record_of(deps, KEY) or {}
    assert (lifecycle.state_of(record), record["exec_state"], record["exec_owner"]) == (
        State.DEAD_LETTERED, "RUNNING", "a-worker")
    clock.advance(seconds=deps.settings.task_claim_lease_seconds + 1)  # its lease ran out: the worker is dead
    made = client.http.post("/tasks/standup/retry", **retry)
    assert (made.status_code, made.json_body["status"]) == (202, "PENDING")
    [(body, _)] = aws.sent(deps.settings.due_queue)
    assert deliver(client, body) == set()
    assert (len(emails_sent()), client.http.get("/tasks/standup").json_body["status"]) == (1, "DONE")


def test_a_redelivered_dead_letter_alerts_and_forwards_once(client: Client, aws: Aws, clock: FakeClock) -> None:
    message = create(client)
    clock.advance(minutes=2)
    assert dead_letter(client, aws, message.to_json()) == set()
    assert dead_letter(client, aws, message.to_json()) == set()  # SQS delivers it again
    assert len(aws.alerts()) == 1
    assert len(forwarded(aws)) == 1


def test_a_second_message_for_the_same_execution_is_forwarded_without_a_second_alert(
        client: Client, aws: Aws, clock: FakeClock) -> None:
    message = create(client)
    clock.advance(minutes=2)
    assert dead_letter(client, aws, message.to_json(), "dlq-1") == set()
    assert dead_letter(client, aws, message.to_json(), "dlq-2") == set()
    assert len(aws.alerts()) == 1
    first, second = forwarded(aws)
    assert first["dedupe_id"] == second["dedupe_id"] == f"due-dead-lettered:standup:{DUE}"


def test_a_dead_lettered_message_whose_execution_finished_is_only_forwarded(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    message = create(client)
    clock.advance(minutes=2)
    set_execution(deps, exec_due=DUE, exec_state="DONE", exec_owner="a-worker", claimed_at=clock.now.timestamp(),
                  status="DONE")
    assert dead_letter(client, aws, message.to_json()) == set()
    assert aws.alerts() == []
    [human] = forwarded(aws)
    assert "its execution is done" in human["reason"]
    assert "dead_letter" not in client.http.get("/tasks/standup").json_body


def test_a_dead_lettered_message_of_a_rescheduled_task_is_only_forwarded(
        client: Client, aws: Aws, clock: FakeClock) -> None:
    message = create(client)
    assert patch_task(client, "standup", {"run_at": "2026-11-22T13:00:00Z"}).status_code == 200
    clock.advance(minutes=2)
    assert dead_letter(client, aws, message.to_json()) == set()
    assert aws.alerts() == []
    assert "rescheduled" in forwarded(aws)[0]["reason"]


def test_an_unreadable_dead_lettered_message_is_forwarded_with_the_reason(client: Client, aws: Aws) -> None:
    assert dead_letter(client, aws, "not json") == set()
    [human] = forwarded(aws)
    assert "unreadable" in human["reason"] and human["payload"] == "not json"
    assert aws.alerts() == []


def test_a_task_of_another_program_shows_why_its_message_was_dead_lettered(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    key = TaskKey("USER#ada", "REMINDER#standup")
    deps.clients.dynamodb.put_item(TableName=deps.settings.tasks_table, Item=ddb.serialize({
        "PK": key.pk, "SK": key.sk, "run_at": DUE, "email": "ada@example.com"}))
    clock.advance(minutes=2)
    assert dead_letter(client, aws, DueMessage(key, parse_due(DUE)).to_json()) == set()
    shown = client.http.get("/tasks/USER%23ada%7CREMINDER%23standup").json_body
    assert (shown["status"], shown["dead_letter"]["run_at"]) == ("DEAD_LETTERED", DUE)
    listed = client.http.get("/tasks?status=DEAD_LETTERED&source=items").json_body["tasks"]
    assert [(t["id"], t["source"]) for t in listed] == [(key.task_id, "items")]  # from the index, by source
    assert client.http.delete("/tasks/USER%23ada%7CREMINDER%23standup").status_code == 200

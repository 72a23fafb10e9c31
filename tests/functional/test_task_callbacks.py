"""A task's ``on_success`` and ``on_failure`` callbacks, run by the executor under moto against a webhook receiver on
a loopback port (local/webhook_receiver.py), as tests/functional/test_webhook_action.py runs the webhook itself:
each runs once after the execution it follows, given its outcome, even when the due message is delivered again;
its failure is alerted and never changes the task's outcome; a callback is validated and allow-listed as an
action is, and has no callbacks of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks.model import TaskKey, parse_due
from local.webhook_receiver import Reply, WebhookReceiver
from tests.faults import Faults, WorkerCrash
from tests.fixtures import Aws, FakeClock, moto_aws
from tests.functional.task_support import deliver, due_body, post_task, state_of, webhook_action

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now
BODY = '{"order": 42}'


@pytest.fixture(scope="module")
def aws() -> Iterator[Aws]:
    with moto_aws() as world:
        yield world


def hook(url: str, body: str = BODY) -> dict[str, Any]:
    return webhook_action(url, body)


def run(client: Client, clock: FakeClock, task: dict[str, Any], times: int = 1) -> None:
    created = post_task(client, {"run_at": RUN_AT, **task})
    assert created.status_code == 201, created.body
    clock.advance(minutes=10)
    for _ in range(times):
        assert deliver(client, due_body(TaskKey.for_id(task["id"]), parse_due(RUN_AT))) == set()


def test_on_success_runs_once_after_done_given_the_outcome_even_when_the_message_comes_again(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    run(client, clock, {"id": "cb-ok", "action": hook(receiver.origin + "/main"),
                        "on_success": hook(receiver.origin + "/done", '{"note": "ok"}'),
                        "on_failure": hook(receiver.origin + "/failed")}, times=2)
    main, callback = receiver.received
    assert (main.path, callback.path, callback.verified) == ("/main", "/done", True)
    assert callback.key == "cb-ok%23on_success@2026-11-22T12:10:00Z" != main.key  # never dropped as the task's repeat
    sent = json.loads(callback.body)
    assert sent["note"] == "ok"
    assert sent["outcome"] == {"callback": "on_success", "task_id": "cb-ok", "due": RUN_AT, "attempt": 1,
                               "status": "DONE", "result": {"type": "webhook", "status": 200,
                                                            "idempotency_key": main.key}}
    record = state_of(deps, TaskKey.for_id("cb-ok"))
    assert record["status"] == "DONE" and record["callback"]["name"] == "on_success"
    assert record["callback"]["status"] == "DONE"
    shown = json.loads(client.http.get("/tasks/cb-ok").body)
    assert shown["callback"]["status"] == "DONE" and shown["on_success"]["url"] == receiver.origin + "/done"


def test_on_failure_runs_once_after_the_last_attempt_given_the_error(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    receiver.replies = [Reply(404)]
    run(client, clock, {"id": "cb-fail", "action": hook(receiver.origin + "/main"),
                        "on_success": hook(receiver.origin + "/done"),
                        "on_failure": hook(receiver.origin + "/failed")}, times=2)
    assert [r.path for r in receiver.received] == ["/main", "/failed"]
    outcome = json.loads(receiver.received[1].body)["outcome"]
    assert (outcome["status"], outcome["attempt"]) == ("FAILED", 1) and "answered 404" in outcome["error"]
    record = state_of(deps, TaskKey.for_id("cb-fail"))
    assert (record["status"], record["callback"]["name"], record["callback"]["status"]) == (
        "FAILED", "on_failure", "DONE")
    assert [a["message"]["task_id"] for a in aws.alerts()] == ["cb-fail"]  # the task's failure, alerted once


def test_a_failing_callback_is_alerted_and_never_changes_the_tasks_outcome(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    receiver.replies = [Reply(200), Reply(404)]
    run(client, clock, {"id": "cb-broken", "action": hook(receiver.origin + "/main"),
                        "on_success": hook(receiver.origin + "/done")}, times=2)
    assert [(r.path, r.status) for r in receiver.received] == [("/main", 200), ("/done", 404)]  # not run again
    record = state_of(deps, TaskKey.for_id("cb-broken"))
    assert (record["status"], record["attempts"], record["callback"]["status"]) == ("DONE", 1, "FAILED")
    assert "answered 404" in record["callback"]["error"]
    [alert] = aws.alerts()
    assert (alert["message"]["callback"], alert["message"]["task_id"]) == ("on_success", "cb-broken")


def test_a_callback_is_validated_and_allow_listed_as_an_action_and_has_no_callbacks_of_its_own(
        client: Client, hooks: Deps, receiver: WebhookReceiver) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"on_success": {**hook(receiver.origin + "/"), "on_failure": hook(receiver.origin + "/")}},
         "on_success.on_failure"),
        ({"on_failure": hook("https://hooks.example.com/x")}, "on_failure.url"),
        ({"on_failure": {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/999999999999/elsewhere",
                         "message": "m"}}, "on_failure.queue_url"),
        ({"on_success": {**hook(receiver.origin + "/"), "headers": {"Host": "x"}}}, "on_success.headers.Host"),
        ({"on_success": {"type": "fax"}}, "on_success.type"),
        ({"on_success": "https://hooks.example.com/x"}, "on_success"),
    ]
    for extra, field in cases:
        refused = post_task(client, {"run_at": RUN_AT, "action": hook(receiver.origin + "/"), **extra})
        assert refused.status_code == 400 and json.loads(refused.body)["field"] == field, (field, refused.body)
        if field == "on_success.on_failure":
            assert "a callback has no callbacks of its own" in json.loads(refused.body)["error"]


def test_a_worker_that_dies_between_the_callback_and_its_note_leaves_it_to_run_again_with_the_same_key(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver,
        faults: Faults) -> None:
    created = post_task(client, {"id": "cb-crash", "run_at": RUN_AT, "action": hook(receiver.origin + "/main"),
                                 "on_success": hook(receiver.origin + "/done")})
    assert created.status_code == 201, created.body
    clock.advance(minutes=10)
    body = due_body(TaskKey.for_id("cb-crash"), parse_due(RUN_AT))
    faults.inject("dynamodb.UpdateItem", "crash",
                  match=lambda p: "#callback = :note" in str(p.get("UpdateExpression", "")))  # the callback's note
    with pytest.raises(WorkerCrash):
        deliver(client, body)
    assert deliver(client, body) == set()  # the redelivery finds it DONE, not noted: the callback runs again
    assert deliver(client, body) == set()  # noted now: nothing more
    main, first, second = receiver.received
    assert (main.path, first.path, second.path) == ("/main", "/done", "/done")
    assert first.key == second.key and second.duplicate  # the receiver drops the repeat by its key
    assert state_of(deps, TaskKey.for_id("cb-crash"))["callback"]["status"] == "DONE"


def test_a_recurring_tasks_on_success_runs_after_each_occurrence(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    run(client, clock, {"id": "cb-daily", "action": hook(receiver.origin + "/main"), "recurrence": "rate(1 day)",
                        "on_success": hook(receiver.origin + "/done")})
    next_due = parse_due("2026-11-23T12:10:00Z")
    clock.advance(days=1)
    assert deliver(client, due_body(TaskKey.for_id("cb-daily"), next_due)) == set()
    assert [r.path for r in receiver.received] == ["/main", "/done", "/main", "/done"]
    dues = [json.loads(r.body)["outcome"]["due"] for r in receiver.received if r.path == "/done"]
    assert dues == [RUN_AT, "2026-11-23T12:10:00Z"]

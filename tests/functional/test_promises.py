"""What the docs promise and each test here proves, one test a promise (issue 21, "Promised, untested").

Every test runs at the stage's settings (LOG_LEVEL=INFO) through the app's own handlers under moto; a race is
made with a botocore hook at the app's own call boundary (the call that loses the race runs the winner first),
never by patching our code.  Each was seen to fail with its promise broken in the code once (the report of
issue 21 names the break).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
from botocore.exceptions import ClientError
from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks import interval
from chalicelib.tasks.model import DueMessage, TaskKey, parse_due
from tests import events
from tests.faults import Faults, WorkerCrash
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.source_support import APPOINTMENTS_TABLE, SEED_SOURCES, SLOTS_TABLE, SourceSim, create_table, load_app
from tests.functional.stream_support import Table, stream
from tests.functional.task_support import (
    EMAIL_ACTION,
    deliver,
    due_body,
    emails_sent,
    patch_task,
    post_task,
    state_of,
    use_client,
)
from tests.functional.test_interval_processor import filed, sent, tick

RUN_AT = "2026-11-22T12:05:00Z"  # five minutes after the FakeClock's now


def before_call(deps: Deps, operation: str, match: Callable[[dict[str, Any]], bool],
                first: Callable[[], None]) -> None:
    """Run ``first`` once, just before the app's first ``operation`` call (dynamodb.UpdateItem) whose parameters
    match: what another request does between the app's read and its write."""
    service, name = operation.split(".")
    done: list[bool] = []

    def hook(params: dict[str, Any], **_: Any) -> None:
        if not done and match(params):
            done.append(True)
            first()

    getattr(deps.clients, service).meta.events.register(f"provide-client-params.{service}.{name}", hook)


def _is_claim(params: dict[str, Any]) -> bool:
    return "claimed_at = :now" in str(params.get("UpdateExpression", "")) and "exec_takeovers = :zero" in str(
        params.get("UpdateExpression", ""))


# --- the interval processor (docs/strategies.md, chalicelib/tasks/interval.py) -------------------------------

@pytest.fixture
def table(deps: Deps) -> Table:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP", bucket_shards=4, bucket_minutes=5)
    return Table(deps)


def test_a_tick_in_the_middle_of_a_bucket_does_not_send_that_buckets_earlier_tasks_again(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    tick(client, clock)  # 12:00:00, the start of a five-minute bucket
    early, late = TaskKey("USER#early", "R"), TaskKey("USER#late", "R")
    table.put(filed(deps, early, clock.now + timedelta(minutes=1, seconds=30)))
    table.put(filed(deps, late, clock.now + timedelta(minutes=3, seconds=30)))
    clock.advance(minutes=2)
    tick(client, clock)  # 12:02:00, in the middle of the 12:00 bucket
    assert [m.key for m in sent(aws, deps, clock)] == [early]
    clock.advance(minutes=2)
    tick(client, clock)  # 12:04:00, the same bucket again: only what came due since
    assert [m.key for m in sent(aws, deps, clock)] == [late]


def test_interval_progress_never_moves_back_when_a_slower_run_saves_after_a_later_one(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    tick(client, clock)  # 12:00:00
    between = TaskKey("USER#between", "R")
    table.put(filed(deps, between, clock.now + timedelta(minutes=3)))  # 12:03, after the slow run's window
    clock.advance(minutes=2)
    slow_run_started = clock.now

    def a_later_run_finishes_first() -> None:
        clock.advance(minutes=2)  # 12:04: the next tick's run, while the 12:02 run is still saving
        tick(client, clock)

    before_call(deps, "dynamodb.PutItem",
                lambda p: p.get("Item", {}).get("SK") == {"S": "interval"}, a_later_run_finishes_first)
    tick(client, clock)  # 12:02's run saves its progress (12:02:00) after 12:04's run saved 12:04:00
    assert interval.load_progress(deps) == int(slow_run_started.timestamp()) + 120
    assert [m.key for m in sent(aws, deps, clock)] == [between]
    clock.advance(minutes=1)
    tick(client, clock)  # 12:05: nothing is sent again
    assert sent(aws, deps, clock) == []


def test_an_item_filed_into_an_interval_sources_running_bucket_after_its_first_tick_still_runs(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = {"slots": create_table(deps, SLOTS_TABLE, [("id", "S")], index=("taskDateTime-index", "taskDateTime"))}
    sources = {"slots": {**SEED_SOURCES["slots"], "due_attribute": "at", "bucket_minutes": 5,
                         "bucket_format": "%Y-%m-%d#%H:%M"}}
    module = load_app(monkeypatch, deps, sources, streams)
    try:
        with Client(module.app) as client:
            sim = SourceSim(deps, client, clock)
            sim.run(lambda: False, timedelta(seconds=30))  # the 12:00 bucket's first tick, at 12:00:00
            due = datetime(2026, 11, 22, 12, 3, 30, tzinfo=clock.now.tzinfo)  # in the 12:00 bucket, minutes ahead
            deps.clients.dynamodb.put_item(TableName=SLOTS_TABLE, Item={
                "id": {"S": "late-filed"}, "at": {"S": due.isoformat()}, "email": {"S": "late@example.com"},
                "taskDateTime": {"S": "2026-11-22#12:00"}})
            sim.run(lambda: False, timedelta(minutes=5, seconds=30))
    finally:
        module.container.use(None)
    assert [m.destinations["ToAddresses"] for m in emails_sent()] == [["late@example.com"]]


# --- the executor's claim (docs/executor.md step 3) ------------------------------------------------------

def test_a_lazy_task_cancelled_after_its_ttl_fired_does_not_run(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    assert post_task(client, {"id": "water", "run_at": RUN_AT, "strategy": "lazy",
                              "action": EMAIL_ACTION}).status_code == 201
    clock.advance(minutes=6)  # TTL deletes the item; its REMOVE record queues the due message (with the item)
    assert stream(client, Table(deps).delete(TaskKey.for_id("water"), by_ttl=True)) == []
    [(body, _)] = aws.sent(deps.settings.due_queue)
    cancelled = client.http.delete("/tasks/water")
    assert cancelled.status_code == 200 and cancelled.json_body["status"] == "CANCELLED"
    assert deliver(client, body) == set()
    assert emails_sent() == []
    assert client.http.get("/tasks/water").json_body["status"] == "CANCELLED"


@pytest.mark.parametrize("change", ["PATCH", "DELETE"])
def test_a_patch_or_delete_that_lands_between_the_executors_read_and_its_claim_wins(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, change: str) -> None:
    assert post_task(client, {"id": "standup", "run_at": RUN_AT, "action": EMAIL_ACTION}).status_code == 201
    clock.advance(minutes=5)

    def the_api_changes_it_first() -> None:
        if change == "PATCH":
            response = patch_task(client, "standup", {"run_at": "2026-11-22T13:00:00Z"})
        else:
            response = client.http.delete("/tasks/standup")
        assert response.status_code == 200, response.body

    before_call(deps, "dynamodb.UpdateItem", _is_claim, the_api_changes_it_first)
    assert deliver(client, due_body(TaskKey.for_id("standup"), parse_due(RUN_AT))) == set()
    assert emails_sent() == []
    shown = client.http.get("/tasks/standup").json_body
    expected = ("PENDING", "2026-11-22T13:00:00Z") if change == "PATCH" else ("CANCELLED", RUN_AT)
    assert (shown["status"], shown["run_at"], shown["attempts"]) == (*expected, 0)


class TakenOverWhileSending:
    """An SES v2 client under which the first worker's action outlives its lease: during its first send, the
    message comes back and a second worker takes the claim over, and holds it (it dies in the middle of its own
    send: its claim stays RUNNING, as while it is still sending).  The first worker's sends fail, so it ends
    FAILED, and would dead-letter and alert if it settled.  After ``healthy`` is set, sends go through."""

    def __init__(self, real: Any, takeover: Callable[[], None]) -> None:
        self._real = real
        self._takeover = takeover
        self.taken_over = False
        self.healthy = False
        self._second_worker = False

    def send_email(self, **kwargs: Any) -> Any:
        if self.healthy:
            return self._real.send_email(**kwargs)
        if self._second_worker:
            raise WorkerCrash("the second worker dies while sending: its claim stays RUNNING")
        if not self.taken_over:
            self.taken_over, self._second_worker = True, True
            try:
                self._takeover()
            finally:
                self._second_worker = False
        raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "timed out"}}, "SendEmail")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_a_worker_whose_claim_was_taken_over_while_its_action_ran_does_not_settle_dead_letter_or_alert(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    assert post_task(client, {"id": "standup", "run_at": RUN_AT, "action": EMAIL_ACTION}).status_code == 201
    clock.advance(minutes=5)
    body = due_body(TaskKey.for_id("standup"), parse_due(RUN_AT))
    lease = deps.settings.task_claim_lease_seconds

    def lease_ends_and_the_message_comes_back() -> None:
        clock.advance(seconds=lease + 1)
        with pytest.raises(WorkerCrash):
            deliver(client, body)  # the second worker takes the claim over and holds it

    ses = TakenOverWhileSending(deps.clients.ses, lease_ends_and_the_message_comes_back)
    use_client(deps, "ses", ses)
    assert deliver(client, body) == set()  # the first worker: its action failed, and the claim is not its own
    assert ses.taken_over
    assert aws.alerts() == [] and aws.drain(deps.settings.task_dlq) == []
    shown = state_of(deps, TaskKey.for_id("standup"))
    assert (shown["status"], shown["last_error"]) == ("RUNNING", None)  # the second worker's claim, untouched

    ses.healthy = True
    clock.advance(seconds=lease + 1)  # the second worker's lease ends: the next delivery takes over and runs it
    assert deliver(client, body) == set()
    assert len(emails_sent()) == 1
    shown = state_of(deps, TaskKey.for_id("standup"))
    assert (shown["status"], shown["attempts"], shown["last_error"]) == ("DONE", 1, None)
    assert aws.alerts() == [] and aws.drain(deps.settings.task_dlq) == []


def test_get_shows_running_only_while_a_live_claim_is_held(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    assert post_task(client, {"id": "standup", "run_at": RUN_AT, "action": EMAIL_ACTION}).status_code == 201
    clock.advance(minutes=5)
    body = due_body(TaskKey.for_id("standup"), parse_due(RUN_AT))
    faults.inject("sesv2.SendEmail", "crash")  # the worker dies in its action: its claim stays RUNNING
    with pytest.raises(WorkerCrash):
        deliver(client, body)
    lease = deps.settings.task_claim_lease_seconds
    clock.advance(seconds=lease)
    assert client.http.get("/tasks/standup").json_body["status"] == "RUNNING"  # the lease's last second
    clock.advance(seconds=1)
    shown = client.http.get("/tasks/standup").json_body  # the lease ended: it waits for the next delivery
    assert (shown["status"], shown["attempts"], shown["last_error"]) == ("PENDING", 0, None)
    assert [t["status"] for t in client.http.get("/tasks").json_body["tasks"]] == ["PENDING"]
    assert client.http.delete("/tasks/standup").status_code == 409  # until the takeover settles it
    assert deliver(client, body) == set()  # the message comes back: the claim is taken over, the task runs
    shown = client.http.get("/tasks/standup").json_body
    assert (shown["status"], shown["attempts"], len(emails_sent())) == ("DONE", 1, 1)


# --- task sources (chalicelib/sources.py, TaskKey.of_source) --------------------------------------------

def test_a_source_key_names_one_task_whatever_the_order_of_its_attributes(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = {"appointments": create_table(deps, APPOINTMENTS_TABLE, [("PK", "S"), ("SK", "S")])}
    module = load_app(monkeypatch, deps, {"appointments": SEED_SOURCES["appointments"]}, streams)
    item = {"PK": "USER#ada", "SK": "REMINDER#standup", "REMINDER_TIMESTAMP": int(clock.now.timestamp()) + 120,
            "email": "ada@example.com"}
    deps.clients.dynamodb.put_item(TableName=APPOINTMENTS_TABLE, Item=ddb.serialize(item))
    orders = [{"PK": item["PK"], "SK": item["SK"]}, {"SK": item["SK"], "PK": item["PK"]}]
    try:
        with Client(module.app) as client:
            for i, keys in enumerate(orders):  # the record and its redelivery, its key's attributes in either order
                record = events.stream_record("INSERT", ddb.serialize(keys), new_image=ddb.serialize(item),
                                              sequence_number=f"10000000000000000000{i + 1}",
                                              source_arn=streams["appointments"], created=clock.now)
                client.lambda_.invoke("source_appointments", events.stream_event(record))
            messages = aws.sent(deps.settings.due_queue)
            assert {DueMessage.from_json(body).key for body, _ in messages} == {
                TaskKey.of_source("appointments", ddb.serialize(order)) for order in orders}
            clock.advance(minutes=2)
            for body, _ in messages:
                assert deliver(client, body) == set()
            shown = [client.http.get("/tasks/appointments/" + quote(json.dumps(order), safe="")).json_body["task"]
                     for order in orders]
    finally:
        module.container.use(None)
    assert len(emails_sent()) == 1
    assert [(task["id"], task["status"], task["attempts"]) for task in shown] == [(shown[0]["id"], "DONE", 1)] * 2


# --- the allow-list of action targets (TASK_ACTION_TARGET_ARNS) ----------------------------------------

ORDERS = "arn:aws:sqs:us-east-1:123456789012:orders"
NEWS = "arn:aws:sns:us-east-1:123456789012:news"
NEIGHBOURS = [  # same prefix with a longer or shorter name, another account, another region, another service
    {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/orders-archive"},
    {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/order"},
    {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/999999999999/orders"},
    {"type": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"},
    {"type": "sns", "topic_arn": NEWS + "letter"},
    {"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:999999999999:news"},
    {"type": "sns", "topic_arn": "arn:aws:sns:us-west-2:123456789012:news"},
    {"type": "sns", "topic_arn": ORDERS.replace(":sqs:", ":sns:")},
]


def test_an_allow_list_entry_without_a_wildcard_allows_that_target_only(client: Client, deps: Deps) -> None:
    use_settings(deps, task_action_target_arns=(ORDERS, NEWS))  # TASK_ACTION_TARGET_ARNS: two exact ARNs
    for i, action in enumerate(NEIGHBOURS):
        response = post_task(client, {"id": f"near-{i}", "run_at": RUN_AT, "action": {**action, "message": "m"}})
        assert response.status_code == 400, (action, response.body)
        assert "TASK_ACTION_TARGET_ARNS" in response.json_body["error"]
        assert response.json_body["field"] == ("action.queue_url" if action["type"] == "sqs" else "action.topic_arn")
    for i, action in enumerate([{"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/orders"},
                                {"type": "sns", "topic_arn": NEWS}]):
        response = post_task(client, {"id": f"exact-{i}", "run_at": RUN_AT, "action": {**action, "message": "m"}})
        assert response.status_code == 201, (action, response.body)

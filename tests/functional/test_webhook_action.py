"""The webhook action run by the executor under moto, against a receiver on a loopback port (local/webhook_receiver.py).

Loopback is allowed only through these tests' settings (TASK_WEBHOOK_ALLOW_LOOPBACK, as on the local stage); the
receiver's clock is the test's, so a signature made at the FakeClock's time verifies.  No test waits for real
time but the timeout's, which is TASK_WEBHOOK_TIMEOUT_SECONDS set tiny.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from chalice.test import Client
from standardwebhooks import Webhook, WebhookVerificationError

from chalicelib.aws import Deps
from chalicelib.tasks import timing, webhook
from chalicelib.tasks.model import DueMessage, TaskKey, iso, parse_due
from local.webhook_receiver import Received, Reply, WebhookReceiver, new_secret
from tests.faults import Faults, WorkerCrash
from tests.fixtures import Aws, FakeClock, moto_aws, use_settings
from tests.functional.task_support import (
    WEBHOOK_KEY,
    deliver,
    due_body,
    post_task,
    state_of,
    use_client,
    webhook_action,
)
from tests.functional.task_support import WEBHOOK_PARAMETER as PARAMETER
from tests.functional.task_support import WEBHOOK_SECRET as SECRET

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now
KEYS = (WEBHOOK_KEY,)  # WEBHOOK_SECRET's, which the hooks fixture (task_support) puts in SSM
BODY = '{"order": 42, "event": "reminder"}'


# One moto world for the module (each test's task has its own id; alerts are drained before each test).
@pytest.fixture(scope="module")
def aws() -> Iterator[Aws]:
    with moto_aws() as world:
        yield world


def action(url: str) -> dict[str, Any]:
    return webhook_action(url, BODY)


def run(client: Client, clock: FakeClock, task_id: str, url: str, times: int = 1) -> str:
    """POST the task, then deliver its due message ``times`` once it is due; the body delivered."""
    created = post_task(client, {"id": task_id, "run_at": RUN_AT, "action": action(url)})
    assert created.status_code == 201, created.body
    clock.advance(minutes=10)
    body = due_body(TaskKey.for_id(task_id), parse_due(RUN_AT))
    for _ in range(times):
        assert deliver(client, body) == set()
    return body


def shown(deps: Deps, task_id: str) -> tuple[Any, ...]:
    item = state_of(deps, TaskKey.for_id(task_id))
    return item["status"], item["attempts"]


def test_a_webhook_posts_its_body_once_signed_with_the_executions_key_even_when_delivered_twice(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    run(client, clock, "ping", receiver.origin + "/hooks/orders?src=tk", times=2)
    [got] = receiver.received
    assert (got.path, got.body, got.verified, got.duplicate) == ("/hooks/orders?src=tk", BODY, True, False)
    assert got.key == "ping@2026-11-22T12:10:00Z"
    assert got.host == receiver.origin.removeprefix("http://")
    assert got.received_at == clock().timestamp()  # the receiver's clock when it read the request (bench P3)
    item = state_of(deps, TaskKey.for_id("ping"))
    assert (item["status"], item["attempts"]) == ("DONE", 1)
    assert item["last_result"] == {"type": "webhook", "status": 200, "idempotency_key": got.key}


def library_verifies(secret: str, got: Received) -> bool:
    """What a receiver does with standardwebhooks as it is (its window around the wall clock)."""
    headers = {"webhook-id": got.key, "webhook-timestamp": got.timestamp, "webhook-signature": got.signature}
    try:
        Webhook(secret).verify(got.body, headers)
    except WebhookVerificationError:
        return False
    return True


def test_a_delivery_verifies_with_the_standardwebhooks_library_as_a_receiver_would_and_with_each_rotated_key(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    newest = new_secret()  # a rotation: the parameter holds the new key, then the old one
    deps.clients.ssm.put_parameter(Name=PARAMETER, Value=f"{newest}\n{SECRET}", Type="SecureString", Overwrite=True)
    run_at = datetime.now(UTC).replace(microsecond=0)  # the library reads the wall clock: the task runs at it
    clock.now = run_at - timedelta(minutes=10)
    created = post_task(client, {"id": "standard.1", "run_at": run_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                 "action": action(receiver.origin + "/")})
    assert created.status_code == 201, created.body
    clock.now = run_at
    assert deliver(client, due_body(TaskKey.for_id("standard.1"), run_at)) == set()
    [got] = receiver.received
    assert got.key == f"standard%2E1@{run_at.strftime('%Y-%m-%dT%H:%M:%SZ')}" and got.verified
    assert got.timestamp == str(int(run_at.timestamp())) and len(got.signature.split(" ")) == 2
    assert library_verifies(SECRET, got) and library_verifies(newest, got)  # a receiver with either key
    assert not library_verifies(new_secret(), got)
    assert not library_verifies(SECRET, replace(got, body=got.body.replace("42", "43")))
    assert not library_verifies(SECRET, replace(got, key="standard%2E1@2000-01-01T00:00:00Z"))


def test_a_webhook_whose_secret_holds_no_whsec_key_fails_at_once_without_showing_it(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    deps.clients.ssm.put_parameter(Name=PARAMETER, Value="hunter2-a-raw-password", Type="SecureString",
                                   Overwrite=True)
    run(client, clock, "unkeyed", receiver.origin + "/")
    assert receiver.received == []
    item = state_of(deps, TaskKey.for_id("unkeyed"))
    assert (item["status"], item["attempts"]) == ("FAILED", 1)
    assert "does not start with whsec_" in item["last_error"] and "hunter2" not in item["last_error"]
    [alert] = aws.alerts()
    assert "hunter2" not in json.dumps(alert)


def test_a_webhook_answered_500_is_retried_with_the_same_key_and_then_done(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    receiver.replies = [Reply(500)]
    run(client, clock, "flaky", receiver.origin + "/")
    key = "flaky@2026-11-22T12:10:00Z"
    assert [(r.status, r.key) for r in receiver.received] == [(500, key), (200, key)]
    assert shown(deps, "flaky") == ("DONE", 2)


def test_a_webhook_answered_404_fails_at_once_with_one_alert(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    receiver.replies = [Reply(404), Reply(404), Reply(404)]
    run(client, clock, "gone", receiver.origin + "/missing")
    assert len(receiver.received) == 1
    item = state_of(deps, TaskKey.for_id("gone"))
    assert (item["status"], item["attempts"]) == ("FAILED", 1)
    assert "answered 404" in item["last_error"]
    [alert] = aws.alerts()
    assert alert["message"]["task_id"] == "gone" and alert["message"]["action"] == "webhook"


def test_a_webhook_answered_429_waits_its_retry_after_before_the_next_attempt(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    receiver.replies = [Reply(429, {"Retry-After": "7"})]
    run(client, clock, "busy", receiver.origin + "/")
    assert [r.status for r in receiver.received] == [429, 200]
    assert shown(deps, "busy") == ("DONE", 2)
    assert clock.slept == 7  # the hint, not the 1 s backoff


def test_a_webhook_answered_429_with_a_long_retry_after_is_retried_in_a_later_delivery_not_failed_nor_slept(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    """docs/tasks.md, "The answer": a Retry-After longer than a delivery sleeps (timing.RETRY_CAP_SECONDS) sends
    the task back to the queue until then; the executor's function is not held and the task does not fail."""
    wait = 60
    assert wait > timing.RETRY_CAP_SECONDS
    receiver.replies = [Reply(429, {"Retry-After": str(wait)})]
    aws.sent(deps.settings.due_queue)  # an earlier test's
    run(client, clock, "later", receiver.origin + "/")
    retry_at = clock() + timedelta(seconds=wait)
    item = state_of(deps, TaskKey.for_id("later"))
    assert (item["status"], item["attempts"], item["retry_at"]) == ("PENDING", 1, iso(retry_at))
    assert clock.slept == 0 and [r.status for r in receiver.received] == [429]
    [(body, delay)] = aws.sent(deps.settings.due_queue)
    assert DueMessage.from_json(body).not_before == retry_at and delay == wait
    clock.now = retry_at
    assert deliver(client, body) == set()
    assert [r.status for r in receiver.received] == [429, 200]
    assert shown(deps, "later") == ("DONE", 2)


def test_a_webhook_that_does_not_answer_in_time_fails_each_attempt_by_the_timeout(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    use_settings(hooks, task_webhook_timeout_seconds=0.05, task_max_attempts=2)
    receiver.replies = [Reply(hang=True), Reply(hang=True)]
    run(client, clock, "slow", receiver.origin + "/")
    assert len(receiver.received) == 2
    item = state_of(deps, TaskKey.for_id("slow"))
    assert (item["status"], item["attempts"]) == ("FAILED", 2)
    assert "timed out" in item["last_error"]


def test_a_webhook_redirected_to_another_origin_is_not_followed(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    other = WebhookReceiver(SECRET, clock=lambda: clock().timestamp()).start()
    try:
        receiver.replies = [Reply(302, {"Location": other.origin + "/steal"})]
        run(client, clock, "moved", receiver.origin + "/")
        assert other.received == []
    finally:
        other.stop()
    item = state_of(deps, TaskKey.for_id("moved"))
    assert (item["status"], item["attempts"]) == ("FAILED", 1)
    assert "redirects are not followed" in item["last_error"]


def test_a_name_resolving_to_loopback_is_refused_where_loopback_is_not_allowed(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    named = receiver.origin.replace("127.0.0.1", "localhost")
    use_settings(hooks, task_webhook_origins=(named,), task_webhook_allow_loopback=False)
    run(client, clock, "inward", named + "/")
    assert receiver.received == []
    item = state_of(deps, TaskKey.for_id("inward"))
    assert (item["status"], item["attempts"]) == ("FAILED", 1)
    assert "loopback address" in item["last_error"]


def test_a_lost_response_is_retried_with_the_same_key_which_the_receiver_drops(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    receiver.replies = [Reply(drop=True)]  # the receiver took it, then the connection broke before its answer
    run(client, clock, "lost", receiver.origin + "/")
    first, second = receiver.received
    assert first.key == second.key and (first.duplicate, second.duplicate) == (False, True)
    assert receiver.taken_bodies() == [BODY]
    assert shown(deps, "lost") == ("DONE", 2)


def test_an_execution_run_again_after_a_crash_before_its_settle_sends_the_same_key(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver,
        faults: Faults) -> None:
    created = post_task(client, {"id": "again", "run_at": RUN_AT, "action": action(receiver.origin + "/")})
    assert created.status_code == 201, created.body
    clock.advance(minutes=10)
    body = due_body(TaskKey.for_id("again"), parse_due(RUN_AT))
    faults.inject("dynamodb.UpdateItem", "crash",
                  match=lambda p: "#exec_owner = :me" in str(p.get("ConditionExpression", "")))  # the settle
    with pytest.raises(WorkerCrash):
        deliver(client, body)
    clock.advance(seconds=deps.settings.task_claim_lease_seconds + 1)  # the claim's lease ends: taken over
    assert deliver(client, body) == set()
    first, second = receiver.received
    assert first.key == second.key == "again@2026-11-22T12:10:00Z" and second.duplicate
    assert receiver.taken_bodies() == [BODY]
    assert state_of(deps, TaskKey.for_id("again"))["status"] == "DONE"


def test_a_webhook_whose_receiver_drops_a_repeated_key_costs_one_write_and_a_duplicate_is_dropped_by_it(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver,
        faults: Faults) -> None:
    created = post_task(client, {"id": "keyed", "run_at": RUN_AT,
                                 "action": {**action(receiver.origin + "/"), "target_deduplicates": True}})
    assert created.status_code == 201, created.body
    clock.advance(minutes=10)
    body = due_body(TaskKey.for_id("keyed"), parse_due(RUN_AT))
    before = faults.calls["dynamodb.UpdateItem"] + faults.calls["dynamodb.TransactWriteItems"]
    assert deliver(client, body) == set()
    assert faults.calls["dynamodb.UpdateItem"] + faults.calls["dynamodb.TransactWriteItems"] - before == 1
    assert deliver(client, body) == set()  # a duplicate: posted again with the same key, dropped, found settled
    first, second = receiver.received
    assert first.key == second.key and (first.duplicate, second.duplicate) == (False, True)
    assert receiver.taken_bodies() == [BODY]
    assert shown(deps, "keyed") == ("DONE", 1)


def test_a_webhook_sends_its_method_and_its_own_headers_and_a_get_sends_no_body_signed_as_empty(
        client: Client, deps: Deps, clock: FakeClock, hooks: Deps, receiver: WebhookReceiver) -> None:
    put = {**action(receiver.origin + "/put"), "method": "PUT",
           "headers": {"X-Team": "7", "Authorization": "Bearer abc", "Content-Type": "application/vnd.x+json"}}
    get = {"type": "webhook", "url": receiver.origin + "/get?q=1", "secret": f"ssm:{PARAMETER}", "method": "GET",
           "headers": {"Accept": "application/json"}}
    for task_id, spec in (("put-hook", put), ("get-hook", get)):
        created = post_task(client, {"id": task_id, "run_at": RUN_AT, "action": spec})
        assert created.status_code == 201, created.body
    clock.advance(minutes=10)
    for task_id in ("put-hook", "get-hook"):
        assert deliver(client, due_body(TaskKey.for_id(task_id), parse_due(RUN_AT))) == set()
    sent_put, sent_get = receiver.received
    assert (sent_put.method, sent_put.path, sent_put.body, sent_put.verified) == ("PUT", "/put", BODY, True)
    assert {name: sent_put.headers[name] for name in ("X-Team", "Authorization", "Content-Type")} == put["headers"]
    assert (sent_get.method, sent_get.path, sent_get.body, sent_get.verified) == ("GET", "/get?q=1", "", True)
    assert sent_get.headers["Accept"] == "application/json" and "Content-Length" not in sent_get.headers
    assert shown(deps, "put-hook") == ("DONE", 1) and shown(deps, "get-hook") == ("DONE", 1)


def test_the_api_refuses_a_webhooks_reserved_header_naming_it(client: Client, hooks: Deps,
                                                               receiver: WebhookReceiver) -> None:
    spec = {**action(receiver.origin + "/"), "headers": {"X-Team": "7", "Host": "internal.example"}}
    refused = post_task(client, {"run_at": RUN_AT, "action": spec})
    assert refused.status_code == 400 and json.loads(refused.body)["field"] == "action.headers.Host"


def test_the_api_refuses_a_webhook_to_an_origin_or_with_a_secret_the_stage_does_not_allow(
        client: Client, hooks: Deps, receiver: WebhookReceiver) -> None:
    elsewhere = post_task(client, {"run_at": RUN_AT, "action": action("https://hooks.example.com/x")})
    assert elsewhere.status_code == 400 and json.loads(elsewhere.body)["field"] == "action.url"
    other_secret = {**action(receiver.origin + "/"), "secret": "ssm:/someone/elses"}
    refused = post_task(client, {"run_at": RUN_AT, "action": other_secret})
    assert refused.status_code == 400 and json.loads(refused.body)["field"] == "action.secret"
    not_json = post_task(client, {"run_at": RUN_AT, "action": {**action(receiver.origin + "/"), "body": "{oops"}})
    assert not_json.status_code == 400 and json.loads(not_json.body)["field"] == "action.body"


def test_threads_that_need_the_signing_secret_at_once_wait_for_the_one_reading_it(
        deps: Deps, clock: FakeClock, hooks: Deps) -> None:
    """A batch's webhook tasks run on the executor's threads: one GetParameter a container, not one a thread."""
    ref = f"ssm:{PARAMETER}"
    ssm, reads = deps.clients.ssm, []

    class Watched:
        def get_parameter(self, **kwargs: Any) -> Any:
            reads.append(webhook.secret_lock(deps, ref).locked())  # the others wait on it, then find it cached
            return ssm.get_parameter(**kwargs)

    use_client(deps, "ssm", Watched())
    try:
        assert webhook.secret_value(deps, ref) == KEYS
        assert webhook.secret_value(deps, ref) == KEYS
        assert reads == [True]
        clock.advance(seconds=webhook.SECRET_TTL_SECONDS)
        assert webhook.secret_value(deps, ref) == KEYS and reads == [True, True]  # read again after its TTL
    finally:
        use_client(deps, "ssm", ssm)


def test_the_signing_secret_is_read_once_per_ttl_from_ssm_or_secrets_manager(
        deps: Deps, clock: FakeClock, hooks: Deps) -> None:
    ref = f"ssm:{PARAMETER}"
    use_settings(hooks, task_webhook_secrets=(ref, "secretsmanager:hooks/partner", "ssm:/hooks/nothing"))
    assert webhook.secret_value(deps, ref) == KEYS
    rotated = new_secret()
    deps.clients.ssm.put_parameter(Name=PARAMETER, Value=f"{rotated} {SECRET}", Type="SecureString", Overwrite=True)
    clock.advance(seconds=webhook.SECRET_TTL_SECONDS - 1)
    assert webhook.secret_value(deps, ref) == KEYS  # cached for the container
    clock.advance(seconds=1)
    assert webhook.secret_value(deps, ref) == webhook.signing_keys(rotated) + KEYS
    partner = new_secret()
    deps.clients.secretsmanager.create_secret(Name="hooks/partner", SecretString=partner)
    assert webhook.secret_value(deps, "secretsmanager:hooks/partner") == webhook.signing_keys(partner)
    with pytest.raises(webhook.WebhookRefused, match="does not exist"):
        webhook.secret_value(deps, "ssm:/hooks/nothing")

"""The executor's claim against the API and other workers (docs/executor.md step 3): who wins a race.

A cancel or a move recorded before the claim wins, even after the due message was sent (a lazy task's, with its
item); a worker whose claim was taken over writes nothing over the new owner; GET shows RUNNING only while a
claim is live.  Each test runs at the stage's settings (LOG_LEVEL=INFO) through the app's own handlers under
moto; a race is made at the app's own call boundary (a botocore hook that lets the winner go first, a client
whose call outlives the lease), never by patching our code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks.model import TaskKey, parse_due
from chalicelib.tasks.store import TaskStore
from tests.faults import Faults, WorkerCrash
from tests.fixtures import Aws, FakeClock
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
    return "claimed_at = :now" in str(params.get("UpdateExpression", "")) and "#exec_takeovers = " in str(
        params.get("UpdateExpression", ""))


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


def _is_takeover(params: dict[str, Any]) -> bool:
    return "ADD #exec_takeovers" in str(params.get("UpdateExpression", ""))


def test_a_takeover_lost_to_another_takers_claim_already_stale_sends_the_message_back(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    assert post_task(client, {"id": "standup", "run_at": RUN_AT, "action": EMAIL_ACTION}).status_code == 201
    clock.advance(minutes=5)
    key, due, lease = TaskKey.for_id("standup"), parse_due(RUN_AT), deps.settings.task_claim_lease_seconds
    body = due_body(key, due)
    faults.inject("sesv2.SendEmail", "crash")  # the first worker dies in its action: its claim stays RUNNING
    with pytest.raises(WorkerCrash):
        deliver(client, body)
    clock.advance(seconds=2 * lease + 10)

    def a_taker_whose_clock_is_behind_takes_it_first() -> None:  # its claim is stale already by this clock
        behind = clock.now - timedelta(seconds=lease + 9)
        assert TaskStore(deps).claim(key, due, behind, lease, "a worker whose clock is behind").won

    before_call(deps, "dynamodb.UpdateItem", _is_takeover, a_taker_whose_clock_is_behind_takes_it_first)
    assert deliver(client, body) == set()  # its takeover lost: the claim found is released, not this worker's
    assert emails_sent() == []
    sent_back = [json.loads(sent) for sent, _ in aws.sent(deps.settings.due_queue)]  # not dropped
    assert [(m["pk"], m["due"], m["hops"]) for m in sent_back] == [(key.pk, RUN_AT, 1)]
    record = TaskStore(deps).get_record(key.task_id) or {}
    assert (record["exec_owner"], record["exec_takeovers"]) == ("a worker whose clock is behind", 1)

"""When the executor stops trying: at once for an action that can never succeed, and after TASK_MAX_TAKEOVERS
takeovers for an execution whose every worker died before recording its outcome (docs/executor.md)."""

from __future__ import annotations

import json
from datetime import timedelta

from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks.model import TaskKey, parse_due
from tests.faults import Faults
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.lambda_sim import LambdaSim
from tests.functional.task_support import EMAIL_ACTION, deliver, due_body, emails_sent, get_task, post_task

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now


def test_a_target_refused_at_run_time_is_failed_on_the_first_attempt_with_no_call_and_one_alert(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    queue_url = aws.clients.sqs.create_queue(QueueName="orders")["QueueUrl"]
    action = {"type": "sqs", "queue_url": queue_url, "message": "restock"}
    assert post_task(client, {"id": "restock", "run_at": RUN_AT, "action": action}).status_code == 201
    use_settings(deps, task_action_target_arns=("arn:aws:sqs:us-east-1:123456789012:other-*",))  # changed since
    clock.advance(minutes=10)
    body = due_body(TaskKey.for_id("restock"), parse_due(RUN_AT))
    assert deliver(client, body, ids=["m-1"]) == set()
    assert deliver(client, body, ids=["m-1"]) == set()  # a duplicate delivery changes nothing
    assert aws.drain(queue_url) == []  # the action made no call
    assert clock.slept == 0  # no backoff: nothing was retried
    shown = get_task(client, "restock")
    assert (shown["status"], shown["attempts"]) == ("FAILED", 1)
    assert "TargetNotAllowed" in shown["last_error"] and "TASK_ACTION_TARGET_ARNS" in shown["last_error"]
    [alert] = aws.alerts()
    assert alert["message"]["attempts"] == 1
    [dead] = [json.loads(m["Body"]) for m in aws.drain(deps.settings.task_dlq)]
    assert dead["event_id"] == "m-1"


def test_a_worker_that_dies_after_the_action_every_time_is_taken_over_at_most_the_limit_then_failed_once(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, faults: Faults) -> None:
    limit = deps.settings.task_max_takeovers
    assert post_task(client, {"id": "crashy", "run_at": RUN_AT, "action": EMAIL_ACTION}).status_code == 201
    faults.inject("sesv2.SendEmail", "crash_after", times=1000)  # the email goes, then the worker dies: always
    sim = LambdaSim(deps, client, clock, processor_period=timedelta(hours=1))  # no interval task: few ticks

    def failed() -> bool:
        return bool(get_task(client, "crashy")["status"] == "FAILED")

    # Each takeover waits out TASK_CLAIM_LEASE_SECONDS: three hours is far more than the limit's worth.
    sim.run(until=failed, limit=timedelta(hours=3), idle_step=timedelta(minutes=10))
    sim.run(until=lambda: False, limit=timedelta(minutes=30), idle_step=timedelta(minutes=10))  # nothing more
    assert len(emails_sent()) == limit + 1  # the first claim's run and one per takeover
    shown = get_task(client, "crashy")
    assert (shown["status"], shown["attempts"]) == ("FAILED", limit + 1)
    assert "TASK_MAX_TAKEOVERS" in shown["last_error"]
    [alert] = [a for a in aws.alerts() if a["message"].get("task_id") == "crashy"]
    assert "failed" in alert["subject"]
    [dead] = [json.loads(m["Body"]) for m in aws.drain(deps.settings.task_dlq)]
    assert "TASK_MAX_TAKEOVERS" in dead["reason"]
    assert sim.queue(deps.settings.due_queue).messages == []  # nothing left to deliver

"""A callback's action given the outcome it follows (actions.with_outcome), and which callback an execution runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from chalicelib.tasks import actions
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import Strategy, Task, TaskKey

OUTCOME = {"callback": "on_failure", "task_id": "t", "due": "2026-01-01T00:00:00Z", "attempt": 3,
           "status": "FAILED", "error": "boom"}
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"


def test_the_outcome_goes_in_each_json_object_field_and_in_a_text_that_holds_a_json_object() -> None:
    lam = {"type": "lambda", "function_arn": "arn:aws:lambda:us-east-1:123456789012:function:f", "payload": {"a": 1}}
    assert actions.with_outcome(lam, OUTCOME)["payload"] == {"a": 1, "outcome": OUTCOME}
    sqs = {"type": "sqs", "queue_url": QUEUE, "message": '{"a": 1}'}
    assert json.loads(actions.with_outcome(sqs, OUTCOME)["message"]) == {"a": 1, "outcome": OUTCOME}
    plain = {"type": "sqs", "queue_url": QUEUE, "message": "the nightly job failed"}
    assert actions.with_outcome(plain, OUTCOME) == plain  # not JSON: sent as written
    email = {"type": "email", "to": "a@example.com", "subject": "s", "body": '{"a": 1}'}
    assert json.loads(actions.with_outcome(email, OUTCOME)["body"])["outcome"] == OUTCOME
    get = {"type": "webhook", "url": "https://h.example.com/", "secret": "ssm:/s", "method": "GET"}
    assert actions.with_outcome(get, OUTCOME) == get  # no body to carry it


def test_done_runs_on_success_failed_runs_on_failure_and_nothing_else_runs_one() -> None:
    task = Task(TaskKey.for_id("t"), datetime(2026, 1, 1, tzinfo=UTC), Strategy.EXACT, {"type": "email"},
                on_success={"type": "sqs"}, on_failure={"type": "sns"})
    assert task.callback(State.DONE.value) == ("on_success", {"type": "sqs"})
    assert task.callback(State.FAILED.value) == ("on_failure", {"type": "sns"})
    assert task.callback("RETRYING") is None and task.callback(State.PENDING.value) is None
    assert Task(task.key, task.due, task.strategy, task.action).callback(State.DONE.value) is None


def test_a_callbacks_call_has_a_key_of_its_own() -> None:
    due = datetime(2026, 1, 1, tzinfo=UTC)
    assert actions.Attempt("t", due).key_id == "t"
    assert actions.Attempt("t", due, 1, callback="on_success").key_id == "t#on_success"
    assert actions.execution_name("t#on_success", due) != actions.execution_name("t", due)

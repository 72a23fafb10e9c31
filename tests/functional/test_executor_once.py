"""One write a task for actions whose target drops a repeat (docs/executor.md, "One write"): a Standard state
machine's execution named after the task and its due time, under moto, through the API and the executor.

No claim: the action runs, then one conditional UpdateItem settles it.  A duplicate delivery starts the same
execution again (Step Functions starts it once) and finds it settled; a lost answer of the settle is the
worker's own; a crash between the action and the settle is run again at once (no lease to wait out); a failure
retried later takes the claim; a cancel or a reschedule that lands after the read no longer stops the action,
and is logged and counted.  A task that does not declare ``target_deduplicates`` still claims."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib import metrics as m
from chalicelib.aws import Deps
from chalicelib.tasks import executor, lifecycle
from chalicelib.tasks.actions import execution_name
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import DueMessage, TaskKey, parse_due
from deploy.provision import MAX_RECEIVE_COUNT
from tests.faults import Faults, WorkerCrash
from tests.fixtures import ACCOUNT, Aws, Emitted, FakeClock, moto_aws, use_settings
from tests.functional.task_support import (
    deliver_until_dead_lettered,
    get_item,
    get_task,
    hand_dead_letter_over,
    patch_task,
    post_task,
    record_of,
    use_client,
)

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now
DUE = parse_due(RUN_AT)
WRITES = ("dynamodb.UpdateItem", "dynamodb.PutItem", "dynamodb.TransactWriteItems")


@pytest.fixture(scope="module")
def aws() -> Iterator[Aws]:
    with moto_aws() as world:
        yield world


@pytest.fixture(scope="module")
def machine(aws: Aws) -> str:
    role = aws.clients.session.client("iam", region_name=aws.settings.region).create_role(
        RoleName="once", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    return str(aws.clients.stepfunctions.create_state_machine(
        name="fulfil", roleArn=role, type="STANDARD",
        definition=json.dumps({"StartAt": "Go", "States": {"Go": {"Type": "Pass", "End": True}}}))["stateMachineArn"])


@pytest.fixture
def allowed(deps: Deps, machine: str) -> str:
    use_settings(deps, task_action_target_arns=(
        *deps.settings.task_action_target_arns, f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:*"))
    return machine


def action(machine: str, once: bool = True) -> dict[str, Any]:
    return {"type": "stepfunctions", "state_machine_arn": machine, "input": {"order": 42},
            **({"target_deduplicates": True} if once else {})}


def create(client: Client, task_id: str, machine: str, once: bool = True, **extra: Any) -> str:
    """POST the task due at RUN_AT; its due message."""
    created = post_task(client, {"id": task_id, "run_at": RUN_AT, "action": action(machine, once), **extra})
    assert created.status_code == 201, created.body
    return DueMessage(TaskKey.for_id(task_id), DUE).to_json()


def run(deps: Deps, clock: FakeClock, body: str) -> str:
    clock.now = max(clock.now, DUE)
    return executor.execute(deps, body, "m-1").text


def executions(aws: Aws, machine: str, task_id: str) -> list[str]:
    found = aws.clients.stepfunctions.list_executions(stateMachineArn=machine)["executions"]
    return [e["name"] for e in found if e["name"] == execution_name(task_id, DUE)]


def writes(faults: Faults) -> int:
    return sum(faults.calls[name] for name in WRITES)


def test_a_task_whose_target_drops_a_repeat_costs_one_write_and_a_duplicate_starts_one_execution(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, allowed: str, faults: Faults) -> None:
    body = create(client, "one", allowed)
    before = writes(faults)
    assert run(deps, clock, body) == "done"
    assert writes(faults) - before == 1  # the settle: no claim
    assert run(deps, clock, body) == "skipped: done"  # a duplicate: started again, dropped, found settled
    assert writes(faults) - before == 2  # its settle, refused
    assert faults.calls["states.StartExecution"] == 2
    assert executions(aws, allowed, "one") == [execution_name("one", DUE)]
    shown = get_task(client, "one")
    assert (shown["status"], shown["attempts"], shown["last_result"]["type"]) == ("DONE", 1, "stepfunctions")


def test_a_task_that_does_not_declare_it_or_recurs_still_claims(
        client: Client, deps: Deps, clock: FakeClock, allowed: str, faults: Faults) -> None:
    for task_id, once, extra in (("undeclared", False, {}), ("daily", True, {"recurrence": "rate(1 day)"})):
        body = create(client, task_id, allowed, once, **extra)
        before = writes(faults)
        assert run(deps, clock, body) == "done"
        assert writes(faults) - before >= 2, task_id  # the claim and the settle (and a recurring item's next time)


def test_the_settles_lost_answer_is_its_own_and_a_crash_before_it_runs_the_action_again_at_once(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, allowed: str, faults: Faults) -> None:
    lost = create(client, "lost", allowed)
    faults.inject("dynamodb.UpdateItem", "lost")  # applied, then an error: written again, refused, recognised
    assert run(deps, clock, lost) == "done"
    assert (get_task(client, "lost")["status"], executions(aws, allowed, "lost")) == ("DONE", [
        execution_name("lost", DUE)])

    crashed = create(client, "crashed", allowed)
    faults.inject("states.StartExecution", "crash_after")  # started, then the worker died before its settle
    with pytest.raises(WorkerCrash):
        run(deps, clock, crashed)
    assert lifecycle.state_of(record_of(deps, TaskKey.for_id("crashed"))) is State.PENDING  # nothing held: no lease to wait out
    assert run(deps, clock, crashed) == "done"  # the redelivery starts it again (one execution) and settles
    assert executions(aws, allowed, "crashed") == [execution_name("crashed", DUE)]
    assert get_task(client, "crashed")["attempts"] == 1


def test_a_failure_retried_later_takes_the_claim_and_a_refused_target_fails_dead_lettered_and_alerted(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, allowed: str, faults: Faults) -> None:
    body = create(client, "later", allowed, retry={"max_attempts": 10})
    faults.inject("states.StartExecution", "error", times=5, code="ServiceUnavailable")
    assert run(deps, clock, body) == "retry later"  # 15 s of backoff slept, the sixth attempt 16 s off
    shown = get_task(client, "later")
    assert (shown["status"], shown["attempts"]) == ("PENDING", 5) and shown.get("retry_at")
    [(again, _)] = aws.sent(deps.settings.due_queue)
    assert run(deps, clock, body) == "skipped: retrying"  # a copy of the first message: it leaves the retry be
    assert (get_task(client, "later")["attempts"], get_task(client, "later")["status"]) == (5, "PENDING")
    clock.now = DueMessage.from_json(again).runs_at
    before = writes(faults)
    assert run(deps, clock, again) == "done"
    assert writes(faults) - before == 2  # a retry claims (its attempts counted on) and settles
    assert get_task(client, "later")["attempts"] == 6

    aws.alerts()
    refused = create(client, "refused", allowed)
    faults.inject("states.StartExecution", "error", code="StateMachineDoesNotExist")
    assert run(deps, clock, refused) == "failed"
    shown = get_task(client, "refused")
    assert (shown["status"], shown["attempts"]) == ("FAILED", 1)
    [dead] = aws.drain(deps.settings.task_dlq)
    assert "refused" in dead["Body"]
    [alert] = aws.alerts()
    assert alert["message"]["task_id"] == "refused"
    record = record_of(deps, TaskKey.for_id("refused")) or {}
    assert (record.get("dead_lettered"), record.get("alerted")) == (True, True)
    assert run(deps, clock, refused) == "skipped: failed"  # a duplicate: nothing left to send
    assert aws.drain(deps.settings.task_dlq) == [] and aws.alerts() == []


def test_a_task_dead_lettered_after_its_action_ran_shows_the_deliveries_as_attempts_and_alerts_it_may_have_run(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, allowed: str, faults: Faults) -> None:
    body = create(client, "unsettled", allowed)
    clock.now = DUE
    aws.alerts()
    # Every settle fails with a hard error (after its 5 attempts): each delivery runs the action, records nothing.
    faults.inject("dynamodb.UpdateItem", "error", times=1000, match=lambda p: "exec_owner" in json.dumps(p))
    runs = deliver_until_dead_lettered(client, aws, deps, body)
    faults.calm()
    hand_dead_letter_over(client, aws, deps)
    assert runs == MAX_RECEIVE_COUNT == faults.calls["states.StartExecution"]
    assert executions(aws, allowed, "unsettled") == [execution_name("unsettled", DUE)]  # the target dropped repeats
    shown = get_task(client, "unsettled")
    assert (shown["status"], shown["attempts"]) == ("DEAD_LETTERED", runs)
    assert "may have run" in shown["dead_letter"]["reason"]
    [alert] = aws.alerts()
    assert "may have run" in alert["subject"] and "may have run" in alert["message"]["reason"]


class ChangedBeforeTheAction:
    """The Step Functions client, with an API request landing right before StartExecution: after the executor's
    read, before its action."""

    def __init__(self, real: Any, change: Callable[[], None]) -> None:
        self._real, self._change = real, change

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def start_execution(self, **kwargs: Any) -> Any:
        self._change()
        return self._real.start_execution(**kwargs)


def test_a_cancel_or_reschedule_after_the_read_does_not_stop_the_action_and_is_logged_and_counted(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, allowed: str, emitted: Emitted,
        caplog: pytest.LogCaptureFixture) -> None:
    real = deps.clients.stepfunctions
    later = DUE + timedelta(hours=1)
    changes: dict[str, Callable[[], None]] = {
        "dropped": lambda: _ok(client.http.delete("/tasks/dropped").status_code),
        "moved": lambda: _ok(patch_task(client, "moved", {"run_at": later.isoformat()}).status_code)}
    for task_id, change in changes.items():
        body = create(client, task_id, allowed)
        use_client(deps, "stepfunctions", ChangedBeforeTheAction(real, change))
        outcome = run(deps, clock, body)
        use_client(deps, "stepfunctions", real)
        assert outcome == ("ran after: cancelled" if task_id == "dropped" else "ran after: rescheduled")
        assert executions(aws, allowed, task_id) == [execution_name(task_id, DUE)]  # the action ran

    dropped, moved = get_task(client, "dropped"), get_task(client, "moved")
    assert dropped["status"] == "CANCELLED" and get_item(deps, TaskKey.for_id("dropped")) is None  # not resurrected
    assert (moved["status"], parse_due(moved["run_at"])) == ("PENDING", later)  # runs again at its new time
    assert dropped.get("last_result") is None and moved.get("last_result") is None  # the outcome is not recorded
    deps.metrics.flush()
    assert emitted.total(m.TASKS_RAN_AFTER_CHANGE, Strategy="exact") == 2
    assert sum("the task was changed after it was read" in r.getMessage() for r in caplog.records) == 2


def _ok(status: int) -> None:
    assert status == 200, status


def test_the_api_takes_target_deduplicates_as_a_boolean_on_stepfunctions_and_webhook_actions_only(
        client: Client, deps: Deps, allowed: str) -> None:
    wrong = post_task(client, {"id": "wrong", "run_at": RUN_AT, "action": {**action(allowed),
                                                                            "target_deduplicates": "yes"}})
    assert (wrong.status_code, json.loads(wrong.body)["field"]) == (400, "action.target_deduplicates")
    sqs = {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "message": "m",
           "target_deduplicates": True}
    other = post_task(client, {"id": "other", "run_at": RUN_AT, "action": sqs})
    assert (other.status_code, json.loads(other.body)["field"]) == (400, "action.target_deduplicates")

"""The lambda, eventbridge and stepfunctions actions against moto (Lambda without docker, EventBridge, Step
Functions): what each target receives, through the API and from another program's item, and what each does under
the faults of tests/faults.py: a hard error, a lost response (the target got it), a crash between the action and
the settle.  Step Functions never starts an execution twice; Lambda and EventBridge are at least once, each
repeat carrying the same task and due time (docs/tasks.md)."""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client
from moto.awslambda_simple.models import LambdaSimpleBackend

from chalicelib.aws import Deps
from chalicelib.tasks import executor
from chalicelib.tasks.actions import execution_name
from chalicelib.tasks.model import TaskKey, parse_due
from tests.faults import Faults, WorkerCrash
from tests.fixtures import ACCOUNT, Aws, FakeClock, use_settings
from tests.functional.stream_support import Table, schedule_of, stream
from tests.functional.task_support import due_body, post_task, put_item, state_of

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now
DUE = parse_due(RUN_AT)


@dataclass
class Targets:
    """A function, a bus (its events land in a queue) and a state machine, all allowed as targets."""

    aws: Aws
    function_arn: str
    bus_arn: str
    machine_arn: str
    capture_url: str
    invoked: list[dict[str, Any]] = field(default_factory=list)  # the envelopes the function received
    delivered: list[dict[str, Any]] = field(default_factory=list)  # the events the bus delivered

    def action(self, kind: str) -> dict[str, Any]:
        return {
            "lambda": {"type": "lambda", "function_arn": self.function_arn, "payload": {"order": 42, "lines": [1, 2]}},
            "eventbridge": {"type": "eventbridge", "event_bus_arn": self.bus_arn, "source": "shop.orders",
                            "detail_type": "Order due", "detail": {"order": 42}},
            "stepfunctions": {"type": "stepfunctions", "state_machine_arn": self.machine_arn,
                              "input": {"order": 42}},
        }[kind]

    def events(self) -> list[dict[str, Any]]:
        """Every event the bus delivered so far."""
        self.delivered += [json.loads(m["Body"]) for m in self.aws.drain(self.capture_url)]
        return self.delivered

    def executions(self) -> list[dict[str, Any]]:
        found = self.aws.clients.stepfunctions.list_executions(stateMachineArn=self.machine_arn)["executions"]
        return [dict(execution) for execution in found]

    def received(self, kind: str) -> int:
        """How many times the target got an action so far."""
        if kind == "lambda":
            return len(self.invoked)
        if kind == "eventbridge":
            return len(self.events())
        return len(self.executions())


@pytest.fixture
def targets(aws: Aws, deps: Deps, monkeypatch: pytest.MonkeyPatch) -> Targets:
    clients = aws.clients
    role = clients.session.client("iam", region_name=aws.settings.region).create_role(
        RoleName="downstream", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def handle(event, context):\n    return event\n")
    function_arn = clients.lambda_.create_function(
        FunctionName="billing", Runtime="python3.12", Role=role, Handler="handler.handle",
        Code={"ZipFile": code.getvalue()})["FunctionArn"]
    bus_arn = clients.events.create_event_bus(Name="shop")["EventBusArn"]
    capture_url = clients.sqs.create_queue(QueueName="shop-events")["QueueUrl"]
    capture_arn = clients.sqs.get_queue_attributes(
        QueueUrl=capture_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    clients.events.put_rule(Name="all", EventBusName="shop", EventPattern=json.dumps({"source": ["shop.orders"]}))
    clients.events.put_targets(Rule="all", EventBusName="shop", Targets=[{"Id": "q", "Arn": capture_arn}])
    machine_arn = clients.stepfunctions.create_state_machine(
        name="fulfil", roleArn=role,
        definition=json.dumps({"StartAt": "Go", "States": {"Go": {"Type": "Pass", "End": True}}}))["stateMachineArn"]
    found = Targets(aws, function_arn, bus_arn, machine_arn, capture_url)
    invoke = LambdaSimpleBackend.invoke

    def noted(backend: Any, function_name: str, qualifier: Any, body: Any, *args: Any) -> Any:
        found.invoked.append(json.loads(body))  # what Lambda took for the function (moto's Lambda keeps no list)
        return invoke(backend, function_name, qualifier, body, *args)

    monkeypatch.setattr(LambdaSimpleBackend, "invoke", noted)
    use_settings(deps, task_action_target_arns=(
        *deps.settings.task_action_target_arns, f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:*",
        f"arn:aws:events:us-east-1:{ACCOUNT}:event-bus/*", f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:*"))
    return found


KINDS = ("lambda", "eventbridge", "stepfunctions")
CALLS = {"lambda": "lambda.Invoke", "eventbridge": "events.PutEvents", "stepfunctions": "states.StartExecution"}


def item_task(deps: Deps, task_id: str, action: dict[str, Any]) -> str:
    """Another program's item with ``action`` (a DynamoDB map), due at RUN_AT; its due message."""
    put_item(deps, {"PK": f"TASK#{task_id}", "SK": "TASK", "run_at": RUN_AT, "action": action})
    return due_body(TaskKey.for_id(task_id), DUE)


def run(deps: Deps, clock: FakeClock, body: str) -> str:
    if clock.now < DUE:
        clock.now = DUE
    return executor.execute(deps, body, "m-1").text


# --- what each target receives ------------------------------------------------------------

def test_each_action_reaches_its_target_once_from_the_api_and_from_another_programs_item(
        client: Client, deps: Deps, clock: FakeClock, targets: Targets) -> None:
    created = post_task(client, {"id": "bill", "run_at": RUN_AT, "action": targets.action("lambda")})
    assert created.status_code == 201, created.body
    bodies = [due_body(TaskKey.for_id("bill"), DUE), item_task(deps, "announce", targets.action("eventbridge")),
              item_task(deps, "ship", targets.action("stepfunctions"))]
    for body in bodies:  # each delivered twice: the second finds the execution settled
        assert [run(deps, clock, body), run(deps, clock, body)] == ["done", "skipped: done"]

    assert targets.invoked == [{"task_id": "bill", "due": RUN_AT, "attempt": 1,
                                "payload": {"order": 42, "lines": [1, 2]}}]
    assert state_of(deps, TaskKey.for_id("bill"))["last_result"]["type"] == "lambda"
    [event] = targets.events()
    assert (event["source"], event["detail-type"], event["detail"]) == ("shop.orders", "Order due", {"order": 42})
    assert state_of(deps, TaskKey.for_id("announce"))["last_result"] == {"type": "eventbridge", "event_id": event["id"]}
    [execution] = targets.executions()
    assert execution["name"] == execution_name("ship", DUE) == "ship-20261122T121000Z"
    described = targets.aws.clients.stepfunctions.describe_execution(executionArn=execution["executionArn"])
    assert json.loads(described["input"]) == {"order": 42}
    assert state_of(deps, TaskKey.for_id("ship"))["last_result"] == {
        "type": "stepfunctions", "execution_arn": execution["executionArn"]}


# --- faults at the action's call --------------------------------------------------------------

REFUSED = {"lambda": "ResourceNotFoundException", "eventbridge": "ResourceNotFoundException",
           "stepfunctions": "StateMachineDoesNotExist"}


def test_faults_at_each_actions_call_and_the_answers_that_mean_done_or_failed(
        deps: Deps, clock: FakeClock, targets: Targets, faults: Faults) -> None:
    for kind in KINDS:  # one moto set-up for all (suite time)
        faults_at_the_actions_call(kind, deps, clock, targets, faults)
    an_execution_started_already_is_done_and_a_failed_eventbridge_entry_is_a_failure_by_its_code(
        deps, clock, targets, faults)


def faults_at_the_actions_call(kind: str, deps: Deps, clock: FakeClock, targets: Targets, faults: Faults) -> None:
    twice = 1 if kind == "stepfunctions" else 2  # how many times the target gets an action that ran twice

    # A lost response: applied, then an error; retried, and the target got it.  Step Functions refuses a second
    # start of the same name (one execution); Lambda and EventBridge take the repeat (at least once).
    lost = item_task(deps, f"lost-{kind}", targets.action(kind))
    faults.inject(CALLS[kind], "lost")
    assert run(deps, clock, lost) == "done"
    shown = state_of(deps, TaskKey.for_id(f"lost-{kind}"))
    assert (shown["status"], shown["attempts"]) == ("DONE", 2)
    assert targets.received(kind) == twice
    if kind == "lambda":  # the repeat carries the same task and due time, for the function to drop it
        assert [(e["task_id"], e["due"], e["attempt"]) for e in targets.invoked] == [
            ("lost-lambda", RUN_AT, 1), ("lost-lambda", RUN_AT, 2)]

    # A hard error: retried when transient, the task failed at once (no retry) when the service refused it.
    blip = item_task(deps, f"blip-{kind}", targets.action(kind))
    faults.inject(CALLS[kind], "error", code="ServiceUnavailable")
    assert run(deps, clock, blip) == "done"
    assert state_of(deps, TaskKey.for_id(f"blip-{kind}"))["attempts"] == 2
    assert targets.received(kind) == twice + 1
    gone = item_task(deps, f"gone-{kind}", targets.action(kind))
    faults.inject(CALLS[kind], "error", code=REFUSED[kind])
    assert run(deps, clock, gone) == "failed"
    shown = state_of(deps, TaskKey.for_id(f"gone-{kind}"))
    assert (shown["status"], shown["attempts"]) == ("FAILED", 1)
    assert REFUSED[kind] in shown["last_error"] and "ActionRefused" in shown["last_error"]

    # A crash between the action and the settle: after the claim's lease SQS's redelivery takes it over and
    # runs the action again; Step Functions still starts one execution.
    crash = item_task(deps, f"crash-{kind}", targets.action(kind))
    faults.inject(CALLS[kind], "crash_after")
    with pytest.raises(WorkerCrash):
        run(deps, clock, crash)
    clock.advance(seconds=deps.settings.task_claim_lease_seconds + 1)
    assert run(deps, clock, crash) == "done"
    assert state_of(deps, TaskKey.for_id(f"crash-{kind}"))["status"] == "DONE"
    assert targets.received(kind) == twice + 1 + twice


def an_execution_started_already_is_done_and_a_failed_eventbridge_entry_is_a_failure_by_its_code(
        deps: Deps, clock: FakeClock, targets: Targets, faults: Faults) -> None:
    # AWS answers ExecutionAlreadyExists once the first start's execution closed, or to another input: done.
    targets.aws.clients.stepfunctions.start_execution(
        stateMachineArn=targets.machine_arn, name=execution_name("again", DUE), input="{}")
    executions = len(targets.executions())
    assert run(deps, clock, item_task(deps, "again", targets.action("stepfunctions"))) == "done"
    assert len(targets.executions()) == executions
    assert state_of(deps, TaskKey.for_id("again"))["last_result"]["already_started"] is True

    # PutEvents answers 200 with a failed entry: a failure, retried or permanent as the entry's code says.
    before = targets.received("eventbridge")
    for task_id, code, outcome, attempts, events in (("throttled", "ThrottlingException", "done", 2, before + 1),
                                                     ("forbidden", "NotAuthorizedForSourceException", "failed", 1,
                                                      before + 1)):
        faults.inject("events.PutEvents", "answer", answer={
            "FailedEntryCount": 1, "Entries": [{"ErrorCode": code, "ErrorMessage": "refused"}]})
        assert run(deps, clock, item_task(deps, task_id, targets.action("eventbridge"))) == outcome
        shown = state_of(deps, TaskKey.for_id(task_id))
        assert shown["attempts"] == attempts and targets.received("eventbridge") == events
    assert "EventRefused: PutEvents refused the entry: NotAuthorizedForSourceException" in shown["last_error"]


# --- allowed targets ---------------------------------------------------------------------------

def test_the_apps_own_functions_and_targets_not_allowed_are_refused_by_the_api_the_stream_and_the_executor(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, targets: Targets, faults: Faults) -> None:
    function = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:timekeeper-{deps.settings.stage}"
    refused = [
        ({"type": "lambda", "function_arn": f"{function}-task_executor", "payload": {}}, "action.function_arn"),
        ({"type": "lambda", "function_arn": f"{function}:live", "payload": {}}, "action.function_arn"),
        ({"type": "eventbridge", "event_bus_arn": "arn:aws:events:us-east-1:999999999999:event-bus/theirs",
          "source": "s", "detail_type": "d", "detail": {}}, "action.event_bus_arn"),
        ({"type": "stepfunctions", "state_machine_arn": "arn:aws:states:us-east-1:999999999999:stateMachine:x",
          "input": {}}, "action.state_machine_arn"),
    ]
    for action, field_name in refused:
        response = post_task(client, {"id": "elsewhere", "run_at": RUN_AT, "action": action})
        assert (response.status_code, response.json_body.get("field")) == (400, field_name), response.body
    # Another program's items through the stream: an allowed target is scheduled, an own function dead-lettered.
    use_settings(deps, past_horizon="scheduler")  # "scheduled": a schedule each, as Scheduler's path makes them
    later = (clock.now + timedelta(hours=3)).isoformat()
    table = Table(deps)
    allowed, inward = TaskKey("USER#ada", "bill"), TaskKey("USER#mallory", "inward")
    assert stream(client, table.put({"PK": allowed.pk, "SK": allowed.sk, "run_at": later,
                                     "action": targets.action("lambda")})) == []
    assert schedule_of(deps, allowed) is not None
    assert stream(client, table.put({"PK": inward.pk, "SK": inward.sk, "run_at": later, "action": {
        "type": "lambda", "function_arn": f"{function}-task_stream", "payload": {}}})) == []
    assert schedule_of(deps, inward) is None
    [(letter, _)] = aws.sent(deps.settings.task_dlq)
    assert "action.function_arn is one of this app's own" in json.loads(letter)["reason"]
    # Another program's item naming the API handler, past the stream's check: the executor refuses it, no call.
    body = item_task(deps, "inward", {"type": "lambda", "function_arn": function, "payload": {}})
    assert run(deps, clock, body) == "failed"
    assert "TargetNotAllowed" in state_of(deps, TaskKey.for_id("inward"))["last_error"]
    assert faults.calls["lambda.Invoke"] == 0

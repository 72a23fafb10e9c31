"""The local stage's sample targets of the lambda, eventbridge and stepfunctions actions, made on moto.

``make run`` (and ``make demo``) make, when they are not there yet: an event bus
``sample-bus`` whose rule ``sample-bus-all`` puts every event on the queue ``sample-bus-events`` (to read
what arrived), and a state machine ``sample-machine`` (one Pass state).  The Lambda function
``sample-target`` is a name only: moto's Lambda without docker takes an asynchronous invocation of any
function and answers 202, running nothing, and a function made on moto's server would break its
``/moto-api/data.json`` (moto reads each function's docker client there, which fails without docker), where
``make demo`` reads the emails sent.  The local stage's
TASK_ACTION_TARGET_ARNS allows them (.chalice/config.json); the banner names them and docs/offline.md shows a
task of each.  Only the offline runtime makes them: on AWS the targets are the user's own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from chalicelib.aws import Clients

FUNCTION = "sample-target"
BUS = "sample-bus"
RULE = "sample-bus-all"
EVENTS_QUEUE = "sample-bus-events"
MACHINE = "sample-machine"
ROLE = "sample-target-role"
PASS = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}


@dataclass(frozen=True)
class SampleTargets:
    function_arn: str
    bus_arn: str
    events_queue_url: str
    machine_arn: str

    def banner_line(self) -> str:
        return (f"  targets    lambda {self.function_arn}\n             eventbridge {self.bus_arn} (its events: "
                f"queue {EVENTS_QUEUE})\n             stepfunctions {self.machine_arn}")


def provision_sample_targets(clients: Clients) -> SampleTargets:
    """The sample function, bus (with its rule and queue) and state machine: made, or found when there."""
    role = _role(clients.session.client("iam", region_name=clients.settings.region,
                                        endpoint_url=clients.settings.endpoint_url))
    bus = _bus(clients.events)
    function = bus.replace(":events:", ":lambda:", 1).split(":event-bus/")[0] + f":function:{FUNCTION}"
    return SampleTargets(function, bus, _events_queue(clients), _machine(clients.stepfunctions, role))


def _role(iam: Any) -> str:
    try:
        return str(iam.get_role(RoleName=ROLE)["Role"]["Arn"])
    except iam.exceptions.NoSuchEntityException:
        trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": {
            "Service": ["states.amazonaws.com"]}}]}
        return str(iam.create_role(RoleName=ROLE, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"])


def _bus(events: Any) -> str:
    try:
        return str(events.describe_event_bus(Name=BUS)["Arn"])
    except events.exceptions.ResourceNotFoundException:
        return str(events.create_event_bus(Name=BUS)["EventBusArn"])


def _events_queue(clients: Clients) -> str:
    sqs, events = clients.sqs, clients.events
    url = sqs.create_queue(QueueName=EVENTS_QUEUE)["QueueUrl"]  # idempotent
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name=RULE, EventBusName=BUS, EventPattern=json.dumps({"account": [arn.split(":")[4]]}))
    events.put_targets(Rule=RULE, EventBusName=BUS, Targets=[{"Id": "queue", "Arn": arn}])
    return url


def _machine(sfn: Any, role: str) -> str:
    found = [m["stateMachineArn"] for m in sfn.list_state_machines()["stateMachines"] if m["name"] == MACHINE]
    if found:
        return str(found[0])
    return str(sfn.create_state_machine(name=MACHINE, definition=json.dumps(PASS), roleArn=role)["stateMachineArn"])

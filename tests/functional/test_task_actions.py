"""Each action type run by the executor under moto (what it sends, once), and a new type as one class."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks import actions
from chalicelib.tasks.action_deps import ActionDeps
from chalicelib.tasks.actions import Action, Check, any_text
from chalicelib.tasks.model import TaskKey, parse_due
from tests.fixtures import Aws, FakeClock
from tests.functional.task_support import deliver, due_body, post_task, state_of

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now


def create_and_run_twice(client: Client, clock: FakeClock, task_id: str, action: dict[str, Any]) -> None:
    """POST the task, then deliver its due message twice once it is due."""
    created = post_task(client, {"id": task_id, "run_at": RUN_AT, "action": action})
    assert created.status_code == 201, created.body
    clock.advance(minutes=10)
    body = due_body(TaskKey.for_id(task_id), parse_due(RUN_AT))
    assert deliver(client, body) == set()
    assert deliver(client, body) == set()


def test_an_sqs_action_puts_one_message_in_its_queue_even_when_delivered_twice(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    queue_url = aws.clients.sqs.create_queue(QueueName="orders")["QueueUrl"]
    create_and_run_twice(client, clock, "restock", {"type": "sqs", "queue_url": queue_url, "message": "restock 42"})
    [message] = aws.drain(queue_url)
    assert message["Body"] == "restock 42"
    item = state_of(deps, TaskKey.for_id("restock"))
    assert (item["status"], item["attempts"]) == ("DONE", 1)
    assert item["last_result"] == {"type": "sqs", "message_id": message["MessageId"]}


def test_an_sns_action_reaches_the_topics_subscribers_once_even_when_delivered_twice(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    sns, sqs = aws.clients.sns, aws.clients.sqs
    topic_arn = sns.create_topic(Name="team")["TopicArn"]
    capture = sqs.create_queue(QueueName="team-capture")["QueueUrl"]
    capture_arn = sqs.get_queue_attributes(QueueUrl=capture, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=capture_arn)
    create_and_run_twice(client, clock, "standup", {"type": "sns", "topic_arn": topic_arn, "message": "Standup"})
    [message] = aws.drain(capture)
    envelope = json.loads(message["Body"])
    assert (envelope["TopicArn"], envelope["Message"]) == (topic_arn, "Standup")
    item = state_of(deps, TaskKey.for_id("standup"))
    assert (item["status"], item["attempts"]) == ("DONE", 1)
    assert item["last_result"] == {"type": "sns", "message_id": envelope["MessageId"]}


# --- a new action type is one class -----------------------------------------------------

def _bell_name(value: str) -> str | None:
    return None if value.isascii() and value.replace("-", "").isalpha() and value.islower() \
        else f"must be a lowercase bell name like 'front-door', got {value!r}"


class ChimeAction(Action):
    """A throwaway action type: rings a bell (here: notes it; no AWS call)."""

    type = "chime"
    fields: ClassVar[Mapping[str, Check]] = {"bell": _bell_name, "tune": any_text}
    rung: ClassVar[list[tuple[str, str]]] = []

    def run(self, deps: ActionDeps, spec: dict[str, Any], attempt: actions.Attempt) -> dict[str, Any]:
        self.rung.append((spec["bell"], spec["tune"]))
        return {"type": self.type, "bell": spec["bell"]}


@pytest.fixture
def chime() -> Iterator[type[ChimeAction]]:
    """The chime action, registered for the test only."""
    actions.register(ChimeAction)
    ChimeAction.rung.clear()
    try:
        yield ChimeAction
    finally:
        del actions.ACTIONS[ChimeAction.type]


def test_an_action_type_nobody_registered_is_rejected(client: Client) -> None:
    response = post_task(client, {"run_at": RUN_AT, "action": {"type": "chime", "bell": "front-door", "tune": "ding"}})
    assert (response.status_code, response.json_body["field"]) == (400, "action.type")
    assert response.json_body["error"].endswith("got 'chime'")


@pytest.mark.parametrize(("action", "field", "error"), [
    ({"bell": "Front Door", "tune": "ding"}, "action.bell",
     "action.bell must be a lowercase bell name like 'front-door', got 'Front Door'"),
    ({"bell": "front-door"}, "action.tune", "action.tune is required and must be a non-empty string"),
    ({"bell": "front-door", "tune": "ding", "volume": "11"}, "action.volume",
     "unknown field action.volume for a chime action"),
])
def test_a_registered_action_types_fields_are_validated_by_the_api(
        client: Client, chime: type[ChimeAction], action: dict[str, Any], field: str, error: str) -> None:
    response = post_task(client, {"run_at": RUN_AT, "action": {"type": "chime", **action}})
    assert response.status_code == 400
    assert response.json_body == {"error": error, "field": field}


def test_a_registered_action_type_is_run_once_by_the_executor(
        client: Client, deps: Deps, clock: FakeClock, chime: type[ChimeAction]) -> None:
    create_and_run_twice(client, clock, "doorbell", {"type": "chime", "bell": "front-door", "tune": "ding dong"})
    assert chime.rung == [("front-door", "ding dong")]
    shown = client.http.get("/tasks/doorbell").json_body
    assert (shown["status"], shown["attempts"], shown["last_result"]) == (
        "DONE", 1, {"type": "chime", "bell": "front-door"})
    assert shown["action"] == {"type": "chime", "bell": "front-door", "tune": "ding dong"}


def test_an_action_type_cannot_be_registered_twice(chime: type[ChimeAction]) -> None:
    with pytest.raises(ValueError, match="chime"):
        actions.register(ChimeAction)

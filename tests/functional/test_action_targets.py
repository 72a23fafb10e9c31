"""Tasks' sqs and sns actions send only where the stage allows (TASK_ACTION_TARGET_ARNS, the executor's IAM grant):
the API refuses any other queue or topic, the stream dead-letters an item that names one, the executor never sends."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks.actions import queue_arn_of, target_refusal
from chalicelib.tasks.model import TaskKey, parse_due
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.api_support import table_contents
from tests.functional.source_support import SourceSim, create_table, load_app
from tests.functional.stream_support import Table, schedule_of, stream
from tests.functional.task_support import deliver, due_body, patch_task, post_task, put_item, state_of

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now
FOREIGN_QUEUE = "https://sqs.us-east-1.amazonaws.com/999999999999/theirs"
FOREIGN_TOPIC = "arn:aws:sns:us-east-1:999999999999:theirs"


def sqs(queue_url: str) -> dict[str, str]:
    return {"type": "sqs", "queue_url": queue_url, "message": "m"}


def sns(topic_arn: str) -> dict[str, str]:
    return {"type": "sns", "topic_arn": topic_arn, "message": "m"}


@pytest.mark.parametrize("action, field", [
    (sqs(FOREIGN_QUEUE), "action.queue_url"),
    (sns(FOREIGN_TOPIC), "action.topic_arn"),
    (sqs("https://sqs.eu-west-1.amazonaws.com/123456789012/orders"), "action.queue_url"),  # another region
])
def test_a_queue_or_topic_the_stage_does_not_allow_is_a_400_naming_the_field_and_nothing_is_stored(
        client: Client, deps: Deps, action: dict[str, str], field: str) -> None:
    before = table_contents(deps)
    response = post_task(client, {"id": "elsewhere", "run_at": RUN_AT, "action": action})
    assert response.status_code == 400, response.body
    assert response.json_body["field"] == field
    assert "TASK_ACTION_TARGET_ARNS" in response.json_body["error"]
    assert table_contents(deps) == before


def test_the_apps_own_queues_and_alert_topic_are_refused_even_under_a_wildcard(
        client: Client, aws: Aws, deps: Deps) -> None:
    for action in (sqs(aws.queue_url(deps.settings.due_queue)), sqs(aws.queue_url(deps.settings.task_dlq)),
                   sns(deps.settings.alert_topic_arn)):
        response = post_task(client, {"id": "inject", "run_at": RUN_AT, "action": action})
        assert response.status_code == 400, response.body
        assert "own" in response.json_body["error"]


def test_every_queue_and_topic_the_stage_provisions_is_refused_by_the_api_naming_the_field(
        client: Client, aws: Aws, deps: Deps) -> None:
    """The due DLQ among them: a forged due message there would alert, record or dead-letter a task falsely."""
    settings = deps.settings
    assert settings.due_dlq in settings.own_queues()
    actions = [(sqs(aws.queue_url(q)), "action.queue_url") for q in settings.own_queues()]
    actions += [(sns(t["TopicArn"]), "action.topic_arn") for t in aws.clients.sns.list_topics()["Topics"]
                if t["TopicArn"].rsplit(":", 1)[-1] in settings.own_topics()]
    assert len(actions) == len(settings.own_queues()) + len(settings.own_topics())
    for action, field in actions:
        response = post_task(client, {"id": "forged", "run_at": RUN_AT, "action": action})
        assert response.status_code == 400, (action, response.body)
        assert response.json_body["field"] == field
        assert "this app's own queues and topics" in response.json_body["error"]


def test_a_patch_to_the_due_dead_letter_queue_is_refused_naming_the_field(client: Client, aws: Aws,
                                                                         deps: Deps) -> None:
    queue_url = aws.clients.sqs.create_queue(QueueName="orders")["QueueUrl"]
    assert post_task(client, {"id": "restock", "run_at": RUN_AT, "action": sqs(queue_url)}).status_code == 201
    before = table_contents(deps)
    response = patch_task(client, "restock", {"action": sqs(aws.queue_url(deps.settings.due_dlq))})
    assert response.status_code == 400, response.body
    assert response.json_body["field"] == "action.queue_url"
    assert table_contents(deps) == before


def test_an_item_another_program_wrote_for_the_due_dead_letter_queue_is_dead_lettered_and_never_scheduled(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    forged = due_body(TaskKey.for_id("victim"), clock.now)
    reason = _dead_lettered_once_and_never_scheduled(
        aws, deps, clock, client, "REMINDER#forged", {**sqs(aws.queue_url(deps.settings.due_dlq)), "message": forged})
    assert "action.queue_url" in reason and "own queues and topics" in reason


def _dead_lettered_once_and_never_scheduled(aws: Aws, deps: Deps, clock: FakeClock, client: Client, sk: str,
                                            action: dict[str, Any]) -> str:
    """Stream an item another program wrote with ``action``; check it was neither scheduled nor sent, and was
    dead-lettered once, naming its event; return the dead letter's reason."""
    key = TaskKey("USER#mallory", sk)
    record = Table(deps).put({"PK": key.pk, "SK": key.sk, "run_at": (clock.now + timedelta(hours=3)).isoformat(),
                              "action": action})
    assert stream(client, record) == []
    assert schedule_of(deps, key) is None
    assert aws.sent(deps.settings.due_queue) == []
    [(body, _)] = aws.sent(deps.settings.task_dlq)
    dead = json.loads(body)
    assert dead["event_id"] == record["eventID"]
    return str(dead["reason"])


def test_the_executor_never_sends_to_the_due_dead_letter_queue(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    """An item that reached the executor without the stream's check (written before an upgrade, say)."""
    due_dlq = aws.queue_url(deps.settings.due_dlq)
    key = TaskKey.for_id("forged")
    put_item(deps, {"PK": key.pk, "SK": key.sk, "run_at": RUN_AT, "strategy": "exact",
                    "action": {**sqs(due_dlq), "message": due_body(TaskKey.for_id("victim"), parse_due(RUN_AT))}})
    clock.advance(minutes=10)
    deliver(client, due_body(key, parse_due(RUN_AT)))
    assert aws.drain(due_dlq) == []
    assert "action.queue_url" in str(state_of(deps, key).get("last_error"))
    assert "own queues and topics" in str(state_of(deps, key).get("last_error"))


def test_an_allowed_queue_is_accepted_and_a_patch_to_a_foreign_one_is_refused(client: Client, aws: Aws,
                                                                              deps: Deps) -> None:
    queue_url = aws.clients.sqs.create_queue(QueueName="orders")["QueueUrl"]
    assert post_task(client, {"id": "restock", "run_at": RUN_AT, "action": sqs(queue_url)}).status_code == 201
    before = table_contents(deps)
    response = patch_task(client, "restock", {"action": sqs(FOREIGN_QUEUE)})
    assert response.status_code == 400
    assert response.json_body["field"] == "action.queue_url"
    assert table_contents(deps) == before


def test_with_no_targets_allowed_every_sqs_and_sns_action_is_refused(client: Client, aws: Aws, deps: Deps) -> None:
    use_settings(deps, task_action_target_arns=())
    queue_url = aws.clients.sqs.create_queue(QueueName="orders")["QueueUrl"]
    response = post_task(client, {"id": "restock", "run_at": RUN_AT, "action": sqs(queue_url)})
    assert response.status_code == 400 and response.json_body["field"] == "action.queue_url"


def test_an_item_another_program_wrote_with_a_foreign_queue_is_dead_lettered_once_and_never_scheduled(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    reason = _dead_lettered_once_and_never_scheduled(aws, deps, clock, client, "REMINDER#x", sqs(FOREIGN_QUEUE))
    assert "action.queue_url" in reason and "TASK_ACTION_TARGET_ARNS" in reason


def test_the_executor_never_sends_to_a_queue_the_stage_no_longer_allows(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    queue_url = aws.clients.sqs.create_queue(QueueName="orders")["QueueUrl"]
    assert post_task(client, {"id": "restock", "run_at": RUN_AT, "action": sqs(queue_url)}).status_code == 201
    use_settings(deps, task_action_target_arns=("arn:aws:sqs:us-east-1:123456789012:other-*",))
    clock.advance(minutes=10)
    deliver(client, due_body(TaskKey.for_id("restock"), parse_due(RUN_AT)))
    assert aws.drain(queue_url) == []
    assert "TASK_ACTION_TARGET_ARNS" in str(state_of(deps, TaskKey.for_id("restock")).get("last_error"))


@pytest.mark.parametrize("url, arn", [
    ("https://sqs.us-east-1.amazonaws.com/123456789012/orders", "arn:aws:sqs:us-east-1:123456789012:orders"),
    ("https://eu-west-1.queue.amazonaws.com/123456789012/orders", "arn:aws:sqs:eu-west-1:123456789012:orders"),
    ("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q", "arn:aws-cn:sqs:cn-north-1:123456789012:q"),
    ("http://localhost:5000/123456789012/orders", "arn:aws:sqs:ap-south-1:123456789012:orders"),
])
def test_a_queue_url_is_matched_by_its_arn(url: str, arn: str) -> None:
    assert queue_arn_of(url, "ap-south-1") == arn


@pytest.mark.parametrize("allowed, allowed_or_not", [
    (("arn:aws:sqs:us-east-1:123456789012:orders",), True),
    (("arn:aws:sqs:us-east-1:123456789012:order?",), True),
    (("arn:aws:sqs:*:123456789012:*",), True),
    (("arn:aws:sqs:us-east-1:123456789012:orders-*",), False),
    (("arn:aws:sns:us-east-1:123456789012:*",), False),
    ((), False),
])
def test_targets_match_with_iams_wildcards(allowed: tuple[str, ...], allowed_or_not: bool) -> None:
    action: dict[str, Any] = sqs("https://sqs.us-east-1.amazonaws.com/123456789012/orders")
    assert (target_refusal(action, allowed, "us-east-1") is None) is allowed_or_not


def test_email_actions_need_no_target_allowed() -> None:
    assert target_refusal({"type": "email", "to": "a@b.co"}, (), "us-east-1") is None


def test_a_task_sources_item_whose_action_renders_to_the_due_dead_letter_queue_is_dead_lettered(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = {"outbox": {"table": "outbox", "strategy": "exact", "due_attribute": "due", "key": ["id"],
                          "action": {"type": "sqs", "queue_url": "{queue}", "message": "{message}"}}}
    streams = {"outbox": create_table(deps, "outbox", [("id", "S")])}
    module = load_app(monkeypatch, deps, sources, streams)
    try:
        with Client(module.app) as client:
            due_dlq = aws.queue_url(deps.settings.due_dlq)
            deps.clients.dynamodb.put_item(TableName="outbox", Item=ddb.serialize({
                "id": "forged", "due": int((clock.now + timedelta(minutes=1)).timestamp()), "queue": due_dlq,
                "message": due_body(TaskKey.for_id("victim"), clock.now)}))
            SourceSim(deps, client, clock).run(lambda: False, timedelta(minutes=3))
    finally:
        module.container.use(None)
    assert aws.drain(due_dlq) == []
    [letter] = [json.loads(m["Body"]) for m in aws.drain(deps.settings.task_dlq)]
    assert letter["source"] == "task_stream:outbox"
    assert "action.queue_url" in letter["reason"] and "own queues and topics" in letter["reason"]


EXACT_QUEUE = "arn:aws:sqs:us-east-1:123456789012:orders"
EXACT_TOPIC = "arn:aws:sns:us-east-1:123456789012:news"
NEIGHBOURS = [  # same prefix with a longer or shorter name, another account, another region, another service
    {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/orders-archive"},
    {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/order"},
    {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/999999999999/orders"},
    {"type": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"},
    {"type": "sns", "topic_arn": EXACT_TOPIC + "letter"},
    {"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:999999999999:news"},
    {"type": "sns", "topic_arn": "arn:aws:sns:us-west-2:123456789012:news"},
    {"type": "sns", "topic_arn": EXACT_QUEUE.replace(":sqs:", ":sns:")},
]


def test_an_allow_list_entry_without_a_wildcard_allows_that_target_only(client: Client, deps: Deps) -> None:
    use_settings(deps, task_action_target_arns=(EXACT_QUEUE, EXACT_TOPIC))  # TASK_ACTION_TARGET_ARNS: two exact ARNs
    for i, action in enumerate(NEIGHBOURS):
        response = post_task(client, {"id": f"near-{i}", "run_at": RUN_AT, "action": {**action, "message": "m"}})
        assert response.status_code == 400, (action, response.body)
        assert "TASK_ACTION_TARGET_ARNS" in response.json_body["error"]
        assert response.json_body["field"] == ("action.queue_url" if action["type"] == "sqs" else "action.topic_arn")
    for i, action in enumerate([{"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/orders"},
                                {"type": "sns", "topic_arn": EXACT_TOPIC}]):
        response = post_task(client, {"id": f"exact-{i}", "run_at": RUN_AT, "action": {**action, "message": "m"}})
        assert response.status_code == 201, (action, response.body)

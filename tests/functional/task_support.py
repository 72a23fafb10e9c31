"""Helpers of the task tests: API calls, seed-shaped items, due messages, SES counts, flaky clients."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError
from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks import items
from chalicelib.tasks.model import DueMessage, TaskKey
from deploy.provision import MAX_RECEIVE_COUNT
from local.webhook_receiver import WebhookReceiver
from tests import events
from tests.configured_lambda import ConfiguredLambdaClient
from tests.fixtures import ACCOUNT, Aws, FakeClock, use_settings

JSON = {"Content-Type": "application/json"}
EMAIL_ACTION = {"type": "email", "to": "ada@example.com", "subject": "Standup", "body": "In five minutes."}


def post_task(client: Client, body: dict[str, Any] | str) -> Any:
    raw = body if isinstance(body, str) else json.dumps(body)
    return client.http.post("/tasks", body=raw, headers=JSON)


def get_task(client: Client, task_id: str) -> dict[str, Any]:
    """The task as ``GET /tasks/{id}`` shows it."""
    response = client.http.get(f"/tasks/{task_id}")
    assert response.status_code == 200, response.body
    task: dict[str, Any] = json.loads(response.body)
    return task


def patch_task(client: Client, task_id: str, body: dict[str, Any]) -> Any:
    return client.http.request("PATCH", f"/tasks/{task_id}", body=json.dumps(body).encode(), headers=JSON)


def put_item(deps: Deps, item: dict[str, Any]) -> None:
    deps.clients.dynamodb.put_item(TableName=deps.settings.tasks_table, Item=ddb.serialize(item))


def get_item(deps: Deps, key: TaskKey) -> dict[str, Any] | None:
    found = deps.clients.dynamodb.get_item(TableName=deps.settings.tasks_table, Key=key.dynamo()).get("Item")
    return ddb.deserialize(found) if found else None


def state_of(deps: Deps, key: TaskKey) -> dict[str, Any]:
    """The task as ``GET /tasks/{id}`` shows it (status, attempts, last_result, ...): since the executor keeps a
    task's execution state on its record in the state table, not on the item."""
    from chalicelib.tasks import api
    status, shown = api.show(deps, key.task_id)
    assert status == 200, shown
    return shown


def record_of(deps: Deps, key: TaskKey) -> dict[str, Any] | None:
    """The task's record in the state table (its execution state among the rest)."""
    found = deps.clients.dynamodb.get_item(TableName=deps.settings.state_table, Key=ddb.serialize(
        items.record_key(key.task_id)), ConsistentRead=True).get("Item")
    return ddb.deserialize(found) if found else None


def delete_item(deps: Deps, key: TaskKey) -> None:
    """What TTL (or another program) does to an item."""
    deps.clients.dynamodb.delete_item(TableName=deps.settings.tasks_table, Key=key.dynamo())


def seed_item(due: str, email: str = "ada@example.com", **extra: Any) -> dict[str, Any]:
    """The exact seed's item: PK, SK, REMINDER_TIMESTAMP and the address of the default email."""
    return {"PK": "USER#ada", "SK": "REMINDER#standup", "REMINDER_TIMESTAMP": due, "email": email, **extra}


def lazy_seed_item(expires_at: int, email: str = "grace@example.com") -> dict[str, Any]:
    """The lazy seed's item: keyed by the email, due when its TTL expires."""
    return {"PK": email, "SK": "reminder", "email": email, "expires_at": expires_at}


def due_body(key: TaskKey, due: datetime, snapshot: dict[str, Any] | None = None) -> str:
    """A due message; with ``snapshot`` (a plain item), one carrying that item as a TTL REMOVE's OldImage."""
    image = ddb.binary_as_text(ddb.serialize(snapshot)) if snapshot is not None else None
    return DueMessage(key, due, image).to_json()


def deliver(client: Client, *bodies: str, ids: list[str] | None = None) -> set[str] | None:
    """Invoke the executor with one SQS batch; the ids it reported as failed."""
    records = [events.sqs_record(body, "timekeeper-due", (ids or [])[i] if ids else None)
               for i, body in enumerate(bodies)]
    response = ConfiguredLambdaClient.of(client).invoke("task_executor", events.sqs_event(*records))
    return events.batch_item_failures(response.payload)


def emails_sent() -> list[Any]:
    """Emails moto's SES accepted (SES v2 shares the SES v1 backend)."""
    from moto.ses.models import ses_backends

    return list(ses_backends[ACCOUNT]["us-east-1"].sent_messages)


class FlakySes:
    """An SES v2 client whose send_email fails ``failures`` times, then passes to the real one."""

    def __init__(self, real: Any, failures: int) -> None:
        self._real = real
        self.failures = failures
        self.calls = 0

    def send_email(self, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "try later"}}, "SendEmail")
        return self._real.send_email(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class BrokenReads:
    """A DynamoDB client whose reads of one task key fail (a throttled or failing read): its get_item, and a
    batch_get_item that asks for it."""

    def __init__(self, real: Any, pk: str) -> None:
        self._real = real
        self._pk = pk

    def get_item(self, **kwargs: Any) -> Any:
        if kwargs.get("Key", {}).get("PK", {}).get("S") == self._pk:
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "boom"}}, "GetItem")
        return self._real.get_item(**kwargs)

    def batch_get_item(self, **kwargs: Any) -> Any:
        if self._pk in json.dumps(kwargs.get("RequestItems", {})):
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "boom"}}, "BatchGetItem")
        return self._real.batch_get_item(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def use_client(deps: Deps, service: str, client: Any) -> None:
    """Replace one of the bundle's (lazily built, cached) clients with a wrapper."""
    setattr(deps.clients, service, client)


class FlakySns:
    """An SNS client whose publish fails ``failures`` times, then passes to the real one."""

    def __init__(self, real: Any, failures: int) -> None:
        self._real = real
        self.failures = failures
        self.calls = 0

    def publish(self, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "try later"}}, "Publish")
        return self._real.publish(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class FlakyTransactions:
    """A DynamoDB client whose transact_write_items fails ``failures`` times (not a condition: a 500)."""

    def __init__(self, real: Any, failures: int) -> None:
        self._real = real
        self.failures = failures
        self.calls = 0

    def transact_write_items(self, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "boom"}}, "TransactWriteItems")
        return self._real.transact_write_items(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class StrictConditions:
    """Makes moto's DynamoDB judge conditions as DynamoDB does where moto is lenient: a comparison with a
    NULL (or missing) value is false.  A botocore hook on the bundle's client sees each write's parameters;
    a condition that compares with a NULL value is refused as DynamoDB would, and noted in ``refused``."""

    WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems")

    def __init__(self, deps: Deps) -> None:
        self.refused: list[str] = []
        for operation in self.WRITES:
            deps.clients.dynamodb.meta.events.register(f"provide-client-params.dynamodb.{operation}", self._check)

    def _check(self, params: dict[str, Any], model: Any, **kwargs: Any) -> None:
        ops = [next(iter(op.values())) for op in params["TransactItems"]] if "TransactItems" in params else [params]
        for op in ops:
            condition = op.get("ConditionExpression", "")
            values = op.get("ExpressionAttributeValues", {})
            nulls = [p for p in re.findall(r":\w+", condition) if values.get(p) == {"NULL": True}]
            if nulls:
                self.refused.append(f"{model.name}: {condition} with {nulls} NULL")
                if "TransactItems" in params:
                    raise ClientError({"Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
                                       "CancellationReasons": [{"Code": "ConditionalCheckFailed"}]},
                                      model.name)
                raise ClientError({"Error": {"Code": "ConditionalCheckFailedException", "Message": "failed"}},
                                  model.name)


def deliver_until_dead_lettered(client: Client, aws: Any, deps: Deps, body: str) -> int:
    """Send ``body`` to the due queue and hand it to the executor as Lambda's poller would, every delivery failing,
    until SQS moves it to the due DLQ; then hand that to ``due_dead_letter``. The deliveries made."""
    due_url = aws.queue_url(deps.settings.due_queue)
    aws.clients.sqs.send_message(QueueUrl=due_url, MessageBody=body)
    runs = 0
    for _ in range(MAX_RECEIVE_COUNT + 1):  # SQS moves it after the last one
        for received in aws.clients.sqs.receive_message(
                QueueUrl=due_url, AttributeNames=["All"], VisibilityTimeout=0).get("Messages", []):
            record = events.sqs_record_from_message(received, events.queue_arn(deps.settings.due_queue))
            payload = client.lambda_.invoke("task_executor", events.sqs_event(record)).payload
            assert events.batch_item_failures(payload) == {received["MessageId"]}
            runs += 1
    return runs


def hand_dead_letter_over(client: Client, aws: Any, deps: Deps) -> None:
    """The one message of the due DLQ, handed to ``due_dead_letter``, which must take it."""
    [moved] = aws.clients.sqs.receive_message(QueueUrl=aws.queue_url(deps.settings.due_dlq),
                                              AttributeNames=["All"]).get("Messages", [])
    record = events.sqs_record_from_message(moved, events.queue_arn(deps.settings.due_dlq))
    assert events.batch_item_failures(client.lambda_.invoke("due_dead_letter", events.sqs_event(record)).payload) \
        == set()


# --- webhooks: a receiver on a loopback port, signed with a key from moto's SSM ----------------------------------

WEBHOOK_KEY = b"timekeeper functional tests key"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(WEBHOOK_KEY).decode()
WEBHOOK_PARAMETER = "/hooks/signing"


def webhook_action(url: str, body: str = "{}") -> dict[str, Any]:
    """A webhook action to ``url`` signed with the key in WEBHOOK_PARAMETER."""
    return {"type": "webhook", "url": url, "secret": f"ssm:{WEBHOOK_PARAMETER}", "body": body}


def signed_webhooks(deps: Deps, *origins: str, timeout_seconds: float = 0.2) -> Deps:
    """The stage signs webhooks with WEBHOOK_SECRET (in moto's SSM) and allows loopback and ``origins`` (loopback
    only through these settings, as on the local stage); a call's timeout tiny unless the test needs more."""
    deps.clients.ssm.put_parameter(Name=WEBHOOK_PARAMETER, Value=WEBHOOK_SECRET, Type="SecureString", Overwrite=True)
    return use_settings(deps, task_webhook_origins=origins, task_webhook_secrets=(f"ssm:{WEBHOOK_PARAMETER}",),
                        task_webhook_allow_loopback=True, task_webhook_timeout_seconds=timeout_seconds)


@pytest.fixture
def receiver(clock: FakeClock) -> Iterator[WebhookReceiver]:
    """A Standard Webhooks receiver on a loopback port (local/webhook_receiver.py) that verifies with WEBHOOK_SECRET
    at the test's clock, so a signature made at the FakeClock's time verifies."""
    server = WebhookReceiver(WEBHOOK_SECRET, clock=lambda: clock().timestamp()).start()
    yield server
    server.stop()


@pytest.fixture
def hooks(aws: Aws, deps: Deps, receiver: WebhookReceiver) -> Deps:
    """The stage allows the receiver's origin, loopback and the SSM secret; an earlier test's alerts drained."""
    aws.alerts()
    return signed_webhooks(deps, receiver.origin)

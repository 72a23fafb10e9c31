"""Helpers of the task tests: API calls, seed-shaped items, due messages, SES counts, flaky clients."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError
from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks.model import DueMessage, TaskKey
from tests import events
from tests.fixtures import ACCOUNT

JSON = {"Content-Type": "application/json"}
EMAIL_ACTION = {"type": "email", "to": "ada@example.com", "subject": "Standup", "body": "In five minutes."}


def post_task(client: Client, body: dict[str, Any] | str) -> Any:
    raw = body if isinstance(body, str) else json.dumps(body)
    return client.http.post("/tasks", body=raw, headers=JSON)


def patch_task(client: Client, task_id: str, body: dict[str, Any]) -> Any:
    return client.http.request("PATCH", f"/tasks/{task_id}", body=json.dumps(body).encode(), headers=JSON)


def put_item(deps: Deps, item: dict[str, Any]) -> None:
    deps.clients.dynamodb.put_item(TableName=deps.settings.tasks_table, Item=ddb.serialize(item))


def get_item(deps: Deps, key: TaskKey) -> dict[str, Any] | None:
    found = deps.clients.dynamodb.get_item(TableName=deps.settings.tasks_table, Key=key.dynamo()).get("Item")
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
    return DueMessage(key, due, snapshot).to_json()


def deliver(client: Client, *bodies: str, ids: list[str] | None = None) -> set[str] | None:
    """Invoke the executor with one SQS batch; the ids it reported as failed."""
    records = [events.sqs_record(body, "timekeeper-due", (ids or [])[i] if ids else None)
               for i, body in enumerate(bodies)]
    response = client.lambda_.invoke("task_executor", events.sqs_event(*records))
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
    """A DynamoDB client whose get_item fails for one task key (a throttled or failing read)."""

    def __init__(self, real: Any, pk: str) -> None:
        self._real = real
        self._pk = pk

    def get_item(self, **kwargs: Any) -> Any:
        if kwargs.get("Key", {}).get("PK", {}).get("S") == self._pk:
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "boom"}}, "GetItem")
        return self._real.get_item(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def use_client(deps: Deps, service: str, client: Any) -> None:
    """Replace one of the bundle's (lazily built, cached) clients with a wrapper."""
    setattr(deps.clients, service, client)

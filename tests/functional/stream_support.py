"""Helpers of the stream scheduler and interval processor tests: items, stream records, call counts."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks.model import TaskKey
from tests import events


class Table:
    """Writes items to the tasks table and builds the stream records those writes produce."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self._sequence = itertools.count(300000000000000000000, 100)

    def get(self, key: TaskKey) -> dict[str, Any] | None:
        found = self.deps.clients.dynamodb.get_item(
            TableName=self.deps.settings.tasks_table, Key=key.dynamo(), ConsistentRead=True).get("Item")
        return ddb.deserialize(found) if found else None

    def put(self, item: dict[str, Any]) -> dict[str, Any]:
        """Write ``item``; the INSERT or MODIFY record DynamoDB streams for it."""
        key = TaskKey(item["PK"], item["SK"])
        old = self.get(key)
        self.deps.clients.dynamodb.put_item(TableName=self.deps.settings.tasks_table, Item=ddb.serialize(item))
        return self.record("MODIFY" if old else "INSERT", key, new=item, old=old)

    def delete(self, key: TaskKey, by_ttl: bool = False) -> dict[str, Any]:
        """Delete the item (as a user, or as DynamoDB's TTL); the REMOVE record."""
        old = self.get(key)
        assert old is not None, f"no item {key}"
        self.deps.clients.dynamodb.delete_item(TableName=self.deps.settings.tasks_table, Key=key.dynamo())
        return self.record("REMOVE", key, old=old, by_ttl=by_ttl)

    def record(self, name: str, key: TaskKey, new: dict[str, Any] | None = None,
               old: dict[str, Any] | None = None, by_ttl: bool = False) -> dict[str, Any]:
        return events.stream_record(
            name, ddb.serialize({"PK": key.pk, "SK": key.sk}),
            new_image=ddb.serialize(new) if new is not None else None,
            old_image=ddb.serialize(old) if old is not None else None,
            sequence_number=str(next(self._sequence)), created=self.deps.clock(),
            source_arn=self.deps.settings.tasks_stream_arn or None,
            user_identity=events.TTL_USER_IDENTITY if by_ttl else None)


def stream(client: Client, *records: dict[str, Any]) -> list[str]:
    """Invoke the stream handler with one batch; the sequence numbers it reported as failed, in order."""
    response = client.lambda_.invoke("task_stream", events.stream_event(*records)).payload
    assert isinstance(response, dict) and isinstance(response.get("batchItemFailures"), list), response
    return [f["itemIdentifier"] for f in response["batchItemFailures"]]


class Calls:
    """Counts the AWS calls the bundle's clients make (a botocore before-call hook on each)."""

    def __init__(self, deps: Deps, services: tuple[str, ...] = ("scheduler", "sqs", "dynamodb")) -> None:
        self.counts: Counter[str] = Counter()
        for service in services:
            client = getattr(deps.clients, service)
            client.meta.events.register("before-call", self._count)

    def _count(self, event_name: str, **kwargs: Any) -> None:
        _, service, operation = event_name.split(".", 2)
        self.counts[f"{service}.{operation}"] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def reset(self) -> None:
        self.counts.clear()

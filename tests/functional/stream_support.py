"""Helpers of the stream scheduler and interval processor tests: items, stream records, call counts."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from typing import Any

from botocore.exceptions import ClientError
from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks.model import TaskKey
from chalicelib.tasks.schedules import schedule_name
from tests import events
from tests.fixtures import ACCOUNT


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


class TableStream:
    """The tasks table's own stream in moto (DynamoDB Streams' GetRecords): what the writes since the last
    read really streamed, shaped as Lambda delivers it."""

    def __init__(self, deps: Deps) -> None:
        self.arn = deps.settings.tasks_stream_arn
        self.region = deps.settings.region
        self._streams = deps.clients.session.client("dynamodbstreams", region_name=self.region)
        self._after: str | None = None

    def new_records(self) -> list[dict[str, Any]]:
        if self._nothing_new():
            return []
        [shard] = self._streams.describe_stream(StreamArn=self.arn)["StreamDescription"]["Shards"]
        where: dict[str, Any] = ({"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": self._after}
                                 if self._after else {"ShardIteratorType": "TRIM_HORIZON"})
        iterator = self._streams.get_shard_iterator(StreamArn=self.arn, ShardId=shard["ShardId"], **where)
        records = list(self._streams.get_records(ShardIterator=iterator["ShardIterator"])["Records"])
        if records:
            self._after = records[-1]["dynamodb"]["SequenceNumber"]
        return [events.stream_record_from_api(r, self.arn, self.region) for r in records]

    def _nothing_new(self) -> bool:
        """Whether the read would find no record after the last one read (moto's shard looked at, not asked):
        the fault tests read the stream at every step of a run, mostly to find nothing new."""
        from moto.dynamodb.models import dynamodb_backends

        table = dynamodb_backends[ACCOUNT][self.region].tables.get(self.arn.split("/")[1])
        if table is None or table.stream_shard is None or \
                f"{table.table_arn}/stream/{table.latest_stream_label}" != self.arn:
            return False  # asked, to answer what moto answers
        shard = table.stream_shard
        end = int(shard.starting_sequence_number) + len(shard.items)  # the next record's sequence number
        return (int(self._after) + 1 if self._after else int(shard.starting_sequence_number)) >= end


class InFlight:
    """A client wrapper that measures how many calls of ``operation`` run at once (``peak``).

    The first calls are held until ``expected`` of them are in flight together (at most ``timeout``
    seconds: never, when the code under test runs them concurrently), then for ``grace`` seconds
    more, so that a call beyond ``expected`` would be in flight too and show in ``peak``.
    Waits are on a condition, woken by each arrival: no sleeping."""

    def __init__(self, real: Any, operation: str, expected: int, timeout: float = 5.0, grace: float = 0.2) -> None:
        self._real = real
        self._operation = operation
        self._expected, self._timeout, self._grace = expected, timeout, grace
        self._changed = threading.Condition()
        self._in_flight = 0
        self._held = True
        self.peak = 0
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        if name != self._operation:
            return getattr(self._real, name)
        call = getattr(self._real, name)

        def measured(**kwargs: Any) -> Any:
            with self._changed:
                self.calls += 1
                self._in_flight += 1
                self.peak = max(self.peak, self._in_flight)
                self._changed.notify_all()
                if self._held:
                    self._changed.wait_for(lambda: self.peak >= self._expected, self._timeout)
                    self._changed.wait_for(lambda: self.peak > self._expected, self._grace)
                    self._held = False
            try:
                return call(**kwargs)
            finally:
                with self._changed:
                    self._in_flight -= 1
                    self._changed.notify_all()

        return measured


def schedule_of(deps: Deps, key: TaskKey) -> dict[str, Any] | None:
    """The task's EventBridge Scheduler schedule as GetSchedule returns it, or None if there is none."""
    try:
        return dict(deps.clients.scheduler.get_schedule(Name=schedule_name(key), GroupName=deps.settings.schedule_group))
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ResourceNotFoundException":
            return None
        raise

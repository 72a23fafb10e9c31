"""DynamoDB Time to Live, which moto never applies: expired items are deleted, as a service.

Every table with TTL enabled is scanned about once a second; an item whose TTL
attribute (a Number, epoch seconds) is at least LOCAL_TTL_LAG_SECONDS in the
past is deleted (if its TTL value has not changed meanwhile).  As on AWS, a TTL
value more than five years in the past is ignored.

On AWS the REMOVE record of such a deletion carries the userIdentity
{"type": "Service", "principalId": "dynamodb.amazonaws.com"}.  moto's records
carry none, so the sweeper notes each item it deletes in a ``TtlLedger`` (its
key, its TTL attribute's value and when) and the stream pollers mark the
matching REMOVE record when they read it: same key, an OldImage whose TTL
attribute has the noted value (when the stream carries old images), made at or
after the note.  The note is taken and the delete made under one lock, which
the pollers also take, so a REMOVE by someone else (before the deletion, or of
the item put again since with another TTL) is not mistaken for one by TTL.  A
note is kept 24 hours, the stream's retention: a consumer stuck longer than
that could not read the record anyway.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from local import events
from local.invoker import Clock, Reporter

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

SWEEP_EVERY_SECONDS = 1.0
TTL_SETTINGS_EVERY_SECONDS = 5.0
IGNORED_AFTER = timedelta(days=5 * 365)  # TTL values older than five years are not acted on
NOTE_LIFETIME_SECONDS = 24 * 3600.0  # DynamoDB Streams keeps records 24 h: a note outlives its record
CLOCK_SLACK_SECONDS = 1.0  # stream records carry whole seconds


def expired(ttl_value: Any, now: datetime, lag_seconds: float) -> bool:
    """Whether an item with this TTL attribute value (DynamoDB JSON) is deleted at ``now``."""
    if not isinstance(ttl_value, dict) or "N" not in ttl_value:
        return False  # only Numbers are TTL values
    try:
        seconds = Decimal(ttl_value["N"])
    except InvalidOperation:
        return False
    now_seconds = Decimal(str(now.timestamp()))
    too_old = Decimal(str((now - IGNORED_AFTER).timestamp()))
    return too_old <= seconds <= now_seconds - Decimal(str(lag_seconds))


def _same_number(a: Any, b: Any) -> bool:
    try:
        return isinstance(a, Mapping) and isinstance(b, Mapping) and Decimal(a["N"]) == Decimal(b["N"])
    except (KeyError, TypeError, InvalidOperation):
        return False


@dataclass
class _Note:
    waiting: set[int]
    noted_at: float        # epoch seconds, just before the delete
    attribute: str = ""    # the table's TTL attribute and the deleted item's value of it
    value: Any = None

    def matches(self, old_image: Mapping[str, Any] | None, created: float | None) -> bool:
        if created is not None and created < math.floor(self.noted_at) - CLOCK_SLACK_SECONDS:
            return False  # a REMOVE made before this deletion
        if old_image is None or not self.attribute:
            return True   # KEYS_ONLY / NEW_IMAGE streams: the key and the time are all there is
        return _same_number(old_image.get(self.attribute), self.value)


@dataclass
class TtlLedger:
    """Which REMOVE records came from TTL: one note per deletion, claimed once by each stream consumer."""

    _lock: threading.RLock = field(default_factory=threading.RLock)
    _consumers: dict[str, set[int]] = field(default_factory=dict)
    _notes: dict[tuple[str, str], list[_Note]] = field(default_factory=dict)
    _ids: Iterator[int] = field(default_factory=itertools.count)
    wall: Callable[[], float] = time.time

    def subscribe(self, table: str) -> int:
        with self._lock:
            consumer = next(self._ids)
            self._consumers.setdefault(table, set()).add(consumer)
            return consumer

    def deleting(self, table: str, key: str, attribute: str = "", value: Any = None) -> _Deletion:
        """Hold the ledger while deleting ``key`` (whose TTL ``attribute`` is ``value``); ``done()``
        records it as a TTL deletion."""
        return _Deletion(self, table, key, attribute, value)

    def _note(self, table: str, key: str, noted_at: float, attribute: str, value: Any) -> None:
        consumers = self._consumers.get(table, set())
        if consumers:
            self._notes.setdefault((table, key), []).append(_Note(set(consumers), noted_at, attribute, value))

    def claim(self, consumer: int, table: str, key: str, *, old_image: Mapping[str, Any] | None = None,
              created: float | None = None) -> bool:
        """True when the REMOVE of ``key`` that ``consumer`` just read (its OldImage, its
        ApproximateCreationDateTime in epoch seconds) was a TTL deletion."""
        with self._lock:
            notes = self._notes.get((table, key), [])
            for note in notes:
                if consumer in note.waiting and note.matches(old_image, created):
                    note.waiting.discard(consumer)
                    if not note.waiting:
                        notes.remove(note)
                    if not notes:
                        self._notes.pop((table, key), None)
                    return True
            return False

    def forget_old(self) -> None:
        with self._lock:
            cutoff = self.wall() - NOTE_LIFETIME_SECONDS
            for ident in list(self._notes):
                self._notes[ident] = [n for n in self._notes[ident] if n.noted_at >= cutoff]
                if not self._notes[ident]:
                    del self._notes[ident]


class _Deletion:
    def __init__(self, ledger: TtlLedger, table: str, key: str, attribute: str, value: Any) -> None:
        self.ledger, self.table, self.key = ledger, table, key
        self.attribute, self.value = attribute, value
        self.deleted = False
        self.started = 0.0

    def __enter__(self) -> _Deletion:
        self.ledger._lock.acquire()
        self.started = self.ledger.wall()
        return self

    def done(self) -> None:
        self.deleted = True

    def __exit__(self, *exc: object) -> None:
        try:
            if self.deleted:
                self.ledger._note(self.table, self.key, self.started, self.attribute, self.value)
        finally:
            self.ledger._lock.release()


@dataclass
class _TtlTable:
    name: str
    attribute: str
    key_names: list[str]


class TtlSweeper:
    def __init__(self, dynamodb: DynamoDBClient, ledger: TtlLedger, reporter: Reporter, clock: Clock, *,
                 lag_seconds: float) -> None:
        self.dynamodb = dynamodb
        self.ledger = ledger
        self.reporter = reporter
        self.clock = clock
        self.lag_seconds = lag_seconds
        self.tables: list[_TtlTable] = []
        self._tables_read_at = -TTL_SETTINGS_EVERY_SECONDS
        self.deleted = 0

    @property
    def name(self) -> str:
        return "ttl"

    def describe(self) -> str:
        return f"DynamoDB TTL: expired items deleted {self.lag_seconds:g}s after their time"

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(SWEEP_EVERY_SECONDS):
            try:
                self.sweep()
            except (ClientError, BotoCoreError) as exc:
                self.reporter.line(f"ttl: sweep failed: {exc}")

    def _ttl_tables(self) -> list[_TtlTable]:
        if time.monotonic() - self._tables_read_at < TTL_SETTINGS_EVERY_SECONDS:
            return self.tables
        found: list[_TtlTable] = []
        for page in self.dynamodb.get_paginator("list_tables").paginate():
            for name in page.get("TableNames", []):
                try:
                    ttl = self.dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
                    if ttl.get("TimeToLiveStatus") != "ENABLED" or not ttl.get("AttributeName"):
                        continue
                    schema = self.dynamodb.describe_table(TableName=name)["Table"]["KeySchema"]
                except ClientError:
                    continue  # deleted meanwhile
                found.append(_TtlTable(name, ttl["AttributeName"], [k["AttributeName"] for k in schema]))
        self.tables, self._tables_read_at = found, time.monotonic()
        self.ledger.forget_old()
        return found

    def sweep(self) -> int:
        """Delete every expired item now; returns how many."""
        count = 0
        for table in self._ttl_tables():
            now = self.clock()
            for item in self._candidates(table, now):
                if self._delete(table, item, now):
                    count += 1
        self.deleted += count
        return count

    def _candidates(self, table: _TtlTable, now: datetime) -> Iterator[dict[str, Any]]:
        names = {f"#k{i}": n for i, n in enumerate(table.key_names)}
        names["#ttl"] = table.attribute
        kwargs: dict[str, Any] = {
            "TableName": table.name, "ProjectionExpression": ", ".join(names),
            "ExpressionAttributeNames": names, "FilterExpression": "#ttl <= :cutoff",
            "ExpressionAttributeValues": {":cutoff": {"N": str(int(now.timestamp() - self.lag_seconds))}},
        }
        while True:
            page = self.dynamodb.scan(**kwargs)
            for item in page.get("Items", []):
                if expired(item.get(table.attribute), now, self.lag_seconds):
                    yield dict(item)
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _delete(self, table: _TtlTable, item: dict[str, Any], now: datetime) -> bool:
        key = {k: item[k] for k in table.key_names}
        with self.ledger.deleting(table.name, events.item_key(key), table.attribute,
                                  item[table.attribute]) as deletion:
            try:
                self.dynamodb.delete_item(
                    TableName=table.name, Key=key, ConditionExpression="#ttl = :seen",
                    ExpressionAttributeNames={"#ttl": table.attribute},
                    ExpressionAttributeValues={":seen": item[table.attribute]})
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                    return False  # changed or deleted meanwhile
                raise
            deletion.done()
        self.reporter.line(f"{'ttl':<24} {'dynamodb':<9} deleted {table.name} {events.item_key(key)} "
                           f"(expired at {item[table.attribute]['N']})")
        return True

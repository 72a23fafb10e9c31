"""DynamoDB Time to Live, which moto never applies: expired items are deleted, as a service.

About once a second, every item of a table with TTL enabled whose TTL attribute
(a Number, epoch seconds) is at least LOCAL_TTL_LAG_SECONDS in the past is
deleted (if its TTL value has not changed meanwhile).  As on AWS, a TTL value
more than five years in the past is ignored.

The sweeper does not read whole tables each second (a Scan of 10,000 items takes
moto seconds): it keeps a ``TtlIndex``, each item's TTL value in a heap by time,
and deletes what the heap says is due.  The index learns items from a write feed
(``moto_speed.watch_writes``: moto runs in this process and announces every
item write), and a table is scanned once, when its TTL is first seen enabled, for
the items written before.  Without a feed (moto elsewhere), tables are scanned
again, at most every FALLBACK_SCAN_FACTOR times as long as a scan takes.

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

import heapq
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

from deploy import lambda_events as events
from local.invoker import Clock, Reporter

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

SWEEP_EVERY_SECONDS = 1.0
TTL_SETTINGS_EVERY_SECONDS = 5.0
IGNORED_AFTER = timedelta(days=5 * 365)  # TTL values older than five years are not acted on
NOTE_LIFETIME_SECONDS = 24 * 3600.0  # DynamoDB Streams keeps records 24 h: a note outlives its record
CLOCK_SLACK_SECONDS = 1.0  # stream records carry whole seconds
FALLBACK_SCAN_FACTOR = 10.0  # without a write feed: a table is scanned again after 10x the last scan's time

# subscribe(listener) -> unsubscribe; listener(table, key, attribute(name)) after each item write
WriteListener = Callable[[str, dict[str, Any], Callable[[str], Any]], None]
WriteFeed = Callable[[WriteListener], Callable[[], None]]


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


def ttl_seconds(ttl_value: Any) -> float | None:
    """A TTL attribute's value (DynamoDB JSON) in epoch seconds; None when it is not a Number."""
    if not isinstance(ttl_value, dict) or "N" not in ttl_value:
        return None
    try:
        return float(Decimal(ttl_value["N"]))
    except (InvalidOperation, ValueError, TypeError):
        return None


class TtlIndex:
    """Each known item's TTL value, per table, with a heap of (epoch seconds, key) to find the due ones.

    A heap entry whose item was written again with another value (or deleted) since is skipped when it
    comes up; the heap is rebuilt when such entries outnumber the items."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heaps: dict[str, list[tuple[float, str]]] = {}
        self._current: dict[str, dict[str, tuple[dict[str, Any], Any]]] = {}

    def note(self, table: str, key: Mapping[str, Any], value: Any, *, unless_known: bool = False) -> None:
        """Item ``key`` of ``table`` now has TTL attribute ``value`` (None: none, or the item is gone).
        ``unless_known``: only if nothing newer was noted for it (a scan's page is older than the feed)."""
        ident = events.item_key(key)
        seconds = ttl_seconds(value)
        with self._lock:
            current = self._current.setdefault(table, {})
            if unless_known and ident in current:
                return
            if seconds is None:
                current.pop(ident, None)
                return
            current[ident] = (dict(key), value)
            heap = self._heaps.setdefault(table, [])
            heapq.heappush(heap, (seconds, ident))
            if len(heap) > 2 * len(current) + 1000:
                self._heaps[table] = [(s, i) for i, (_, v) in current.items() if (s := ttl_seconds(v)) is not None]
                heapq.heapify(self._heaps[table])

    def due(self, table: str, cutoff: float) -> list[tuple[dict[str, Any], Any]]:
        """(key, TTL value) of the items whose TTL is at or before ``cutoff``, each once: taken off the heap
        (``note`` them again to keep them)."""
        found: list[tuple[dict[str, Any], Any]] = []
        with self._lock:
            heap, current = self._heaps.get(table, []), self._current.get(table, {})
            while heap and heap[0][0] <= cutoff:
                seconds, ident = heapq.heappop(heap)
                entry = current.get(ident)
                if entry is not None and ttl_seconds(entry[1]) == seconds:
                    found.append(entry)
        return found

    def discard(self, table: str, key: Mapping[str, Any], value: Any) -> None:
        """Forget ``key`` if its TTL value is still ``value`` (its delete found it changed or gone)."""
        ident = events.item_key(key)
        with self._lock:
            current = self._current.get(table, {})
            entry = current.get(ident)
            if entry is not None and entry[1] == value:
                del current[ident]

    def forget(self, table: str) -> None:
        with self._lock:
            self._heaps.pop(table, None)
            self._current.pop(table, None)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(c) for c in self._current.values())


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
                 lag_seconds: float, writes: WriteFeed | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.dynamodb = dynamodb
        self.ledger = ledger
        self.reporter = reporter
        self.clock = clock
        self.lag_seconds = lag_seconds
        self.monotonic = monotonic
        self.tables: list[_TtlTable] = []
        self.index = TtlIndex()
        self.scans = 0                               # Scan calls made (pages)
        self._watched: dict[str, str] = {}           # table -> TTL attribute, as the write feed is read
        self._scanned: dict[str, tuple[str, float, float]] = {}  # table -> (attribute, scanned at, seconds)
        self._tables_read_at = -math.inf
        self._writes = writes
        self._unsubscribe: Callable[[], None] | None = None
        self.deleted = 0

    @property
    def name(self) -> str:
        return "ttl"

    def describe(self) -> str:
        return f"DynamoDB TTL: expired items deleted {self.lag_seconds:g}s after their time"

    def run(self, stop: threading.Event) -> None:
        self.listen()
        try:
            while not stop.wait(SWEEP_EVERY_SECONDS):
                try:
                    self.sweep()
                except (ClientError, BotoCoreError) as exc:
                    self.reporter.line(f"ttl: sweep failed: {exc}")
        finally:
            self.close()

    def listen(self) -> None:
        """Follow the write feed (before any scan: a write is either in the feed or in the scan)."""
        if self._writes is not None and self._unsubscribe is None:
            self._unsubscribe = self._writes(self._written)

    def close(self) -> None:
        """Stop listening to the write feed."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _written(self, table: str, key: dict[str, Any], attribute: Callable[[str], Any]) -> None:
        """The write feed's listener (called in moto's request thread: cheap, never an AWS call)."""
        name = self._watched.get(table)
        if name:
            self.index.note(table, key, attribute(name))

    def _ttl_tables(self) -> list[_TtlTable]:
        if self.monotonic() - self._tables_read_at < TTL_SETTINGS_EVERY_SECONDS:
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
        self.tables, self._tables_read_at = found, self.monotonic()
        self._watched = {t.name: t.attribute for t in found}  # the feed notes these tables' writes from now on
        for gone in set(self._scanned) - set(self._watched):
            del self._scanned[gone]
            self.index.forget(gone)
        self.ledger.forget_old()
        return found

    def sweep(self) -> int:
        """Delete every expired item now; returns how many."""
        count = 0
        for table in self._ttl_tables():
            self._learn(table)
            now = self.clock()
            cutoff = now.timestamp() - self.lag_seconds
            for key, value in self.index.due(table.name, cutoff):
                if not expired(value, now, self.lag_seconds):
                    continue  # more than five years old: never acted on
                try:
                    if self._delete(table, {**key, table.attribute: value}, now):
                        count += 1
                    else:
                        self.index.discard(table.name, key, value)  # changed or gone: the feed or a scan says
                except (ClientError, BotoCoreError):
                    self.index.note(table.name, key, value)  # tried again at the next sweep
                    raise
        self.deleted += count
        return count

    def _learn(self, table: _TtlTable) -> None:
        """Scan ``table`` into the index: once when its TTL is first seen enabled (or its attribute changed),
        and, without a write feed, again once the last scan is FALLBACK_SCAN_FACTOR scans' time old."""
        scanned = self._scanned.get(table.name)
        if scanned is not None and scanned[0] == table.attribute and (
                self._writes is not None
                or self.monotonic() - scanned[1] < max(SWEEP_EVERY_SECONDS, FALLBACK_SCAN_FACTOR * scanned[2])):
            return
        self.index.forget(table.name)
        began = self.monotonic()
        for item in self._items(table):
            key = {k: item[k] for k in table.key_names}
            self.index.note(table.name, key, item.get(table.attribute), unless_known=True)
        self._scanned[table.name] = (table.attribute, self.monotonic(), self.monotonic() - began)

    def _items(self, table: _TtlTable) -> Iterator[dict[str, Any]]:
        """Every item of ``table`` that has its TTL attribute: its key and that attribute."""
        names = {f"#k{i}": n for i, n in enumerate(table.key_names)}
        names["#ttl"] = table.attribute
        kwargs: dict[str, Any] = {
            "TableName": table.name, "ProjectionExpression": ", ".join(names),
            "ExpressionAttributeNames": names, "FilterExpression": "attribute_exists(#ttl)",
        }
        while True:
            self.scans += 1
            page = self.dynamodb.scan(**kwargs)
            for item in page.get("Items", []):
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
        if self._writes is None:
            self.index.note(table.name, key, None)
        self.reporter.line(f"{'ttl':<24} {'dynamodb':<9} deleted {table.name} {events.item_key(key)} "
                           f"(expired at {item[table.attribute]['N']})")
        return True

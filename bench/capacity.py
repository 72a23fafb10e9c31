"""DynamoDB request units and storage as AWS bills them, worked out from the items themselves: the meter the cost
bench (P4) hooks on the app's DynamoDB client.

Writes (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html): a write unit
per 1 KB of the larger of the item before and after, two in a transaction; a write whose condition fails still
costs the existing item's units (at least one), and changes no index.  Every secondary index the table has
(read from DescribeTable, never a kept list) costs its own write units per 1 KB of index entry
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html#GSI.ThroughputConsiderations.Writes):
an item newly in the index (every key attribute of the index present) is a put of its entry, an item leaving it
a delete, a change of the index's key attributes a delete and a put, a change of a projected attribute an update
(the larger entry), and a write that changes none of them costs the index nothing.  An index's writes are
standard ones, in a transaction too (the transaction's changes reach the indexes after it).

Reads: a unit per 4 KB strongly consistent, half eventually consistent, two in a transaction; a GetItem that
finds nothing costs the minimum; BatchGetItem prices each item as a GetItem at its table's ``ConsistentRead``;
a Query or Scan the sum of the items (or index entries) it evaluated, rounded up to 4 KB once.  Sizes are the
whole item's (or entry's), whatever a projection returns.

Storage: an item's size plus 100 bytes, and each index entry's size plus 100 bytes
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.aws_limits import item_size

Item = Mapping[str, Any]  # DynamoDB JSON

WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096
#: DynamoDB's storage overhead per item and per index entry (bytes).
ENTRY_OVERHEAD_BYTES = 100
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"})
READS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})


def units(size: int, per: int) -> int:
    """Units of ``size`` bytes at ``per`` bytes a unit: rounded up, at least one."""
    return max(1, math.ceil(size / per))


@dataclass(frozen=True)
class Index:
    """A secondary index: its key attributes, and what it projects (KEYS_ONLY, INCLUDE with ``non_key``, ALL)."""

    name: str
    keys: tuple[str, ...]
    projection: str
    non_key: tuple[str, ...] = ()

    def entry(self, item: Item | None, table_keys: Iterable[str]) -> dict[str, Any] | None:
        """The index entry of ``item``, or None when the item is not in the index (absent, or sparse: a key
        attribute of the index missing)."""
        if not item or any(name not in item for name in self.keys):
            return None
        if self.projection == "ALL":
            return dict(item)
        kept = {*self.keys, *table_keys, *(self.non_key if self.projection == "INCLUDE" else ())}
        return {name: value for name, value in item.items() if name in kept}


@dataclass(frozen=True)
class Table:
    """A table's primary key attributes and secondary indexes, as DescribeTable answers."""

    name: str
    keys: tuple[str, ...]
    indexes: tuple[Index, ...]

    @classmethod
    def described(cls, description: Mapping[str, Any]) -> Table:
        indexes = []
        for index in [*description.get("GlobalSecondaryIndexes", []), *description.get("LocalSecondaryIndexes", [])]:
            projection = index.get("Projection", {})
            indexes.append(Index(index["IndexName"], tuple(k["AttributeName"] for k in index["KeySchema"]),
                                 projection.get("ProjectionType", "ALL"), tuple(projection.get("NonKeyAttributes", ()))))
        return cls(description["TableName"], tuple(k["AttributeName"] for k in description["KeySchema"]),
                   tuple(indexes))

    def key(self, item: Item) -> dict[str, Any]:
        return {name: item[name] for name in self.keys if name in item}

    def index(self, name: str) -> Index:
        return next(i for i in self.indexes if i.name == name)


def index_write_units(index: Index, table_keys: Iterable[str], before: Item | None, after: Item | None) -> int:
    """Write units an index pays for a write that turned ``before`` into ``after`` (None: no item). Pure."""
    keys = tuple(table_keys)
    old, new = index.entry(before, keys), index.entry(after, keys)
    if old == new:
        return 0  # not in the index before or after, or its entry unchanged
    if old is None or new is None:
        return units(item_size(new or old or {}), WRITE_UNIT_BYTES)  # a put, or a delete
    if any(old[name] != new[name] for name in index.keys):
        return units(item_size(old), WRITE_UNIT_BYTES) + units(item_size(new), WRITE_UNIT_BYTES)  # moved
    return units(max(item_size(old), item_size(new)), WRITE_UNIT_BYTES)  # a projected attribute changed


def write_units(table: Table, before: Item | None, after: Item | None, *, transactional: bool = False,
                failed: bool = False) -> tuple[int, int]:
    """(table, indexes) write units of one item's write, from its images before and after. Pure."""
    base = units(max(item_size(before or {}), item_size(after or {})), WRITE_UNIT_BYTES)
    base *= 2 if transactional else 1
    if failed:
        return base, 0
    return base, sum(index_write_units(index, table.keys, before, after) for index in table.indexes)


def stored_bytes(table: Table, item: Item | None) -> int:
    """What an item takes in storage: its size and each of its index entries', 100 bytes overhead each. Pure."""
    if not item:
        return 0
    entries = [index.entry(item, table.keys) for index in table.indexes]
    return sum(item_size(e) + ENTRY_OVERHEAD_BYTES for e in [item, *entries] if e is not None)


def read_units(size: int, consistent: bool) -> float:
    return (1.0 if consistent else 0.5) * units(size, READ_UNIT_BYTES)


_TOKEN = re.compile(r"[#:][A-Za-z0-9_]+")


def unfiltered(params: Mapping[str, Any]) -> dict[str, Any]:
    """A Query's or Scan's parameters without what only narrows its answer (filter, projection, Select): the
    items it evaluated, as they stand (the names and values only those used dropped too). Pure."""
    kept = {k: v for k, v in params.items() if k not in (
        "FilterExpression", "ProjectionExpression", "Select", "AttributesToGet", "QueryFilter", "ScanFilter",
        "ConditionalOperator", "ReturnConsumedCapacity", "ExpressionAttributeNames", "ExpressionAttributeValues")}
    used = set(_TOKEN.findall(str(params.get("KeyConditionExpression", ""))))
    for field in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
        values = {k: v for k, v in params.get(field, {}).items() if k in used}
        if values:
            kept[field] = values
    return kept


class Meter:
    """The write and read units of the calls a DynamoDB client makes, from the items they touch: ``attach`` it to
    the client; items and tables are read through ``reader`` (another client, not counted).  ``wrap`` wraps each
    hook (the bench uses it to keep the meter's own time out of the handler's)."""

    def __init__(self, reader: Any, wrap: Callable[[Any], Any] = lambda hook: hook) -> None:
        self.write_units = 0.0
        self.index_write_units = 0.0  # of write_units, what the indexes cost
        self.read_units = 0.0
        self._reader, self._wrap = reader, wrap
        self._tables: dict[str, Table] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    def attach(self, client: Any) -> Meter:
        client.meta.events.register("provide-client-params.dynamodb.*", self._wrap(self._before))
        client.meta.events.register("after-call.dynamodb.*", self._wrap(self._after))
        return self

    def table(self, name: str) -> Table:
        with self._lock:
            found = self._tables.get(name)
        if found is None:
            found = Table.described(self._reader.describe_table(TableName=name)["Table"])
            with self._lock:
                self._tables[name] = found
        return found

    def _item(self, table: str, key: Item) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._reader.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
        return found

    def _writes(self, name: str, params: Mapping[str, Any]) -> list[tuple[str, dict[str, Any], bool]]:
        """(table, key, transactional) of each item a write call touches."""
        def key_of(table: str, op: Mapping[str, Any]) -> dict[str, Any]:
            return self.table(table).key(op["Item"]) if "Item" in op else dict(op["Key"])

        if name in ("PutItem", "UpdateItem", "DeleteItem"):
            return [(params["TableName"], key_of(params["TableName"], params), False)]
        if name == "TransactWriteItems":
            return [(op["TableName"], key_of(op["TableName"], op), True)
                    for entry in params["TransactItems"] for op in entry.values()]
        return [(table, key_of(table, request.get("PutRequest") or request["DeleteRequest"]), False)
                for table, requests in params["RequestItems"].items() for request in requests]

    def _before(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self._local.params = params
        if model.name in WRITES:
            self._local.before = [(table, key, transactional, self._item(table, key))
                                  for table, key, transactional in self._writes(model.name, params)]

    def _after(self, http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        params: dict[str, Any] = getattr(self._local, "params", {})
        if model.name in WRITES:
            self._written(model.name, parsed, getattr(self._local, "before", []))
        elif model.name in READS and http_response.status_code < 300:
            units_read = self._read(model.name, params, parsed)
            with self._lock:
                self.read_units += units_read

    def _written(self, name: str, parsed: Mapping[str, Any], touched: list[Any]) -> None:
        code = str(parsed.get("Error", {}).get("Code", ""))
        if code and code not in ("ConditionalCheckFailedException", "TransactionCanceledException"):
            return  # refused before any write (validation, throttling): no units
        unprocessed = [request.get("PutRequest") or request["DeleteRequest"]
                       for table, requests in parsed.get("UnprocessedItems", {}).items() for request in requests]
        base = indexes = 0
        for table_name, key, transactional, before in touched:
            table = self.table(table_name)
            if any(table.key(r.get("Item") or r.get("Key") or {}) == key for r in unprocessed):
                continue  # BatchWriteItem left it: not written
            if code:  # the condition failed (the whole transaction, cancelled): the item as it is, no index
                b, i = write_units(table, before, before, transactional=transactional, failed=True)
            else:
                b, i = write_units(table, before, self._item(table_name, key), transactional=transactional)
            base, indexes = base + b, indexes + i
        with self._lock:
            self.write_units += base + indexes
            self.index_write_units += indexes

    def _read(self, name: str, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> float:
        if name == "GetItem":
            item = parsed.get("Item")
            if item is not None and ("ProjectionExpression" in params or "AttributesToGet" in params):
                item = self._item(params["TableName"], params["Key"])
            return read_units(item_size(item or {}), bool(params.get("ConsistentRead")))
        if name == "BatchGetItem":
            total = 0.0
            for table, request in params["RequestItems"].items():
                left = parsed.get("UnprocessedKeys", {}).get(table, {}).get("Keys", [])
                for key in request["Keys"]:
                    if key not in left:
                        total += read_units(item_size(self._item(table, key) or {}), bool(request.get("ConsistentRead")))
            return total
        if name == "TransactGetItems":
            return sum(2 * units(item_size(self._item(op["Get"]["TableName"], op["Get"]["Key"]) or {}),
                                 READ_UNIT_BYTES) for op in params["TransactItems"])
        items = parsed.get("Items", [])
        if any(k in params for k in ("FilterExpression", "ProjectionExpression", "Select", "AttributesToGet",
                                     "QueryFilter", "ScanFilter")):
            call = self._reader.query if name == "Query" else self._reader.scan
            items = call(**unfiltered(params)).get("Items", [])
        return read_units(sum(item_size(i) for i in items), bool(params.get("ConsistentRead")))

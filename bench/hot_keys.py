"""P4k: the hottest partition key of each table and index on the task path, from the keys each write touched.

DynamoDB gives one partition key at most 1,000 write units a second, and a GSI that throttles throttles its
table's writes.  ``KeyWrites`` hooks a DynamoDB client (botocore events): before and after each write it
reads the items the write names (through another client, not hooked) and counts, per table and per GSI, the
write units each partition key took -- the table's by the item's size (twice in a transaction), a GSI's one a
key-only entry put or deleted, none when the index's keys did not change.  ``run`` drives a run of the task
path (the API's create, the executor's claim and settle, for API tasks and for other programs' items) and
prints each table's and index's hottest key: its share of the writes and the write units a second it would
take at 10,000 tasks a second.  Kept apart from P4's meter (bench/task_cost.py): ``KeyWrites`` attaches to
any client.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench import task_stage
from bench.core import Scale, Section, Target
from tests.aws_limits import item_size

RATE = 10_000  # tasks a second the figure is taken at
PARTITION_LIMIT = 1_000  # write units a second one partition key takes
FAILING = " (every task FAILED)"  # the rows of the run whose tasks all fail
WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")


@dataclass(frozen=True)
class Keys:
    """A table's partition key attribute and its GSIs' (name, hash, range) attributes."""

    hash_key: str
    key_names: tuple[str, ...]
    indexes: tuple[tuple[str, str, str], ...] = ()


def table_keys(reader: Any, tables: list[str]) -> dict[str, Keys]:
    """Each table's key attributes and GSIs, as DescribeTable gives them."""
    found: dict[str, Keys] = {}
    for name in tables:
        table = reader.describe_table(TableName=name)["Table"]
        schema = {k["KeyType"]: k["AttributeName"] for k in table["KeySchema"]}
        indexes = []
        for index in table.get("GlobalSecondaryIndexes", []):
            keys = {k["KeyType"]: k["AttributeName"] for k in index["KeySchema"]}
            indexes.append((index["IndexName"], keys["HASH"], keys.get("RANGE", "")))
        found[name] = Keys(schema["HASH"], tuple(schema.values()), tuple(indexes))
    return found


@dataclass
class KeyWrites:
    """Write units by (table or ``table/index``) and partition key value, from the keys each write touched."""

    reader: Any
    tables: Mapping[str, Keys]
    units: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    #: (table or index, key) -> the base items (table, partition key) whose writes touched it
    items: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))

    def __post_init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()

    def attach(self, client: Any) -> KeyWrites:
        client.meta.events.register("provide-client-params.dynamodb.*", self._before)
        client.meta.events.register("after-call.dynamodb.*", self._after)
        return self

    def _targets(self, name: str, params: dict[str, Any]) -> list[tuple[str, dict[str, Any], int]]:
        """(table, key, write unit factor) of each item a write names."""
        def key_of(table: str, op: dict[str, Any]) -> dict[str, Any]:
            source = op.get("Key") or op.get("Item") or {}
            return {k: source[k] for k in self.tables[table].key_names if k in source}

        if name in ("PutItem", "UpdateItem", "DeleteItem"):
            return [(params["TableName"], key_of(params["TableName"], params), 1)] \
                if params["TableName"] in self.tables else []
        if name == "TransactWriteItems":
            return [(op["TableName"], key_of(op["TableName"], op), 2) for item in params["TransactItems"]
                    for kind, op in item.items() if kind != "ConditionCheck" and op["TableName"] in self.tables]
        if name == "BatchWriteItem":
            return [(table, key_of(table, r.get("PutRequest") or r["DeleteRequest"]), 1)
                    for table, requests in params["RequestItems"].items() if table in self.tables for r in requests]
        return []

    def _read(self, table: str, key: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = self.reader.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item") or {}
        return found

    def _before(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        targets = self._targets(model.name, params) if model.name in WRITES else []
        self._local.pending = [(t, k, f, self._read(t, k)) for t, k, f in targets]

    def _after(self, model: Any, **_: Any) -> None:
        pending = getattr(self._local, "pending", [])
        self._local.pending = []
        for table, key, factor, before in pending:
            after = self._read(table, key)
            keys = self.tables[table]
            counted: dict[str, Counter[str]] = defaultdict(Counter)
            counted[table][_value(key[keys.hash_key])] += factor * max(
                1, math.ceil(max(item_size(before), item_size(after)) / 1024))
            for index, hash_key, range_key in keys.indexes:
                old, new = _entry(before, hash_key, range_key), _entry(after, hash_key, range_key)
                if old != new:
                    for entry in (old, new):
                        if entry is not None:
                            counted[f"{table}/{index}"][entry[0]] += 1
            item = f"{table}:{_value(key[keys.hash_key])}"
            with self._lock:
                for where, by_key in counted.items():
                    self.units[where].update(by_key)
                    for touched in by_key:
                        self.items[(where, touched)].add(item)


def _value(attribute: Mapping[str, Any]) -> str:
    (_, content), = attribute.items()
    return str(content)


def _entry(item: Mapping[str, Any], hash_key: str, range_key: str) -> tuple[str, str] | None:
    """The GSI keys of an item, or None when it is not in the (sparse) index."""
    if hash_key not in item or (range_key and range_key not in item):
        return None
    return _value(item[hash_key]), _value(item[range_key]) if range_key else ""


@dataclass(frozen=True)
class Hottest:
    where: str
    units: int
    keys: int
    key: str
    key_units: int
    shared: bool  # written for more than one task (a per-task key is not: its writes do not grow with the rate)

    @property
    def share(self) -> float:
        return self.key_units / self.units if self.units else 0.0

    def at_rate(self, tasks: int) -> float:
        """Write units a second the key takes at ``RATE`` tasks a second: a key shared by tasks, its units per
        task x RATE; a task's own key, the units of its whole life (at most that in any one second)."""
        return self.key_units / tasks * RATE if self.shared else float(self.key_units)


def hottest(units: Mapping[str, Counter[str]], items: Mapping[tuple[str, str], set[str]],
            tasks: int) -> list[Hottest]:
    """Each table's and index's hottest partition key at ``RATE`` tasks a second. Pure."""
    rows = []
    for where, by_key in sorted(units.items()):
        candidates = [Hottest(where, sum(by_key.values()), len(by_key), key, count,
                              len(items.get((where, key), ())) > 1) for key, count in by_key.items()]
        rows.append(max(candidates, key=lambda h: h.at_rate(tasks)))
    return rows


def unsharded(units: Counter[str]) -> Counter[str]:
    """The same index writes had each status been one key (``<status>#<shard>`` read as ``<status>``). Pure."""
    merged: Counter[str] = Counter()
    for key, count in units.items():
        merged[key.rsplit("#", 1)[0]] += count
    return merged


def measure(tasks: int) -> tuple[KeyWrites, KeyWrites, int]:
    """``tasks`` one-time exact tasks through the task path, half the API's (create), half another program's
    items (written by it, not counted): each claimed and settled DONE by the executor's store writes; then as
    many others settled FAILED (as when a target fails for everyone), metered apart, in the same stage."""
    from chalicelib import ddb
    from chalicelib.aws import Clients, Deps
    from chalicelib.tasks import api
    from chalicelib.tasks.lifecycle import State
    from chalicelib.tasks.model import TaskKey, parse_due
    from chalicelib.tasks.store import Outcome, TaskStore
    from tests.fixtures import FakeClock
    from tests.functional.task_support import EMAIL_ACTION

    meters: list[KeyWrites] = []
    with task_stage.stage() as stage:
        settings, clock = stage.settings, FakeClock()
        for run, outcome in enumerate((Outcome(State.DONE, 1, {"sent": True}),
                                       Outcome(State.FAILED, 1, error="Refused"))):
            clients = Clients(settings, session=stage.setup.session)
            meter = KeyWrites(stage.setup.dynamodb, table_keys(stage.setup.dynamodb, [settings.tasks_table,
                                                                                       settings.state_table]))
            meter.attach(clients.dynamodb)
            meters.append(meter)
            deps = Deps(settings=settings, clients=clients, clock=clock)
            store, due = TaskStore(deps), clock.now + timedelta(minutes=5)
            keys = []
            for i in range(run * tasks, (run + 1) * tasks):
                if i % 2 == 0:
                    status, _ = api.create(deps, {"id": f"api-{i}", "run_at": due.isoformat(),
                                                  "action": EMAIL_ACTION})
                    assert status == 201
                    keys.append(TaskKey.for_id(f"api-{i}"))
                else:
                    key = TaskKey(f"USER#{i}", "REMINDER")
                    stage.setup.dynamodb.put_item(TableName=settings.tasks_table, Item=ddb.serialize(
                        {"PK": key.pk, "SK": key.sk, settings.due_attribute: due.isoformat(),
                         "action": EMAIL_ACTION}))
                    keys.append(key)
            clock.advance(minutes=5)
            when = parse_due(due.isoformat())
            for key in keys:
                claim = store.claim(key, when, clock.now, settings.task_claim_lease_seconds, f"w-{key.task_id}")
                assert claim.won, claim
                assert store.settle(key, when, f"w-{key.task_id}", outcome, clock.now, None)
    return meters[0], meters[1], tasks


def run(scale: Scale, plots: Path) -> list[Section]:
    n = scale.pick(2000, 400, 20)
    meter, failing, tasks = measure(n)
    section = Section(
        key="P4k", title=f"hot keys: the hottest partition key of each table and index on the task path ({n} tasks)",
        columns=["table / index", "write units", "partition keys", "hottest key", "its share",
                 f"hottest key's write units/s at {RATE:,} tasks/s"])
    figures: dict[str, Any] = {"tasks": tasks, "rate": RATE, "hottest": {}}
    failed = [replace(row, where=row.where + FAILING) for row in hottest(failing.units, failing.items, tasks)]
    for row in [*hottest(meter.units, meter.items, tasks), *failed]:
        section.rows.append([row.where, row.units, row.keys, row.key[:40], row.share, row.at_rate(tasks)])
        figures["hottest"][row.where] = {"units": row.units, "keys": row.keys, "key": row.key,
                                         "share": row.share, "units_per_second_at_rate": row.at_rate(tasks)}
        if not scale.tiny:  # 20 tasks over 32 shards say little of the fullest one
            section.targets.append(Target(f"{row.where}: hottest key at {RATE:,} tasks/s", row.at_rate(tasks),
                                          PARTITION_LIMIT, " WCU/s"))
    from chalicelib.tasks.items import STATUS_INDEX
    figures["status_index_units"] = sum(sum(by_key.values()) for where, by_key in meter.units.items()
                                        if where.endswith("/" + STATUS_INDEX))  # the ordinary path's: none
    for where, by_key in failing.units.items():
        if where.endswith("/" + STATUS_INDEX):
            one = hottest({where: unsharded(by_key)}, {(where, k.rsplit("#", 1)[0]): {"", "*"} for k in by_key},
                          tasks)[0]
            figures["status_index_unsharded"] = {"key": one.key, "units_per_second_at_rate": one.at_rate(tasks)}
            section.notes.append(
                f"the same index writes with each status one key (the index keyed by status alone): {one.key} "
                f"takes {one.share:.0%} of them, {one.at_rate(tasks):,.0f} write units a second at {RATE:,} tasks/s")
    section.notes.append(
        "write units from the keys each write touched (a hook on the app's DynamoDB client reads each item before "
        "and after): a table's by item size (twice in a transaction), an index's one a keys-only entry put or "
        "deleted; a key written for one task only (its record, its item) takes its writes once, not at the rate; "
        "tasks: one-time exact, half the API's (create, claim, settle), half another program's items "
        f"(claim, settle), all DONE, then all FAILED ('{FAILING.strip()}': the status index carries FAILED, "
        "not PENDING or DONE); the figure scales the run's hottest key to the rate (a small run overstates a sharded "
        "key's: its fullest shard holds more than 1/32 by chance)")
    section.figures = figures
    return [section]

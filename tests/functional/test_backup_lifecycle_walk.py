"""The backups' state machines (chalicelib/backups/lifecycle.py) walked against RunStore and RestoreStore under moto:
each declared edge of a run, a table's result, a verification and a restore is made by the store method ``writers``
names (each once, but a run's create, started and finish, which the second and third runs make again), and no write of those records makes a
transition the declaration lacks.

Every write of those records is watched at the DynamoDB client: the states it touches are known right before it
and read from its own answer after it, and the transition is named by the store method that made it. The drawing is checked against the
declaration in tests/unit/test_backup_lifecycle.py."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from moto import mock_aws

from chalicelib import ddb
from chalicelib.aws import Clients, Deps
from chalicelib.backups.conditional import StateStore
from chalicelib.backups.lifecycle import MACHINES, NONE, RESTORE, RUN, TABLE, VERIFICATION, Machine, UndeclaredTransition
from chalicelib.backups.restore_store import PARTITION as RESTORES
from chalicelib.backups.restore_store import Restore, RestoreStore
from chalicelib.backups.store import PAGES_PARTITION, PARTITION, VERIFY_KEY, Run, RunStore, TableResult, Verification
from chalicelib.metrics import Metrics
from chalicelib.settings import Settings
from tests.fixtures import FakeClock

Edge = tuple[str, str, str, str]  # machine, transition, from, to
ROUTING = frozenset({"_write", "_done"})  # RunStore's own plumbing between a writer and the client


class Watched:
    """The store's DynamoDB client, watching each write of a run's items or a restore's record: (machine,
    transition, from, to) of each record it touches; a write that makes no declared transition fails the test."""

    def __init__(self, real: Any, table: str, store: type[StateStore]) -> None:
        self._real, self._table = real, table
        self._machines = [m for m in MACHINES if m.store in {c.__name__ for c in store.__mro__}]
        self._methods = {getattr(store, name).__code__: name for name in dir(store)
                         if callable(getattr(store, name)) and hasattr(getattr(store, name), "__code__")}
        self.seen: set[Edge] = set()
        self.unused: list[str] = []  # placeholders a write carries and does not use (AWS refuses them)
        self._items: dict[tuple[str, str], dict[str, Any]] = {}  # each item as last read or written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def put_item(self, **kwargs: Any) -> Any:
        key = {"PK": kwargs["Item"]["PK"], "SK": kwargs["Item"]["SK"]}
        return self._watch(key, {}, lambda: (self._real.put_item(**kwargs), kwargs["Item"]))

    def transact_write_items(self, **kwargs: Any) -> Any:  # a restore's create: its record's put is watched
        [item] = [op["Put"]["Item"] for op in kwargs["TransactItems"] if op["Put"]["Item"]["PK"]["S"] == RESTORES]
        key = {"PK": item["PK"], "SK": item["SK"]}
        return self._watch(key, {}, lambda: (self._real.transact_write_items(**kwargs), item))

    def batch_write_item(self, **kwargs: Any) -> Any:
        self._items.clear()  # pages and verifications written whole (not a transition): read them again
        return self._real.batch_write_item(**kwargs)

    def update_item(self, **kwargs: Any) -> Any:
        used = set(re.findall(r"[#:]\w+", f"{kwargs['UpdateExpression']} {kwargs.get('ConditionExpression', '')}"))
        self.unused += sorted({*kwargs.get("ExpressionAttributeNames", {}), *kwargs["ExpressionAttributeValues"]} - used)

        def write() -> tuple[Any, dict[str, Any]]:  # the item as written, from the write's own answer
            answer = self._real.update_item(**{"ReturnValues": "ALL_NEW", **kwargs})
            item = answer["Attributes"]
            if "ReturnValues" not in kwargs:
                answer = {k: v for k, v in answer.items() if k != "Attributes"}
            return answer, item

        return self._watch(kwargs["Key"], kwargs.get("ExpressionAttributeNames", {}), write)

    def _watch(self, key: dict[str, Any], names: dict[str, str], write: Any) -> Any:
        pk = key["PK"]["S"]
        if pk not in (PARTITION, RESTORES) and not pk.startswith(PAGES_PARTITION):
            return write()[0]
        method = self._writer()
        candidates = [(m, t) for m in self._machines for t in m.transitions if m.writers[t.name] == method]
        tables = [v for k, v in names.items() if re.fullmatch(r"#table\d*", k)]
        machine = candidates[0][0] if candidates else (
            RESTORE if pk == RESTORES else TABLE if tables else VERIFICATION if key["SK"]["S"].startswith(VERIFY_KEY)
            else RUN)
        where = (pk, key["SK"]["S"])
        if where not in self._items:
            raw = self._real.get_item(TableName=self._table, Key=key, ConsistentRead=True).get("Item")
            self._items[where] = ddb.deserialize(raw) if raw else {}
        before = _states(self._items[where], machine, tables)
        answer, written = write()  # a condition that failed raises: nothing was written
        self._items[where] = ddb.deserialize(written)
        for old, new in zip(before, _states(self._items[where], machine, tables), strict=True):
            named = [t.name for m, t in candidates if (old, new) in t.edges()]
            if not named:
                raise AssertionError(f"a write the declaration lacks: {method} made {machine.name} {old} -> {new}")
            self.seen.update((machine.name, n, old, new) for n in named)
        return answer

    def _writer(self) -> str:
        frame = sys._getframe(2)
        while frame is not None:
            name = self._methods.get(frame.f_code)
            if name and name not in ROUTING:
                return name
            frame = frame.f_back  # type: ignore[assignment]
        return "?"


def _states(item: dict[str, Any], machine: Machine, tables: list[str]) -> list[str]:
    """The state of each record a write touches: the item's, or its tables' (in ``tables``' order)."""
    if machine is TABLE:
        return [str(item["tables"][t]["status"]) for t in tables]
    return [str(item.get("status", NONE))]


@pytest.fixture(scope="module")
def world() -> Iterator[Deps]:
    """The state table alone, in moto in process, for the module's tests (their runs have their own ids). The store's
    requests meet AWS's limits in the functional tests of the backups (tests/aws_limits.py); here, the watch checks
    that each write uses every placeholder it carries."""
    with mock_aws():
        settings = Settings.from_env()
        clients = Clients(settings)
        clients.dynamodb.create_table(
            TableName=settings.state_table, BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"},
                                  {"AttributeName": "SK", "AttributeType": "S"}])
        clock = FakeClock()
        yield Deps(settings=settings, clients=clients, clock=clock, sleep=clock.sleep, metrics=Metrics(emit=print))


def watch(deps: Deps, store: type[StateStore]) -> Watched:
    watcher = Watched(deps.clients.dynamodb, deps.settings.state_table, store)
    deps.clients.dynamodb = watcher  # type: ignore[assignment]
    return watcher


@pytest.fixture
def deps(world: Deps) -> Iterator[Deps]:
    real = world.clients.dynamodb
    yield world
    world.clients.dynamodb = real


def _run(store: RunStore, run_id: str, at: datetime, tables: dict[str, str] | None = None) -> Run:
    run = Run(run_id=run_id, started_at=at, trigger="schedule", claimed_at=at, advanced_at=at,
              tables={t: TableResult(t, s, alerted=False) for t, s in (tables or {}).items()})
    assert store.create(run)
    return run


def _settled(run: Run, table: str, status: str) -> TableResult:
    result = run.tables[table]
    result.status = status
    return result


def test_every_edge_is_walked_by_its_writer_and_no_write_leaves_the_declaration(deps: Deps) -> None:
    watched = watch(deps, RunStore)
    store, t = RunStore(deps), deps.clock()
    at = [t + timedelta(seconds=i) for i in range(40)]
    lease = timedelta(minutes=10)

    # A start that is taken over, handed on, abandoned, opened again and closed with nothing to back up.
    a = _run(store, "20261122T120000Z-a", t)
    assert store.claim_resend(a.run_id, 0, t, at[1])
    store.mark_queued(a.run_id, 0)
    assert store.reclaim_start(a.run_id, at[2] + lease, at[2])
    a.claimed_at = at[2]
    assert store.record_tables(a) and store.release_start(a) == 1
    assert store.hand_off(a, at[3] - lease)
    a.claimed_at = at[3] - lease
    assert store.take_handoff(a, at[4])
    assert store.abandon(a.run_id, at[4], at[5], "abandoned")
    store.unabandon(a.run_id, at[4])
    assert store.complete(a.run_id, at[6], {"backed_up": 0})

    # A run that backs up, settles its tables, finishes (taken over once), verifies and completes.
    tables = {name: "PENDING" for name in "abcdeg"} | {"f": "FAILED"}
    b = _run(store, "20261122T120000Z-b", t, tables)
    assert store.started(b, at[1])
    assert store.claim_resend(b.run_id, 0, at[1], at[2])
    store.mark_queued(b.run_id, 0)
    assert store.claim_stale_poll(b.run_id, 0, at[2], at[3])
    assert store.claim_poll(b.run_id, 0, at[4], "m-1") is not None
    for table, status in (("a", "AVAILABLE"), ("b", "FAILED"), ("c", "STUCK")):
        assert store.settle_table(b.run_id, _settled(b, table, status))
    assert store.settle_available(b.run_id, [b.tables["d"], b.tables["e"]]) == [b.tables["d"], b.tables["e"]]
    assert store.claim_alert(b.run_id, b.tables["f"])
    assert not store.claim_alert(b.run_id, b.tables["f"])  # claimed once: one alert
    for table in "gacf":
        store.release_alert(b.run_id, b.tables[table])
    for table in "gabc":
        store.unsettle_table(b.run_id, b.tables[table])
    assert store.claim_finish(b.run_id, 1, at[5], at[5] - lease)
    assert store.claim_resend(b.run_id, 1, at[4], at[6])
    store.mark_queued(b.run_id, 1)
    assert store.claim_finish(b.run_id, -1, at[7], at[7])  # its claim at[5] is stale at at[7]
    assert store.release_finish(b.run_id, at[7], 3, False)
    assert store.verifying(b.run_id, at[8], {"backed_up": 5})
    store.add_verifications(b.run_id, [Verification(name, "RESTORING") for name in ("a", "b", "r")]
                            + [Verification("s", "SKIPPED")])
    passed, failed = Verification("a", "PASSED"), Verification("b", "FAILED")
    assert store.settle_verification(b.run_id, passed) and store.settle_verification(b.run_id, failed)
    for name, status in (("r", "RESTORING"), ("a", "PASSED"), ("b", "FAILED"), ("s", "SKIPPED")):
        store.restore_table_deleted(b.run_id, Verification(name, status))
    store.unsettle_verification(b.run_id, passed)
    store.unsettle_verification(b.run_id, failed)
    assert store.claim_resend(b.run_id, 1, at[8], at[9])
    store.mark_queued(b.run_id, 1)
    assert store.claim_stale_poll(b.run_id, 1, at[9], at[10])
    assert store.claim_poll(b.run_id, 1, at[11], "m-2") is not None
    assert store.verified(b.run_id, at[12], {"verified": 1, "verify_failed": 1, "verify_skipped": 1})
    assert store.claim_resend(b.run_id, 2, at[11], at[13])
    store.mark_queued(b.run_id, 2)

    # A run that completes with no verification planned.
    c = _run(store, "20261122T120000Z-c", t)
    assert store.started(c, at[1]) and store.claim_finish(c.run_id, 0, at[2], at[2] - lease)
    assert store.complete(c.run_id, at[3], {"backed_up": 0})

    assert watched.unused == []
    declared = {(m.name, *edge) for m in (RUN, TABLE, VERIFICATION) for edge in m.edges()}
    assert declared - watched.seen == set(), "declared but not walked"
    assert watched.seen - declared == set()


def test_every_edge_of_a_restore_is_walked_by_its_writer(deps: Deps) -> None:
    watched = watch(deps, RestoreStore)
    store, now = RestoreStore(deps), deps.clock()
    restore = Restore("walk", {"table": "orders", "target": "orders-walk"}, {}, now)
    assert store.create(restore)
    assert store.claim_poll(restore.restore_id, 0, now, "m-1") is not None
    assert store.claim_poll(restore.restore_id, 0, now, "m-1") is not None  # its redelivery
    for status in ("ACTIVE", "FAILED"):
        restore.status = status
        assert store.settle(restore, now)
        store.unsettle(restore)
    assert watched.unused == []
    assert watched.seen == {("restore", *edge) for edge in RESTORE.edges()}


class Reopening(RunStore):
    """A store with writes the declaration lacks."""

    def reopen(self, run_id: str) -> bool:
        return self._done(RUN, ("reopen",), run_id, {})

    def reopen_by_hand(self, run_id: str) -> None:
        self._items.update(self._key(run_id), "SET #s = :running", "#s = :complete", {"#s": "status"},
                           {":running": "RUNNING", ":complete": "COMPLETE"})


def test_a_write_only_the_store_knows_is_refused_or_seen(deps: Deps) -> None:
    watcher = watch(deps, Reopening)
    store, now = Reopening(deps), deps.clock()
    run = _run(store, "20261122T120000Z-r", now)
    assert store.complete(run.run_id, now, {})
    with pytest.raises(UndeclaredTransition, match="reopen"):
        store.reopen(run.run_id)
    with pytest.raises(AssertionError, match="reopen_by_hand made run COMPLETE -> RUNNING"):
        store.reopen_by_hand(run.run_id)  # around the declaration: the watch sees it
    assert watcher.seen == {("run", "create", "none", "STARTING"), ("run", "complete", "STARTING", "COMPLETE")}


def test_a_page_another_poll_settled_in_part_is_settled_table_by_table_returning_only_this_writers(
        deps: Deps) -> None:
    store, now = RunStore(deps), deps.clock()
    run = _run(store, "20261122T120000Z-p", now, {name: "PENDING" for name in "xyz"})
    assert store.settle_table(run.run_id, _settled(run, "y", "AVAILABLE"))  # another poll settled y first
    page = [_settled(run, name, "AVAILABLE") for name in "xyz"]
    assert [r.table for r in store.settle_available(run.run_id, page)] == ["x", "z"]
    assert store.settle_available(run.run_id, page) == []  # a redelivery settles none of them again

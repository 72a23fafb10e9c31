"""P1, backups: the AWS calls of a daily backup run at 10 to 2,000 tables, against seed 000's design
(bench/seed_backups.py) and the floor; the state table's writes and item size.

Each run is in-process moto (``mock_aws``) with its corrections toward AWS
(``local.moto_corrections``: ListBackups' pages of 100, time bounds, TableName,
BackupType among them), its backups stamped at a clock that the app's own sleeps
move (``moto_corrections.backups_stamped_by``).  The world is the same for every
design: N tables, each with this app's backups from 1 and 4 days before (the
older one is past the 3-day retention; BACKUP_MIN_KEEP=2 keeps the other), and a
few backups that are not this app's (hand-made, another stage's, AWS Backup's)
which must survive.  The app's code path runs as deployed: ``trigger.start_run``,
then every message the app put on its monitor queue is delivered to
``monitor.check_run`` in due order (the clock moved to each one's delay), until
the queue is empty.  Every design's backups stay CREATING for its first
``CREATING_POLLS`` polls and are AVAILABLE at the next.  Calls are counted with a
botocore hook on the clients the app builds (``core.CallCounter``); set-up calls
are not counted.

The PITR report (DescribeContinuousBackups: AWS has no call that answers for many tables) reads, without
BACKUP_REQUIRE_PITR (the bench's setting), one table in 7 a run (``chalicelib.backups.rules.pitr_checked``):
each table once a week, as issue 25 allows; the floor counts those ceil(N / 7) calls, and a target checks
the run makes no more.  Issue 11 set its floor before the report existed, and a note gives ours without the
report against that floor too.

The floor is the fewest calls any design makes on AWS: CreateBackup per table,
DeleteBackup per expired backup, per poll one SendMessage and the ListBackups
pages of the run's backups, and the pages listing the backups older than the
retention (TimeRangeUpperBound) once.  State writes are the app's PutItem,
UpdateItem, DeleteItem and BatchWriteItem calls on its state table; a write's units are
ceil(max(item size before, after) / 1 KB), for each item a BatchWriteItem writes, sizes by DynamoDB's rules
(attribute names + values, tests/aws_limits.item_size).  A write whose item
would pass 400 KB is refused as AWS refuses it (moto would refuse it without
telling its size): the run stops there and the row says so.  ``faster_updates``
spares moto's whole-item copies on UpdateItem (speed only, same answers).
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import export_prices, retention_scale, seed_backups
from bench.core import BENCH_ENV, PROJECT, CallCounter, Clock, Scale, Section, Target

ACCOUNT = "123456789012"  # moto's default account
PAGE = 100  # AWS's ListBackups page (local.moto_corrections.LIST_BACKUPS_PAGE)
CREATING_POLLS = 2  # polls that find the backups still CREATING; the next finds them AVAILABLE
POLLS = CREATING_POLLS + 1
START = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
WRITE_UNIT = 1024
ITEM_TARGET = 40_000
PENDING_POLL_AT = 500
RUN_TARGET = 1.05
STATE_OPS = ("PutItem", "UpdateItem", "DeleteItem")  # and BatchWriteItem, sized item by item


# --- the figures ----------------------------------------------------------------------------


@dataclass
class RunFigures:
    """What one design's daily run cost at one table count."""

    design: str
    tables: int
    calls: Counter[str]
    pending_poll: Counter[str]
    polls: int
    deleted: int
    non_app_deleted: int
    state_writes: int = 0
    write_units: int = 0
    largest_item: int = 0
    failed: str = ""     # why the run could not finish (then the counts are up to that point)

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    @property
    def pending_total(self) -> int:
        return sum(self.pending_poll.values())

    def of(self, operation: str) -> int:
        return sum(n for op, n in self.calls.items() if op.endswith(":" + operation))


def pages(backups: int) -> int:
    """ListBackups calls to list ``backups`` backups (an empty listing is one call)."""
    return max(1, math.ceil(backups / PAGE))


def pitr_reads(tables: int) -> int:
    """The PITR report's DescribeContinuousBackups calls of a run that reads each table once a week."""
    return math.ceil(tables / 7)


def floor_calls(tables: int, expired: int, old: int, polls: int) -> int:
    """The fewest calls of a whole run: CreateBackup per table, DeleteBackup per expired backup, per
    poll one SendMessage and the pages of the run's backups, the pages of the ``old`` backups, and the
    PITR report's DescribeContinuousBackups for a seventh of the tables (one table a call)."""
    return issue_floor_calls(tables, expired, old, polls) + pitr_reads(tables)


def issue_floor_calls(tables: int, expired: int, old: int, polls: int) -> int:
    """Issue 11's floor, set before the PITR report existed: the floor above without its per-table call."""
    return tables + expired + polls * (pages(tables) + 1) + pages(old)


def floor_poll(tables: int) -> int:
    """The fewest calls of one poll: the pages of the run's backups and one SendMessage."""
    return pages(tables) + 1


# --- the state table's writes ---------------------------------------------------------------


def moto_value_size(value: Any) -> int:
    """DynamoDB's size of one of moto's stored values (``DynamoType``), as tests/aws_limits.value_size
    counts DynamoDB JSON, without converting the item (moto's ``to_json`` copies it).  A map's string
    and boolean members are counted in the loop: the run item is thousands of them, sized per write."""
    from tests.aws_limits import value_size

    kind, content = value.type, value.value
    if kind == "S":
        return len(content.encode())
    if kind == "M":
        total = 3
        for name, member in content.items():
            member_kind = member.type
            if member_kind == "S":
                total += 1 + len(name.encode()) + len(member.value.encode())
            elif member_kind == "BOOL":
                total += 2 + len(name.encode())
            else:
                total += 1 + len(name.encode()) + moto_value_size(member)
        return total
    if kind == "L":
        return 3 + sum(1 + moto_value_size(v) for v in content)
    return value_size({kind: content})


class StateWrites:
    """PutItem/UpdateItem/DeleteItem and BatchWriteItem calls on one table (a call is one write),
    with their write units (each item a batch writes counts its own) and item sizes (read from
    moto's backend before and after each call, so not counted as AWS calls).

    A write whose item would pass DynamoDB's 400 KB is refused as AWS refuses it
    (ValidationException), after its size is recorded in ``refused``; inside
    ``oversized_items_measured`` moto keeps such an item instead of refusing it
    unmeasured.
    """

    def __init__(self, backend: Any, table: str) -> None:
        self.backend = backend
        self.table = table
        self.writes = 0
        self.units = 0
        self.largest = 0
        self.refused: list[tuple[str, int]] = []   # (operation, item size) of writes AWS refuses
        self._pending: list[tuple[str, list[tuple[dict[str, Any], int]]]] = []  # (operation, [(key, size before)])
        self._sizes: dict[str, int] = {}           # the size after this counter's last write, by key

    def attach(self, client: Any) -> StateWrites:
        client.meta.events.register("before-parameter-build.dynamodb", self._before)
        client.meta.events.register("after-call.dynamodb", self._after)
        return self

    def _key(self, params: dict[str, Any]) -> dict[str, Any]:
        if "Key" in params:
            return dict(params["Key"])
        table = self.backend.get_table(self.table)
        names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
        return {name: params["Item"][name] for name in names}

    def size(self, key: dict[str, Any]) -> int:
        """The stored item's size by DynamoDB's rules (0: no item)."""
        from moto.dynamodb.models.dynamo_type import DynamoType

        table = self.backend.get_table(self.table)
        range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        item = table.get_item(DynamoType(key[table.hash_key_attr]), range_value)
        if item is None:
            return 0
        return sum(len(name.encode()) + moto_value_size(value) for name, value in item.attrs.items())

    def _before(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name in STATE_OPS and params.get("TableName") == self.table:
            self._pending.append((model.name, [self._measured_key(params)]))
        elif model.name == "BatchWriteItem" and self.table in params.get("RequestItems", {}):
            keys = [self._measured_key(request.get("PutRequest") or request["DeleteRequest"])
                    for request in params["RequestItems"][self.table]]
            self._pending.append((model.name, keys))
        elif model.name == "TransactWriteItems" and self.table in json.dumps(params, default=str):
            raise NotImplementedError(f"{model.name} on the state table: the bench does not size it yet")

    def _measured_key(self, params: dict[str, Any]) -> tuple[dict[str, Any], int]:
        key = self._key(params)
        known = self._sizes.get(json.dumps(key, sort_keys=True))
        return key, self.size(key) if known is None else known

    def _after(self, model: Any, parsed: Any = None, **_: Any) -> None:
        from botocore.exceptions import ClientError

        from tests.aws_limits import ITEM_LIMIT

        if model.name not in (*STATE_OPS, "BatchWriteItem") or not self._pending:
            return
        operation, keys = self._pending.pop()
        unprocessed = json.dumps((parsed or {}).get("UnprocessedItems", {}), sort_keys=True, default=str)
        self.writes += 1
        for key, before in keys:
            if operation == "BatchWriteItem" and json.dumps(key, sort_keys=True)[1:-1] in unprocessed:
                continue
            after = self.size(key)
            self._sizes[json.dumps(key, sort_keys=True)] = after
            self.units += max(1, math.ceil(max(before, after) / WRITE_UNIT))
            self.largest = max(self.largest, before, after)
            if after > ITEM_LIMIT:
                self.refused.append((operation, after))
                raise ClientError({"Error": {"Code": "ValidationException",
                                             "Message": "Item size has exceeded the maximum allowed size"}}, operation)


@contextmanager
def oversized_items_measured() -> Iterator[None]:
    """moto keeps items over 400 KB (``StateWrites`` measures, then refuses them as AWS does); its
    own check, which also recomputes the whole item's size on every attribute set, is off inside."""
    from moto.dynamodb.models.dynamo_type import LimitedSizeDict

    checked = LimitedSizeDict.__setitem__
    LimitedSizeDict.__setitem__ = dict.__setitem__  # type: ignore[method-assign]
    try:
        yield
    finally:
        LimitedSizeDict.__setitem__ = checked  # type: ignore[method-assign]


class _NoCopy:
    """Stands for the ``copy`` module in moto's DynamoDB responses and models (see ``faster_updates``)."""

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        return value


def _no_attributes(self: Any, root_attr_name: str = "Attributes") -> dict[str, Any]:
    return {root_attr_name: {}}


@contextmanager
def faster_updates() -> Iterator[None]:
    """Speed only.  moto's UpdateItem copies the whole item twice (before the update, for the
    answer's ReturnValues and for a stream record) and converts it to JSON twice (to tell which
    attributes changed, for ReturnValues); the run item grows with the table count and is written
    once per table, so at 2,000 tables those copies would be nearly all of the bench's time.  Inside,
    an UpdateItem without ReturnValues skips them: its answer is the same (no attributes), and the
    state table has no stream.  The bench makes no TransactWriteItems, whose rollback copies too."""
    from moto.dynamodb import models, responses
    from moto.dynamodb.models.dynamo_type import Item

    real_update = responses.DynamoHandler.update_item

    def update_item(self: Any) -> Any:
        if self.body.get("ReturnValues", "NONE") != "NONE":
            return real_update(self)
        to_json = Item.to_json
        Item.to_json = _no_attributes  # type: ignore[method-assign]
        try:
            return real_update(self)
        finally:
            Item.to_json = to_json  # type: ignore[method-assign]

    saved = (models.copy, responses.copy)  # type: ignore[attr-defined]
    models.copy = responses.copy = _NoCopy  # type: ignore[attr-defined,assignment]
    responses.DynamoHandler.update_item = update_item  # type: ignore[method-assign]
    try:
        yield
    finally:
        models.copy, responses.copy = saved  # type: ignore[attr-defined]
        responses.DynamoHandler.update_item = real_update  # type: ignore[method-assign]


# --- the world every design runs in ---------------------------------------------------------


@dataclass
class World:
    deps: Any                    # chalicelib.aws.Deps
    clock: Clock
    tables: list[str]
    backend: Any                 # moto's DynamoDB backend
    expired: int                 # this app's backups past the retention
    old: int                     # USER backups created before the retention cutoff (any owner)
    non_app: list[str] = field(default_factory=list)
    run_start: datetime = START

    def messages(self, queue: str) -> list[tuple[int, str]]:
        """(delay seconds, body) of every message now in ``queue``; empties it (moto's backend)."""
        from moto.sqs.models import sqs_backends

        q = sqs_backends[ACCOUNT][self.deps.settings.region].queues[queue]
        out = [(round((m.delayed_until - (m.sent_timestamp or 0)) / 1000) if m.delayed_until else 0, m.body)
               for m in q._messages]
        q._messages.clear()
        return out

    def set_run_backups(self, status: str) -> None:
        for backup in list(self.backend.backups.values()):
            if backup.creation_date_time.replace(tzinfo=UTC) >= self.run_start:
                backup.status = status

    def non_app_left(self) -> int:
        return sum(1 for arn in self.non_app if arn in self.backend.backups)


@contextmanager
def _environment() -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.pop("AWS_ENDPOINT_URL", None)
    os.environ.update(BENCH_ENV)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def _quiet_app() -> Iterator[None]:
    """The app logs a line per table at INFO; the bench's output is its table."""
    from chalicelib.log import logger

    level = logger.log_level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def table_names(n: int) -> list[str]:
    return [f"bench-{i:04d}" for i in range(n)]


@contextmanager
def world(n: int) -> Iterator[World]:
    """N tables with a day-old and a 4-day-old backup of this app each, and 3 backups not the app's."""
    from moto import mock_aws
    from moto.dynamodb.models import dynamodb_backends

    from chalicelib.aws import Clients, Deps
    from chalicelib.backups.rules import backup_name
    from chalicelib.settings import Settings
    from deploy.provision import provision
    from local import moto_corrections

    clock = Clock(START)
    moto_corrections.install()
    with _environment(), _quiet_app(), mock_aws(), moto_corrections.backups_stamped_by(clock), \
            oversized_items_measured(), \
            faster_updates():
        settings = Settings.from_env({**BENCH_ENV, "STAGE": "bench"})
        clients = Clients(settings)
        environment = provision(clients, settings).environment
        tables = table_names(n)
        settings = replace(settings, alert_topic_arn=environment["ALERT_TOPIC_ARN"], backup_tables=tuple(tables),
                           backup_table_pattern=None, backup_table_tag=None)
        deps = Deps(settings=settings, clients=clients, clock=clock, sleep=clock.sleep)
        for table in tables:
            clients.dynamodb.create_table(
                TableName=table, BillingMode="PAY_PER_REQUEST",
                KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])
        backend = dynamodb_backends[ACCOUNT][settings.region]
        prefix = settings.backup_name_prefix
        for days in (4, 1):
            clock.now = START - timedelta(days=days, minutes=-5)
            for table in tables:
                backend.create_backup(table, backup_name(prefix, table, clock.now))
        clock.now = START - timedelta(days=10)
        non_app = [backend.create_backup(tables[0], "before-the-migration").arn,
                   backend.create_backup(tables[-1], backup_name("timekeeper-other", tables[-1], clock.now)).arn]
        managed = backend.create_backup(tables[0], "awsbackup-job")
        managed.type = "AWS_BACKUP"
        non_app.append(managed.arn)
        clock.now = START
        yield World(deps=deps, clock=clock, tables=tables, backend=backend, expired=n,
                    old=n + 2, non_app=non_app)


# --- running the designs --------------------------------------------------------------------


def _deliver_all(w: World, queue: str, counter: CallCounter,
                 deliver: Callable[[str, int], int | None]) -> tuple[int, Counter[str]]:
    """Deliver the queue's messages in due order until it stays empty (``deliver(body, polls so far)``
    returns the poll number it handled, None for another message); (polls, calls of poll 0)."""
    due: list[tuple[datetime, int, str]] = []
    order = itertools.count()  # messages due at the same time go in the order they were sent
    polls = 0
    pending: Counter[str] = Counter()

    def collect() -> None:
        for delay, body in w.messages(queue):
            heapq.heappush(due, (w.clock.now + timedelta(seconds=delay), next(order), body))

    collect()
    while due:
        at, _, body = heapq.heappop(due)
        w.clock.now = max(w.clock.now, at)
        before = counter.calls.copy()
        poll = deliver(body, polls)
        if poll == 0:
            pending = counter.calls - before
        if poll is not None:
            polls += 1
        if polls > 50:
            raise RuntimeError("the run did not finish in 50 polls")
        collect()
    return polls, pending


def run_ours(w: World) -> RunFigures:
    """The app's daily run: trigger, every monitor message, retention."""
    from botocore.exceptions import ClientError

    from chalicelib.backups import monitor, trigger
    from chalicelib.backups.store import COMPLETE, RunStore

    deps = w.deps
    clients = deps.clients
    counter = CallCounter().attach(clients.dynamodb, clients.dynamodb_unretried, clients.sqs, clients.sns)
    writes = StateWrites(w.backend, deps.settings.state_table).attach(clients.dynamodb)

    def deliver(body: str, polls: int) -> int | None:
        message = json.loads(body)
        poll = None if message.get("watch") else int(message["poll"])
        if poll is not None:
            w.set_run_backups("CREATING" if poll < CREATING_POLLS else "AVAILABLE")
        monitor.check_run(deps, body)
        return poll

    polls, pending, failed = 0, Counter[str](), ""
    try:
        run = trigger.start_run(deps, trigger="bench")
        w.set_run_backups("CREATING")
        polls, pending = _deliver_all(w, deps.settings.backup_monitor_queue, counter, deliver)
    except ClientError:
        if not writes.refused:
            raise
        operation, size = writes.refused[0]
        failed = (f"its state write {writes.writes} ({operation}) makes a {size:,} B item, which DynamoDB "
                  f"refuses (400 KB at most)")
    deleted = 0
    calls = counter.reset()  # the run's calls; reading the finished run back below is the bench's own
    if not failed:
        finished = RunStore(deps).get(run.run_id)
        if finished is None or finished.status != COMPLETE:
            raise RuntimeError(f"the app's run did not complete: {finished and finished.status}")
        deleted = int(finished.summary.get("deleted", 0))
    return RunFigures("ours", len(w.tables), calls, pending, polls, deleted,
                      len(w.non_app) - w.non_app_left(), writes.writes, writes.units, writes.largest, failed)


def run_seed(w: World) -> RunFigures:
    """Seed 000's run (bench/seed_backups.py) on the same world."""
    clients = w.deps.clients
    queue = w.deps.settings.backup_monitor_queue
    url = w.deps.queue_url(queue)
    topic = w.deps.settings.alert_topic_arn
    counter = CallCounter().attach(clients.dynamodb, clients.sqs, clients.sns)
    seed_backups.trigger(clients.dynamodb, clients.sqs, url, w.tables, w.clock.now)
    w.set_run_backups("CREATING")
    outcomes: list[str] = []

    def deliver(body: str, polls: int) -> int:
        w.set_run_backups("CREATING" if polls < CREATING_POLLS else "AVAILABLE")
        outcomes.append(seed_backups.consume(clients.dynamodb, clients.sqs, clients.sns, url, topic, body,
                                             w.clock.now))
        return polls

    polls, pending = _deliver_all(w, queue, counter, deliver)
    if outcomes[-1:] != ["complete"]:
        raise RuntimeError(f"seed 000's run did not complete: {outcomes}")
    non_app_deleted = len(w.non_app) - w.non_app_left()
    return RunFigures("seed 000", len(w.tables), counter.calls, pending, polls,
                      counter.calls["dynamodb:DeleteBackup"] - non_app_deleted, non_app_deleted)


@dataclass(frozen=True)
class Facts:
    """What the floor needs to know of a world."""

    expired: int
    old: int


def measure(n: int) -> tuple[RunFigures, RunFigures, Facts]:
    """Ours and seed 000's runs at ``n`` tables, each in a world of its own."""
    with world(n) as w:
        ours = run_ours(w)
        facts = Facts(w.expired, w.old)
    with world(n) as w:
        seed = run_seed(w)
    return ours, seed, facts


# --- the section ----------------------------------------------------------------------------


def plot(rows: Sequence[tuple[int, int | None, int, int]], path: Path) -> None:
    """Calls of a whole run against the table count, log-log: ours (where the run finishes), seed 000, floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = [r[0] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    ours = [(r[0], r[1]) for r in rows if r[1] is not None]
    ax.plot([t for t, _ in ours], [c for _, c in ours], "o-", label="timekeeper")
    ax.plot(tables, [r[2] for r in rows], "s--", label="seed 000")
    ax.plot(tables, [r[3] for r in rows], "^:", label="floor")
    for n, calls, _, floor in rows:
        if calls is None:
            ax.annotate("timekeeper's run fails\n(state item > 400 KB)", (n, floor), textcoords="offset points",
                        xytext=(-170, -12), arrowprops={"arrowstyle": "->"}, fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tables backed up")
    ax.set_ylabel("AWS calls of one daily run")
    ax.set_title("P1: AWS calls of a daily backup run (trigger, polls, retention)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(PROJECT))
    except ValueError:
        return str(path)


def run(scale: Scale, plots: Path) -> list[Section]:
    sizes: list[int] = scale.pick([10, 100, 500, 2000], [10, 150], [3, 101])  # tiny: past one ListBackups page
    started, cpu = time.perf_counter(), time.process_time()
    results = [measure(n) for n in sizes]
    wall, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    section = Section(
        key="P1", title="backups: AWS calls of a daily run against seed 000 and the floor",
        columns=["tables", "poll: ours", "poll: seed", "poll: floor", "run: ours", "run: seed", "run: floor",
                 "ours / floor", "ListBackups (ours)", "state writes", "write units", "largest item B"])
    by_n: dict[int, tuple[RunFigures, RunFigures, int]] = {}
    for ours, seed, facts in results:
        n = ours.tables
        floor = floor_calls(n, facts.expired, facts.old, POLLS)
        by_n[n] = (ours, seed, floor)
        fails = "fails" if ours.failed else None
        section.rows.append([n, ours.pending_total if ours.pending_poll else "fails", seed.pending_total, floor_poll(n),
                             fails or ours.total, seed.total, floor, fails or ours.total / floor,
                             fails or ours.of("ListBackups"), fails or ours.state_writes,
                             fails or ours.write_units, ours.largest_item])
        if ours.failed:
            section.notes.append(f"at {n} tables the app's run fails: {ours.failed}; the bench stops it there "
                                 f"({ours.total:,} calls made by then)")
    section.figures = {"sizes": sizes, "by_tables": {str(n): _figures(*by_n[n]) for n in sizes},
                       "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu_s, 1)}
    section.targets = targets(by_n)
    largest = max(sizes)
    section.notes[:0] = [
        f"every design's backups stay CREATING for {CREATING_POLLS} polls and are AVAILABLE at poll "
        f"{CREATING_POLLS + 1}; each table has this app's backups from 1 and 4 days before (the older one "
        "expired), and 3 backups that are not the app's must survive",
        f"the tables are named in BACKUP_TABLES (with BACKUP_TABLE_PATTERN ours adds {pages(largest)} ListTables "
        "pages at the largest N); ListBackups pages at 100 and honours its time bounds, as on AWS",
        f"backups not the app's deleted at {largest} tables: ours {by_n[largest][0].non_app_deleted}, seed 000 "
        f"{by_n[largest][1].non_app_deleted} (its retention goes by age and table only)",
    ]
    for ours, _, facts in results:
        if ours.tables == largest and not ours.failed:
            without = ours.total - ours.of("DescribeContinuousBackups")
            issue_floor = issue_floor_calls(largest, facts.expired, facts.old, POLLS)
            section.notes.append(
                f"without the PITR report, at {largest} tables: ours {without:,} calls, the floor without it "
                f"{issue_floor:,}: {without / issue_floor:.2f}x")
    section.notes.append(f"measured in {wall:.0f} s wall, {cpu_s:.0f} s CPU")
    path = plots / "p1_backup_calls.png"
    plot([(n, None if by_n[n][0].failed else by_n[n][0].total, by_n[n][1].total, by_n[n][2]) for n in sizes], path)
    section.plots.append(_relative(path))
    return [section, retention_scale.section(scale), *export_prices.section(scale)]


def targets(by_n: dict[int, tuple[RunFigures, RunFigures, int]]) -> list[Target]:
    """The issue's P1 targets from the runs by table count ((ours, seed, floor calls) each)."""
    sizes = sorted(by_n)
    done = [n for n in sizes if not by_n[n][0].failed]
    nan = float("nan")
    poll_n = max([n for n in sizes if n <= PENDING_POLL_AT] or sizes[:1])
    poll = by_n[poll_n][0]
    largest = sizes[-1]
    big = by_n[largest][0]
    run_n = done[-1] if done else largest
    fails = f"; at {largest} the run fails" if big.failed else ""
    out = [
        Target(f"pending poll at {poll_n} tables, calls (floor: {pages(poll_n)} ListBackups pages + 1)",
               poll.pending_total if poll.pending_poll else nan, floor_poll(poll_n)),
        Target(f"whole run at {run_n} tables / floor (the largest N whose run finishes{fails})",
               by_n[run_n][0].total / by_n[run_n][2] if done else nan, RUN_TARGET, "x"),
        Target(f"PITR report at {run_n} tables, DescribeContinuousBackups calls (a seventh: once a week each)",
               by_n[run_n][0].of("DescribeContinuousBackups") if done else nan, pitr_reads(run_n)),
    ]
    if len(done) > 1:  # linear: a table costs no more write units in a big run than in a small one
        def per_table(n: int) -> float:
            return by_n[n][0].write_units / n
        small = per_table(done[0])
        out.append(Target(f"state write units per table, {done[-1]} tables / {done[0]} tables",
                          per_table(done[-1]) / small if small else nan, 1.0, "x"))
    out.append(Target(f"largest state item at {largest} tables, bytes", big.largest_item, ITEM_TARGET))
    return out


def _figures(ours: RunFigures, seed: RunFigures, floor: int) -> dict[str, Any]:
    return {
        "ours": {"calls": dict(ours.calls), "pending_poll": dict(ours.pending_poll), "polls": ours.polls,
                 "deleted": ours.deleted, "non_app_deleted": ours.non_app_deleted, "state_writes": ours.state_writes,
                 "write_units": ours.write_units, "largest_item_bytes": ours.largest_item, "failed": ours.failed},
        "seed_000": {"calls": dict(seed.calls), "pending_poll": dict(seed.pending_poll), "polls": seed.polls,
                     "deleted": seed.deleted, "non_app_deleted": seed.non_app_deleted},
        "floor": {"calls": floor, "pending_poll": floor_poll(ours.tables), "polls": POLLS},
    }

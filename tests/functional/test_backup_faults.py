"""Every AWS write of a backup run, under every fault, with redeliveries as AWS makes them.

A run backs up a table and one that does not exist (a start failure: an
alert), and its retention has old backups to delete. Each write the trigger and
the monitor make in a clean run (CreateBackup, the state table's PutItem and
UpdateItem and BatchWriteItem, SendMessage, DeleteBackup, Publish), at each occurrence, gets each
fault of tests/faults.py. The world then goes on as AWS would: the scheduled
event's async invocation is retried twice (after 1 and 2 minutes) when the
trigger fails or dies, and SQS delivers the monitor queue's messages after
their delay, again after the visibility timeout when the handler fails or dies,
and dead-letters a message after 5 receives. Then:

- every table is backed up, once, and the run records that backup (a CreateBackup
  whose answer was lost is not retried by botocore: the trigger finds its backup
  by name first);
- the run is COMPLETE within the hour (never left STARTING or FINISHING past its
  lease), and no monitor message was dead-lettered;
- retention deleted only expired backups and kept BACKUP_MIN_KEEP good ones;
- each alert was sent at most once (twice only when Publish's own answer was
  lost), and at least once unless the worker died holding it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from moto import mock_aws

from chalicelib.aws import Clients, Deps
from chalicelib.backups import monitor, trigger
from chalicelib.backups.rules import parse_backup_name
from chalicelib.backups.store import COMPLETE, RunStore
from chalicelib.settings import STATE_TTL_ATTRIBUTE, Settings
from deploy import iam
from deploy.provision import Provisioned, ensure_queue, ensure_table, ensure_topic
from tests.aws_limits import AwsLimits
from tests.faults import Faults, Kind, WorkerCrash
from tests.fixtures import ACCOUNT, Aws, FakeClock, use_settings
from tests.functional.backup_support import create_tables, moto_backups, our_backup
from tests.policy_recorder import RECORDER

pytestmark = pytest.mark.usefixtures("attribute_values_fast")  # speed only: tests/moto_fast.py

TABLES = ("orders",)          # one table to back up (a second would only repeat the same calls)
MISSING = "gone"
OLD_DAYS = (5, 6)             # existing good backups; retention (3 days, keep 2) deletes the 6 day old one
ASYNC_RETRIES = (60, 120)     # Lambda's async retries of a failed scheduled invocation
VISIBILITY = 300              # the monitor queue's visibility timeout
MAX_RECEIVES = 5              # then SQS moves the message to the dead-letter queue
KINDS: tuple[Kind, ...] = ("error", "lost", "retried", "crash", "crash_after")

# The writes of a clean run, by operation (checked against a clean run below).
CLEAN_WRITES = {
    "dynamodb.CreateBackup": 2,   # orders, gone (refused: the table does not exist)
    "dynamodb.PutItem": 1,        # the run
    "dynamodb.BatchWriteItem": 2,  # the run's table page: when the run is recorded, when its backups have started
    "dynamodb.UpdateItem": 8,     # tables recorded, started, poll 0 queued, gone's alert claimed; poll 0 claimed,
                                  # orders settled, finish claimed, complete
    "sqs.SendMessage": 2,         # the start watch, poll 0
    "dynamodb.DeleteBackup": 1,   # the expired backup
    "sns.Publish": 2,             # gone's alert, the summary
}
CASES = [(op, n, kind) for op, count in CLEAN_WRITES.items() for n in range(1, count + 1) for kind in KINDS]


@dataclass
class Message:
    body: str
    visible_at: datetime
    receives: int = 0
    id: str = ""


@dataclass
class World:
    """SQS, Lambda and EventBridge around the app, on the fake clock."""

    aws: Aws
    deps: Deps
    clock: FakeClock
    queue: list[Message] = field(default_factory=list)
    dead_lettered: list[str] = field(default_factory=list)
    sent: int = 0
    old: dict[str, list[str]] = field(default_factory=dict)  # each table's old backups' names, newest first

    def _collect(self) -> None:
        for body, delay in self.aws.sent(self.deps.settings.backup_monitor_queue):
            self.sent += 1
            self.queue.append(Message(body, self.clock.now + timedelta(seconds=delay), id=f"m-{self.sent}"))

    def scheduled_trigger(self, at: datetime) -> None:
        """EventBridge's scheduled event, invoked asynchronously: retried twice if it fails or dies."""
        for pause in (0, *ASYNC_RETRIES):
            self.clock.advance(seconds=pause)
            try:
                trigger.start_run(self.deps, "schedule", run_id=trigger.new_run_id(at, "scheduled"))
                break
            except (Exception, WorkerCrash):
                continue
            finally:
                self._collect()

    def deliver_until(self, until: datetime) -> None:
        """The monitor queue's messages in visibility order, redelivered on failure, until ``until``."""
        while True:
            self._collect()
            if not self.queue:
                return
            message = min(self.queue, key=lambda m: m.visible_at)
            if message.visible_at > until:
                return
            self.clock.now = max(self.clock.now, message.visible_at)
            message.receives += 1
            try:
                monitor.check_run(self.deps, message.body, message.id)
                self.queue.remove(message)
            except (Exception, WorkerCrash):
                if message.receives >= MAX_RECEIVES:
                    self.queue.remove(message)
                    self.dead_lettered.append(message.body)
                else:
                    message.visible_at = self.clock.now + timedelta(seconds=VISIBILITY)


@dataclass
class Provisioning:
    """What a backup run touches, provisioned once for the module: the state table, the monitor queue and its
    DLQ, the alert topic and a queue capturing its alerts."""

    settings: Settings
    alert_queue_url: str
    clients: Clients
    limits: AwsLimits


@pytest.fixture(scope="module")
def provisioned() -> Iterator[Provisioning]:
    with mock_aws():
        settings = Settings.from_env()
        clients = Clients(settings)
        made = Provisioned()
        ensure_table(clients, settings.state_table, made, ttl_attribute=STATE_TTL_ATTRIBUTE)
        _, dlq_arn = ensure_queue(clients, settings.backup_monitor_dlq, made)
        ensure_queue(clients, settings.backup_monitor_queue, made, dlq_arn=dlq_arn, visibility_timeout=VISIBILITY)
        topic = ensure_topic(clients, iam.alert_topic_name(settings), made)
        capture = clients.sqs.create_queue(QueueName="alert-capture")["QueueUrl"]
        capture_arn = clients.sqs.get_queue_attributes(
            QueueUrl=capture, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        clients.sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=capture_arn)
        settings = replace(settings, alert_topic_arn=topic)
        clients = Clients(settings)  # the tests' clients: the app's calls checked against the IAM policy and AWS
        RECORDER.attach(clients.session)
        yield Provisioning(settings, capture, clients, AwsLimits(clients))


def _fresh(settings: Settings) -> None:
    """The provisioned world as just made: no table but the (emptied) state table, no backup, no message."""
    from moto.dynamodb.models import dynamodb_backends
    from moto.sqs.models import sqs_backends

    dynamodb = dynamodb_backends[ACCOUNT][settings.region]
    for name in [n for n in dynamodb.tables if n != settings.state_table]:
        del dynamodb.tables[name]
    dynamodb.tables[settings.state_table].items.clear()
    dynamodb.backups.clear()
    for queue in sqs_backends[ACCOUNT][settings.region].queues.values():
        queue._messages.clear()


@pytest.fixture
def aws(provisioned: Provisioning) -> Iterator[Aws]:
    """The shared ``aws`` fixture with only what a backup run touches, provisioned once for the module (some
    90 scenarios) and emptied before each test; its clients too are the module's (the ``faults`` below unhooks)."""
    _fresh(provisioned.settings)
    limits = provisioned.limits
    limits.violations.clear()
    limits.expected = False  # its key schemas kept: this module's tables of a name always have the same keys
    yield Aws(clients=provisioned.clients, settings=provisioned.settings,
              alert_queue_url=provisioned.alert_queue_url, limits=limits)
    if limits.violations and not limits.expected:
        pytest.fail("requests AWS would reject (moto accepted them):\n" + "\n".join(limits.violations))


@pytest.fixture(name="faults")
def unhooked_faults(aws: Aws) -> Iterator[Faults]:
    """The shared ``faults`` fixture, unhooked from the module's clients after the test."""
    armed = Faults(aws.clients)
    yield armed
    armed.detach()


@pytest.fixture
def world(aws: Aws, deps: Deps, clock: FakeClock) -> World:
    create_tables(deps, TABLES)
    use_settings(deps, backup_tables=(*TABLES, MISSING), backup_retention_days=3, backup_min_keep=2,
                 backup_run_lease_seconds=900, backup_monitor_delay_seconds=300)
    world = World(aws, deps, clock)
    for table in TABLES:
        arns = [our_backup(deps, table, clock.now - timedelta(days=days)) for days in OLD_DAYS]
        world.old[table] = [moto_backups(deps)[arn].name for arn in arns]
    return world


def _run_day(world: World) -> datetime:
    start = world.clock.now
    world.scheduled_trigger(start)
    world.deliver_until(start + timedelta(hours=1))
    return start


def test_the_enumerated_writes_are_those_of_a_clean_run(world: World, faults: Faults) -> None:
    _run_day(world)

    writes = {op: faults.calls[op] for op in CLEAN_WRITES}
    assert writes == CLEAN_WRITES
    _assert_outcome(world, ("", 0, "error"), faults)


@pytest.mark.parametrize(("operation", "occurrence", "kind"), CASES,
                         ids=[f"{op.split('.')[1]}#{n}-{kind}" for op, n, kind in CASES])
def test_a_backup_run_survives_a_fault_at_each_write(
        world: World, faults: Faults, operation: str, occurrence: int, kind: Kind) -> None:
    fault = faults.inject(operation, kind, occurrence=occurrence)

    _run_day(world)

    assert fault.hits == 1
    _assert_outcome(world, (operation, occurrence, kind), faults)


def _assert_outcome(world: World, case: tuple[str, int, Kind], faults: Faults) -> None:
    operation, _, kind = case
    deps, aws = world.deps, world.aws
    [run] = RunStore(deps).recent(5)
    # Finished within the hour: never left STARTING or FINISHING past its lease until a next day's trigger.
    assert run.status == COMPLETE, run
    assert run.finished_at is not None and run.finished_at - run.started_at < timedelta(hours=1)
    assert world.dead_lettered == []

    backups = moto_backups(deps)
    for table in TABLES:
        result = run.tables[table]
        assert result.status == "AVAILABLE" and result.backup_arn in backups, (table, result)
        copies = [b for b in backups.values() if b.name == result.backup_name and b.table.name == table]
        assert [b.arn for b in copies] == [result.backup_arn], table
        # Retention: only expired backups went, and BACKUP_MIN_KEEP good ones (by name) stay, the newest old one too.
        kept = {b.name for b in backups.values() if b.table.name == table and b.status == "AVAILABLE"
                and parse_backup_name(b.name, deps.settings.backup_name_prefix, table)}
        assert {result.backup_name, world.old[table][0]} <= kept
        assert all(name in kept or days > 3 for days, name in zip(OLD_DAYS, world.old[table], strict=True))
    assert run.tables[MISSING].status == "FAILED"

    alerts = aws.alerts()
    subjects = Counter(a["message"]["subject"] for a in alerts)
    expected = {f"timekeeper: backup of {MISSING} failed", _summary_subject(run.run_id, alerts)}
    most = 2 if (operation, kind) in (("sns.Publish", "lost"), ("sns.Publish", "retried")) else 1
    assert set(subjects) <= expected, subjects
    assert all(n <= most for n in subjects.values()), subjects
    ids: dict[str, set[str | None]] = {a["message"]["subject"]: set() for a in alerts}
    for a in alerts:  # a copy of one alert carries its id: a consumer can drop it
        ids[a["message"]["subject"]].add(a["dedup_id"])
    assert all(len(found) == 1 and None not in found for found in ids.values()), ids
    assert len({i for found in ids.values() for i in found}) == len(ids)
    if kind not in ("crash", "crash_after"):
        assert set(subjects) == expected, subjects


def _summary_subject(run_id: str, alerts: list[dict[str, Any]]) -> str:
    for alert in alerts:
        if alert["message"].get("kind") == "summary":
            return str(alert["message"]["subject"])
    return f"timekeeper backup run {run_id}: summary"


def test_one_error_writing_the_started_run_leaves_it_running_with_its_monitor_queued(
        world: World, faults: Faults) -> None:
    """Defect 8: the write after the backups were made failed once, and the run stayed STARTING for a day."""
    faults.inject("dynamodb.UpdateItem", "error", match=lambda p: ":RUNNING" in p.get("ExpressionAttributeValues", {})
                  and "tables" in p["UpdateExpression"])
    start = world.clock.now

    trigger.start_run(world.deps, "schedule", run_id=trigger.new_run_id(start, "scheduled"))

    [run] = RunStore(world.deps).recent(1)
    assert run.status == "RUNNING" and run.poll_queued
    polls = [json.loads(body) for body, _ in world.aws.sent(world.deps.settings.backup_monitor_queue)]
    assert {"run_id": run.run_id, "poll": 0} in polls


def test_a_lost_answer_to_the_started_write_is_recognised_as_this_triggers_own(world: World, faults: Faults) -> None:
    faults.inject("dynamodb.UpdateItem", "retried",
                  match=lambda p: "tables" in p["UpdateExpression"] and ":RUNNING" in p["ExpressionAttributeValues"])

    trigger.start_run(world.deps, "schedule", run_id=trigger.new_run_id(world.clock.now, "scheduled"))

    [run] = RunStore(world.deps).recent(1)
    assert run.status == "RUNNING" and run.poll_queued


def test_a_create_backup_whose_lost_answer_botocore_would_retry_makes_one_backup_that_the_run_records(
        world: World, faults: Faults) -> None:
    fault = faults.inject("dynamodb.CreateBackup", "retried", match=lambda p: p["TableName"] == TABLES[0])

    _run_day(world)

    [run] = RunStore(world.deps).recent(1)
    result = run.tables[TABLES[0]]
    copies = [b.arn for b in moto_backups(world.deps).values() if b.name == result.backup_name]
    assert fault.hits == 1 and copies == [result.backup_arn]
    assert result.status == "AVAILABLE" and run.status == COMPLETE
    assert run.summary["backed_up"] == 1


def test_a_trigger_that_died_after_its_backups_is_resumed_by_the_start_watch_without_a_second_backup(
        world: World, faults: Faults) -> None:
    faults.inject("dynamodb.UpdateItem", "crash",  # the backups are made, the run not yet RUNNING
                  match=lambda p: "tables" in p["UpdateExpression"] and ":RUNNING" in p["ExpressionAttributeValues"])
    start = world.clock.now

    world.scheduled_trigger(start)
    [run] = RunStore(world.deps).recent(1)
    assert run.status == "STARTING"
    faults.calm()
    world.deliver_until(start + timedelta(hours=1))

    [run] = RunStore(world.deps).recent(1)
    assert run.status == COMPLETE and run.finished_at is not None
    assert run.finished_at - start <= timedelta(seconds=900 + VISIBILITY * 2 + 300)
    names = Counter(b.name for b in moto_backups(world.deps).values())
    assert all(names[run.tables[t].backup_name] == 1 for t in TABLES)


# --- a start that cannot proceed: a record and one alert, whatever fails -------------------------------------

NOT_STARTED = "could not start"


def _subjects(world: World) -> Counter[str]:
    return Counter(str(a["message"]["subject"]) for a in world.aws.alerts())


def _select_by_pattern(world: World) -> None:
    """The selection lists the account's tables (ListTables, which botocore alone retries)."""
    use_settings(world.deps, backup_tables=(), backup_table_pattern=re.compile("orders"))


def test_a_day_whose_three_tries_fail_after_the_first_write_leaves_the_run_closed_with_one_alert(
        world: World, faults: Faults) -> None:
    _select_by_pattern(world)
    faults.inject("dynamodb.ListTables", "error", times=1000)  # every try fails choosing its tables
    start = world.clock.now

    world.scheduled_trigger(start)

    [run] = RunStore(world.deps).recent(1)
    assert run.status == COMPLETE and run.summary["note"].startswith("not started: 3 tries failed"), run
    subjects = _subjects(world)
    assert subjects == Counter({f"timekeeper: backup run {run.run_id} {NOT_STARTED}": 1}), subjects
    # The watch, and the next day's trigger, find it closed: no second alert; the next day backs up.
    faults.calm()
    world.deliver_until(start + timedelta(hours=1))
    world.clock.advance(seconds=86_400 - (world.clock.now - start).total_seconds())
    world.scheduled_trigger(world.clock.now)
    assert not [s for s in _subjects(world) if NOT_STARTED in s]
    newest, closed = RunStore(world.deps).recent(2)
    assert closed.status == COMPLETE and closed.summary == run.summary
    assert newest.status == "RUNNING" and newest.tables["orders"].backup_arn


def test_a_try_that_fails_lets_the_next_async_try_start_the_run_at_once(world: World, faults: Faults) -> None:
    # The first try records the run, then cannot write its tables (a hard error on every retry of it).
    faults.inject("dynamodb.BatchWriteItem", "error", times=5)

    world.scheduled_trigger(world.clock.now)

    [run] = RunStore(world.deps).recent(1)
    assert run.status == "RUNNING" and run.tables["orders"].backup_arn, run  # not STARTING until the lease
    assert run.start_failures == 1
    assert not [s for s in _subjects(world) if NOT_STARTED in s]


def test_when_the_runs_first_write_fails_each_try_alerts_directly_with_one_dedup_id(
        world: World, faults: Faults) -> None:
    faults.inject("dynamodb.PutItem", "error", times=1000)
    start = world.clock.now

    world.scheduled_trigger(start)

    assert RunStore(world.deps).recent(1) == []
    alerts = world.aws.alerts()
    assert len(alerts) == 3  # one a try: nothing to claim it on
    assert {a["message"]["subject"] for a in alerts} == {
        f"timekeeper: backup run {trigger.new_run_id(start, 'scheduled')} could not be recorded"}
    assert len({a["dedup_id"] for a in alerts}) == 1


def test_a_close_whose_alert_could_not_be_sent_is_closed_and_alerted_by_the_watch_once(
        world: World, faults: Faults) -> None:
    _select_by_pattern(world)
    faults.inject("dynamodb.ListTables", "error", times=1000)
    faults.inject("sns.Publish", "error", times=5, match=lambda p: NOT_STARTED in p.get("Subject", ""))
    start = world.clock.now

    world.scheduled_trigger(start)
    [run] = RunStore(world.deps).recent(1)
    assert run.status == "STARTING" and run.start_failures == 3 and not _subjects(world)

    world.deliver_until(start + timedelta(hours=1))  # the start watch, after the lease

    [run] = RunStore(world.deps).recent(1)
    assert run.status == COMPLETE and run.summary["note"].startswith("not started")
    assert _subjects(world) == Counter({f"timekeeper: backup run {run.run_id} {NOT_STARTED}": 1})
    assert world.dead_lettered == []


@pytest.mark.parametrize(("selection", "seed"), [(s, n) for s in ("pattern", "tag") for n in range(4)])
def test_a_day_of_hard_errors_leaves_a_run_that_started_or_one_alert(
        world: World, faults: Faults, selection: str, seed: int) -> None:
    """30 % of the calls fail with a hard error (after botocore's retries) through the day's three tries: the
    run starts, or is closed with an alert, or, when not even its first write was made, the alert says so. (A
    selection by tag reads each table's tags: most days no try gets past it.)"""
    names = [f"orders-{i}" for i in range(20)]
    create_tables(world.deps, names, tags={name: {"backup": "daily"} for name in names})
    if selection == "tag":
        use_settings(world.deps, backup_tables=(), backup_table_tag=("backup", "daily"))
    else:
        use_settings(world.deps, backup_tables=(), backup_table_pattern=re.compile("orders-.*"))
    start = world.clock.now
    faults.chaos(seed, error=0.3)

    world.scheduled_trigger(start)
    faults.calm()
    world.deliver_until(start + timedelta(hours=1))

    runs = RunStore(world.deps).recent(1)
    subjects = _subjects(world)
    if not runs:
        assert [s for s in subjects if "could not be recorded" in s], subjects
        return
    [run] = runs
    assert run.status == COMPLETE, run
    if run.summary.get("note", "").startswith("not started"):
        assert subjects[f"timekeeper: backup run {run.run_id} {NOT_STARTED}"] == 1, subjects
    else:
        assert run.summary["tables"] == 20, run.summary

"""Every AWS write of the task path, under every fault, until the system settles: the action runs once.

Each scenario puts a task in the tasks table, then a ``World`` drives it the way AWS would: the table's stream
records go to the stream scheduler (a failed or crashed batch is retried from its first failed record), the
interval processor ticks every minute, EventBridge Scheduler fires its schedules, and the due queue's messages
go to the executor (a failed or crashed delivery comes back after the visibility timeout, a message sent back
after its delay), with the FakeClock moved to the next of these events, until nothing is left to do.

The writes are enumerated from a clean run of each scenario (``WRITES``, in call order), so a new write is
covered without editing this file; every (write, occurrence) is then run under each fault kind of
tests/faults.py.  After it settled: the action ran once -- twice only inside the window docs/executor.md documents
("Delivery is at least once per action call"), asserted explicitly -- no task is left PENDING or RUNNING (its
record's execution state settled), the item was never given a status, and the failure alert and dead letter
were sent once, twice only inside the window
docs/executor.md's "Fail loudly" documents, the copies then carrying one dedupe_id.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import pytest
from moto import mock_aws
from moto.ses.models import ses_backends
from moto.sqs.models import sqs_backends

import app as app_module
from chalicelib import ddb
from chalicelib.aws import Clients, Deps
from chalicelib.settings import Settings
from chalicelib.tasks import executor, interval, lifecycle, stream
from chalicelib.tasks.model import TaskKey, iso
from deploy.provision import MAX_RECEIVE_COUNT
from local import moto_speed
from tests import events
from tests.aws_limits import AwsLimits
from tests.faults import Faults, Kind, WorkerCrash
from tests.fixtures import ACCOUNT, Aws, FakeClock, provision_world
from tests.functional.lambda_sim import Message, stored_schedules
from tests.functional.stream_support import TableStream
from tests.functional.task_support import FlakySes, emails_sent, record_of, use_client
from tests.policy_recorder import RECORDER

KINDS: tuple[Kind, ...] = ("error", "lost", "retried", "crash", "crash_after")
WRITE_OPERATIONS = frozenset({
    "dynamodb.PutItem", "dynamodb.UpdateItem", "dynamodb.DeleteItem", "dynamodb.TransactWriteItems",
    "sqs.SendMessage", "sqs.SendMessageBatch", "sns.Publish", "sesv2.SendEmail",
    "scheduler.CreateSchedule", "scheduler.UpdateSchedule", "scheduler.DeleteSchedule",
})
VISIBILITY_SECONDS = 120  # the due queue's (deploy/provision.py)
KEY = TaskKey("USER#ada", "REMINDER#standup")
ADDRESS = "ada@example.com"


# --- the scenarios: a task item as some program writes it, and which component's writes are faulted -----------

@dataclass(frozen=True)
class Scenario:
    name: str
    item: Callable[[datetime], dict[str, Any]]
    components: frozenset[str]   # whose writes are faulted: stream, processor, executor
    action_fails: bool = False


def _item(strategy: str, due_in: timedelta) -> Callable[[datetime], dict[str, Any]]:
    def build(now: datetime) -> dict[str, Any]:
        return {"PK": KEY.pk, "SK": KEY.sk, "run_at": iso(now + due_in), "strategy": strategy, "email": ADDRESS}
    return build


SCENARIOS = {s.name: s for s in (
    Scenario("exact-soon", _item("exact", timedelta(minutes=2)), frozenset({"stream", "executor"})),
    Scenario("exact-later", _item("exact", timedelta(hours=1)), frozenset({"stream"})),
    Scenario("interval", _item("interval", timedelta(minutes=3)), frozenset({"stream", "processor"})),
    Scenario("lazy", _item("lazy", timedelta(minutes=5)), frozenset({"stream", "executor"})),
    Scenario("failing", _item("exact", timedelta(minutes=2)), frozenset({"executor"}), action_fails=True),
)}


# --- the world: AWS's side of the task path, driven by hand ------------------------------------------------------

_SEQUENCES = iter(range(900000000000000000001, 999999999999999999999))


@dataclass
class World:
    """Delivers what AWS would deliver, in time order, until nothing is left (``settle``)."""

    deps: Deps
    clock: FakeClock
    table: TableStream
    writes: list[tuple[str, str]] = field(default_factory=list)  # (operation, component) of every write
    due: list[Message] = field(default_factory=list)
    stream_batches: list[list[dict[str, Any]]] = field(default_factory=list)
    fired: set[str] = field(default_factory=set)
    next_tick: datetime | None = None
    dead_lettered: list[Message] = field(default_factory=list)  # moved to the due queue's DLQ by SQS
    deliveries: int = 0
    _component: str = ""
    _ids: Iterator[int] = field(default_factory=lambda: iter(range(1, 10_000)))

    def note(self, model: Any) -> None:
        prefix = "sesv2" if model.service_model.service_name == "sesv2" else model.service_model.endpoint_prefix
        operation = f"{prefix}.{model.name}"
        if operation in WRITE_OPERATIONS and self._component:
            self.writes.append((operation, self._component))

    def _as(self, component: str, run: Callable[[], Any]) -> Any:
        self._component = component
        try:
            return run()
        finally:
            self._component = ""

    # --- what each AWS service does ---

    def _stream(self) -> None:
        new = self.table.new_records()
        if new:
            self.stream_batches.append(new)
        while self.stream_batches:
            batch = self.stream_batches.pop(0)
            try:
                response = self._as("stream", partial(stream.process_records, self.deps, batch))
                failed = [f["itemIdentifier"] for f in response["batchItemFailures"]]
            except WorkerCrash:
                failed = [batch[0]["dynamodb"]["SequenceNumber"]]
            if failed:  # Lambda retries the shard from the lowest failed record
                lowest = min(int(s) for s in failed)
                self.stream_batches.insert(0, [r for r in batch if int(r["dynamodb"]["SequenceNumber"]) >= lowest])
                if self.deliveries > 200:
                    raise AssertionError("the stream batch never succeeds")
                self.deliveries += 1
            new = self.table.new_records()
            if new:
                self.stream_batches.append(new)

    def _collect_sent(self, aws: Aws) -> None:
        for body, delay in aws.sent(self.deps.settings.due_queue):
            self.due.append(Message(body, self.clock.now + timedelta(seconds=delay), f"m-{next(self._ids)}"))

    def _scheduler_fires(self) -> None:
        """EventBridge Scheduler: each schedule whose at() time has come sends its input, then deletes itself."""
        scheduler, group = self.deps.clients.scheduler, self.deps.settings.schedule_group
        for schedule in stored_schedules(self.deps.settings.region, group):
            at = datetime.fromisoformat(schedule["ScheduleExpression"][3:-1] + "+00:00")
            if at <= self.clock.now:
                self.due.append(Message(schedule["Target"]["Input"], self.clock.now, f"s-{next(self._ids)}"))
                scheduler.delete_schedule(Name=schedule["Name"], GroupName=group)

    def _next_schedule(self) -> datetime | None:
        times = [datetime.fromisoformat(s["ScheduleExpression"][3:-1] + "+00:00")
                 for s in stored_schedules(self.deps.settings.region, self.deps.settings.schedule_group)]
        return min(times, default=None)

    def _tick(self) -> None:
        if self.next_tick is not None and self.next_tick <= self.clock.now:
            with contextlib.suppress(WorkerCrash, Exception):  # the next tick starts from the saved progress
                self._as("processor", lambda: interval.process_due(self.deps))
            self.next_tick = self.clock.now.replace(second=0, microsecond=0) + timedelta(minutes=1)

    def _deliver(self, message: Message) -> None:
        message.receives += 1
        record = events.sqs_record(message.body, self.deps.settings.due_queue, message.message_id, message.receives)
        try:
            failed = bool(self._as("executor", lambda: executor.run_batch(self.deps, [record]))["batchItemFailures"])
        except WorkerCrash:
            failed = True
        if not failed:
            return
        if message.receives >= MAX_RECEIVE_COUNT:
            self.dead_lettered.append(message)
            return
        message.visible_at = self.clock.now + timedelta(seconds=VISIBILITY_SECONDS)
        self.due.append(message)

    def settle(self, aws: Aws, until: datetime) -> None:
        """Run every component until nothing is left to deliver (or the clock reaches ``until``)."""
        for _ in range(500):
            self._stream()
            self._collect_sent(aws)
            self._scheduler_fires()
            self._tick()
            self._collect_sent(aws)
            ready = sorted((m for m in self.due if m.visible_at <= self.clock.now), key=lambda m: m.visible_at)
            if ready:
                self.due.remove(ready[0])
                self._deliver(ready[0])
                self._collect_sent(aws)
                continue
            upcoming = [m.visible_at for m in self.due] + [t for t in (self._next_schedule(),) if t]
            if self.next_tick is not None and (upcoming or not self._settled()):
                upcoming.append(self.next_tick)
            upcoming = [t for t in upcoming if t <= until]
            if not upcoming:
                return
            self.clock.now = max(self.clock.now, min(upcoming))
        raise AssertionError("the world did not settle in 500 steps")

    def run(self, aws: Aws, lazy: bool) -> None:
        """Settle; for the lazy strategy, DynamoDB's TTL then deletes the item once its time has come, and the
        world settles again."""
        start = self.clock.now
        for _ in range(4):
            self.settle(aws, start + timedelta(hours=3))
            if not lazy or not self._expire_lazy():
                return

    def _expire_lazy(self) -> bool:
        dynamodb, settings = self.deps.clients.dynamodb, self.deps.settings
        raw = dynamodb.get_item(TableName=settings.tasks_table, Key=KEY.dynamo(), ConsistentRead=True).get("Item")
        if raw is None or settings.ttl_attribute not in raw:
            return False
        expires = datetime.fromtimestamp(int(raw[settings.ttl_attribute]["N"]), self.clock.now.tzinfo)
        self.clock.now = max(self.clock.now, expires + timedelta(minutes=10))
        dynamodb.delete_item(TableName=settings.tasks_table, Key=KEY.dynamo())
        self.table.new_records()  # moto's REMOVE carries no TTL identity: the record TTL makes is built here
        self.stream_batches.append([events.stream_record(
            "REMOVE", KEY.dynamo(), old_image=dict(raw), sequence_number=str(next(_SEQUENCES)),
            created=self.clock.now, source_arn=settings.tasks_stream_arn, user_identity=events.TTL_USER_IDENTITY)])
        return True

    def _settled(self) -> bool:
        return (record_of(self.deps, KEY) or {}).get("exec_state") in ("DONE", "FAILED")


@dataclass
class Lab:
    """One moto account, provisioned once for the whole file (provisioning costs more than a scenario), reset
    between runs: tables emptied, queues and SES's sent mail cleared, schedules deleted, a new clock."""

    aws: Aws
    faults: Faults
    table: TableStream
    ses: Any
    world: World | None = None

    def deps_of(self) -> Deps:
        return Deps(settings=self.aws.settings, clients=self.aws.clients)

    @classmethod
    def start(cls, record: bool = True) -> Lab:
        moto_speed.uninstall()  # as the aws fixture does: an e2e test run earlier by this process may have installed it
        settings = Settings.from_env()
        clients = Clients(settings)
        if record:  # app code's calls are checked against the IAM policy (not the clean runs of collection)
            RECORDER.attach(clients.session)
        limits = AwsLimits(clients)  # a request AWS would reject fails the test, though moto accepts it
        settings, capture = provision_world(clients, settings)
        # exact-later is Scheduler's path (PAST_HORIZON=scheduler); the sweeper's failed and repeated writes: test_sweeper.py
        settings = replace(settings, past_horizon="scheduler")
        lab = cls(Aws(clients, settings, capture, limits), Faults(clients), TableStream(
            Deps(settings=settings, clients=clients)), clients.ses)
        for client in (clients.dynamodb, clients.sqs, clients.sns, clients.ses, clients.scheduler):
            client.meta.events.register("before-call", lab._note)
        return lab

    def _note(self, model: Any, **kwargs: Any) -> None:
        if self.world is not None:
            self.world.note(model)

    def reset(self) -> Deps:
        self.aws.limits.violations.clear()
        self.faults.calm()
        clients, settings = self.aws.clients, self.aws.settings
        use_client(self.deps_of(), "ses", self.ses)  # a scenario may have wrapped it
        for table in (settings.tasks_table, settings.state_table):
            for page in clients.dynamodb.get_paginator("scan").paginate(TableName=table):
                for row in page["Items"]:
                    clients.dynamodb.delete_item(TableName=table, Key={"PK": row["PK"], "SK": row["SK"]})
        for queue in sqs_backends[ACCOUNT][settings.region].queues.values():
            queue._messages.clear()
        ses_backends[ACCOUNT][settings.region].sent_messages.clear()
        group = settings.schedule_group
        for schedule in clients.scheduler.list_schedules(GroupName=group).get("Schedules", []):
            clients.scheduler.delete_schedule(Name=schedule["Name"], GroupName=group)
        self.table.new_records()  # the deletes' records are not the scenario's
        clock = FakeClock()
        return Deps(settings=settings, clients=clients, clock=clock, sleep=clock.sleep)

    def arrange(self, scenario: Scenario) -> World:
        deps = self.reset()
        assert isinstance(deps.clock, FakeClock)
        clients = deps.clients
        if scenario.action_fails:
            use_client(deps, "ses", FlakySes(clients.ses, failures=10_000))
        self.world = World(deps, deps.clock, self.table)
        clients.dynamodb.put_item(TableName=deps.settings.tasks_table, Item=ddb.serialize(scenario.item(deps.clock.now)))
        if "processor" in scenario.components:  # running for a while already: its progress is the last minute
            interval.save_progress(deps, int(deps.clock.now.timestamp()) - 60)
            self.world.next_tick = deps.clock.now
        return self.world

    def run(self, scenario: Scenario) -> World:
        world = self.arrange(scenario)
        world.run(self.aws, lazy=scenario.name == "lazy")
        return world


# --- the writes of a clean run, enumerated at collection ---------------------------------------------------------

def _cases() -> list[Any]:
    cases = []
    with mock_aws():
        lab = Lab.start(record=False)
        for scenario in SCENARIOS.values():
            seen: dict[str, int] = {}
            for operation, component in lab.run(scenario).writes:
                seen[operation] = seen.get(operation, 0) + 1
                if component in scenario.components:
                    for kind in KINDS:
                        cases.append(pytest.param(scenario.name, operation, seen[operation], kind,
                                                  id=f"{scenario.name}-{operation}#{seen[operation]}-{kind}"))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with mock_aws():
        started = Lab.start()
        yield started
    app_module.container.use(None)


# --- what must hold once it settled ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Hit:
    """The call a fault hit: its operation, kind and parameters."""

    operation: str
    kind: Kind
    params: Mapping[str, Any]

    def applied(self) -> bool:
        return self.kind in ("lost", "retried", "crash_after")

    def twice(self) -> bool:
        """Applied twice by AWS: botocore retried it (retried), or the app did, not knowing it was (lost)."""
        return self.kind in ("lost", "retried")

    def writes(self, text: str) -> bool:
        return text in json.dumps(self.params)


def expected_actions(hit: Hit, scenario: Scenario) -> int:
    """Emails sent: once; twice only inside docs/executor.md's window ("Delivery is at least once per action call"): the
    action's call applied but its answer lost (the retry sends again) or the worker dead after it, or the worker
    dead before the write that keeps its outcome on the claim."""
    if scenario.action_fails:
        return 0
    if hit.operation == "sesv2.SendEmail" and hit.applied():
        return 2
    if hit.operation == "dynamodb.UpdateItem" and hit.writes("#exec_owner = :me") and hit.kind == "crash":
        return 2  # the settle: the worker died before its outcome was written; the takeover runs it again
    return 1


def expected_sends(hit: Hit, operation: str, note: str, matches: Callable[[Mapping[str, Any]], bool]) -> int:
    """Alerts or dead letters of a failed task: once; twice only inside docs/executor.md's window ("Fail loudly"): the
    send applied and its answer lost or the worker dead after it, or the worker dead before noting it."""
    if hit.operation == operation and matches(hit.params) and hit.applied():
        return 2
    if hit.operation == "dynamodb.UpdateItem" and hit.writes(f"#{note} = ") and hit.kind == "crash":
        return 2
    return 1


@pytest.mark.parametrize(("scenario_name", "operation", "occurrence", "kind"), CASES)
def test_every_write_under_every_fault_settles_with_the_action_run_once(
        scenario_name: str, operation: str, occurrence: int, kind: Kind, lab: Lab) -> None:
    scenario = SCENARIOS[scenario_name]
    hit_params: list[Mapping[str, Any]] = []

    def note(params: Mapping[str, Any]) -> bool:
        hit_params.append(params)
        return True

    world = lab.arrange(scenario)  # the program's write is not faulted; what follows is
    deps, aws = world.deps, lab.aws
    app_module.container.use(deps)  # the IAM coverage check renders the policy from these settings
    fault = lab.faults.inject(operation, kind, occurrence=occurrence, match=note)
    world.run(aws, lazy=scenario.name == "lazy")
    assert fault.hits == 1, f"{operation} #{occurrence} was never made"
    assert not aws.limits.violations, "requests AWS would reject (moto accepted them): " + "; ".join(
        aws.limits.violations)
    hit = Hit(operation, kind, hit_params[occurrence - 1])

    assert world.dead_lettered == [], "a due message was dead-lettered"
    assert len(emails_sent()) == expected_actions(hit, scenario)
    item = deps.clients.dynamodb.get_item(TableName=deps.settings.tasks_table, Key=KEY.dynamo(),
                                          ConsistentRead=True).get("Item")
    assert "status" not in (item or {}), "the executor wrote to the task's item"
    record = record_of(deps, KEY) or {}
    status = lifecycle.state_of(record).value
    assert status in ("DONE", "FAILED"), f"the task was left {status}"
    assert record.get("exec_state") == ("FAILED" if scenario.action_fails else "DONE")
    if scenario.action_fails:
        assert status == "FAILED"
        alerts = aws.alerts()
        dead = [json.loads(m["Body"]) for m in aws.drain(deps.settings.task_dlq)]
        assert len(alerts) == expected_sends(hit, "sns.Publish", "alerted", lambda p: True)
        assert len(dead) == expected_sends(
            hit, "sqs.SendMessage", "dead_lettered", lambda p: deps.settings.task_dlq in str(p.get("QueueUrl")))
        assert len({a["message"]["dedupe_id"] for a in alerts} | {d["dedupe_id"] for d in dead}) == 1
    else:
        assert aws.alerts() == []
        assert aws.drain(deps.settings.task_dlq) == []


def test_every_scenario_has_writes_of_its_components_to_fault() -> None:
    for name in SCENARIOS:
        assert any(case.values[0] == name for case in CASES), name
    operations = {case.values[1] for case in CASES}
    assert {"sqs.SendMessage", "sqs.SendMessageBatch", "dynamodb.UpdateItem", "dynamodb.PutItem",
            "sesv2.SendEmail", "sns.Publish", "scheduler.CreateSchedule"} <= operations

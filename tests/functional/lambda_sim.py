"""Lambda's event sources, emulated in-process on the injected clock, for soak and fault tests under moto.

``LambdaSim`` delivers what the app's handlers would receive on AWS, at the
times AWS would deliver it, while the test's FakeClock jumps from one event to
the next (no real waiting):

- the due and backup-monitor queues: messages the app sent (read from moto's
  backend, delays on the fake clock), in batches, with visibility timeouts,
  duplicate deliveries of due messages when asked (``due_duplicates``),
  partial batch responses, receive counts and the redrive after
  ``MAX_RECEIVE_COUNT`` receives (to the due queue's DLQ, whose handler runs);
  the due DLQ has no redrive policy (deploy/provision.py): a message its
  handler fails on stays there and is received again, however many times;
- the tasks table's stream, in order, from moto's own stream: a batch that
  reports failures is retried from the lowest failed sequence number, one that
  raises (or whose worker crashed) is retried whole;
- DynamoDB's TTL: items whose TTL has passed are deleted by "the service", and
  their REMOVE records carry its userIdentity;
- EventBridge Scheduler: one-time ``at()`` schedules of the app's group fire
  their input into the due queue (``schedule_lateness`` after their time) and
  delete themselves;
- EventBridge rules: the interval processor every ``processor_period``; with ``sweeping`` its configured time in
  its context (Chalice's test client gives 3 s, under which the sweeper's tick stops at once: the queries of a
  sweep each minute would slow the long emulations that have no task for it).

The emulation's own reads and writes go through clients no fault hooks, so a
test's faults hit the app's calls only.  A handler that dies (``WorkerCrash``)
is an invocation that failed: its messages come back after the visibility
timeout, its stream batch is retried.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks.model import DueMessage, InvalidTask
from deploy.provision import MAX_RECEIVE_COUNT
from tests import events
from tests.configured_lambda import ConfiguredLambdaClient
from tests.faults import WorkerCrash
from tests.fixtures import ACCOUNT, FakeClock


@dataclass
class Message:
    body: str
    visible_at: datetime
    message_id: str
    receives: int = 0


@dataclass
class SimQueue:
    name: str
    handler: str
    batch_size: int
    visibility_timeout: int
    dead_letter_queue: str | None = None  # its redrive target (another emulated queue), if any
    redrive: bool = True  # a redrive policy: after MAX_RECEIVE_COUNT failed receives SQS moves the message
    messages: list[Message] = field(default_factory=list)
    dead: list[Message] = field(default_factory=list)
    delivered: int = 0


@dataclass
class LambdaSim:
    deps: Deps
    client: Client
    clock: FakeClock
    processor_period: timedelta | None = timedelta(minutes=1)  # None: the interval processor never runs
    # SQS's at-least-once delivery: every due message the app sends (its first hop) comes once more after each
    # of these delays, a copy of its own (a duplicate, or a redelivery of a message whose handler finished).
    due_duplicates: tuple[timedelta, ...] = ()
    # How late Scheduler fires a schedule after its at() time (AWS: within 60 s, "60 second precision").
    schedule_lateness: timedelta = timedelta(0)
    sweeping: bool = False  # the interval processor's tick has its configured time: the sweeper sweeps
    failed_invocations: int = 0
    invocations: Counter[str] = field(default_factory=Counter)  # per handler
    ttl_deletes: int = 0
    schedules_fired: int = 0
    _queues: dict[str, SimQueue] = field(default_factory=dict)
    _ids: int = 0
    _pending_records: list[dict[str, Any]] = field(default_factory=list)
    _after: str | None = None
    _ttl_keys: set[str] = field(default_factory=set)
    _next_tick: datetime | None = None
    _next_schedule: datetime | None = None
    _next_expiry: datetime | None = None
    _iterators: dict[str, str] = field(default_factory=dict)  # stream ARN -> the iterator after the last record read

    def __post_init__(self) -> None:
        s = self.deps.settings
        session = boto3.session.Session()
        self.ddb = session.client("dynamodb", region_name=s.region)
        self._streams = session.client("dynamodbstreams", region_name=s.region)
        self._scheduler = session.client("scheduler", region_name=s.region)
        self._queues = {
            s.due_queue: SimQueue(s.due_queue, "task_executor", 10, 120, s.due_dlq),
            s.due_dlq: SimQueue(s.due_dlq, "due_dead_letter", 10, 30, redrive=False),
            s.backup_monitor_queue: SimQueue(s.backup_monitor_queue, "backup_monitor", 1, 300),
        }
        self._next_tick = self.clock.now if self.processor_period is not None else None

    # --- one step of every source ----------------------------------------------------------------------

    def step(self) -> bool:
        """Deliver everything due now; True when something was delivered."""
        busy = False
        self._collect_sent()
        busy |= self._fire_schedules()
        busy |= self._expire_ttl()
        busy |= self._deliver_stream()
        self._collect_sent()
        for queue in self._queues.values():
            busy |= self._deliver_queue(queue)
        if self._next_tick is not None and self.processor_period is not None and self.clock.now >= self._next_tick:
            self._invoke("interval_processor", events.scheduled_event(self.clock.now))
            self._next_tick = self.clock.now + self.processor_period
            busy = True
        return busy

    def run(self, until: Any, limit: timedelta, idle_step: timedelta = timedelta(minutes=1)) -> None:
        """Step, moving the clock to the next event when idle, until ``until()`` or ``limit`` of fake time."""
        end = self.clock.now + limit
        while not until() and self.clock.now < end:
            if not self.step():
                self.clock.now = min(self._next_event(idle_step), end)

    def _next_event(self, idle_step: timedelta) -> datetime:
        candidates = [self.clock.now + idle_step]
        candidates += [m.visible_at for q in self._queues.values() for m in q.messages]
        candidates += [t for t in (self._next_tick, self._next_schedule, self._next_expiry) if t is not None]
        return max(self.clock.now + timedelta(milliseconds=1), min(candidates))

    # --- SQS ---------------------------------------------------------------------------------------------

    def _collect_sent(self) -> None:
        """Move what the app sent to the emulated queues (moto keeps it; its delays run on real time)."""
        from moto.sqs.models import sqs_backends

        backend = sqs_backends[ACCOUNT][self.deps.settings.region]
        for name, queue in self._queues.items():
            moto_queue = backend.queues.get(name)
            if moto_queue is None:
                continue
            for m in list(moto_queue._messages):
                delay = round((m.delayed_until - (m.sent_timestamp or 0)) / 1000) if m.delayed_until else 0
                self._ids += 1
                queue.messages.append(Message(m.body, self.clock.now + timedelta(seconds=delay), f"m{self._ids}"))
                if name == self.deps.settings.due_queue and self.due_duplicates and _first_hop(m.body):
                    for after in self.due_duplicates:
                        self._ids += 1
                        queue.messages.append(Message(m.body, self.clock.now + timedelta(seconds=delay) + after,
                                                      f"m{self._ids}"))
            moto_queue._messages.clear()

    def _deliver_queue(self, queue: SimQueue) -> bool:
        visible = [m for m in queue.messages if m.visible_at <= self.clock.now][: queue.batch_size]
        if not visible:
            return False
        for m in visible:
            m.receives += 1
            m.visible_at = self.clock.now + timedelta(seconds=queue.visibility_timeout)
        records = [events.sqs_record(m.body, queue.name, m.message_id, m.receives) for m in visible]
        queue.delivered += len(visible)
        response = self._invoke(queue.handler, events.sqs_event(*records))
        failed = {m.message_id for m in visible} if response is None else events.batch_item_failures(response) or set()
        for m in visible:
            if m.message_id not in failed:
                queue.messages.remove(m)
            elif queue.redrive and m.receives >= MAX_RECEIVE_COUNT:
                queue.messages.remove(m)
                queue.dead.append(m)
                if queue.dead_letter_queue in self._queues:  # SQS's redrive: the handler of the DLQ sees it
                    self._queues[queue.dead_letter_queue].messages.append(
                        Message(m.body, self.clock.now, m.message_id, m.receives))
        return True

    # --- the stream --------------------------------------------------------------------------------------

    def stream_page(self, arn: str, after: str | None) -> list[Any]:
        """The next page (up to 1,000) of the stream's records after sequence number ``after`` (from its start when
        None), read as Lambda's poller reads: GetRecords on the NextShardIterator of the previous read, a new
        iterator (DescribeStream, GetShardIterator) only for a stream's first read or when no next one was given."""
        iterator = self._iterators.pop(arn, None)
        if iterator is not None and _read_through(iterator, self.deps.settings.region):
            self._iterators[arn] = iterator  # GetRecords would answer no record, and an iterator to the same place
            return []
        if iterator is None:
            [shard] = self._streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
            where: dict[str, Any] = ({"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": after}
                                     if after else {"ShardIteratorType": "TRIM_HORIZON"})
            iterator = self._streams.get_shard_iterator(
                StreamArn=arn, ShardId=shard["ShardId"], **where)["ShardIterator"]
        page = self._streams.get_records(ShardIterator=iterator, Limit=1000)
        if page.get("NextShardIterator"):
            self._iterators[arn] = page["NextShardIterator"]
        return list(page["Records"])

    def _read_stream(self) -> None:
        arn = self.deps.settings.tasks_stream_arn
        while True:
            records = self.stream_page(arn, self._after)
            for record in records:
                key = events.item_key(record["dynamodb"]["Keys"])
                by_ttl = record["eventName"] == "REMOVE" and key in self._ttl_keys
                if by_ttl:
                    self._ttl_keys.discard(key)
                self._pending_records.append(events.stream_record_from_api(
                    record, arn, self.deps.settings.region, events.TTL_USER_IDENTITY if by_ttl else None))
                self._after = record["dynamodb"]["SequenceNumber"]
            if not records or arn not in self._iterators:
                return

    def _deliver_stream(self) -> bool:
        self._read_stream()
        if not self._pending_records:
            return False
        batch = self._pending_records[:100]
        response = self._invoke("task_stream", events.stream_event(*batch))
        if response is None:
            return True  # the whole batch is retried
        failed = [f["itemIdentifier"] for f in response.get("batchItemFailures", [])]
        if not failed:
            del self._pending_records[: len(batch)]
            return True
        sequences = [r["dynamodb"]["SequenceNumber"] for r in batch]
        first = min(sequences.index(s) for s in failed if s in sequences)
        del self._pending_records[:first]
        return True

    # --- TTL and Scheduler -------------------------------------------------------------------------------

    def _expire_ttl(self) -> bool:
        s = self.deps.settings
        now = int(self.clock.now.timestamp())
        if self._next_expiry is not None and self._next_expiry > self.clock.now and not self._pending_records:
            return False  # nothing expires before the next known TTL, and no write since may have set one
        expired: list[dict[str, Any]] = []
        later: list[int] = []
        for item in stored_items(s.region, s.tasks_table, having=s.ttl_attribute):
            ttl = int(float(item[s.ttl_attribute].get("N", "0")))
            (expired.append(item) if ttl <= now else later.append(ttl))
        self._next_expiry = datetime.fromtimestamp(min(later), UTC) if later else None
        for item in expired:
            key = {"PK": item["PK"], "SK": item["SK"]}
            self.ddb.delete_item(TableName=s.tasks_table, Key=key)
            self._ttl_keys.add(events.item_key(key))
            self.ttl_deletes += 1
        return bool(expired)

    def _fire_schedules(self) -> bool:
        group = self.deps.settings.schedule_group
        fired = False
        self._next_schedule = None
        for schedule in stored_schedules(self.deps.settings.region, group):
            match = re.fullmatch(r"at\((.+)\)", schedule["ScheduleExpression"])
            if match is None:
                continue
            at = datetime.fromisoformat(match.group(1)).replace(tzinfo=UTC) + self.schedule_lateness
            if at > self.clock.now:
                self._next_schedule = min(at, self._next_schedule or at)
                continue
            queue = self._queues[self.deps.settings.due_queue]
            self._ids += 1
            queue.messages.append(Message(schedule["Target"]["Input"], self.clock.now, f"s{self._ids}"))
            self._scheduler.delete_schedule(Name=schedule["Name"], GroupName=group)
            self.schedules_fired += 1
            fired = True
        return fired

    # --- invocations -------------------------------------------------------------------------------------

    def _invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any] | None:
        """The handler's response, or None when the invocation failed (an exception, a crashed worker)."""
        self.invocations[function] += 1
        lambda_ = self.client.lambda_
        if self.sweeping and function == "interval_processor" and not isinstance(lambda_, ConfiguredLambdaClient):
            lambda_ = ConfiguredLambdaClient.of(self.client)
        try:
            payload = lambda_.invoke(function, event).payload
        except (Exception, WorkerCrash):
            self.failed_invocations += 1
            return None
        if isinstance(payload, dict) and "errorMessage" in payload:
            self.failed_invocations += 1
            return None
        return payload if isinstance(payload, dict) else {}

    def invoke_ok(self, function: str, event: dict[str, Any]) -> bool:
        """Invoke a handler once (as an asynchronous invocation would); False when it failed."""
        return self._invoke(function, event) is not None

    def dead_letters(self) -> dict[str, int]:
        return {name: len(q.dead) for name, q in self._queues.items()}

    def queue(self, name: str) -> SimQueue:
        """The emulated queue ``name`` (its messages, the dead ones, how many it delivered)."""
        return self._queues[name]


def stored_schedules(region: str, group: str) -> list[dict[str, Any]]:
    """The group's schedules as ListSchedules lists them (newest first) and GetSchedule shows each, read from
    moto's backend: an emulation looks at every step, and these requests were a fifth of a long run's."""
    from moto.scheduler.models import scheduler_backends

    found = scheduler_backends[ACCOUNT][region].schedule_groups.get(group)
    schedules = sorted(found.schedules.values(), key=lambda x: x.creation_date, reverse=True) if found else []
    return [schedule.to_dict() for schedule in schedules]


def _read_through(iterator: str, region: str) -> bool:
    """Whether GetRecords on the shard iterator would find no record (moto's backend looked at, not asked): the
    emulation reads each stream at every step, mostly to find nothing new."""
    from moto.dynamodbstreams.models import dynamodbstreams_backends

    kept = dynamodbstreams_backends[ACCOUNT][region].shard_iterators.get(iterator)
    if kept is None:
        return False
    shard = kept.stream_shard
    return int(kept.sequence_number) - int(shard.starting_sequence_number) >= len(shard.items)


def stored_items(region: str, table: str, having: str) -> list[dict[str, Any]]:
    """The items of ``table`` that have the attribute ``having``, as a Scan answers them (DynamoDB JSON, binary
    values as bytes, in moto's scan order), read from moto's backend: the emulation looks at its tables at many
    steps, and a Scan each time was a tenth of a long emulation's requests."""
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.utilities import dynamo_json_dump

    items = dynamodb_backends[ACCOUNT][region].get_table(table).all_items()
    return [ddb.binary_as_bytes(json.loads(dynamo_json_dump(item.to_json()))["Attributes"])
            for item in items if having in item.attrs]


def _first_hop(body: str) -> bool:
    """A due message as first sent (not sent back for being early, which would copy its copies again)."""
    try:
        return DueMessage.from_json(body).hops == 0
    except InvalidTask:
        return False

"""The runtime with any Chalice app: redelivery, batch failures, Scheduler timing, TTL removals.

A tiny app is built here whose handlers fail on purpose; the runtime runs it
against moto's server on a free port, and the tests drive it only with boto3
(send, put, create_schedule) and read what its handlers saw.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from chalice.app import Chalice, DynamoDBEvent, SQSEvent

from deploy.lambda_events import TTL_USER_IDENTITY
from local.aws import MotoServer
from local.client import wait_until
from local.moto_speed import watch_schedules, watch_writes
from local.runtime import Runtime, RuntimeOptions
from local.sources.sqs import QueuePoller

pytestmark = pytest.mark.e2e

REGION = "us-east-1"


@dataclass
class Seen:
    """What the tiny app's handlers received, and how they should behave next."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    sqs: list[list[dict[str, Any]]] = field(default_factory=list)
    stream: list[list[dict[str, Any]]] = field(default_factory=list)
    scheduled: list[tuple[datetime, Any]] = field(default_factory=list)
    fail_bodies: set[str] = field(default_factory=set)      # raise once when a batch has one of these
    report_bodies: set[str] = field(default_factory=set)    # report as batchItemFailures once
    fail_keys: set[str] = field(default_factory=set)        # stream: raise once for a batch with this PK

    def take(self, pool: set[str], candidates: list[str]) -> list[str]:
        with self.lock:
            hit = [c for c in candidates if c in pool]
            pool.difference_update(hit)
            return hit


@dataclass(frozen=True)
class Schedules:
    """The Scheduler tests' schedules, made as the runtime starts (their times pass while the other tests run)."""

    when: datetime          # when each is due: a whole second, a few seconds after they are made
    target_url: str         # "once"'s SQS target
    dlq_url: str            # "lost"'s dead-letter queue
    topic: str              # "publish"'s SNS target ...
    subscriber_url: str     # ... and the queue subscribed to it


@dataclass
class World:
    runtime: Runtime
    seen: Seen
    endpoint: str
    queue_url: str
    queue_arn: str
    table: str
    ttl_table: str
    stream_arn: str
    schedules: Schedules

    def client(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION)  # type: ignore[call-overload]


def build_app(seen: Seen, queue: str, stream_arn: str, ttl_stream_arn: str) -> Chalice:
    app = Chalice(app_name="tiny")

    @app.on_sqs_message(queue=queue, batch_size=5, maximum_batching_window_in_seconds=1, name="consume")
    def consume(event: SQSEvent) -> dict[str, Any] | None:
        records = [r.to_dict() for r in event]
        with seen.lock:
            seen.sqs.append(records)
        bodies = [r["body"] for r in records]
        if seen.take(seen.fail_bodies, bodies):
            raise RuntimeError("failing once on purpose")
        reported = set(seen.take(seen.report_bodies, bodies))
        if reported:
            return {"batchItemFailures": [{"itemIdentifier": r["messageId"]}
                                          for r in records if r["body"] in reported]}
        return None

    @app.on_dynamodb_record(stream_arn=stream_arn, batch_size=10, starting_position="TRIM_HORIZON", name="changes")
    def changes(event: DynamoDBEvent) -> None:
        records = event.to_dict()["Records"]
        with seen.lock:
            seen.stream.append(records)
        keys = [r["dynamodb"]["Keys"]["PK"]["S"] for r in records]
        if seen.take(seen.fail_keys, keys):
            raise RuntimeError("failing once on purpose")

    @app.on_dynamodb_record(stream_arn=ttl_stream_arn, batch_size=10, starting_position="LATEST", name="expiries")
    def expiries(event: DynamoDBEvent) -> None:
        with seen.lock:
            seen.stream.append(event.to_dict()["Records"])

    @app.lambda_function(name="on_schedule")
    def on_schedule(event: Any, context: Any) -> None:
        with seen.lock:
            seen.scheduled.append((datetime.now(UTC), event))

    return app


def _table(ddb: Any, name: str) -> str:
    table = ddb.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
    return str(table["TableDescription"]["LatestStreamArn"])


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    moto = MotoServer(port=0).start()
    session = boto3.session.Session(region_name=REGION)
    sqs = session.client("sqs", endpoint_url=moto.endpoint)
    ddb = session.client("dynamodb", endpoint_url=moto.endpoint)
    queue_url = sqs.create_queue(QueueName="tiny-work", Attributes={"VisibilityTimeout": "2"})["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    stream_arn = _table(ddb, "tiny-items")
    ttl_stream_arn = _table(ddb, "tiny-expiring")
    ddb.update_time_to_live(TableName="tiny-expiring",
                            TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires"})
    session.client("scheduler", endpoint_url=moto.endpoint).create_schedule_group(Name="tiny")
    # written before the runtime starts: the LATEST handler (expiries) must never see it
    ddb.put_item(TableName="tiny-expiring", Item={"PK": {"S": "before-start"}})
    seen = Seen()
    app = build_app(seen, "tiny-work", stream_arn, ttl_stream_arn)
    runtime = Runtime(app, moto.endpoint, RuntimeOptions(api_port=0, scheduler_jitter_seconds=0,
                                                         ttl_lag_seconds=1), out=lambda line: None,
                      writes=watch_writes, schedule_changes=watch_schedules)  # moto's feeds, as `make run`
    runtime.start()
    try:
        yield World(runtime, seen, moto.endpoint, queue_url, queue_arn, "tiny-items", "tiny-expiring", stream_arn,
                    make_schedules(session, moto.endpoint))
    finally:
        runtime.stop()
        moto.stop()


def _queue(sqs: Any, name: str) -> tuple[str, str]:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    return url, sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def _at(moment: datetime) -> str:
    return f"at({moment.astimezone(UTC):%Y-%m-%dT%H:%M:%S})"


def make_schedules(session: boto3.session.Session, endpoint: str) -> Schedules:
    """One-time schedules, all due at the same whole second 3 s ahead: "once" to an SQS queue (deleted after),
    "call" to the app's on_schedule handler, "lost" to a queue that does not exist (retried once, then
    dead-lettered), "publish" to an SNS topic."""
    scheduler = session.client("scheduler", endpoint_url=endpoint)
    sqs = session.client("sqs", endpoint_url=endpoint)
    sns = session.client("sns", endpoint_url=endpoint)
    target_url, target_arn = _queue(sqs, "tiny-scheduled")
    dlq_url, dlq_arn = _queue(sqs, "tiny-dlq")
    topic = sns.create_topic(Name="tiny-topic")["TopicArn"]
    subscriber_url, subscriber_arn = _queue(sqs, "tiny-subscriber")
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=subscriber_arn)
    when = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    role = "arn:aws:iam::123456789012:role/tiny"
    scheduler.create_schedule(
        Name="once", GroupName="tiny", ScheduleExpression=_at(when), ScheduleExpressionTimezone="UTC",
        FlexibleTimeWindow={"Mode": "OFF"}, ActionAfterCompletion="DELETE",
        Target={"Arn": target_arn, "RoleArn": role, "Input": '{"hello": 1}'})
    scheduler.create_schedule(
        Name="call", GroupName="tiny", ScheduleExpression=_at(when), FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": "arn:aws:lambda:us-east-1:123456789012:function:tiny-local-on_schedule",
                "RoleArn": role, "Input": '{"task": "t-1"}'})
    scheduler.create_schedule(
        Name="lost", GroupName="tiny", ScheduleExpression=_at(when), FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": "arn:aws:sqs:us-east-1:123456789012:no-such-queue", "RoleArn": "arn:aws:iam::1:role/x",
                "Input": "lost", "RetryPolicy": {"MaximumRetryAttempts": 1, "MaximumEventAgeInSeconds": 60},
                "DeadLetterConfig": {"Arn": dlq_arn}})
    scheduler.create_schedule(
        Name="publish", GroupName="tiny", ScheduleExpression=_at(when), FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": topic, "RoleArn": role, "Input": '{"via": "sns"}'})
    return Schedules(when, target_url, dlq_url, topic, subscriber_url)


def _sqs_deliveries(world: World, body: str) -> list[dict[str, Any]]:
    with world.seen.lock:
        return [r for batch in world.seen.sqs for r in batch if r["body"] == body]


def _queue_is_empty(world: World) -> bool:
    attributes = world.client("sqs").get_queue_attributes(QueueUrl=world.queue_url, AttributeNames=["All"])
    counts: dict[str, str] = attributes["Attributes"]
    return counts["ApproximateNumberOfMessages"] == "0" and counts["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_a_message_whose_handler_raises_comes_back_after_the_visibility_timeout_then_is_deleted(
        world: World) -> None:
    world.seen.fail_bodies.add("flaky")
    world.client("sqs").send_message(QueueUrl=world.queue_url, MessageBody="flaky")
    def redelivered() -> list[dict[str, Any]] | None:
        deliveries = _sqs_deliveries(world, "flaky")
        return deliveries if len(deliveries) >= 2 else None
    deliveries = wait_until(redelivered, 10, "a second delivery")
    first, second = deliveries[:2]
    assert first["messageId"] == second["messageId"]
    assert [d["attributes"]["ApproximateReceiveCount"] for d in (first, second)] == ["1", "2"]
    assert first["eventSource"] == "aws:sqs" and first["eventSourceARN"] == world.queue_arn
    assert first["awsRegion"] == REGION and first["md5OfBody"] and first["receiptHandle"]
    wait_until(lambda: _queue_is_empty(world), 5, "the message to be deleted after success")
    time.sleep(2.5)  # past another visibility timeout: no third delivery
    assert len(_sqs_deliveries(world, "flaky")) == 2


def test_only_the_messages_reported_in_batch_item_failures_come_back(world: World) -> None:
    world.seen.report_bodies.add("partial-b")
    sqs = world.client("sqs")
    sqs.send_message_batch(QueueUrl=world.queue_url, Entries=[
        {"Id": n, "MessageBody": f"partial-{n}"} for n in ("a", "b", "c")])
    wait_until(lambda: len(_sqs_deliveries(world, "partial-b")) >= 2, 10, "the reported message to come back")
    wait_until(lambda: _queue_is_empty(world), 5, "the queue to empty")
    time.sleep(2.5)
    assert [len(_sqs_deliveries(world, f"partial-{n}")) for n in ("a", "b", "c")] == [1, 2, 1]


def test_a_message_with_a_delay_is_not_delivered_before_it(world: World) -> None:
    world.client("sqs").send_message(QueueUrl=world.queue_url, MessageBody="later", DelaySeconds=2)
    sent = time.monotonic()
    wait_until(lambda: _sqs_deliveries(world, "later"), 6, "the delayed message")
    assert time.monotonic() - sent >= 1.9


def _stream_batches(world: World, prefix: str) -> list[list[dict[str, Any]]]:
    with world.seen.lock:
        return [b for b in world.seen.stream if any(r["dynamodb"]["Keys"]["PK"]["S"].startswith(prefix) for r in b)]


def test_a_stream_batch_whose_handler_raises_is_delivered_again_in_order(world: World) -> None:
    ddb = world.client("dynamodb")
    world.seen.fail_keys.add("order-0")
    for i in range(3):
        ddb.put_item(TableName=world.table, Item={"PK": {"S": f"order-{i}"}, "n": {"N": str(i)}})
    ddb.delete_item(TableName=world.table, Key={"PK": {"S": "order-2"}})

    def delivered() -> list[dict[str, Any]] | None:
        records = [r for b in _stream_batches(world, "order-") for r in b]
        return records if len({r["eventID"] for r in records}) >= 4 and len(records) > 4 else None
    wait_until(delivered, 10, "the failed batch again and every record")
    batches = _stream_batches(world, "order-")
    first_numbers = [r["dynamodb"]["SequenceNumber"] for r in batches[0]]
    again = [r["dynamodb"]["SequenceNumber"] for r in batches[1]][:len(first_numbers)]
    assert again == first_numbers                     # the same records, in the same order
    everything = [r for b in batches[1:] for r in b]
    assert [r["eventName"] for r in everything] == ["INSERT", "INSERT", "INSERT", "REMOVE"]
    numbers = [int(r["dynamodb"]["SequenceNumber"]) for r in everything]
    assert numbers == sorted(numbers)
    record = everything[0]
    assert record["eventVersion"] == "1.1" and record["eventSource"] == "aws:dynamodb"
    assert record["eventSourceARN"] == world.stream_arn
    assert record["dynamodb"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"
    assert record["dynamodb"]["NewImage"]["n"] == {"N": "0"} and "userIdentity" not in record
    assert isinstance(record["dynamodb"]["ApproximateCreationDateTime"], float)
    assert "OldImage" in everything[-1]["dynamodb"] and "userIdentity" not in everything[-1]


def test_an_expired_item_is_removed_by_the_ttl_service_and_a_user_delete_is_not(world: World) -> None:
    ddb = world.client("dynamodb")
    now = int(time.time())
    ddb.put_item(TableName=world.ttl_table, Item={"PK": {"S": "ttl-expired"}, "expires": {"N": str(now - 1)}})
    ddb.put_item(TableName=world.ttl_table, Item={"PK": {"S": "ttl-future"}, "expires": {"N": str(now + 3600)}})
    ddb.put_item(TableName=world.ttl_table, Item={"PK": {"S": "ttl-user"}, "expires": {"N": str(now + 3600)}})
    ddb.delete_item(TableName=world.ttl_table, Key={"PK": {"S": "ttl-user"}})

    def removals() -> dict[str, dict[str, Any]] | None:
        found = {r["dynamodb"]["Keys"]["PK"]["S"]: r for b in _stream_batches(world, "ttl-") for r in b
                 if r["eventName"] == "REMOVE"}
        return found if {"ttl-expired", "ttl-user"} <= found.keys() else None
    found = wait_until(removals, 8, "the TTL removal")
    assert found["ttl-expired"]["userIdentity"] == TTL_USER_IDENTITY
    assert found["ttl-expired"]["dynamodb"]["OldImage"]["expires"] == {"N": str(now - 1)}
    assert "userIdentity" not in found["ttl-user"]
    assert "ttl-future" not in found
    assert "Item" in ddb.get_item(TableName=world.ttl_table, Key={"PK": {"S": "ttl-future"}})


def test_a_one_time_schedule_with_jitter_0_delivers_to_sqs_within_a_second_and_is_deleted(world: World) -> None:
    scheduler = world.client("scheduler")
    sqs = world.client("sqs")
    target_url, when = world.schedules.target_url, world.schedules.when

    def received() -> list[Any]:
        return list(sqs.receive_message(QueueUrl=target_url, WaitTimeSeconds=1,
                                        AttributeNames=["SentTimestamp"]).get("Messages", []))
    message = wait_until(received, 8, "the scheduled message")[0]
    sent = datetime.fromtimestamp(int(message["Attributes"]["SentTimestamp"]) / 1000, UTC)
    assert json.loads(message["Body"]) == {"hello": 1}
    assert abs((sent - when).total_seconds()) < 1.0, f"sent at {sent}, due at {when}"
    wait_until(lambda: not scheduler.list_schedules(GroupName="tiny", NamePrefix="once")["Schedules"], 3,
               "the completed schedule to be deleted")


def test_a_schedule_with_a_lambda_target_invokes_the_apps_handler_with_its_input(world: World) -> None:
    scheduler = world.client("scheduler")
    when = world.schedules.when
    at, event = wait_until(lambda: list(world.seen.scheduled), 6, "the handler to be invoked")[0]
    assert event == {"task": "t-1"}
    assert abs((at - when).total_seconds()) < 1.5
    time.sleep(max(0.0, 1.5 - (datetime.now(UTC) - at).total_seconds()))  # one-time: never again (the
    assert len(world.seen.scheduled) == 1                                   # schedule stays: no ActionAfterCompletion)
    assert scheduler.get_schedule(Name="call", GroupName="tiny")["Name"] == "call"


def test_a_schedule_whose_target_is_missing_is_retried_then_dead_lettered(world: World) -> None:
    sqs = world.client("sqs")
    dlq_url = world.schedules.dlq_url

    def dead() -> list[Any]:
        return list(sqs.receive_message(QueueUrl=dlq_url, WaitTimeSeconds=1,
                                        MessageAttributeNames=["All"]).get("Messages", []))
    message = wait_until(dead, 30, "the dead-lettered delivery")[0]  # 2-3 s after its time unloaded
    assert message["Body"] == "lost"
    attributes = {k: v["StringValue"] for k, v in message["MessageAttributes"].items()}
    assert attributes["EXHAUSTED_RETRY_CONDITION"] == "MaximumRetryAttempts"
    assert attributes["RETRY_ATTEMPTS"] == "1"
    assert attributes["TARGET_ARN"].endswith(":no-such-queue")


def test_the_sqs_poller_survives_an_aws_error_and_the_undeleted_message_comes_back(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    client = world.runtime.client("sqs")
    real = client.delete_message_batch
    calls: list[int] = []

    def flaky(**kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise EndpointConnectionError(endpoint_url=world.endpoint)
        return real(**kwargs)

    monkeypatch.setattr(client, "delete_message_batch", flaky)
    sqs = world.client("sqs")
    sqs.send_message(QueueUrl=world.queue_url, MessageBody="undeleted")
    wait_until(lambda: len(_sqs_deliveries(world, "undeleted")) >= 2, 8, "the undeleted message to come back")
    sqs.send_message(QueueUrl=world.queue_url, MessageBody="after-error")
    wait_until(lambda: _sqs_deliveries(world, "after-error"), 5, "a message sent after the error")
    wait_until(lambda: _queue_is_empty(world), 5, "the queue to empty")
    assert [t.is_alive() for t in world.runtime._threads if t.name == "local-consume"] == [True]


def _batches_with(world: World, prefix: str) -> list[list[str]]:
    with world.seen.lock:
        return [[r["body"] for r in b] for b in world.seen.sqs if any(r["body"].startswith(prefix) for r in b)]


def _one_poller(world: World) -> None:
    """Until the handler's pollers are back to one (earlier tests' messages may have started more: each
    gathers its own batch, so messages sent together could be split between them, as on Lambda)."""
    poller = world.runtime.source("consume")
    assert isinstance(poller, QueuePoller)
    wait_until(lambda: poller.pollers == 1, 30, "a single poller")


def test_sqs_batches_hold_at_most_the_batch_size(world: World) -> None:
    _one_poller(world)
    world.client("sqs").send_message_batch(QueueUrl=world.queue_url, Entries=[
        {"Id": str(n), "MessageBody": f"seven-{n}"} for n in range(7)])
    wait_until(lambda: sum(map(len, _batches_with(world, "seven-"))) >= 7, 8, "the seven messages")
    batches = _batches_with(world, "seven-")
    assert sorted(b for batch in batches for b in batch) == [f"seven-{n}" for n in range(7)]
    assert sorted(map(len, batches)) == [2, 5]


def test_the_batching_window_gathers_messages_sent_apart(world: World) -> None:
    _one_poller(world)
    sqs = world.client("sqs")
    sqs.send_message(QueueUrl=world.queue_url, MessageBody="window-1")
    time.sleep(0.4)
    sqs.send_message(QueueUrl=world.queue_url, MessageBody="window-2")
    wait_until(lambda: sum(map(len, _batches_with(world, "window-"))) >= 2, 5, "both messages")
    assert _batches_with(world, "window-") == [["window-1", "window-2"]]


def test_a_latest_handler_never_sees_records_written_before_the_runtime_started(world: World) -> None:
    ddb = world.client("dynamodb")
    ddb.put_item(TableName=world.ttl_table, Item={"PK": {"S": "after-start"}})
    wait_until(lambda: _stream_batches(world, "after-start"), 5, "the record written after the start")
    assert _stream_batches(world, "before-start") == []


def test_a_schedule_with_an_sns_target_publishes_to_the_topics_subscribers(world: World) -> None:
    sqs = world.client("sqs")
    topic, url = world.schedules.topic, world.schedules.subscriber_url

    def received() -> list[Any]:
        return list(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages", []))
    [message] = wait_until(received, 30, "the published message")  # returns as soon as it comes; 6 s was too short beside another worker
    envelope = json.loads(message["Body"])
    assert envelope["TopicArn"] == topic and json.loads(envelope["Message"]) == {"via": "sns"}

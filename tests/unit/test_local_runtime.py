"""The offline runtime's decisions, without moto or real time: event shapes, retries, schedules, TTL."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from chalice.app import Chalice, SQSEvent

from local import events
from local.invoker import Invoker, Reporter
from local.runtime import Runtime, RuntimeOptions
from local.sources.scheduler import next_due, spread_seconds
from local.sources.schedules import ScheduledRule
from local.sources.sqs import to_delete
from local.sources.streams import remaining_after_failures, retry_pause
from local.sources.ttl import TtlLedger, expired
from tests.fixtures import FakeClock

NOON = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)

# --- event shapes ----------------------------------------------------------------


def test_a_received_sqs_message_becomes_the_record_lambda_delivers() -> None:
    message = {
        "MessageId": "m-1", "ReceiptHandle": "rh-1", "Body": "hello", "MD5OfMessageAttributes": "abc",
        "Attributes": {"ApproximateReceiveCount": "2", "SentTimestamp": "1795374116095", "SenderId": "AIDA",
                       "ApproximateFirstReceiveTimestamp": "1795374116101"},
        "MessageAttributes": {"kind": {"DataType": "String", "StringValue": "due"}},
    }
    record = events.sqs_record_from_message(message, "arn:aws:sqs:us-east-1:123456789012:work")
    assert record["messageId"] == "m-1" and record["receiptHandle"] == "rh-1" and record["body"] == "hello"
    assert record["attributes"]["ApproximateReceiveCount"] == "2"
    assert record["attributes"]["SentTimestamp"] == "1795374116095"
    assert record["messageAttributes"] == {"kind": {"stringValue": "due", "stringListValues": [],
                                                    "binaryListValues": [], "dataType": "String"}}
    assert record["md5OfBody"] == "5d41402abc4b2a76b9719d911017c592"
    assert record["md5OfMessageAttributes"] == "abc"
    assert (record["eventSource"], record["eventSourceARN"], record["awsRegion"]) == (
        "aws:sqs", "arn:aws:sqs:us-east-1:123456789012:work", "us-east-1")
    assert SQSEvent(events.sqs_event(record), None).to_dict()["Records"][0]["body"] == "hello"


def test_a_stream_record_read_from_the_api_is_shaped_as_lambda_delivers_it() -> None:
    arn = events.stream_arn("items")
    api_record = {
        "eventID": "e-1", "eventName": "MODIFY", "eventVersion": "1.0", "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {"ApproximateCreationDateTime": datetime(2026, 11, 22, 12, 0, 0, 700000, tzinfo=UTC),
                     "Keys": {"PK": {"S": "a"}}, "NewImage": {"PK": {"S": "a"}, "b": {"B": b"xx"}},
                     "OldImage": {"PK": {"S": "a"}}, "SequenceNumber": "1100", "SizeBytes": 40,
                     "StreamViewType": "NEW_AND_OLD_IMAGES"},
    }
    record = events.stream_record_from_api(api_record, arn)
    assert record["eventVersion"] == "1.1" and record["eventSourceARN"] == arn
    assert record["eventID"] == "e-1" and record["eventName"] == "MODIFY"
    assert record["dynamodb"]["ApproximateCreationDateTime"] == NOON.timestamp()
    assert record["dynamodb"]["NewImage"]["b"] == {"B": "eHg="}  # binary as base64 text
    assert record["dynamodb"]["SequenceNumber"] == "1100" and record["dynamodb"]["SizeBytes"] == 40
    assert "userIdentity" not in record


def test_a_ttl_removal_carries_the_dynamodb_service_identity() -> None:
    record = events.stream_record("REMOVE", {"PK": {"S": "a"}}, old_image={"PK": {"S": "a"}},
                                  new_image={"PK": {"S": "ignored"}}, user_identity=events.TTL_USER_IDENTITY)
    assert record["userIdentity"] == {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    assert "NewImage" not in record["dynamodb"] and record["dynamodb"]["OldImage"] == {"PK": {"S": "a"}}


def test_images_follow_the_stream_view_type() -> None:
    keys_only = events.stream_record("INSERT", {"PK": {"S": "a"}}, new_image={"PK": {"S": "a"}},
                                     view_type="KEYS_ONLY")
    assert "NewImage" not in keys_only["dynamodb"]
    with pytest.raises(ValueError, match="event_name"):
        events.stream_record("UPSERT", {"PK": {"S": "a"}})


@pytest.mark.parametrize(("response", "expected"), [
    (None, None),
    ({"statusCode": 200}, None),
    ({"batchItemFailures": []}, set()),
    ({"batchItemFailures": [{"itemIdentifier": "a"}, {"itemIdentifier": "b"}]}, {"a", "b"}),
])
def test_batch_item_failures_are_read_from_the_handler_response(response: Any, expected: set[str] | None) -> None:
    assert events.batch_item_failures(response) == expected


def test_a_malformed_batch_item_failures_response_fails_the_whole_batch() -> None:
    with pytest.raises(ValueError):
        events.batch_item_failures({"batchItemFailures": [{"itemIdentifier": ""}]})


# --- SQS and stream retries -----------------------------------------------------

def test_after_a_partial_failure_only_the_reported_messages_stay_in_the_queue() -> None:
    batch = [{"MessageId": i, "ReceiptHandle": f"h{i}"} for i in ("a", "b", "c")]
    assert [m["MessageId"] for m in to_delete(batch, {"b"})] == ["a", "c"]
    assert len(to_delete(batch, None)) == 3


def test_a_failure_report_naming_an_unknown_message_keeps_the_whole_batch() -> None:
    batch = [{"MessageId": i, "ReceiptHandle": f"h{i}"} for i in ("a", "b")]
    assert to_delete(batch, {"zzz"}) == []


def _seq(*numbers: str) -> list[dict[str, Any]]:
    return [events.stream_record("INSERT", {"PK": {"S": n}}, sequence_number=n) for n in numbers]


def test_a_stream_batch_is_retried_from_its_first_failed_record() -> None:
    batch = _seq("10", "11", "12", "13")
    again = remaining_after_failures(batch, {"12", "13"})
    assert [r["dynamodb"]["SequenceNumber"] for r in again] == ["12", "13"]


def test_an_unknown_failure_identifier_retries_the_whole_stream_batch() -> None:
    batch = _seq("10", "11")
    assert remaining_after_failures(batch, {"99"}) == batch


def test_stream_retries_back_off_up_to_half_a_minute() -> None:
    assert [retry_pause(n) for n in (1, 2, 3, 4, 10)] == [0.5, 1.0, 2.0, 4.0, 30.0]


# --- scheduled rules and Scheduler schedules -----------------------------------

def _app_with_schedule(expression: str) -> Chalice:
    app = Chalice(app_name="tiny")

    @app.schedule(expression, name="tick")
    def tick(event: Any) -> None:
        return None

    return app


def test_a_rate_rule_fires_one_period_after_the_runtime_started_then_every_period() -> None:
    clock = FakeClock(now=NOON + timedelta(seconds=7))
    app = _app_with_schedule("rate(5 minutes)")
    with ThreadPoolExecutor(1) as pool:
        rule = ScheduledRule(app.event_sources[0], Invoker(app, Reporter(lambda _: None)), pool,  # type: ignore[arg-type]
                             clock, region="us-east-1", account="123456789012")
    assert rule.next_at == NOON + timedelta(minutes=5, seconds=7)
    assert rule.following(NOON + timedelta(minutes=5, seconds=7)) == NOON + timedelta(minutes=10, seconds=7)
    assert rule.rule_arn == "arn:aws:events:us-east-1:123456789012:rule/tiny-local-tick"


def test_a_cron_rule_fires_on_the_matching_utc_minute() -> None:
    clock = FakeClock(now=NOON + timedelta(seconds=7))
    app = _app_with_schedule("cron(0/15 * * * ? *)")
    with ThreadPoolExecutor(1) as pool:
        rule = ScheduledRule(app.event_sources[0], Invoker(app, Reporter(lambda _: None)), pool,  # type: ignore[arg-type]
                             clock, region="us-east-1", account="123456789012")
    assert rule.next_at == NOON + timedelta(minutes=15)


def _schedule(expression: str, **extra: Any) -> dict[str, Any]:
    return {"Name": "s", "ScheduleExpression": expression, "CreationDate": NOON, **extra}


@pytest.mark.parametrize(("schedule", "after", "expected"), [
    (_schedule("at(2026-11-22T12:30:00)"), NOON, NOON + timedelta(minutes=30)),
    (_schedule("at(2026-11-22T12:30:00)"), NOON + timedelta(minutes=30), None),
    (_schedule("at(2026-11-22T13:30:00)", ScheduleExpressionTimezone="Europe/Paris"), NOON,
     NOON + timedelta(minutes=30)),
    (_schedule("rate(10 minutes)"), NOON + timedelta(minutes=3), NOON + timedelta(minutes=10)),
    (_schedule("rate(10 minutes)", StartDate=NOON + timedelta(hours=1)), NOON, NOON + timedelta(hours=1, minutes=10)),
    (_schedule("rate(10 minutes)", EndDate=NOON + timedelta(minutes=15)), NOON + timedelta(minutes=10), None),
    (_schedule("cron(0 13 * * ? *)", ScheduleExpressionTimezone="Europe/Paris"), NOON - timedelta(hours=1),
     NOON),
])
def test_a_scheduler_schedule_is_due_at_its_time_in_its_zone_within_its_dates(
        schedule: dict[str, Any], after: datetime, expected: datetime | None) -> None:
    assert next_due(schedule, after) == expected


@pytest.mark.parametrize(("window", "jitter", "expected"), [
    ({"Mode": "OFF"}, 60.0, 60.0),
    ({"Mode": "OFF"}, 10.0, 10.0),
    ({"Mode": "OFF"}, 0.0, 0.0),
    ({"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 5}, 60.0, 300.0),
    ({"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 5}, 0.0, 0.0),
])
def test_a_schedule_fires_somewhere_in_its_window_unless_jitter_is_zero(
        window: dict[str, Any], jitter: float, expected: float) -> None:
    assert spread_seconds({"FlexibleTimeWindow": window}, jitter) == expected


# --- TTL ------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "lag", "expected"), [
    ({"N": str(int(NOON.timestamp()) - 10)}, 5.0, True),
    ({"N": str(int(NOON.timestamp()) - 3)}, 5.0, False),     # expired, but within the lag
    ({"N": str(int(NOON.timestamp()) + 60)}, 0.0, False),
    ({"S": str(int(NOON.timestamp()) - 10)}, 0.0, False),    # only Numbers are TTL values
    ({"N": str(int((NOON - timedelta(days=6 * 365)).timestamp()))}, 0.0, False),  # over five years old
])
def test_an_item_expires_once_its_ttl_and_the_lag_have_passed(value: Any, lag: float, expected: bool) -> None:
    assert expired(value, NOON, lag) is expected


def test_each_stream_consumer_sees_a_ttl_deletion_once_and_other_removals_never() -> None:
    ledger = TtlLedger()
    first, second = ledger.subscribe("t"), ledger.subscribe("t")
    with ledger.deleting("t", "k1") as deletion:
        deletion.done()
    with ledger.deleting("t", "k2"):
        pass  # the conditional delete failed: not a TTL deletion
    assert ledger.claim(first, "t", "k1") and not ledger.claim(first, "t", "k1")
    assert ledger.claim(second, "t", "k1")
    assert not ledger.claim(first, "t", "k2") and not ledger.claim(first, "other", "k1")


# --- discovery ----------------------------------------------------------------------

def test_every_registered_event_source_gets_a_poller_and_unsupported_ones_are_named() -> None:
    app = Chalice(app_name="tiny")

    @app.on_sqs_message(queue="work", batch_size=3, name="work")
    def work(event: Any) -> None:
        return None

    @app.on_dynamodb_record(stream_arn=events.stream_arn("items"), name="changes")
    def changes(event: Any) -> None:
        return None

    @app.schedule("rate(1 hour)", name="hourly")
    def hourly(event: Any) -> None:
        return None

    @app.on_sns_message(topic="news", name="news")
    def news(event: Any) -> None:
        return None

    runtime = Runtime(app, "http://127.0.0.1:9", RuntimeOptions(api_port=0), out=lambda _: None,
                      rng=random.Random(1))
    try:
        kinds = {s.name: type(s).__name__ for s in runtime.sources}
        assert kinds == {"work": "QueuePoller", "changes": "StreamPoller", "hourly": "ScheduledRule",
                         "scheduler": "SchedulerPoller", "ttl": "TtlSweeper"}
        assert runtime.not_emulated == ["news (SNSEventConfig)"]
        assert "work" in runtime.banner() and "not emulated: news" in runtime.banner()
    finally:
        runtime.stop_event.set()
        runtime.executor.shutdown()


def test_the_invoker_calls_the_registered_handler_with_the_raw_event_and_a_context() -> None:
    app = Chalice(app_name="tiny")
    seen: list[Any] = []

    @app.lambda_function(name="plain")
    def plain(event: Any, context: Any) -> str:
        seen.append((event, context.function_name))
        return "done"

    @app.lambda_function(name="broken")
    def broken(event: Any, context: Any) -> None:
        raise RuntimeError("boom")

    lines: list[str] = []
    invoker = Invoker(app, Reporter(lines.append, FakeClock()), stage="local")
    ok = invoker.invoke("plain", "scheduler", {"a": 1})
    assert ok.ok and ok.result == "done" and seen == [({"a": 1}, "tiny-local-plain")]
    failed = invoker.invoke("broken", "scheduler", {})
    assert not failed.ok and isinstance(failed.error, RuntimeError)
    invoker.reporter.invocation(failed)
    assert "broken" in lines[0] and "FAILED RuntimeError: boom" in lines[0]
    assert invoker.handler_for_function("arn:aws:lambda:us-east-1:123456789012:function:tiny-local-plain") == "plain"
    assert invoker.handler_for_function("arn:aws:lambda:us-east-1:123456789012:function:other") is None


# --- stream checkpoints -------------------------------------------------------------

class FlakyStreams:
    """A DynamoDB Streams client over a fixed list of records whose GetRecords fails when told to."""

    def __init__(self, count: int) -> None:
        self.records = [{"eventID": str(n), "eventName": "INSERT", "dynamodb": {
            "Keys": {"PK": {"S": str(n)}}, "SequenceNumber": str(100 + n), "StreamViewType": "KEYS_ONLY"}}
            for n in range(count)]
        self.fail_next = False
        self.opened: list[dict[str, Any]] = []

    def describe_stream(self, StreamArn: str) -> dict[str, Any]:
        return {"StreamDescription": {"Shards": [{"ShardId": "shard-1"}]}}

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        self.opened.append(kwargs)
        after = int(kwargs["SequenceNumber"]) - 100 + 1 if "SequenceNumber" in kwargs else 0
        return {"ShardIterator": str(after)}

    def get_records(self, ShardIterator: str, Limit: int) -> dict[str, Any]:
        if self.fail_next:
            self.fail_next = False
            raise ClientError({"Error": {"Code": "ExpiredIteratorException", "Message": "expired"}}, "GetRecords")
        start = int(ShardIterator)
        return {"Records": self.records[start:start + Limit], "NextShardIterator": str(start + len(
            self.records[start:start + Limit]))}


def test_after_a_failed_read_the_stream_is_reopened_just_after_the_last_record_read() -> None:
    from chalice.app import DynamoDBEventConfig

    from local.sources.streams import StreamPoller

    app = Chalice(app_name="tiny")
    delivered: list[str] = []

    @app.on_dynamodb_record(stream_arn=events.stream_arn("items"), batch_size=2, name="changes")
    def changes(event: Any) -> None:
        delivered.extend(r["dynamodb"]["SequenceNumber"] for r in event.to_dict()["Records"])

    config = app.event_sources[0]
    assert isinstance(config, DynamoDBEventConfig)
    streams = FlakyStreams(5)
    poller = StreamPoller(config, Invoker(app, Reporter(lambda _: None)), streams,  # type: ignore[arg-type]
                          TtlLedger(), region="us-east-1")
    stop = threading.Event()
    poller.refresh_shards(at_start=True)
    shard = poller.shards["shard-1"]
    assert poller.poll(shard, stop)                       # 100, 101
    streams.fail_next = True
    with pytest.raises(ClientError):
        poller.poll(shard, stop)
    while poller.poll(shard, stop):
        pass
    assert delivered == ["100", "101", "102", "103", "104"]
    assert streams.opened[-1] == {"StreamArn": config.stream_arn, "ShardId": "shard-1",
                                  "ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "101"}

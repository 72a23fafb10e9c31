"""The offline runtime's decisions, without moto or real time: event shapes, retries, schedules, TTL."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, cast

import pytest
from botocore.exceptions import ClientError
from chalice.app import Chalice, SQSEvent

from deploy import lambda_events as events
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
                         "scheduler": "SchedulerPoller", "ttl": "TtlSweeper", "retention": "MotoRetention"}
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


# --- a source that raises is restarted; the pool never keeps the process alive ---------------

def test_a_source_that_raises_is_restarted_after_a_growing_pause() -> None:
    from local.runtime import supervise

    runs: list[int] = []
    pauses: list[float] = []
    lines: list[str] = []

    def source() -> None:
        runs.append(1)
        if len(runs) < 4:
            raise RuntimeError(f"boom {len(runs)}")

    def pause(seconds: float) -> bool:
        pauses.append(seconds)
        return False

    supervise("work", source, threading.Event(), lines.append, pause=pause)
    assert len(runs) == 4 and pauses == [1.0, 2.0, 4.0]
    assert lines[0] == "work: stopped by RuntimeError: boom 1; restarting in 1s"


def test_a_source_is_not_restarted_once_the_runtime_is_stopping() -> None:
    from local.runtime import supervise

    stop = threading.Event()
    runs: list[int] = []

    def source() -> None:
        runs.append(1)
        raise RuntimeError("boom")

    def pause(seconds: float) -> bool:
        stop.set()
        return True

    supervise("work", source, stop, lambda _: None, pause=pause)
    assert runs == [1]


def test_invocations_run_on_daemon_threads_so_a_running_handler_never_keeps_the_process_alive() -> None:
    runtime = Runtime(Chalice(app_name="tiny"), "http://127.0.0.1:9", RuntimeOptions(api_port=0),
                      out=lambda _: None)
    release, running = threading.Event(), threading.Event()

    def handler() -> bool:
        running.set()
        return release.wait(5)

    try:
        future = runtime.executor.submit(handler)
        assert running.wait(5)
        workers = [t for t in threading.enumerate() if t.name.startswith("invoke-")]
        assert workers and all(t.daemon for t in workers)
    finally:
        release.set()
        runtime.executor.shutdown(wait=True)
    assert future.result() is True


def test_an_exception_in_the_pool_is_reported_not_lost() -> None:
    from local.runtime import DaemonExecutor

    lines: list[str] = []
    pool = DaemonExecutor(1, "t", lines.append)

    def broken() -> None:
        raise ValueError("lost?")

    future = pool.submit(broken)
    pool.shutdown(wait=True)
    assert isinstance(future.exception(), ValueError) and lines == ["worker: ValueError: lost?"]


class StuckThread(threading.Thread):
    """A thread that never ends: join(timeout) only moves the fake clock."""

    def __init__(self, clock: list[float], joins: list[float]) -> None:
        super().__init__(daemon=True)
        self.clock, self.joins = clock, joins

    def join(self, timeout: float | None = None) -> None:
        self.joins.append(timeout or 0.0)
        self.clock[0] += timeout or 0.0

    def is_alive(self) -> bool:
        return True


def test_stopping_waits_for_all_threads_within_one_deadline_not_one_per_thread() -> None:
    from local.runtime import join_all

    clock, joins = [100.0], list[float]()
    threads = [StuckThread(clock, joins) for _ in range(3)]
    stuck = join_all(threads, 5.0, monotonic=lambda: clock[0])
    assert joins == [5.0, 0.0, 0.0] and clock[0] == 105.0 and stuck == threads


# --- SQS: AWS errors, batching window ---------------------------------------------------

class FakeSqs:
    """An SQS client over a list of messages; delete_message_batch fails or reports failures when told."""

    def __init__(self, messages: list[dict[str, Any]], clock: list[float] | None = None) -> None:
        self.messages = messages
        self.clock = clock
        self.receives: list[int] = []
        self.deleted: list[str] = []
        self.delete_error: Exception | None = None
        self.failed_ids: set[str] = set()

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        self.receives.append(kwargs["WaitTimeSeconds"])
        taken, self.messages = self.messages[:kwargs["MaxNumberOfMessages"]], self.messages[kwargs["MaxNumberOfMessages"]:]
        if self.clock is not None:
            self.clock[0] += kwargs["WaitTimeSeconds"] if not taken else 0.0
            self.clock[0] += 0.001  # a short poll still takes a moment
        return {"Messages": taken}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> dict[str, Any]:
        if self.delete_error is not None:
            error, self.delete_error = self.delete_error, None
            raise error
        failed = [e for e in Entries if e["ReceiptHandle"] in self.failed_ids]
        self.deleted += [e["ReceiptHandle"] for e in Entries if e not in failed]
        return {"Successful": [{"Id": e["Id"]} for e in Entries if e not in failed],
                "Failed": [{"Id": e["Id"], "Code": "ReceiptHandleIsInvalid", "SenderFault": True,
                            "Message": "bad handle"} for e in failed]}


def _message(n: int) -> dict[str, Any]:
    return {"MessageId": f"m{n}", "ReceiptHandle": f"h{n}", "Body": f"body {n}",
            "Attributes": {"ApproximateReceiveCount": "1"}}


def _queue_poller(sqs: FakeSqs, lines: list[str], *, window: int = 0, batch: int = 10,
                  clock: list[float] | None = None) -> Any:
    from chalice.app import SQSEventConfig

    from local.sources.sqs import QueuePoller

    app = Chalice(app_name="tiny")
    handled: list[int] = []

    @app.on_sqs_message(queue="work", batch_size=batch, maximum_batching_window_in_seconds=window, name="work")
    def work(event: Any) -> None:
        handled.append(len(list(event)))

    config = app.event_sources[0]
    assert isinstance(config, SQSEventConfig)
    poller = QueuePoller(config, Invoker(app, Reporter(lines.append, FakeClock())), sqs,  # type: ignore[arg-type]
                         region="us-east-1", account="123456789012",
                         monotonic=(lambda: clock[0]) if clock is not None else time.monotonic)
    poller.queue_url = "http://sqs/work"
    poller.handled = handled  # type: ignore[attr-defined]
    return poller


class FakeStop(threading.Event):
    """A stop Event whose wait advances a fake clock instead of sleeping."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self.clock = clock
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout or 0.0)
        self.clock[0] += timeout or 0.0
        return self.is_set()


def test_a_failed_delete_is_reported_and_polling_goes_on() -> None:
    from botocore.exceptions import EndpointConnectionError

    lines: list[str] = []
    sqs = FakeSqs([_message(1)])
    sqs.delete_error = EndpointConnectionError(endpoint_url="http://sqs")
    poller = _queue_poller(sqs, lines)
    stop = FakeStop([0.0])
    poller.poll_once(stop)                       # handled, delete fails: reported, not raised
    assert poller.handled == [1] and sqs.deleted == []
    assert any("deleting 1 handled messages failed" in line and "come back" in line for line in lines)
    sqs.messages = [_message(2)]                 # the poller goes on
    poller.poll_once(stop)
    assert poller.handled == [1, 1] and sqs.deleted == ["h2"]


def test_messages_sqs_refused_to_delete_are_reported() -> None:
    lines: list[str] = []
    sqs = FakeSqs([_message(1), _message(2)])
    sqs.failed_ids = {"h2"}
    poller = _queue_poller(sqs, lines)
    poller.poll_once(FakeStop([0.0]))
    assert sqs.deleted == ["h1"]
    assert any("message m2 not deleted (ReceiptHandleIsInvalid: bad handle)" in line for line in lines)


def test_the_batching_windows_last_second_short_polls_with_pauses_instead_of_spinning() -> None:
    clock = [0.0]
    sqs = FakeSqs([_message(1)], clock)
    poller = _queue_poller(sqs, [], window=2, batch=10, clock=clock)
    stop = FakeStop(clock)
    batch = poller.gather(stop)
    assert len(batch) == 1 and clock[0] >= 2.0
    short_polls = sqs.receives.count(0)
    assert 1 <= short_polls <= 6, sqs.receives   # about one per 0.2 s in the last second, not hundreds
    assert all(0 < w <= 0.2 for w in stop.waits)


# --- schedules after a suspend: no burst ------------------------------------------------

class RecordingExecutor:
    def __init__(self, run: bool = False) -> None:
        self.calls: list[tuple[Any, tuple[Any, ...]]] = []
        self.run = run

    def submit(self, fn: Any, *args: Any) -> None:
        self.calls.append((fn, args))
        if self.run:
            fn(*args)


def _rule(clock: FakeClock, expression: str, executor: Any, seen: list[Any] | None = None,
          lines: list[str] | None = None) -> ScheduledRule:
    app = Chalice(app_name="tiny")

    @app.schedule(expression, name="tick")
    def tick(event: Any) -> None:
        if seen is not None:
            seen.append(event.to_dict())

    return ScheduledRule(app.event_sources[0], Invoker(app, Reporter((lines if lines is not None else []).append,  # type: ignore[arg-type]
                                                                     clock)),
                         executor, clock, region="us-east-1", account="123456789012")


def test_a_rule_woken_up_hours_late_fires_once_and_says_how_many_firings_it_skipped() -> None:
    clock = FakeClock(now=NOON)
    executor, lines = RecordingExecutor(), list[str]()
    rule = _rule(clock, "rate(1 minute)", executor, lines=lines)
    clock.advance(hours=8)                                  # the laptop slept
    assert rule.fire_due(clock())
    assert not rule.fire_due(clock())                       # no burst of catch-up firings
    assert [args for _, args in executor.calls] == [(NOON + timedelta(minutes=1),)]
    assert rule.next_at == NOON + timedelta(hours=8, minutes=1)
    assert len(lines) == 1 and "skipped 479 missed firings" in lines[0]


def test_a_rule_invokes_its_handler_with_a_scheduled_event_whose_time_is_the_scheduled_time() -> None:
    clock = FakeClock(now=NOON + timedelta(seconds=7))
    seen: list[Any] = []
    rule = _rule(clock, "cron(0/15 * * * ? *)", RecordingExecutor(run=True), seen)
    clock.advance(minutes=15, seconds=2)                    # a little late
    assert rule.fire_due(clock())
    [event] = seen
    assert event["time"] == "2026-11-22T12:15:00Z" and event["detail-type"] == "Scheduled Event"
    assert event["source"] == "aws.events" and event["resources"] == [rule.rule_arn]
    assert rule.next_at == NOON + timedelta(minutes=30)


class FakeScheduler:
    def __init__(self, schedule: dict[str, Any]) -> None:
        self.schedule = schedule

    def get_schedule(self, Name: str, GroupName: str) -> dict[str, Any]:
        return self.schedule


def _scheduler(clock: FakeClock, schedule: dict[str, Any], executor: Any, lines: list[str],
               sqs: Any = None) -> Any:
    from local.sources.scheduler import SchedulerPoller

    app = Chalice(app_name="tiny")
    return SchedulerPoller(FakeScheduler(schedule), sqs, None, Invoker(app, Reporter(lines.append, clock)),  # type: ignore[arg-type]
                           executor, clock, jitter_seconds=0)


def test_a_scheduler_schedule_woken_up_late_is_invoked_once_not_once_per_missed_time() -> None:
    clock = FakeClock(now=NOON)
    schedule = {"Name": "s", "GroupName": "g", "Arn": "arn:s", "ScheduleExpression": "rate(5 minutes)",
                "CreationDate": NOON, "LastModificationDate": NOON, "State": "ENABLED",
                "Target": {"Arn": "arn:aws:sqs:us-east-1:123456789012:q"}}
    executor, lines = RecordingExecutor(), list[str]()
    poller = _scheduler(clock, schedule, executor, lines)
    poller._set_plan("arn:s", poller._plan(schedule, NOON))
    clock.advance(hours=2, minutes=1)
    for _ in range(3):
        poller.dispatch()
    assert len(executor.calls) == 1
    [delivery] = [args[0] for _, args in executor.calls]
    assert delivery.due == NOON + timedelta(minutes=5)
    assert poller.plans["arn:s"].due == NOON + timedelta(hours=2, minutes=5)
    assert len(lines) == 1 and "skipped 23 missed invocations up to 2026-11-22 14:00:00Z" in lines[0]


class BrokenSqs:
    def get_queue_url(self, **kwargs: Any) -> dict[str, Any]:
        raise ValueError("not an AWS error")


def test_a_delivery_failing_with_any_error_is_retried_per_the_retry_policy() -> None:
    from local.sources.scheduler import Delivery

    clock = FakeClock(now=NOON)
    schedule = {"Name": "s", "GroupName": "g", "Arn": "arn:s", "ScheduleExpression": "at(2026-11-22T12:00:00)",
                "Target": {"Arn": "arn:aws:sqs:us-east-1:123456789012:q", "Input": "x"}}
    lines: list[str] = []
    poller = _scheduler(clock, schedule, RecordingExecutor(), lines, sqs=BrokenSqs())
    delivery = Delivery(NOON, 0, schedule, NOON)
    poller.attempt(delivery)                                 # never raises
    assert delivery.attempt == 1 and poller.deliveries == [delivery]
    assert "delivery failed (ValueError: not an AWS error); retry 1 in 1s" in lines[0]


# --- TTL identity: value and time, kept as long as the stream ----------------------------

def test_a_ttl_note_claims_only_the_remove_with_the_deleted_ttl_value_made_after_the_deletion() -> None:
    wall = [1_800_000_000.5]
    ledger = TtlLedger(wall=lambda: wall[0])
    consumer = ledger.subscribe("t")
    with ledger.deleting("t", "k", "expires", {"N": "1799999990"}) as deletion:
        deletion.done()
    before = 1_799_999_990.0                                  # a user's REMOVE read late, made before
    assert not ledger.claim(consumer, "t", "k", old_image={"expires": {"N": "1799999990"}}, created=before)
    assert not ledger.claim(consumer, "t", "k", old_image={"expires": {"N": "1900000000"}},
                            created=1_800_000_001.0)          # the item put again with another TTL
    assert ledger.claim(consumer, "t", "k", old_image={"expires": {"N": "1799999990.0"}},
                        created=1_800_000_000.0)              # same number, whole seconds
    assert not ledger.claim(consumer, "t", "k", old_image={"expires": {"N": "1799999990"}},
                            created=1_800_000_000.0)          # claimed once


def test_ttl_notes_are_kept_as_long_as_the_stream_keeps_records() -> None:
    wall = [1_800_000_000.0]
    ledger = TtlLedger(wall=lambda: wall[0])
    consumer = ledger.subscribe("t")
    with ledger.deleting("t", "k", "expires", {"N": "1"}) as deletion:
        deletion.done()
    wall[0] += 23 * 3600                                      # a shard stuck for 23 hours
    ledger.forget_old()
    assert ledger.claim(consumer, "t", "k", old_image={"expires": {"N": "1"}}, created=1_800_000_000.0)
    with ledger.deleting("t", "k2", "expires", {"N": "1"}) as deletion:
        deletion.done()
    wall[0] += 24 * 3600 + 1
    ledger.forget_old()
    assert not ledger.claim(consumer, "t", "k2")


# --- streams: moto's iterators, idle polling, the mapping's failure settings ----------------

def _stream_poller(streams: Any, *, policy: Any = None, sqs: Any = None, fail: bool = True,
                   clock: FakeClock | None = None, lines: list[str] | None = None,
                   forget: Any = None, batch_size: int = 4) -> tuple[Any, list[list[str]]]:
    from chalice.app import DynamoDBEventConfig

    from local.sources.streams import StreamPoller

    app = Chalice(app_name="tiny")
    delivered: list[list[str]] = []

    @app.on_dynamodb_record(stream_arn=events.stream_arn("items"), batch_size=batch_size, name="changes")
    def changes(event: Any) -> None:
        numbers = [r["dynamodb"]["SequenceNumber"] for r in event.to_dict()["Records"]]
        delivered.append(numbers)
        if fail and "102" in numbers:
            raise RuntimeError("bad record 102")

    config = app.event_sources[0]
    assert isinstance(config, DynamoDBEventConfig)
    clock = clock or FakeClock(now=NOON)
    poller = StreamPoller(config, Invoker(app, Reporter((lines if lines is not None else []).append, clock)),
                          streams, TtlLedger(), region="us-east-1", clock=clock, policy=policy, sqs=sqs,
                          forget_iterator=forget, monotonic=lambda: 0.0)
    poller.refresh_shards(at_start=True)
    return poller, delivered


def test_each_used_shard_iterator_is_forgotten_and_an_idle_shard_is_read_once_a_second() -> None:
    from local.sources.streams import IDLE_BACKOFF_SECONDS, IDLE_SECONDS

    forgotten: list[str] = []
    poller, _ = _stream_poller(FlakyStreams(0), forget=lambda arn, it: forgotten.append(it))
    shard = poller.shards["shard-1"]
    pauses = []
    for _ in range(6):
        assert not poller.poll(shard, threading.Event())
        pauses.append(poller.idle_pause())
    assert forgotten == ["0"] * 6                      # every iterator used, then dropped
    assert pauses == [IDLE_SECONDS] * 3 + [IDLE_BACKOFF_SECONDS] * 3


def test_moto_forgets_used_iterators_in_process() -> None:
    from moto.dynamodbstreams.models import dynamodbstreams_backends

    from local.sources.streams import forget_moto_iterator

    arn = events.stream_arn("items", account="999999999999")
    backend = dynamodbstreams_backends["999999999999"]["us-east-1"]

    class Iterator:  # moto's models are tracked in their class's instances_tracked too
        instances_tracked: ClassVar[list[Any]] = []

    kept, used = Iterator(), Iterator()
    Iterator.instances_tracked += [kept, used]
    backend.shard_iterators["it-1"] = used  # type: ignore[assignment]
    forget_moto_iterator(arn, "it-1")
    forget_moto_iterator("not-an-arn", "it-1")          # best effort: never raises
    assert "it-1" not in backend.shard_iterators and Iterator.instances_tracked == [kept]


class FakeOnFailureSqs:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def get_queue_url(self, **kwargs: Any) -> dict[str, Any]:
        return {"QueueUrl": f"http://sqs/{kwargs['QueueName']}"}

    def send_message(self, QueueUrl: str, MessageBody: str) -> dict[str, Any]:
        import json
        self.sent.append({"url": QueueUrl, **json.loads(MessageBody)})
        return {"MessageId": "x"}


def _drain(poller: Any) -> None:
    shard = poller.shards["shard-1"]
    for _ in range(30):
        shard.retry_at = 0.0
        if not poller.poll(shard, threading.Event()) and not shard.pending:
            return


def test_a_batch_failing_past_its_retry_attempts_is_set_aside_to_the_on_failure_queue() -> None:
    from local.sources.streams import StreamFailurePolicy

    sqs, lines = FakeOnFailureSqs(), list[str]()
    policy = StreamFailurePolicy(max_retry_attempts=2, on_failure_queue="tiny-dlq")
    poller, delivered = _stream_poller(FlakyStreams(6), policy=policy, sqs=sqs, lines=lines)
    _drain(poller)
    assert delivered == [["100", "101", "102", "103"]] * 3 + [["104", "105"]]
    [message] = sqs.sent
    info = message["DDBStreamBatchInfo"]
    assert message["url"] == "http://sqs/tiny-dlq" and message["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert message["requestContext"]["approximateInvokeCount"] == 3
    assert message["requestContext"]["functionArn"] == "arn:aws:lambda:us-east-1:123456789012:function:tiny-local-changes"
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == ("100", "103", 4)
    assert info["shardId"] == "shard-1" and info["streamArn"] == events.stream_arn("items")
    assert any("gave up (RetryAttemptsExhausted)" in line for line in lines)


def test_a_failing_batch_is_bisected_and_only_the_bad_records_half_is_set_aside_when_too_old() -> None:
    from local.sources.streams import StreamFailurePolicy

    sqs, clock = FakeOnFailureSqs(), FakeClock(now=NOON)
    policy = StreamFailurePolicy(bisect_on_error=True, max_record_age_seconds=60, on_failure_queue="tiny-dlq")
    streams = FlakyStreams(6)
    for record in streams.records:
        record["dynamodb"]["ApproximateCreationDateTime"] = NOON - timedelta(seconds=61)  # type: ignore[index]
    poller, delivered = _stream_poller(streams, policy=policy, sqs=sqs, clock=clock)
    _drain(poller)
    assert delivered == [["100", "101", "102", "103"], ["100", "101"], ["102", "103"], ["102"], ["103"],
                         ["104", "105"]]
    [message] = sqs.sent
    assert message["requestContext"]["condition"] == "RecordAgeExceeded"
    assert message["DDBStreamBatchInfo"]["startSequenceNumber"] == "102"
    assert message["DDBStreamBatchInfo"]["endSequenceNumber"] == "102"


def test_without_limits_a_failing_batch_is_retried_and_never_skipped() -> None:
    poller, delivered = _stream_poller(FlakyStreams(6))
    _drain(poller)
    assert len(delivered) == 30 and set(map(tuple, delivered)) == {("100", "101", "102", "103")}


def test_the_local_stage_takes_the_deployed_stream_mappings_failure_settings() -> None:
    from local.stage import LocalSettingsError, stream_failure_policy

    policy = stream_failure_policy({}, "timekeeper-local-task-dlq")
    assert (policy.bisect_on_error, policy.max_retry_attempts, policy.max_record_age_seconds,
            policy.on_failure_queue, policy.report_batch_item_failures) == (
        True, -1, 43200, "timekeeper-local-task-dlq", True)
    assert stream_failure_policy({"STREAM_ON_FAILURE_QUEUE": "other"}, "x").on_failure_queue == "other"
    with pytest.raises(LocalSettingsError, match="STREAM_BISECT_ON_ERROR"):
        stream_failure_policy({"STREAM_BISECT_ON_ERROR": "maybe"}, "x")


# --- settings, environment, banner, invocation lines ------------------------------------

def test_the_environment_points_every_client_at_moto_with_dummy_credentials() -> None:
    from local.aws import aws_environment

    env = aws_environment("http://127.0.0.1:4566", "eu-west-1")
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:4566"
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert env["AWS_ACCOUNT_ID_ENDPOINT_MODE"] == "disabled"
    assert env["AWS_ACCESS_KEY_ID"] == env["AWS_SECRET_ACCESS_KEY"] == "local"


def test_local_settings_default_to_4566_and_8000() -> None:
    from local.stage import LocalSettings

    settings = LocalSettings.from_env({})
    assert (settings.aws_port, settings.api_port, settings.scheduler_jitter_seconds,
            settings.ttl_lag_seconds) == (4566, 8000, 60.0, 5.0)
    assert LocalSettings.from_env({"LOCAL_AWS_PORT": "0", "LOCAL_API_PORT": " 9000 "}).api_port == 9000


@pytest.mark.parametrize(("name", "value"), [
    ("LOCAL_AWS_PORT", "65536"), ("LOCAL_API_PORT", "http"), ("LOCAL_SCHEDULER_JITTER_SECONDS", "-1"),
    ("LOCAL_TTL_LAG_SECONDS", "nan"),
])
def test_a_bad_local_setting_names_the_variable(name: str, value: str) -> None:
    from local.stage import LocalSettings, LocalSettingsError

    with pytest.raises(LocalSettingsError, match=name):
        LocalSettings.from_env({name: value})


def test_the_banner_shows_the_api_and_moto_urls() -> None:
    runtime = Runtime(_app_with_schedule("rate(1 hour)"), "http://127.0.0.1:4566", RuntimeOptions(api_port=8000),
                      out=lambda _: None)
    try:
        banner = runtime.banner().splitlines()
        assert "  API        http://127.0.0.1:8000/  (Chalice's local server, as `chalice local`)" in banner
        assert ("  AWS        http://127.0.0.1:4566  (moto; state: http://127.0.0.1:4566/moto-api/data.json)"
                in banner)
        assert any(line.startswith("    tick") and "rate(1 hour)" in line for line in banner)
    finally:
        runtime.executor.shutdown()


def test_each_invocation_prints_its_records_duration_and_outcome() -> None:
    from local.invoker import Invocation

    lines: list[str] = []
    reporter = Reporter(lines.append, FakeClock(now=NOON + timedelta(milliseconds=134)))
    reporter.invocation(Invocation("task_executor", "sqs", 6, 1.2324))
    reporter.invocation(Invocation("task_stream", "stream", 1, 0.144, error=RuntimeError("no")))
    reporter.invocation(Invocation("slow", "sqs", 2, 61.0, timed_out=True))
    assert lines[0] == "12:00:00.134  task_executor            sqs         6 records    1232 ms  ok"
    assert lines[1] == "12:00:00.134  task_stream              stream      1 record      144 ms  FAILED RuntimeError: no"
    assert lines[2].endswith("2 records   61000 ms  FAILED timed out")


# --- bounded memory for what moto keeps (local/moto_speed.py, local/sources/retention.py) ---------

class _Record:
    def __init__(self, created: float) -> None:
        self.record = {"dynamodb": {"ApproximateCreationDateTime": created}}


class _Shard:
    """What trim_shard needs of moto's StreamShard: records in order, the first one's sequence number."""

    def __init__(self, created: list[float], start: int = 1000) -> None:
        self.id = "shard-1"
        self.items = [_Record(c) for c in created]
        self.starting_sequence_number = start


def test_stream_records_read_by_every_reader_are_dropped_but_the_newest_and_the_unread_stay() -> None:
    from local.moto_speed import trim_shard

    shard = _Shard([100.0] * 10)                       # sequence numbers 1000 .. 1009
    assert trim_shard(shard, 1005, keep_newest=2, older_than=None) == 6
    assert shard.starting_sequence_number == 1006 and len(shard.items) == 4   # 1006 .. 1009: unread
    assert trim_shard(shard, 1009, keep_newest=2, older_than=None) == 2       # the newest two stay
    assert shard.starting_sequence_number == 1008 and len(shard.items) == 2
    assert trim_shard(shard, -1, keep_newest=0, older_than=None) == 0         # a reader that read nothing


def test_stream_records_older_than_the_retention_are_dropped_even_unread() -> None:
    from local.moto_speed import trim_shard

    shard = _Shard([10.0, 20.0, 30.0, 40.0])
    assert trim_shard(shard, None, keep_newest=100, older_than=25.0) == 2
    assert shard.starting_sequence_number == 1002 and [r.record["dynamodb"]["ApproximateCreationDateTime"]
                                                       for r in shard.items] == [30.0, 40.0]


def test_a_read_from_before_the_oldest_record_kept_starts_at_the_oldest_record_kept() -> None:
    from moto.dynamodb.models.table import StreamShard

    from local.moto_speed import _from_oldest_kept

    _shard_get = _from_oldest_kept(StreamShard.get)

    class Kept:
        def __init__(self, n: int) -> None:
            self.n = n

        def to_json(self) -> dict[str, Any]:
            return {"n": self.n}

    shard = _Shard([])
    shard.items = [Kept(n) for n in (1005, 1006, 1007)]  # type: ignore[misc]
    shard.starting_sequence_number = 1005
    assert _shard_get(shard, 1001, 2) == [{"n": 1005}, {"n": 1006}]
    assert _shard_get(shard, 1007, 5) == [{"n": 1007}]


def test_the_stream_is_read_up_to_the_slowest_poller_and_not_at_all_without_one() -> None:
    from local.sources.retention import read_up_to
    from local.sources.streams import Shard

    class Poller:
        def __init__(self, table: str, position: str | None) -> None:
            self.table = table
            self.shards = {"shard-1": Shard("shard-1", "TRIM_HORIZON", position=position)}

    pollers: list[Any] = [Poller("tasks", "1009"), Poller("tasks", "1004"), Poller("other", "1")]
    assert read_up_to(pollers, "tasks", "shard-1") == 1004
    assert read_up_to(pollers, "nobody-reads", "shard-1") is None
    assert read_up_to([cast(Any, Poller("tasks", None))], "tasks", "shard-1") == -1


def test_moto_model_registry_lists_live_objects_only() -> None:
    import gc

    from local.moto_speed import LiveInstances

    class Model:
        pass

    registry = LiveInstances()
    kept, dropped = Model(), Model()
    registry.append(kept)
    registry.append(dropped)
    assert list(registry) == [kept, dropped]
    del dropped
    gc.collect()
    assert list(registry) == [kept] and len(registry) == 1
    registry.append(3)  # no weak reference to an int: kept as moto would
    assert list(registry) == [kept, 3]


def test_deleted_sqs_receipts_are_remembered_up_to_a_bound_oldest_forgotten_first() -> None:
    from local.moto_speed import RecentReceipts

    receipts = RecentReceipts(["a", "b"], limit=3)
    receipts.update(["c", "d"])
    assert "a" not in receipts and all(r in receipts for r in "bcd") and len(receipts) == 3
    receipts.discard("c")
    assert list(receipts) == ["b", "d"]


def test_the_soak_fails_on_a_task_run_twice_or_never_and_on_a_slow_stop() -> None:
    from collections import Counter

    from local.soak import SoakResult

    result = SoakResult(tasks=3, expected={"a", "b", "c"}, ran=Counter({"a": 1, "b": 2}), conflict_status=409,
                        replay_status=200, peak_rss_mb=100.0, stop_seconds=6.0, stopped_printed=True, exit_code=0)
    result.check()
    assert not result.ok
    assert any("never ran: ['c']" in p for p in result.problems)
    assert any("more than once: ['b']" in p for p in result.problems)
    assert any("SIGTERM: exited after 6.0s" in p for p in result.problems)
    assert result.report()[-1].startswith("SOAK FAILED")

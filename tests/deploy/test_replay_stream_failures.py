"""replay-stream-failures against moto: batch positions in the on-failure queue -> records read back
from the tasks table's stream -> the stream handler's effects (schedules, due messages)."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks import stream as task_stream
from chalicelib.tasks.model import DueMessage, TaskKey, parse_due
from deploy import cli, replay
from tests import events
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.stream_support import schedule_of

ROOT = Path(__file__).resolve().parents[2]
ADA = TaskKey("USER#ada", "REMINDER#standup")
GRACE = TaskKey("grace@example.com", "reminder")
API_IDENTITY_OF_TTL = {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"}  # as GetRecords spells it


@pytest.fixture(autouse=True)
def scheduler_path(deps: Deps) -> None:
    """A replayed exact insert shows as its schedule: Scheduler's path (the sweeper is the default)."""
    use_settings(deps, past_horizon="scheduler")


@pytest.fixture
def streams(aws: Aws) -> Any:
    return aws.clients.session.client("dynamodbstreams", region_name=aws.settings.region)


def put(deps: Deps, item: dict[str, Any]) -> None:
    deps.clients.dynamodb.put_item(TableName=deps.settings.tasks_table, Item=ddb.serialize(item))


def exact(due: str) -> dict[str, Any]:
    return {"PK": ADA.pk, "SK": ADA.sk, "run_at": due, "email": "ada@example.com"}


def stream_records(aws: Aws, streams: Any) -> tuple[str, list[dict[str, Any]]]:
    """The shard id and every record of the tasks table's stream (GetRecords' shape)."""
    arn = aws.settings.tasks_stream_arn
    [shard] = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"],
                                          ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    return shard["ShardId"], list(streams.get_records(ShardIterator=iterator)["Records"])


def given_up(aws: Aws, shard: str, first: dict[str, Any], last: dict[str, Any]) -> None:
    """The message Lambda sends the on-failure queue when a stream batch exhausted its retries."""
    body = {
        "requestContext": {"requestId": "r-1", "condition": "RecordAgeExceeded", "approximateInvokeCount": 40,
                           "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:timekeeper-test-task_stream"},
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": ""},
        "version": "1.0", "timestamp": "2026-11-22T12:00:00.000Z",
        "DDBStreamBatchInfo": {
            "shardId": shard, "streamArn": aws.settings.tasks_stream_arn, "batchSize": 1,
            "startSequenceNumber": first["dynamodb"]["SequenceNumber"],
            "endSequenceNumber": last["dynamodb"]["SequenceNumber"],
            "approximateArrivalOfFirstRecord": "2026-11-22T00:00:00Z",
            "approximateArrivalOfLastRecord": "2026-11-22T00:00:00Z"}}
    aws.clients.sqs.send_message(QueueUrl=aws.queue_url(aws.settings.task_dlq), MessageBody=json.dumps(body))


def dlq_bodies(aws: Aws) -> list[str]:
    return [m["Body"] for m in aws.drain(aws.settings.task_dlq)]


def test_an_exact_insert_given_up_on_gets_its_schedule_and_its_message_is_deleted(
        aws: Aws, deps: Deps, clock: FakeClock, streams: Any) -> None:
    put(deps, exact("2026-11-22T15:00:00Z"))
    shard, [insert] = stream_records(aws, streams)
    given_up(aws, shard, insert, insert)
    dead_letter = json.dumps({"source": "task_stream", "event_id": "x", "reason": "not a task", "payload": {}})
    aws.clients.sqs.send_message(QueueUrl=aws.queue_url(deps.settings.task_dlq), MessageBody=dead_letter)

    report = replay.replay_stream_failures(deps, streams, deps.settings.task_dlq)

    assert report.problems == []
    assert report.changes == [f"replayed {shard} {insert['dynamodb']['SequenceNumber']}.."
                              f"{insert['dynamodb']['SequenceNumber']}: 1 record(s) (1 as is)"]
    schedule = schedule_of(deps, ADA)
    assert schedule is not None and schedule["ScheduleExpression"] == "at(2026-11-22T14:59:00)"
    assert DueMessage.from_json(schedule["Target"]["Input"]) == DueMessage(ADA, parse_due("2026-11-22T15:00:00Z"))
    assert report.other_messages == 1
    assert dlq_bodies(aws) == [dead_letter]  # the handler's own dead letter is left, visible, for a human


def test_a_task_due_soon_goes_to_the_due_queue(aws: Aws, deps: Deps, clock: FakeClock, streams: Any) -> None:
    put(deps, exact("2026-11-22T12:05:00Z"))
    shard, [insert] = stream_records(aws, streams)
    given_up(aws, shard, insert, insert)
    assert replay.replay_stream_failures(deps, streams, deps.settings.task_dlq).problems == []
    [(body, delay)] = aws.sent(deps.settings.due_queue)
    assert DueMessage.from_json(body) == DueMessage(ADA, parse_due("2026-11-22T12:05:00Z"))
    assert delay == 300
    assert dlq_bodies(aws) == []


def test_a_lazy_tasks_ttl_removal_is_sent_with_the_item(
        aws: Aws, deps: Deps, clock: FakeClock, streams: Any) -> None:
    item = {"PK": GRACE.pk, "SK": GRACE.sk, "email": "grace@example.com", "note": "only-in-the-item",
            "expires_at": int((clock.now - timedelta(minutes=1)).timestamp())}
    put(deps, item)
    deps.clients.dynamodb.delete_item(TableName=deps.settings.tasks_table, Key=GRACE.dynamo())

    def as_ttl(parsed: dict[str, Any], **_: Any) -> None:  # moto runs no TTL: mark the REMOVE as its
        for record in parsed.get("Records", []):
            if record["eventName"] == "REMOVE":
                record["userIdentity"] = dict(API_IDENTITY_OF_TTL)
    streams.meta.events.register("after-call.dynamodbstreams.GetRecords", as_ttl)
    shard, [_insert, remove] = stream_records(aws, streams)
    given_up(aws, shard, remove, remove)

    assert replay.replay_stream_failures(deps, streams, deps.settings.task_dlq).problems == []
    [(body, _delay)] = aws.sent(deps.settings.due_queue)
    assert DueMessage.from_json(body).key == GRACE
    assert "only-in-the-item" in body  # the message carries the item, which is gone from the table


def test_a_record_superseded_since_is_reconciled_with_the_item_not_rewound(
        aws: Aws, deps: Deps, clock: FakeClock, streams: Any) -> None:
    put(deps, exact("2026-11-22T15:00:00Z"))
    put(deps, exact("2026-11-22T18:00:00Z"))  # rescheduled; Lambda processed this record, not the first
    shard, [insert, modify] = stream_records(aws, streams)
    assert task_stream.process_records(deps, [events.stream_record_from_api(
        modify, deps.settings.tasks_stream_arn)]) == {"batchItemFailures": []}
    given_up(aws, shard, insert, insert)

    report = replay.replay_stream_failures(deps, streams, deps.settings.task_dlq)

    assert report.problems == []
    assert "1 reconciled with the item as it is now" in report.changes[0]
    schedule = schedule_of(deps, ADA)
    assert schedule is not None and schedule["ScheduleExpression"] == "at(2026-11-22T17:59:00)"


def test_an_insert_of_an_item_deleted_since_is_skipped(aws: Aws, deps: Deps, streams: Any) -> None:
    put(deps, exact("2026-11-22T15:00:00Z"))
    deps.clients.dynamodb.delete_item(TableName=deps.settings.tasks_table, Key=ADA.dynamo())
    shard, [insert, _remove] = stream_records(aws, streams)
    given_up(aws, shard, insert, insert)
    report = replay.replay_stream_failures(deps, streams, deps.settings.task_dlq)
    assert report.problems == [] and "1 skipped: the item is gone since" in report.changes[0]
    assert schedule_of(deps, ADA) is None


def test_a_batch_that_still_fails_keeps_its_message(aws: Aws, deps: Deps, streams: Any) -> None:
    put(deps, exact("2026-11-22T15:00:00Z"))
    shard, [insert] = stream_records(aws, streams)
    given_up(aws, shard, insert, insert)

    def outage(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "down"}}, "CreateSchedule")
    deps.clients.scheduler.meta.events.register("provide-client-params.scheduler.CreateSchedule", outage)

    report = replay.replay_stream_failures(deps, streams, deps.settings.task_dlq)

    assert report.changes == []
    assert len(report.problems) == 1 and "still failing" in report.problems[0]
    [kept] = dlq_bodies(aws)  # visible again, for the next run
    assert replay.batch_info(kept) is not None


def test_a_position_past_the_streams_records_is_kept(aws: Aws, deps: Deps, streams: Any) -> None:
    put(deps, exact("2026-11-22T15:00:00Z"))
    shard, [insert] = stream_records(aws, streams)
    beyond = {"dynamodb": {"SequenceNumber": str(int(insert["dynamodb"]["SequenceNumber"]) + 10)}}
    given_up(aws, shard, beyond, beyond)
    report = replay.replay_stream_failures(deps, streams, deps.settings.task_dlq)
    assert report.changes == [] and len(report.problems) == 1
    assert len(dlq_bodies(aws)) == 1


def test_the_command_needs_a_deployed_stage(tmp_path: Path) -> None:
    (tmp_path / ".chalice").mkdir()
    shutil.copy(ROOT / ".chalice" / "config.json", tmp_path / ".chalice" / "config.json")
    config = json.loads((tmp_path / ".chalice" / "config.json").read_text())
    config["stages"]["prod"]["environment_variables"].pop("TASKS_STREAM_ARN", None)
    (tmp_path / ".chalice" / "config.json").write_text(json.dumps(config))
    with pytest.raises(cli.DeployError, match="TASKS_STREAM_ARN"):
        cli.replay_stream_failures("prod", boto3.session.Session(region_name="us-east-1"), {}, tmp_path)

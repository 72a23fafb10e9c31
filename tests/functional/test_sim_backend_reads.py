"""The emulations' reads of moto's backend (tests/functional/lambda_sim.py, stream_support.py, api_support.py)
answer what the requests they replace answer: a Scan's items, ListSchedules then GetSchedule, GetRecords."""

from __future__ import annotations

import copy

from chalicelib import ddb
from chalicelib.aws import Deps
from tests.fixtures import ACCOUNT, Aws
from tests.functional.api_support import table_contents
from tests.functional.lambda_sim import _read_through, stored_items, stored_schedules
from tests.functional.stream_support import TableStream
from tests.functional.task_support import put_item


def test_stored_items_are_a_scans_items_in_its_order(aws: Aws, deps: Deps) -> None:
    table, ttl = deps.settings.tasks_table, deps.settings.ttl_attribute
    for i in (3, 1, 2):
        put_item(deps, {"PK": f"P{i}", "SK": "S", ttl: 1000 + i, "blob": b"\x00\xff", "m": {"l": [1, "x"]}})
    put_item(deps, {"PK": "P0", "SK": "S"})  # no TTL: not stored_items'
    scanned = deps.clients.dynamodb.scan(TableName=table, FilterExpression="attribute_exists(#t)",
                                         ExpressionAttributeNames={"#t": ttl})["Items"]
    assert stored_items(deps.settings.region, table, having=ttl) == scanned
    before = table_contents(deps)
    snapshot = copy.deepcopy(before)
    deps.clients.dynamodb.update_item(TableName=table, Key=ddb.serialize({"PK": "P1", "SK": "S"}),
                                      UpdateExpression="SET m.l[1] = :v", ExpressionAttributeValues={":v": {"S": "y"}})
    assert before == snapshot and table_contents(deps) != before  # a snapshot, not a view of moto's items


def test_stored_schedules_are_listed_and_shown_as_the_api_does(aws: Aws, deps: Deps) -> None:
    scheduler, group = deps.clients.scheduler, deps.settings.schedule_group
    role = f"arn:aws:iam::{ACCOUNT}:role/timekeeper-scheduler"
    for name, at in (("a", "2026-11-22T12:05:00"), ("b", "2026-11-22T12:01:00")):
        scheduler.create_schedule(Name=name, GroupName=group, ScheduleExpression=f"at({at})",
                                  FlexibleTimeWindow={"Mode": "OFF"},
                                  Target={"Arn": deps.settings.due_queue_arn, "RoleArn": role, "Input": name})
    listed = [scheduler.get_schedule(Name=s["Name"], GroupName=group)
              for s in scheduler.list_schedules(GroupName=group)["Schedules"]]
    stored = stored_schedules(deps.settings.region, group)
    assert [(s["Name"], s["ScheduleExpression"], s["Target"]["Input"]) for s in stored] == \
        [(s["Name"], s["ScheduleExpression"], s["Target"]["Input"]) for s in listed]
    assert stored_schedules(deps.settings.region, "no-such-group") == []


def test_a_stream_read_is_skipped_only_when_get_records_would_find_nothing(aws: Aws, deps: Deps) -> None:
    from moto.dynamodbstreams.models import dynamodbstreams_backends

    stream = TableStream(deps)
    stream.new_records()  # whatever provisioning left: read past it
    put_item(deps, {"PK": "P", "SK": "S"})
    assert not stream._nothing_new()
    assert [r["eventName"] for r in stream.new_records()] == ["INSERT"]
    assert stream._nothing_new() and stream.new_records() == []
    streams = deps.clients.session.client("dynamodbstreams", region_name=deps.settings.region)
    [shard] = streams.describe_stream(StreamArn=stream.arn)["StreamDescription"]["Shards"]
    iterator = streams.get_shard_iterator(StreamArn=stream.arn, ShardId=shard["ShardId"],
                                          ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    assert not _read_through(iterator, deps.settings.region)
    page = streams.get_records(ShardIterator=iterator)
    assert page["Records"] and _read_through(page["NextShardIterator"], deps.settings.region)
    assert streams.get_records(ShardIterator=page["NextShardIterator"])["Records"] == []
    assert page["NextShardIterator"] in dynamodbstreams_backends[ACCOUNT][deps.settings.region].shard_iterators

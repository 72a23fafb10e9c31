"""make deploy and the task sources' tables: checked; a stream or TTL enabled only on the source's opt-in;
anything else refused with what to do; a user's items never touched."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from chalicelib.settings import Settings
from deploy.task_sources import SourceRefused, prepare_sources


@pytest.fixture
def ddb() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


def table(ddb: Any, name: str, keys: list[str], stream: str | None = None,
          index: tuple[str, str] | None = None) -> None:
    extra: dict[str, Any] = {}
    if stream:
        extra["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream}
    definitions = [{"AttributeName": k, "AttributeType": "S"} for k in keys]
    if index:
        definitions.append({"AttributeName": index[1], "AttributeType": "S"})
        extra["GlobalSecondaryIndexes"] = [{"IndexName": index[0], "Projection": {"ProjectionType": "KEYS_ONLY"},
                                            "KeySchema": [{"AttributeName": index[1], "KeyType": "HASH"}]}]
    ddb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST", AttributeDefinitions=definitions,
                     KeySchema=[{"AttributeName": k, "KeyType": t} for k, t in zip(keys, ("HASH", "RANGE"), strict=False)],
                     **extra)
    ddb.put_item(TableName=name, Item={k: {"S": "x"} for k in keys} | {"note": {"S": "the user's data"}})


def settings(**sources: dict[str, Any]) -> Settings:
    return Settings.from_env({"TASK_SOURCES": json.dumps(sources)})


EXACT = {"table": "appointments", "due_attribute": "REMINDER_TIMESTAMP"}
LAZY = {"table": "sessions", "strategy": "lazy", "ttl_attribute": "expires_at", "key": ["email"]}
INTERVAL = {"table": "slots", "strategy": "interval", "bucket_index": "by-time", "bucket_attribute": "taskDateTime",
            "key": ["id"]}


def test_a_table_set_up_as_the_source_needs_passes_unchanged(ddb: Any) -> None:
    table(ddb, "appointments", ["PK", "SK"], stream="NEW_AND_OLD_IMAGES")
    streams, changes = prepare_sources(ddb, settings(appointments=EXACT))
    assert changes == [] and streams["appointments"].startswith("arn:aws:dynamodb:")


@pytest.mark.parametrize(("setup", "source", "message"), [
    (lambda d: None, EXACT, "does not exist"),
    (lambda d: table(d, "appointments", ["PK", "SK"]), EXACT, "has no stream"),
    (lambda d: table(d, "appointments", ["PK", "SK"], stream="KEYS_ONLY"), {**EXACT, "enable_stream": True},
     "view type is KEYS_ONLY"),
    (lambda d: table(d, "sessions", ["email"], stream="NEW_AND_OLD_IMAGES"), LAZY, "TTL is not enabled"),
    (lambda d: table(d, "sessions", ["id"], stream="NEW_AND_OLD_IMAGES"), LAZY, "the table's key is ['id']"),
    (lambda d: table(d, "slots", ["id"], stream="NEW_AND_OLD_IMAGES"), INTERVAL, "global secondary index 'by-time'"),
])
def test_a_table_not_set_up_is_refused_saying_what_to_do(ddb: Any, setup: Any, source: dict[str, Any],
                                                         message: str) -> None:
    setup(ddb)
    name = "src"
    with pytest.raises(SourceRefused) as error:
        prepare_sources(ddb, settings(src=source))
    assert f"task source {name!r}" in str(error.value) and message in str(error.value)


def test_ttl_on_another_attribute_is_refused(ddb: Any) -> None:
    table(ddb, "sessions", ["email"], stream="NEW_AND_OLD_IMAGES")
    ddb.update_time_to_live(TableName="sessions", TimeToLiveSpecification={"Enabled": True, "AttributeName": "gone_at"})
    with pytest.raises(SourceRefused, match="TTL is on 'gone_at'"):
        prepare_sources(ddb, settings(sessions={**LAZY, "enable_ttl": True}))


def test_the_opt_ins_enable_the_stream_and_ttl_and_leave_the_items_alone(ddb: Any) -> None:
    table(ddb, "sessions", ["email"])
    before = ddb.scan(TableName="sessions")["Items"]
    streams, changes = prepare_sources(ddb, settings(sessions={**LAZY, "enable_stream": True, "enable_ttl": True}))
    assert len(changes) == 2 and streams["sessions"]
    described = ddb.describe_table(TableName="sessions")["Table"]["StreamSpecification"]
    assert described == {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    ttl = ddb.describe_time_to_live(TableName="sessions")["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", "expires_at")
    assert ddb.scan(TableName="sessions")["Items"] == before
    assert prepare_sources(ddb, settings(sessions={**LAZY, "enable_stream": True, "enable_ttl": True}))[1] == []


def test_each_source_function_may_read_only_its_own_stream_and_write_only_the_attributes_it_needs() -> None:
    from deploy import iam

    where = iam.Account("aws", "us-east-1", "123456789012")
    policies = iam.function_policies(settings(appointments=EXACT, sessions=LAZY), where)
    assert {"source_appointments", "source_sessions"} <= set(policies)
    exact = policies["source_appointments"]["Statement"]
    assert [s["Resource"] for s in exact if s["Sid"] == "ReadSourceStream"] == [
        ["arn:aws:dynamodb:us-east-1:123456789012:table/appointments/stream/*"]]
    assert not any("dynamodb:UpdateItem" in s["Action"] and "appointments" in str(s["Resource"]) for s in exact)
    [write] = [s for s in policies["source_sessions"]["Statement"] if s["Sid"] == "WriteSourceDueAttributes"]
    assert write["Resource"] == ["arn:aws:dynamodb:us-east-1:123456789012:table/sessions"]
    assert write["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:Attributes": ["email", "expires_at"]}}
    executor = policies["task_executor"]["Statement"]
    assert [s["Action"] for s in executor if s["Sid"] == "ReadSourceItems"] == [["dynamodb:GetItem"]]


def test_the_packaged_template_points_a_source_function_at_its_own_tables_stream() -> None:
    from chalice.app import Chalice, DynamoDBEvent

    from deploy.event_sources import EventSourceOptions, sam_event_overrides

    app = Chalice("t")
    arn = "arn:aws:dynamodb:us-east-1:123456789012:table/appointments/stream/2026-01-01T00:00:00.000"

    @app.on_dynamodb_record(stream_arn="arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/x", name="task_stream")
    def task_stream(event: DynamoDBEvent) -> None: ...

    @app.on_dynamodb_record(stream_arn=arn, name="source_appointments")
    def source_appointments(event: DynamoDBEvent) -> None: ...

    resources = sam_event_overrides(app, EventSourceOptions.from_env({}), "dlq", "TasksTable")
    streams = {name: next(iter(r["Properties"]["Events"].values()))["Properties"]["Stream"]
               for name, r in resources.items()}
    assert streams == {"TaskStream": {"Fn::GetAtt": ["TasksTable", "StreamArn"]}, "SourceAppointments": arn}

"""The AWS-limits guard rejects what AWS would reject and moto accepts, and lets through what AWS takes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.aws_limits import ITEM_LIMIT, item_size
from tests.fixtures import Aws

TABLE = "limits-probe"


@pytest.fixture
def table(aws: Aws) -> str:
    aws.clients.dynamodb.create_table(
        TableName=TABLE, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}, {"AttributeName": "SK", "AttributeType": "S"}])
    return TABLE


def _rejected(aws: Aws, call: Callable[[], Any]) -> str:
    with pytest.raises(ClientError) as raised:
        call()
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    aws.limits.expect()
    return str(raised.value)


def test_an_item_over_400_kb_is_rejected_and_one_just_under_is_taken(aws: Aws, table: str) -> None:
    ddb = aws.clients.dynamodb
    under = {"PK": {"S": "a"}, "SK": {"S": "b"}, "data": {"S": "x" * (ITEM_LIMIT - 100)}}
    assert item_size(under) <= ITEM_LIMIT
    ddb.put_item(TableName=TABLE, Item=under)
    over = {**under, "data": {"S": "x" * ITEM_LIMIT}}
    assert "bytes; DynamoDB allows" in _rejected(aws, lambda: ddb.put_item(TableName=TABLE, Item=over))
    assert "Item" in ddb.get_item(TableName=TABLE, Key={"PK": {"S": "a"}, "SK": {"S": "b"}})


@pytest.mark.parametrize(("key", "fits"), [
    ({"PK": {"S": "p" * 2048}, "SK": {"S": "s" * 1024}}, True),
    ({"PK": {"S": "p" * 2049}, "SK": {"S": "s"}}, False),
    ({"PK": {"S": "é" * 1025}, "SK": {"S": "s"}}, False),  # bytes, not characters
    ({"PK": {"S": "p"}, "SK": {"S": "s" * 1025}}, False),
    ({"PK": {"S": ""}, "SK": {"S": "s"}}, False),
])
def test_keys_are_held_to_their_byte_limits(aws: Aws, table: str, key: dict[str, Any], fits: bool) -> None:
    def get() -> Any:
        return aws.clients.dynamodb.get_item(TableName=TABLE, Key=key)

    if fits:
        get()
    else:
        _rejected(aws, get)


@pytest.mark.parametrize("number", ["1" * 39, "1E+126", "1E-131", "-1E+126"])
def test_numbers_dynamodb_cannot_hold_are_rejected(aws: Aws, table: str, number: str) -> None:
    _rejected(aws, lambda: aws.clients.dynamodb.put_item(
        TableName=TABLE, Item={"PK": {"S": "a"}, "SK": {"S": "b"}, "n": {"N": number}}))


def test_sqs_delay_size_and_characters_are_held_to_aws_limits(aws: Aws) -> None:
    url = aws.clients.sqs.create_queue(QueueName="limits-probe")["QueueUrl"]
    sqs = aws.clients.sqs
    sqs.send_message(QueueUrl=url, MessageBody="x" * (256 * 1024), DelaySeconds=900)
    _rejected(aws, lambda: sqs.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=901))
    _rejected(aws, lambda: sqs.send_message(QueueUrl=url, MessageBody="x" * (256 * 1024 + 1)))
    _rejected(aws, lambda: sqs.send_message(QueueUrl=url, MessageBody="nul \x00 inside"))
    _rejected(aws, lambda: sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": str(i), "MessageBody": "x"} for i in range(11)]))


def test_names_and_tokens_over_their_model_limits_are_rejected(aws: Aws) -> None:
    _rejected(aws, lambda: aws.clients.scheduler.create_schedule(
        Name="n" * 65, ScheduleExpression="at(2030-01-01T00:00:00)", FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": "arn:aws:sqs:us-east-1:123456789012:q", "RoleArn": "arn:aws:iam::123456789012:role/r"}))
    _rejected(aws, lambda: aws.clients.dynamodb.create_backup(TableName="t", BackupName="bad:name"))


def test_an_sns_subject_with_a_line_break_or_over_99_characters_is_rejected(aws: Aws) -> None:
    topic = aws.settings.alert_topic_arn
    aws.clients.sns.publish(TopicArn=topic, Subject="s" * 99, Message="m")
    _rejected(aws, lambda: aws.clients.sns.publish(TopicArn=topic, Subject="s" * 100, Message="m"))
    _rejected(aws, lambda: aws.clients.sns.publish(TopicArn=topic, Subject="a\nb", Message="m"))


def test_a_transaction_touching_one_item_twice_is_rejected(aws: Aws, table: str) -> None:
    key = {"PK": {"S": "a"}, "SK": {"S": "b"}}
    _rejected(aws, lambda: aws.clients.dynamodb.transact_write_items(TransactItems=[
        {"Put": {"TableName": TABLE, "Item": key}},
        {"Update": {"TableName": TABLE, "Key": key, "UpdateExpression": "SET x = :x",
                    "ExpressionAttributeValues": {":x": {"S": "1"}}}}]))

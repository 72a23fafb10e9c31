"""The fault harness does what scenario tests rely on: each kind of fault, at the call and occurrence armed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from botocore.exceptions import ClientError

from chalicelib.aws import Clients
from tests.faults import Faults, WorkerCrash
from tests.fixtures import Aws, FakeClock

TABLE = "faults-probe"


@pytest.fixture
def table(aws: Aws) -> str:
    aws.clients.dynamodb.create_table(
        TableName=TABLE, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])
    return TABLE


def _put(aws: Aws, pk: str) -> None:
    aws.clients.dynamodb.put_item(TableName=TABLE, Item={"PK": {"S": pk}}, ConditionExpression="attribute_not_exists(PK)")


def _exists(aws: Aws, pk: str) -> bool:
    return "Item" in aws.clients.dynamodb.get_item(TableName=TABLE, Key={"PK": {"S": pk}})


def test_an_error_is_not_applied_and_reaches_the_caller(aws: Aws, table: str, faults: Faults) -> None:
    faults.inject("dynamodb.PutItem", "error")
    with pytest.raises(ClientError) as raised:
        _put(aws, "a")
    assert raised.value.response["Error"]["Code"] == "InternalServerError"
    assert not _exists(aws, "a")
    _put(aws, "a")  # only the first occurrence was armed
    assert _exists(aws, "a")


def test_a_lost_response_is_applied_then_reaches_the_caller_as_an_error(aws: Aws, table: str, faults: Faults) -> None:
    faults.inject("dynamodb.PutItem", "lost")
    with pytest.raises(ClientError):
        _put(aws, "b")
    assert _exists(aws, "b")


def test_a_retried_lost_response_fails_its_own_condition(aws: Aws, table: str, faults: Faults) -> None:
    faults.inject("dynamodb.PutItem", "retried")
    with pytest.raises(ClientError) as raised:
        _put(aws, "c")
    assert raised.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert _exists(aws, "c")


def test_a_retried_lost_response_on_a_client_botocore_does_not_retry_reaches_the_caller(
        aws: Aws, table: str, faults: Faults) -> None:
    faults.inject("dynamodb.PutItem", "retried")
    with pytest.raises(ClientError) as raised:
        aws.clients.dynamodb_unretried.put_item(TableName=TABLE, Item={"PK": {"S": "e"}})
    assert raised.value.response["Error"]["Code"] == "InternalServerError"
    assert _exists(aws, "e")


def test_a_crash_is_no_exception_the_app_can_catch_and_crash_after_applies(aws: Aws, table: str, faults: Faults) -> None:
    faults.inject("dynamodb.PutItem", "crash")
    faults.inject("dynamodb.PutItem", "crash_after", occurrence=2)
    with pytest.raises(WorkerCrash):
        try:
            _put(aws, "d")
        except Exception:  # what app code does; a crash must pass through it
            pytest.fail("a crash was caught as an Exception")
    assert not _exists(aws, "d")
    with pytest.raises(WorkerCrash):
        _put(aws, "d")
    assert _exists(aws, "d")


def test_a_fault_hits_only_the_occurrence_and_parameters_armed(aws: Aws, table: str, faults: Faults) -> None:
    fault = faults.inject("dynamodb.PutItem", "error", occurrence=2, match=lambda p: p["Item"]["PK"]["S"].startswith("x"))
    _put(aws, "x1")
    _put(aws, "y1")
    with pytest.raises(ClientError):
        _put(aws, "x2")
    _put(aws, "x3")
    assert (fault.seen, fault.hits) == (3, 1)
    assert [_exists(aws, k) for k in ("x1", "y1", "x2", "x3")] == [True, True, False, True]


def test_chaos_throttling_is_retried_by_botocore_and_hard_faults_reach_the_caller(
        aws: Aws, table: str, fake_backoff: FakeClock) -> None:
    # Retry mode standard, its backoff on the test's clock: adaptive mode's rate limiter would wait for real.
    aws.clients = Clients(replace(aws.settings, aws_retry_mode="standard"))
    faults = Faults(aws.clients)
    faults.chaos(seed=7, throttle=0.3)
    for i in range(40):
        aws.clients.dynamodb.put_item(TableName=TABLE, Item={"PK": {"S": f"t{i}"}})
        aws.clients.sqs.list_queues()
        aws.clients.sns.list_topics()
    assert faults.injected["throttle"] > 10
    assert all(_exists(aws, f"t{i}") for i in range(40))
    url = aws.clients.sqs.create_queue(QueueName="throttled")["QueueUrl"]
    faults.chaos(seed=7, throttle=1.0)
    with pytest.raises(ClientError):
        aws.clients.sqs.send_message(QueueUrl=url, MessageBody="refused")
    faults.calm()
    assert aws.drain(url) == []  # a throttled request is not applied
    faults.chaos(seed=7, error=1.0)
    with pytest.raises(ClientError):
        aws.clients.sqs.list_queues()

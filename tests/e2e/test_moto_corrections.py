"""What the offline runtime changes in moto (local/moto_corrections.py, local/moto_speed.py), seen through moto's own server:
cancelled transactions leave the tables and their streams alone, and cost no copy of a table; ListBackups pages
and honours its time bounds at the real time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import boto3
import pytest
from botocore.exceptions import ClientError

from local.aws import MotoServer

pytestmark = pytest.mark.e2e

REGION = "us-east-1"
ACCOUNT = "123456789012"


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = MotoServer(port=0).start()
    yield server
    server.stop()


def client(moto: MotoServer, service: str) -> Any:
    return boto3.client(service, endpoint_url=moto.endpoint, region_name=REGION,  # type: ignore[call-overload]
                        aws_access_key_id="local", aws_secret_access_key="local")


def make_table(moto: MotoServer, name: str, rows: int = 0) -> tuple[Any, str]:
    ddb = client(moto, "dynamodb")
    arn = ddb.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )["TableDescription"]["LatestStreamArn"]
    for first in range(0, rows, 25):  # BatchWriteItem's most: the same items, a 25th of the requests
        ddb.batch_write_item(RequestItems={name: [
            {"PutRequest": {"Item": {"PK": {"S": f"row-{row}"}, "data": {"S": "x" * 200}}}}
            for row in range(first, min(first + 25, rows))]})
    return ddb, arn


def put_if_new(table: str, key: str, **attributes: str) -> dict[str, Any]:
    item = {"PK": {"S": key}, **{k: {"S": v} for k, v in attributes.items()}}
    return {"Put": {"TableName": table, "Item": item, "ConditionExpression": "attribute_not_exists(PK)"}}


def cancel_reasons(call: Any) -> list[dict[str, Any]]:
    with pytest.raises(ClientError) as raised:
        call()
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    reasons: list[dict[str, Any]] = cast(Any, raised.value.response).get("CancellationReasons", [])
    return reasons


def test_a_stream_reader_sees_the_writes_made_after_a_cancelled_transaction(moto: MotoServer) -> None:
    ddb, arn = make_table(moto, "after-cancel")
    streams = client(moto, "dynamodbstreams")
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST")["ShardIterator"]
    ddb.put_item(TableName="after-cancel", Item={"PK": {"S": "taken"}})
    reasons = cancel_reasons(lambda: ddb.transact_write_items(TransactItems=[
        put_if_new("after-cancel", "fresh"), put_if_new("after-cancel", "taken")]))
    assert [r["Code"] for r in reasons] == ["None", "ConditionalCheckFailed"]
    ddb.put_item(TableName="after-cancel", Item={"PK": {"S": "later"}})

    records = streams.get_records(ShardIterator=iterator)["Records"]
    assert [r["dynamodb"]["Keys"]["PK"]["S"] for r in records] == ["taken", "later"]
    assert "Item" not in ddb.get_item(TableName="after-cancel", Key={"PK": {"S": "fresh"}})


def test_a_transaction_is_all_or_nothing_and_says_why_per_item(moto: MotoServer) -> None:
    ddb, _ = make_table(moto, "all-or-nothing")
    ddb.put_item(TableName="all-or-nothing", Item={"PK": {"S": "old"}, "n": {"N": "1"}})
    ddb.put_item(TableName="all-or-nothing", Item={"PK": {"S": "other"}, "n": {"N": "1"}})
    reasons = cancel_reasons(lambda: ddb.transact_write_items(TransactItems=[
        put_if_new("all-or-nothing", "a"),
        {"Update": {"TableName": "all-or-nothing", "Key": {"PK": {"S": "old"}}, "UpdateExpression": "SET n = :n",
                    "ExpressionAttributeValues": {":n": {"N": "2"}}}},
        {"ConditionCheck": {"TableName": "all-or-nothing", "Key": {"PK": {"S": "other"}},
                            "ConditionExpression": "n = :two", "ExpressionAttributeValues": {":two": {"N": "2"}},
                            "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
    ]))
    assert [r["Code"] for r in reasons] == ["None", "None", "ConditionalCheckFailed"]
    assert reasons[2]["Item"] == {"PK": {"S": "other"}, "n": {"N": "1"}}
    assert ddb.get_item(TableName="all-or-nothing", Key={"PK": {"S": "old"}})["Item"]["n"] == {"N": "1"}
    assert "Item" not in ddb.get_item(TableName="all-or-nothing", Key={"PK": {"S": "a"}})

    ddb.transact_write_items(TransactItems=[
        put_if_new("all-or-nothing", "a", v="1"),
        {"Delete": {"TableName": "all-or-nothing", "Key": {"PK": {"S": "old"}}}},
    ])
    assert ddb.get_item(TableName="all-or-nothing", Key={"PK": {"S": "a"}})["Item"]["v"] == {"S": "1"}
    assert "Item" not in ddb.get_item(TableName="all-or-nothing", Key={"PK": {"S": "old"}})


def test_an_update_that_fails_while_writing_undoes_the_writes_before_it_and_their_stream_records(
        moto: MotoServer) -> None:
    ddb, arn = make_table(moto, "undo")
    streams = client(moto, "dynamodbstreams")
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    ddb.put_item(TableName="undo", Item={"PK": {"S": "text"}, "n": {"S": "not a number"}})
    with pytest.raises(ClientError):  # ADD to a string: refused once the first put was applied
        ddb.transact_write_items(TransactItems=[
            put_if_new("undo", "first"),
            {"Update": {"TableName": "undo", "Key": {"PK": {"S": "text"}}, "UpdateExpression": "ADD n :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}}}},
        ])
    assert "Item" not in ddb.get_item(TableName="undo", Key={"PK": {"S": "first"}})
    assert ddb.get_item(TableName="undo", Key={"PK": {"S": "text"}})["Item"]["n"] == {"S": "not a number"}
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard,
                                          ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    assert [r["eventName"] for r in streams.get_records(ShardIterator=iterator)["Records"]] == ["INSERT"]


def item_copies_of_a_cancelled_transaction(moto: MotoServer, table: str, rows: int) -> int:
    """How many stored items moto deep-copies while it cancels one transaction on ``table`` (the server runs
    in this process).  Uncorrected moto copies every item of every table the transaction names, and their
    stream: memory per transaction grew with the table."""
    from moto.dynamodb.models.dynamo_type import Item

    ddb, _ = make_table(moto, table, rows=rows)
    ddb.put_item(TableName=table, Item={"PK": {"S": "taken"}})
    copies = [0]
    real = Item.__deepcopy__

    def counted(self: Any, memo: dict[int, Any]) -> Any:
        copies[0] += 1
        return real(self, memo)
    Item.__deepcopy__ = counted  # type: ignore[method-assign]
    try:
        cancel_reasons(lambda: ddb.transact_write_items(TransactItems=[put_if_new(table, "taken")]))
    finally:
        Item.__deepcopy__ = real  # type: ignore[method-assign]
    return copies[0]


def test_a_cancelled_transaction_copies_no_table(moto: MotoServer) -> None:
    """Counted, not timed or weighed: a process-wide memory peak also saw unrelated one-off allocations (a
    10 MB one in some interpreters), which made the earlier tracemalloc check flaky."""
    assert item_copies_of_a_cancelled_transaction(moto, "copies-small", rows=10) == 0
    assert item_copies_of_a_cancelled_transaction(moto, "copies-big", rows=1500) == 0


def test_every_item_write_is_announced_with_its_key_and_attributes(moto: MotoServer) -> None:
    from local.moto_speed import watch_writes

    ddb, _ = make_table(moto, "announced")
    heard: list[tuple[str, str, Any]] = []
    stop = watch_writes(lambda table, key, attribute: heard.append((table, key["PK"]["S"], attribute("ttl")))
                        if table == "announced" else None)
    try:
        ddb.put_item(TableName="announced", Item={"PK": {"S": "a"}, "ttl": {"N": "100"}})
        ddb.update_item(TableName="announced", Key={"PK": {"S": "a"}}, UpdateExpression="SET #t = :t",
                        ExpressionAttributeNames={"#t": "ttl"}, ExpressionAttributeValues={":t": {"N": "200"}})
        ddb.batch_write_item(RequestItems={"announced": [{"PutRequest": {"Item": {"PK": {"S": "b"}}}}]})
        ddb.transact_write_items(TransactItems=[put_if_new("announced", "c")])
        ddb.delete_item(TableName="announced", Key={"PK": {"S": "a"}})
    finally:
        stop()
    ddb.put_item(TableName="announced", Item={"PK": {"S": "after"}})
    assert heard == [("announced", "a", {"N": "100"}), ("announced", "a", {"N": "200"}),
                     ("announced", "b", None), ("announced", "c", None), ("announced", "a", None)]


def test_list_backups_pages_as_aws_and_bounds_backups_by_the_real_time_they_were_made(moto: MotoServer) -> None:
    from datetime import UTC, datetime, timedelta

    ddb, _ = make_table(moto, "backed-up")
    before = datetime.now(UTC) - timedelta(seconds=1)
    for n in range(3):
        ddb.create_backup(TableName="backed-up", BackupName=f"backed-up-{n}")
    first = ddb.list_backups(TableName="backed-up", Limit=2)
    rest = ddb.list_backups(TableName="backed-up", Limit=2, ExclusiveStartBackupArn=first["LastEvaluatedBackupArn"])
    assert [len(first["BackupSummaries"]), len(rest["BackupSummaries"])] == [2, 1] and "LastEvaluatedBackupArn" not in rest
    assert ddb.list_backups(TableName="backed-up", TimeRangeUpperBound=before)["BackupSummaries"] == []
    assert len(ddb.list_backups(TableName="backed-up", TimeRangeLowerBound=before)["BackupSummaries"]) == 3


def _sqs_round_seconds(sqs: Any, url: str, rounds: int = 5) -> float:
    import time

    began = time.perf_counter()
    for _ in range(rounds):
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(n), "MessageBody": "now"} for n in range(10)])
        received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60)["Messages"]
        sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(received)])
    return (time.perf_counter() - began) / rounds


def test_sqs_calls_do_not_slow_down_with_thousands_of_delayed_messages(moto: MotoServer) -> None:
    sqs = client(moto, "sqs")
    quiet = sqs.create_queue(QueueName="quiet")["QueueUrl"]
    crowded = sqs.create_queue(QueueName="crowded")["QueueUrl"]
    for _ in range(0, 5000, 10):
        sqs.send_message_batch(QueueUrl=crowded, Entries=[
            {"Id": str(n), "MessageBody": "later", "DelaySeconds": 900} for n in range(10)])
    _sqs_round_seconds(sqs, quiet, 1)  # connections open, models loaded
    alone, among = _sqs_round_seconds(sqs, quiet), _sqs_round_seconds(sqs, crowded)
    attributes = sqs.get_queue_attributes(QueueUrl=crowded, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesDelayed"] == "5000"
    # a send, a receive and a delete of 10 cost about the same beside 5,000 delayed messages as in an
    # empty queue (moto's own: 250 times as much here)
    assert among < 5 * alone + 0.05, (among, alone)


def test_a_long_poll_returns_when_a_delayed_message_becomes_visible(moto: MotoServer) -> None:
    import time

    sqs = client(moto, "sqs")
    url = sqs.create_queue(QueueName="delayed")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="in 2 s", DelaySeconds=2)
    time.sleep(0.9)  # the poll starts 0.9 s after the send: moto's own woke at 1.9 s, then 2.9 s
    [message] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["All"])["Messages"]
    attributes = message["Attributes"]
    waited = int(attributes["ApproximateFirstReceiveTimestamp"]) - int(attributes["SentTimestamp"])
    assert 2000 <= waited < 2500, waited


def _update_error(ddb: Any, table: str, expression: str, names: dict[str, str] | None = None) -> str:
    values = {name: {"S": name} for name in (":a", ":b") if name in expression}
    with pytest.raises(ClientError) as raised:
        ddb.update_item(TableName=table, Key={"PK": {"S": "k"}}, UpdateExpression=expression,
                        ExpressionAttributeValues=values, **({"ExpressionAttributeNames": names} if names else {}))
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    return str(raised.value.response["Error"]["Message"])


def test_update_expressions_are_checked_once_and_still_refused_as_aws_refuses_them(moto: MotoServer) -> None:
    ddb, _ = make_table(moto, "expressions")
    many = ", ".join(f"a{n} = if_not_exists(a{n}, :a)" for n in range(12))
    ddb.update_item(TableName="expressions", Key={"PK": {"S": "k"}}, UpdateExpression=f"SET {many} REMOVE b, c",
                    ExpressionAttributeValues={":a": {"S": "a"}})
    item = ddb.get_item(TableName="expressions", Key={"PK": {"S": "k"}})["Item"]
    assert {name: value["S"] for name, value in item.items() if name != "PK"} == {f"a{n}": "a" for n in range(12)}
    assert "overlap" in _update_error(ddb, "expressions", "SET x = :a, y = :b, x = :b")
    assert "overlap" in _update_error(ddb, "expressions", "SET #x = :a REMOVE #x", {"#x": "x"})
    assert "SET" in _update_error(ddb, "expressions", "SET x = :a SET y = :b")
    assert "REMOVE" in _update_error(ddb, "expressions", "SET x = :a REMOVE y REMOVE z")


def test_fifo_queues_still_deduplicate_by_content_only_when_asked(moto: MotoServer) -> None:
    sqs = client(moto, "sqs")
    by_content = sqs.create_queue(QueueName="by-content.fifo", Attributes={
        "FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
    for _ in range(2):
        sqs.send_message(QueueUrl=by_content, MessageBody="same", MessageGroupId="g")
    attributes = sqs.get_queue_attributes(QueueUrl=by_content, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "1" and attributes["ContentBasedDeduplication"] == "true"
    explicit = sqs.create_queue(QueueName="explicit.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    with pytest.raises(ClientError) as raised:
        sqs.send_message(QueueUrl=explicit, MessageBody="no id", MessageGroupId="g")
    assert "ContentBasedDeduplication" in raised.value.response["Error"]["Message"]
    standard = sqs.create_queue(QueueName="standard")["QueueUrl"]
    for _ in range(2):
        sqs.send_message(QueueUrl=standard, MessageBody="same")
    attributes = sqs.get_queue_attributes(QueueUrl=standard, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "2" and "ContentBasedDeduplication" not in attributes


def test_a_delete_batch_deletes_what_it_names_once_and_refuses_unknown_handles(moto: MotoServer) -> None:
    sqs = client(moto, "sqs")
    url = sqs.create_queue(QueueName="deletes")["QueueUrl"]
    for n in range(4):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{n}")
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60)["Messages"]
    first, second = received[0]["ReceiptHandle"], received[1]["ReceiptHandle"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first)
    response = sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": "again", "ReceiptHandle": first}, {"Id": "new", "ReceiptHandle": second},
        {"Id": "unknown", "ReceiptHandle": "not-a-handle"}])
    assert sorted(e["Id"] for e in response["Successful"]) == ["again", "new"]
    assert [(e["Id"], e["Code"]) for e in response["Failed"]] == [("unknown", "ReceiptHandleIsInvalid")]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == str(len(received) - 2)

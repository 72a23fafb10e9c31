"""local/moto_speed.py answers what moto answers: an UpdateItem made of plain SETs (``if_not_exists`` too) and
REMOVEs of top-level attributes skips moto's expression machinery, errors included; responses serialised with
the member keys worked out once per shape are the same, to the byte.

Each scenario runs against moto with the speed-ups and against moto without them (the corrections installed in
both), in this process; the speed-ups are left installed or not as they were found."""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from local import moto_corrections, moto_speed

S: Any = "S"


def values(**named: Any) -> dict[str, Any]:
    return {f":{name}": value for name, value in named.items()}


BIG = "x" * 250_000
# (UpdateExpression, ExpressionAttributeNames, ExpressionAttributeValues), in order, on one item
REQUESTS: list[tuple[str, dict[str, str] | None, dict[str, Any] | None]] = [
    ("SET exec_due = :due, exec_state = :running, id = if_not_exists(id, :id), #s = :pending "
     "REMOVE dead_lettered, alerted", {"#s": "status"},
     values(due={S: "d1"}, running={S: "RUNNING"}, id={S: "task"}, pending={S: "PENDING"})),
    ("SET id = if_not_exists(id, :id), dup = if_not_exists(exec_due, :id), fresh = if_not_exists(nope, :n)",
     None, values(id={S: "other"}, n={"N": "7"})),
    ("SET #s = :done, m = :m REMOVE exec_state, absent", {"#s": "status"},
     values(done={S: "DONE"}, m={"M": {"a": {"L": [{S: "b"}]}}})),
    ("SET #s = :empty", {"#s": "status"}, values(empty={S: ""})),            # an index key: moto's checks
    ("SET #s = :number", {"#s": "status"}, values(number={"N": "1"})),
    ("SET status = :a", None, values(a={S: "a"})),                           # a reserved word
    ("SET PK = :a", None, values(a={S: "a"})),                               # the table's key
    ("REMOVE PK", None, None),
    ("SET a = :a, a = :b", None, values(a={S: "a"}, b={S: "b"})),            # overlapping paths
    ("SET #a = :a REMOVE #b", {"#a": "a", "#b": "a"}, values(a={S: "a"})),
    ("SET a = :a SET b = :a", None, values(a={S: "a"})),                     # SET twice
    ("SET a = :missing", None, None),                                         # a value not defined
    ("SET big = :big", None, values(big={S: BIG})),
    ("SET big2 = :big", None, values(big={S: BIG})),                         # over the item size limit
    ("SET n = :n ADD tally :n", None, values(n={"N": "1"})),               # not plain: moto's path
    ("SET l = :l, l2 = l", None, values(l={"L": []})),
]


def answers() -> list[Any]:
    """Each request's answer (ALL_NEW, or the error), then the item's stream records' images."""
    out: list[Any] = []
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName="t", BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": S},
                                  {"AttributeName": "status", "AttributeType": S}],
            GlobalSecondaryIndexes=[{"IndexName": "by-status", "Projection": {"ProjectionType": "ALL"},
                                     "KeySchema": [{"AttributeName": "status", "KeyType": "HASH"}]}])
        for expression, names, given in REQUESTS:
            extra: dict[str, Any] = {}
            if names:
                extra["ExpressionAttributeNames"] = names
            if given:
                extra["ExpressionAttributeValues"] = given
            try:
                out.append(ddb.update_item(TableName="t", Key={"PK": {S: "k"}}, UpdateExpression=expression,
                                           ReturnValues="ALL_NEW", **extra)["Attributes"])
            except ClientError as exc:
                out.append(exc.response["Error"])
    return out


@pytest.fixture
def speed_as_found() -> Iterator[None]:
    moto_corrections.install()
    was = moto_speed._installed
    yield
    (moto_speed.install if was else moto_speed.uninstall)()


def test_plain_updates_answer_as_moto_answers_and_skip_its_validation(speed_as_found: None) -> None:
    moto_speed.uninstall()
    plain = answers()
    moto_speed.install()
    fast = answers()
    assert fast == plain
    assert fast[0]["id"] == {S: "task"} and fast[1]["dup"] == {S: "d1"} and fast[1]["fresh"] == {"N": "7"}
    assert sum("Code" in answer for answer in fast) == 9

    parser: Any = importlib.import_module("moto.dynamodb.parsing.expressions").UpdateExpressionParser
    validator: Any = importlib.import_module("moto.dynamodb.parsing.validators").UpdateExpressionValidator

    table = SimpleNamespace(attr=[{"AttributeName": "PK", "AttributeType": S}], table_key_attrs=["PK"],
                            attribute_keys=["PK"])
    claim = parser.make(REQUESTS[0][0])
    validated = validator(claim, REQUESTS[0][1], REQUESTS[0][2], SimpleNamespace(attrs={}),
                                          table).validate()
    assert isinstance(validated, moto_speed._PlainUpdate)  # no tree copied, no traversal


def stream_answers() -> list[bytes]:
    """The raw bodies of GetRecords (every kind of attribute value, binary keys, a REMOVE), DescribeTable and
    ReceiveMessage, with moto's random ids and times made fixed."""
    bodies: list[bytes] = []
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        arn = ddb.create_table(
            TableName="s", BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "B"},
                                  {"AttributeName": "SK", "AttributeType": "S"}],
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )["TableDescription"]["LatestStreamArn"]
        every: dict[str, Any] = {"s": {S: "text"}, "n": {"N": "1.5"}, "b": {"B": b"\x00\xff"}, "t": {"BOOL": True},
                                 "z": {"NULL": True}, "ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1", "2"]},
                                 "bs": {"BS": [b"\x01"]}, "l": {"L": [{S: "x"}, {"M": {"k": {"N": "3"}}}]},
                                 "m": {"M": {"deep": {"L": [{"B": b"\x02"}]}}}}
        key: dict[str, Any] = {"PK": {"B": b"\x01key"}, "SK": {S: "one"}}
        ddb.put_item(TableName="s", Item={**key, **every})
        ddb.update_item(TableName="s", Key=key, UpdateExpression="SET s = :s", ExpressionAttributeValues={":s": {S: "v2"}})
        ddb.delete_item(TableName="s", Key=key)
        streams = boto3.client("dynamodbstreams", region_name="us-east-1")
        shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
        iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard,
                                              ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes={"a": {"DataType": "String",
                                                                               "StringValue": "v"}})
        captured: list[bytes] = []

        def keep(http_response: Any, **_: Any) -> None:
            captured.append(http_response.content)

        for client in (streams, ddb, sqs):
            client.meta.events.register("after-call", keep)
        streams.get_records(ShardIterator=iterator)
        ddb.describe_table(TableName="s")
        sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], AttributeNames=["All"])
        bodies.extend(captured)
    return [fixed(body) for body in bodies]


def fixed(body: bytes) -> bytes:
    """``body`` with the times (epoch or ISO), receipt handles, shard iterators and stream records' sizes (moto
    counts the record's time in them) masked: they differ from run to run."""
    body = re.sub(rb'"(ReceiptHandle|NextShardIterator)": "[^"]*"', b'"\\1": "R"', body)
    body = re.sub(rb'"SizeBytes": \d+', b'"SizeBytes": 0', body)
    body = re.sub(rb"\d{4}-\d\d-\d\dT[\d:.]+", b"ISO", body)
    return re.sub(rb"\d{10,}(\.\d+)?", b"EPOCH", body)


def test_responses_are_serialised_as_moto_serialises_them(speed_as_found: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.moto_api._internal import mock_random

    monkeypatch.setattr(mock_random, "uuid4", lambda: __import__("uuid").UUID(int=7))
    json_serializer: Any = importlib.import_module("moto.core.serialize").BaseJSONSerializer
    maps = [0]  # maps moto's serializer walked: GetRecords' keys and images, ReceiveMessage's two attribute maps
    walk_map = json_serializer._serialize_type_map

    def counted(self: Any, *args: Any) -> None:
        maps[0] += 1
        walk_map(self, *args)

    monkeypatch.setattr(json_serializer, "_serialize_type_map", counted)
    moto_speed.uninstall()
    plain = stream_answers()
    plain_maps, maps[0] = maps[0], 0
    moto_speed.install()
    fast = stream_answers()
    assert len(fast) == 3 and b"NewImage" in fast[0] and b"REMOVE" in fast[0]
    assert fast == plain
    assert plain_maps > 10 and maps[0] == 2  # GetRecords' records serialised without moto's serializer


def test_a_response_classs_method_names_are_listed_once_as_moto_lists_them(speed_as_found: None) -> None:
    from moto.core import responses, utils
    from moto.scheduler.responses import EventBridgeSchedulerResponse

    def dispatch_lists(clazz: object) -> list[str]:  # the name moto's dispatch calls (moto.core.responses)
        listed: list[str] = vars(responses)["method_names_from_class"](clazz)
        return listed

    moto_speed.install()
    first = dispatch_lists(EventBridgeSchedulerResponse)
    assert first == utils.method_names_from_class(EventBridgeSchedulerResponse) and "create_schedule" in first
    assert dispatch_lists(EventBridgeSchedulerResponse) is first  # not listed again
    moto_speed.uninstall()
    assert vars(responses)["method_names_from_class"] is utils.method_names_from_class


# --- condition expressions parsed once per text; Query without sorting the whole table -------------------------

def condition_answers() -> list[Any]:
    """Conditional writes, the same texts again with other values, and each way a condition can be refused:
    each answer (the item, or the error's code and message)."""
    out: list[Any] = []
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(TableName="c", BillingMode="PAY_PER_REQUEST",
                         KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": S}])
        claim = "attribute_not_exists(PK) OR (#s = :pending AND (lease < :now OR NOT attribute_exists(lease)))"
        requests: list[tuple[str, dict[str, str] | None, dict[str, Any] | None]] = [
            (claim, {"#s": "status"}, values(pending={S: "PENDING"}, now={"N": "5"})),
            (claim, {"#s": "status"}, values(pending={S: "PENDING"}, now={"N": "6"})),   # the item exists now
            (claim, {"#s": "st"}, values(pending={S: "PENDING"}, now={"N": "6"})),       # other names
            ("#s IN (:a, :b) AND n BETWEEN :low AND :high", {"#s": "status"},
             values(a={S: "x"}, b={S: "PENDING"}, low={"N": "0"}, high={"N": "9"})),
            ("#s IN (:a, :b) AND n BETWEEN :low AND :high", {"#s": "status"},
             values(a={S: "x"}, b={S: "y"}, low={"N": "0"}, high={"N": "9"})),
            ("begins_with(#s, :p) AND size(#s) > :n", {"#s": "status"}, values(p={S: "PEN"}, n={"N": "3"})),
            ("begins_with(#s, :p) AND size(#s) > :n", {"#s": "status"}, values(p={S: "PEN"}, n={"N": "30"})),
            ("#s = :v", {"#s": "status"}, None),                                     # a value missing
            ("#s = :v", {"#s": "status"}, values(w={S: "a"})),                        # another value missing
            ("#s = :v", None, values(v={S: "a"})),                                    # a name missing
            ("#s = :v", {"#s": "status"}, values(v={S: "PENDING"}, unused={S: "u"})),  # a value not used
            ("status = :v", None, values(v={S: "PENDING"})),                          # a reserved word
            ("#s = = :v", {"#s": "status"}, values(v={S: "PENDING"})),                # not a condition
            ("((#s = :v))", {"#s": "status"}, values(v={S: "PENDING"})),              # redundant parentheses
            ("#s = :v", {"#s": "status"}, values(v={S: "PENDING"})),
        ]
        for index, (condition, names, given) in enumerate(requests):
            extra: dict[str, Any] = {"ConditionExpression": condition}
            if names:
                extra["ExpressionAttributeNames"] = names
            if given:
                extra["ExpressionAttributeValues"] = {**given, ":i": {"N": str(index)}}
            else:
                extra["ExpressionAttributeValues"] = {":i": {"N": str(index)}}
            try:
                out.append(ddb.update_item(TableName="c", Key={"PK": {S: "k"}}, UpdateExpression="SET n = :i",
                                           ReturnValues="ALL_NEW", **extra)["Attributes"])
            except ClientError as exc:
                out.append(exc.response["Error"])
            except (KeyError, ValueError) as exc:  # moto raises these for a lacking value, a bad text
                out.append({"Code": type(exc).__name__, "Message": str(exc)})
            if index == 0:
                ddb.put_item(TableName="c", Item={"PK": {S: "k"}, "status": {S: "PENDING"}, "n": {"N": "1"}})
    return out


def test_conditions_parsed_once_answer_as_moto_answers(speed_as_found: None, monkeypatch: pytest.MonkeyPatch) -> None:
    moto_speed.uninstall()
    plain = condition_answers()
    moto_speed.install()
    fast = condition_answers()
    assert fast == plain
    assert sum("Code" in answer for answer in fast) == 10 and sum("Code" not in answer for answer in fast) == 5

    parser: Any = importlib.import_module("moto.dynamodb.comparisons").ConditionExpressionParser
    lexed: list[str] = []
    lex = parser._lex_condition_expression

    def counted(self: Any) -> Any:
        lexed.append(self.condition_expression)
        return lex(self)

    monkeypatch.setattr(parser, "_lex_condition_expression", counted)
    op = parser("#s = :v AND n > :n", {"#s": "status"}, values(v={S: "a"}, n={"N": "1"})).parse()
    again = parser("#s = :v AND n > :n", {"#s": "status"}, values(v={S: "b"}, n={"N": "2"}))
    other = again.parse()
    assert len(lexed) == 1  # the second text was not lexed again
    assert repr(op) != repr(other) and ":v" in again.expr_attr_values_found and "#s" in again.expr_attr_names_found


def put_all(ddb: Any, table: str, items: list[dict[str, Any]]) -> None:
    for start in range(0, len(items), 25):
        ddb.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": item}} for item in items[start:start + 25]]})


def query_answers() -> list[Any]:
    """Queries of a table and of its indexes (ranges, reversed, filtered, in pages) and a Scan in pages."""
    out: list[Any] = []
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName="q", BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"},
                                  {"AttributeName": "SK", "AttributeType": "S"},
                                  {"AttributeName": "bucket", "AttributeType": "S"},
                                  {"AttributeName": "due", "AttributeType": "N"}],
            GlobalSecondaryIndexes=[
                {"IndexName": "by-bucket", "Projection": {"ProjectionType": "ALL"},
                 "KeySchema": [{"AttributeName": "bucket", "KeyType": "HASH"},
                               {"AttributeName": "due", "KeyType": "RANGE"}]},
                {"IndexName": "bucket-only", "Projection": {"ProjectionType": "KEYS_ONLY"},
                 "KeySchema": [{"AttributeName": "bucket", "KeyType": "HASH"}]}])
        ddb.create_table(TableName="n", BillingMode="PAY_PER_REQUEST",
                         KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "N"}])
        items: list[dict[str, Any]] = []
        for i in range(40):  # every third item outside the indexes; dues repeat across buckets
            item: dict[str, Any] = {"PK": {S: f"p{i % 4}"}, "SK": {S: f"s{(i * 7) % 40:02}"}, "v": {"N": str(i)}}
            if i % 3:
                item |= {"bucket": {S: f"b{i % 2}"}, "due": {"N": str(i % 5)}}
            items.append(item)
        put_all(ddb, "q", items)
        put_all(ddb, "n", [{"id": {"N": str(i)}, "v": {S: str(i)}} for i in (3, 1, 2)])
        queries: list[dict[str, Any]] = [
            {"KeyConditionExpression": "PK = :p", "ExpressionAttributeValues": {":p": {S: "p1"}}},
            {"KeyConditionExpression": "PK = :p AND SK > :s", "ExpressionAttributeValues": {":p": {S: "p2"},
                                                                                        ":s": {S: "s10"}},
             "ScanIndexForward": False},
            {"KeyConditionExpression": "PK = :p", "ExpressionAttributeValues": {":p": {S: "none"}}},
            {"KeyConditionExpression": "PK = :p", "FilterExpression": "v > :v",
             "ExpressionAttributeValues": {":p": {S: "p3"}, ":v": {"N": "10"}}},
            {"IndexName": "by-bucket", "KeyConditionExpression": "bucket = :b",
             "ExpressionAttributeValues": {":b": {S: "b1"}}},
            {"IndexName": "by-bucket", "KeyConditionExpression": "bucket = :b AND due BETWEEN :l AND :h",
             "ExpressionAttributeValues": {":b": {S: "b0"}, ":l": {"N": "1"}, ":h": {"N": "3"}},
             "ScanIndexForward": False},
            {"IndexName": "bucket-only", "KeyConditionExpression": "bucket = :b",
             "ExpressionAttributeValues": {":b": {S: "b0"}}},
        ]
        for query in queries:
            out.append(ddb.query(TableName="q", **query))
            start: dict[str, Any] = {}
            while True:  # the same in pages of 3
                page = ddb.query(TableName="q", Limit=3, **query, **start)
                out.append(page)
                if "LastEvaluatedKey" not in page:
                    break
                start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}
        out.append(ddb.query(TableName="n", KeyConditionExpression="id = :i",
                             ExpressionAttributeValues={":i": {"N": "2.0"}}))  # a number equal to 2
        out.append(ddb.scan(TableName="q", Limit=7))
        out.append(ddb.scan(TableName="n"))
    for answer in out:
        answer.pop("ResponseMetadata", None)
    return out


def test_queries_answer_as_moto_answers_without_sorting_the_table(speed_as_found: None,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    moto_speed.uninstall()
    plain = query_answers()
    moto_speed.install()
    fast = query_answers()
    assert fast == plain
    assert fast[0]["Count"] == 10 and fast[-3]["Items"] == [{"id": {"N": "2"}, "v": {S: "2"}}]

    dynamo_type: Any = importlib.import_module("moto.dynamodb.models.dynamo_type").DynamoType
    compared = [0]
    for method in ("__lt__", "__ne__"):
        monkeypatch.setattr(dynamo_type, method, functools.partialmethod(
            lambda self, other, original: compared.__setitem__(0, compared[0] + 1) or original(self, other),
            original=getattr(dynamo_type, method)))

    def comparisons_in_queries() -> tuple[int, int]:
        """DynamoType comparisons in a Query of one key of a 150-item table, then of one of its index's keys."""
        with mock_aws():
            ddb = boto3.client("dynamodb", region_name="us-east-1")
            ddb.create_table(TableName="big", BillingMode="PAY_PER_REQUEST",
                             KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"},
                                        {"AttributeName": "SK", "KeyType": "RANGE"}],
                             AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": S},
                                                   {"AttributeName": "SK", "AttributeType": S},
                                                   {"AttributeName": "bucket", "AttributeType": S}],
                             GlobalSecondaryIndexes=[{"IndexName": "by-bucket", "Projection": {"ProjectionType": "ALL"},
                                                      "KeySchema": [{"AttributeName": "bucket", "KeyType": "HASH"}]}])
            put_all(ddb, "big", [{"PK": {S: f"p{i}"}, "SK": {S: "TASK"}, "bucket": {S: f"b{i % 50}"}}
                                 for i in range(150)])
            compared[0] = 0
            ddb.query(TableName="big", KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": {S: "p7"}})
            table, compared[0] = compared[0], 0
            ddb.query(TableName="big", IndexName="by-bucket", KeyConditionExpression="bucket = :b",
                      ExpressionAttributeValues={":b": {S: "b7"}})
            return table, compared[0]

    table, index = comparisons_in_queries()
    assert table == 0 and index <= 10  # only the queried key's items compared and sorted (1, then 3)
    moto_speed.uninstall()
    table, index = comparisons_in_queries()
    assert table > 150 and index > 150  # moto's Query sorts, then compares, the whole table


def delete_answers() -> list[Any]:
    """Deletes of messages in flight, of one received again after its visibility ended (its old and new
    handles), twice, and of an unknown handle, with delayed messages in the queue; then what is left."""
    out: list[Any] = []
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="d")["QueueUrl"]
        for i in range(12):
            sqs.send_message(QueueUrl=url, MessageBody=f"m{i}", DelaySeconds=900 if i % 3 == 0 else 0)
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=5)["Messages"]
        handles = [message["ReceiptHandle"] for message in got]
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handles[0], VisibilityTimeout=0)
        again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
        renewed = next(m["ReceiptHandle"] for m in again if m["Body"] == got[0]["Body"])
        entries = [(handles[1], "a"), (handles[0], "old"), ("bogus", "c"), (handles[2], "d")]
        answer = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": i, "ReceiptHandle": h} for h, i in entries])
        out.append((sorted(answer.get("Successful", []), key=str), sorted(answer.get("Failed", []), key=str)))
        again_deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "x", "ReceiptHandle": renewed},
                                                                          {"Id": "y", "ReceiptHandle": handles[1]}])
        out.append((again_deleted.get("Successful"), again_deleted.get("Failed")))
        sqs.delete_message(QueueUrl=url, ReceiptHandle=handles[3])
        try:
            sqs.delete_message(QueueUrl=url, ReceiptHandle="bogus")
        except ClientError as exc:
            out.append(exc.response["Error"]["Code"])
        out.append(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"].get(
            "ApproximateNumberOfMessagesDelayed"))
        sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
            {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0} for n, m in enumerate(again)
            if m["ReceiptHandle"] not in (renewed, handles[1], handles[2], handles[3])])
        left = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        out.append(sorted(m["Body"] for m in left))
    return out


def test_deletes_answer_as_moto_answers(speed_as_found: None) -> None:
    moto_speed.uninstall()
    plain = delete_answers()
    moto_speed.install()
    fast = delete_answers()
    assert fast == plain
    assert [entry["Id"] for entry in fast[0][0]] == ["a", "d", "old"] and len(fast[0][1]) == 1

"""local/moto_speed.py's plain updates: an UpdateItem made of plain SETs (``if_not_exists`` too) and REMOVEs of
top-level attributes skips moto's expression machinery, and answers exactly what moto answers, errors included.

Each request runs against moto with the speed-ups and against moto without them (the corrections installed in
both), in this process; the speed-ups are left installed or not as they were found."""

from __future__ import annotations

import importlib
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

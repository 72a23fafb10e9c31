"""AWS's limits, enforced on every call the app makes under moto, which accepts far more than AWS.

``AwsLimits(clients)`` hooks each client (``before-parameter-build``) and
checks a request as AWS would before moto sees it:

- every parameter against the service model's own constraints, which botocore
  does not check client-side: string length and ``pattern`` (a full match),
  number ranges, list and map sizes (a CreateSchedule name or ClientToken over
  64 characters, a BackupName with a ``:``, a batch over its size...);
- DynamoDB: an item over 400 KB (DynamoDB's size rules), a partition key over
  2048 bytes or a sort key over 1024 (table and index keys), a number outside
  DynamoDB's 38 digits and 1E-130..1E+126, an empty key, a transaction over
  100 items or 4 MB or touching one item twice (moto 5.2 itself refuses an
  UpdateItem whose result would pass 400 KB); an ExpressionAttributeNames or
  ExpressionAttributeValues entry that no expression of the request uses, or
  an empty map of either;
- SQS: a message over 256 KiB (body and attributes), DelaySeconds over 900, a
  batch over 10 entries or 256 KiB, characters SQS refuses;
- SNS: a message over 256 KiB, a subject that is not 1-99 ASCII characters
  without line breaks.

A request AWS would reject gets the ``ValidationException`` AWS would answer,
and is kept in ``violations``: the ``aws`` fixture fails the test with them
unless the test says it expects them (``aws.limits.expect()``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import Clients
from chalicelib.expression import referenced

ITEM_LIMIT = 400_000  # AWS documents "400 KB"; the stricter reading (moto's too, for PutItem)
PARTITION_KEY_LIMIT = 2048
SORT_KEY_LIMIT = 1024
TRANSACTION_ITEMS = 100
TRANSACTION_BYTES = 4 * 1024 * 1024
SQS_MESSAGE_LIMIT = 256 * 1024
SQS_MAX_DELAY = 900
SNS_MESSAGE_LIMIT = 256 * 1024
SNS_SUBJECT_MAX = 99
# SQS accepts #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF.
SQS_BAD_CHARACTER = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class LimitExceeded(ValueError):
    pass


# --- DynamoDB sizes (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html)

def _number_size(text: str) -> int:
    """About one byte per two significant digits, plus one (at most 21)."""
    try:
        digits = _significant_digits(Decimal(text))
    except InvalidOperation:
        return 21
    return min(21, (digits + 1) // 2 + 1)


def _significant_digits(number: Decimal) -> int:
    """Digits between the first and last non-zero one (no rounding: Decimal's context keeps only 28)."""
    text = "".join(str(d) for d in number.as_tuple().digits).strip("0")
    return len(text)


def value_size(value: Mapping[str, Any]) -> int:
    """The size DynamoDB counts for one attribute value (DynamoDB JSON)."""
    (kind, content), = value.items()
    if kind == "S":
        return len(str(content).encode())
    if kind == "N":
        return _number_size(str(content))
    if kind == "B":
        return len(content) if isinstance(content, bytes | bytearray) else len(str(content).encode())
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(v).encode()) for v in content)
    if kind == "NS":
        return sum(_number_size(str(v)) for v in content)
    if kind == "BS":
        return sum(len(v) if isinstance(v, bytes | bytearray) else len(str(v).encode()) for v in content)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in content)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in content.items())
    raise LimitExceeded(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Any]) -> int:
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def _numbers(value: Mapping[str, Any]) -> Iterator[str]:
    (kind, content), = value.items()
    if kind == "N":
        yield str(content)
    elif kind == "NS":
        yield from (str(v) for v in content)
    elif kind == "L":
        for v in content:
            yield from _numbers(v)
    elif kind == "M":
        for v in content.values():
            yield from _numbers(v)


def check_number(text: str) -> None:
    try:
        number = Decimal(text)
    except InvalidOperation as exc:
        raise LimitExceeded(f"{text[:40]!r} is not a number") from exc
    if not number.is_finite():
        raise LimitExceeded(f"{text[:40]!r} is not a finite number")
    if number == 0:
        return
    significant = _significant_digits(number)
    if significant > 38:
        raise LimitExceeded(f"a number has {significant} significant digits; DynamoDB keeps 38")
    magnitude = abs(number)
    if magnitude >= Decimal("1E126") or magnitude < Decimal("1E-130"):
        raise LimitExceeded(f"a number's magnitude is out of DynamoDB's range: {text[:40]}")


def _key_bytes(value: Mapping[str, Any]) -> int:
    (kind, content), = value.items()
    if kind == "S":
        return len(str(content).encode())
    if kind == "B":
        return len(content) if isinstance(content, bytes | bytearray) else len(str(content).encode())
    return 0


@dataclass
class KeySchema:
    partition: str
    sort: str | None
    indexes: list[tuple[str, str | None]] = field(default_factory=list)


def check_key(key: Mapping[str, Any], schema: KeySchema, what: str) -> None:
    for name, limit, role in ((schema.partition, PARTITION_KEY_LIMIT, "partition"),
                              (schema.sort, SORT_KEY_LIMIT, "sort")):
        if name is None or name not in key:
            continue
        size = _key_bytes(key[name])
        if size > limit:
            raise LimitExceeded(f"{what}: {role} key {name!r} is {size} bytes; AWS allows {limit}")
        if size == 0 and next(iter(key[name])) in ("S", "B"):
            raise LimitExceeded(f"{what}: {role} key {name!r} is empty")


def check_item(item: Mapping[str, Any], schema: KeySchema | None, what: str) -> None:
    size = item_size(item)
    if size > ITEM_LIMIT:
        raise LimitExceeded(f"{what}: item is {size} bytes; DynamoDB allows {ITEM_LIMIT}")
    for value in item.values():
        for number in _numbers(value):
            check_number(number)
    if schema is not None:
        check_key(item, schema, what)
        for partition, sort in schema.indexes:
            check_key(item, KeySchema(partition, sort), f"{what} (index key)")


EXPRESSIONS = ("UpdateExpression", "ConditionExpression", "FilterExpression", "KeyConditionExpression",
               "ProjectionExpression")


def check_placeholders(params: Mapping[str, Any], what: str) -> None:
    """AWS refuses an empty ExpressionAttributeNames or ExpressionAttributeValues, and an entry of either that
    none of the request's expressions uses (moto takes both)."""
    used: set[str] = set()
    for name in EXPRESSIONS:
        if isinstance(params.get(name), str):
            used |= referenced(params[name])
    for kind in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
        given = params.get(kind)
        if given is None:
            continue
        if not given:
            raise LimitExceeded(f"{what}: {kind} must not be empty")
        unused = sorted(set(given) - used)
        if unused:
            raise LimitExceeded(f"{what}: Value provided in {kind} unused in expressions: keys: {{{', '.join(unused)}}}")


# --- the service model's own constraints ----------------------------------------------------------

def check_shape(shape: Any, value: Any, path: str) -> None:
    """Check ``value`` against ``shape``'s max/pattern/range constraints, recursively."""
    meta = shape.metadata
    kind = shape.type_name
    if kind == "string" and isinstance(value, str):
        if "max" in meta and len(value) > meta["max"]:
            raise LimitExceeded(f"{path} is {len(value)} characters; AWS allows {meta['max']}")
        if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
            raise LimitExceeded(f"{path} {value[:80]!r} does not match AWS's pattern {meta['pattern']}")
    elif kind in ("integer", "long") and isinstance(value, int):
        if ("max" in meta and value > meta["max"]) or ("min" in meta and value < meta["min"]):
            raise LimitExceeded(f"{path} is {value}; AWS allows {meta.get('min')}..{meta.get('max')}")
    elif kind == "list" and isinstance(value, list):
        if "max" in meta and len(value) > meta["max"]:
            raise LimitExceeded(f"{path} has {len(value)} entries; AWS allows {meta['max']}")
        for i, entry in enumerate(value):
            check_shape(shape.member, entry, f"{path}[{i}]")
    elif kind == "map" and isinstance(value, dict):
        if "max" in meta and len(value) > meta["max"]:
            raise LimitExceeded(f"{path} has {len(value)} entries; AWS allows {meta['max']}")
        for key, entry in value.items():
            check_shape(shape.key, key, f"{path} key")
            check_shape(shape.value, entry, f"{path}.{key}")
    elif kind == "structure" and isinstance(value, dict):
        for name, member in shape.members.items():
            if name in value:
                check_shape(member, value[name], f"{path}.{name}" if path else name)


# --- the guard --------------------------------------------------------------------------------------

#: The services whose requests are held to AWS's limits, and the ``Clients`` properties that make their clients.
GUARDED_SERVICES = ("dynamodb", "sqs", "sns", "sesv2", "scheduler")
GUARDED_CLIENTS = ("dynamodb", "dynamodb_unretried", "sqs", "sns", "ses", "scheduler")


@dataclass
class AwsLimits:
    clients: Clients
    violations: list[str] = field(default_factory=list)
    expected: bool = False
    _schemas: dict[str, KeySchema | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # on the session: each client of these services made from now on is hooked, none made for nothing
        for service in GUARDED_SERVICES:
            self.clients.session.events.register(f"before-parameter-build.{service}", self._check)
        for made in (self.clients.__dict__.get(name) for name in GUARDED_CLIENTS):  # made before: hooked too
            if made is not None:
                made.meta.events.register("before-parameter-build", self._check)

    def expect(self) -> None:
        """This test provokes a request AWS would reject on purpose: do not fail it for that."""
        self.expected = True

    def _check(self, params: Mapping[str, Any], model: Any, **_: Any) -> None:
        operation = f"{model.service_model.service_name}.{model.name}"
        try:
            if model.input_shape is not None:
                check_shape(model.input_shape, params, "")
            checker = getattr(self, "_" + operation.replace(".", "_"), None)
            if checker is not None:
                checker(params)
        except LimitExceeded as exc:
            self.violations.append(f"{operation}: {exc}")
            error: Any = {"Error": {"Code": "ValidationException", "Message": str(exc)},
                          "ResponseMetadata": {"HTTPStatusCode": 400}}
            raise ClientError(error, model.name) from None

    # DynamoDB

    def _schema(self, table: str) -> KeySchema | None:
        if table not in self._schemas:
            try:
                description = self._describe(table)
            except ClientError:
                return None
            keys = {k["KeyType"]: k["AttributeName"] for k in description["KeySchema"]}
            indexes = [{k["KeyType"]: k["AttributeName"] for k in index["KeySchema"]}
                       for index in description.get("GlobalSecondaryIndexes", [])
                       + description.get("LocalSecondaryIndexes", [])]
            self._schemas[table] = KeySchema(keys["HASH"], keys.get("RANGE"),
                                             [(i["HASH"], i.get("RANGE")) for i in indexes])
        return self._schemas[table]

    def _describe(self, table: str) -> dict[str, Any]:
        return dict(_shadow(self.clients.settings.region).describe_table(TableName=table)["Table"])

    def _dynamodb_PutItem(self, params: Mapping[str, Any]) -> None:
        check_item(params["Item"], self._schema(params["TableName"]), f"PutItem {params['TableName']}")
        check_placeholders(params, f"PutItem {params['TableName']}")

    def _keyed(self, params: Mapping[str, Any], operation: str) -> None:
        check_placeholders(params, f"{operation} {params['TableName']}")
        schema = self._schema(params["TableName"])
        if schema is not None:
            check_key(params["Key"], schema, f"{operation} {params['TableName']}")
        for value in params.get("ExpressionAttributeValues", {}).values():
            for number in _numbers(value):
                check_number(number)

    def _dynamodb_GetItem(self, params: Mapping[str, Any]) -> None:
        self._keyed(params, "GetItem")

    def _dynamodb_DeleteItem(self, params: Mapping[str, Any]) -> None:
        self._keyed(params, "DeleteItem")

    def _dynamodb_UpdateItem(self, params: Mapping[str, Any]) -> None:
        self._keyed(params, "UpdateItem")

    def _dynamodb_Query(self, params: Mapping[str, Any]) -> None:
        self._start_key(params)

    def _dynamodb_Scan(self, params: Mapping[str, Any]) -> None:
        self._start_key(params)

    def _start_key(self, params: Mapping[str, Any]) -> None:
        check_placeholders(params, f"Query or Scan {params['TableName']}")
        schema = self._schema(params["TableName"])
        if "ExclusiveStartKey" in params and schema is not None:
            check_key(params["ExclusiveStartKey"], schema, f"ExclusiveStartKey {params['TableName']}")

    def _dynamodb_TransactWriteItems(self, params: Mapping[str, Any]) -> None:
        seen: set[str] = set()
        total = 0
        for op in params["TransactItems"]:
            (kind, body), = op.items()
            table = body["TableName"]
            check_placeholders(body, f"TransactWriteItems {kind} {table}")
            schema = self._schema(table)
            if kind == "Put":
                check_item(body["Item"], schema, f"TransactWriteItems Put {table}")
                total += item_size(body["Item"])
                key = {k: v for k, v in body["Item"].items()
                       if schema is not None and k in (schema.partition, schema.sort)}
            else:
                key = body["Key"]
                if schema is not None:
                    check_key(key, schema, f"TransactWriteItems {kind} {table}")
                total += item_size(key)
            ident = table + json.dumps(key, sort_keys=True, default=str)
            if ident in seen:
                raise LimitExceeded(f"TransactWriteItems touches one item of {table} twice")
            seen.add(ident)
        if total > TRANSACTION_BYTES:
            raise LimitExceeded(f"TransactWriteItems carries {total} bytes; AWS allows {TRANSACTION_BYTES}")

    def _dynamodb_BatchWriteItem(self, params: Mapping[str, Any]) -> None:
        count = sum(len(requests) for requests in params["RequestItems"].values())
        if count > 25:
            raise LimitExceeded(f"BatchWriteItem has {count} requests; AWS allows 25")
        for table, requests in params["RequestItems"].items():
            for request in requests:
                if "PutRequest" in request:
                    check_item(request["PutRequest"]["Item"], self._schema(table), f"BatchWriteItem {table}")

    def _dynamodb_BatchGetItem(self, params: Mapping[str, Any]) -> None:
        count = sum(len(spec["Keys"]) for spec in params["RequestItems"].values())
        if count > 100:
            raise LimitExceeded(f"BatchGetItem asks for {count} keys; AWS allows 100")

    # SQS

    def _sqs_SendMessage(self, params: Mapping[str, Any]) -> None:
        self._sqs_message(params, "SendMessage")

    def _sqs_message(self, params: Mapping[str, Any], what: str) -> int:
        body = params.get("MessageBody", "")
        if not body:
            raise LimitExceeded(f"{what}: an empty message body")
        if SQS_BAD_CHARACTER.search(body):
            raise LimitExceeded(f"{what}: the body has a character SQS refuses")
        size = len(body.encode()) + sum(
            len(name.encode()) + len(str(a.get("DataType", "")).encode())
            + len(str(a.get("StringValue", "")).encode()) + len(a.get("BinaryValue", b"") or b"")
            for name, a in params.get("MessageAttributes", {}).items())
        if size > SQS_MESSAGE_LIMIT:
            raise LimitExceeded(f"{what}: the message is {size} bytes; SQS allows {SQS_MESSAGE_LIMIT}")
        delay = params.get("DelaySeconds", 0)
        if not 0 <= delay <= SQS_MAX_DELAY:
            raise LimitExceeded(f"{what}: DelaySeconds {delay}; SQS allows 0..{SQS_MAX_DELAY}")
        return size

    def _sqs_SendMessageBatch(self, params: Mapping[str, Any]) -> None:
        entries = params["Entries"]
        if len(entries) > 10:
            raise LimitExceeded(f"SendMessageBatch has {len(entries)} entries; SQS allows 10")
        ids = [e["Id"] for e in entries]
        if len(set(ids)) != len(ids) or not all(re.fullmatch(r"[A-Za-z0-9_-]{1,80}", i) for i in ids):
            raise LimitExceeded("SendMessageBatch entry ids must be unique, 1-80 of [A-Za-z0-9_-]")
        total = sum(self._sqs_message(e, "SendMessageBatch") for e in entries)
        if total > SQS_MESSAGE_LIMIT:
            raise LimitExceeded(f"SendMessageBatch carries {total} bytes; SQS allows {SQS_MESSAGE_LIMIT}")

    # SNS

    def _sns_Publish(self, params: Mapping[str, Any]) -> None:
        size = len(params["Message"].encode())
        if size > SNS_MESSAGE_LIMIT:
            raise LimitExceeded(f"Publish: the message is {size} bytes; SNS allows {SNS_MESSAGE_LIMIT}")
        subject = params.get("Subject")
        if subject is not None and not re.fullmatch(rf"[\x20-\x7e]{{1,{SNS_SUBJECT_MAX}}}", subject):
            raise LimitExceeded(f"Publish: subject {subject[:120]!r} is not 1-{SNS_SUBJECT_MAX} printable ASCII")


_SHADOWS: dict[str, Any] = {}


def _shadow(region: str) -> Any:
    """A DynamoDB client of no session the tests hook (faults, the policy recorder), made once a region and
    process (a session and client cost some 70 ms; moto answers any client while a test mocks AWS)."""
    if region not in _SHADOWS:
        import boto3

        _SHADOWS[region] = boto3.session.Session().client("dynamodb", region_name=region)
    return _SHADOWS[region]

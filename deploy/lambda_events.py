"""The Lambda events the handlers receive, shaped as Lambda delivers them.

One implementation for three users: the offline runtime (local/) turns what it
reads from moto's server into these events, the stream replay (deploy/replay.py)
turns what it reads from a deployed stage's stream into them, and the tests
(tests/events.py re-exports this module) build the same shapes by hand.  It lives
in deploy/ because the replay runs on an operator's machine without the offline
runtime; local/ may import deploy/, never the other way.  So a handler that
passes its unit tests sees the same fields offline, and on AWS.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"

# The userIdentity of a REMOVE record that DynamoDB's Time to Live produced.
TTL_USER_IDENTITY: dict[str, str] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}

AttributeMap = Mapping[str, Any]  # DynamoDB JSON: {"name": {"S": "value"}}


# --- EventBridge (scheduled rules) ---------------------------------------------

def scheduled_event(at: datetime, rule_arn: str = f"arn:aws:events:{REGION}:{ACCOUNT}:rule/timekeeper-dev",
                    *, region: str = REGION, account: str = ACCOUNT, event_id: str | None = None) -> dict[str, Any]:
    """The event of an EventBridge scheduled rule firing at ``at`` (its ``time``, UTC, whole seconds)."""
    moment = at.astimezone(UTC) if at.tzinfo else at
    return {
        "version": "0", "id": event_id or str(uuid.uuid4()), "detail-type": "Scheduled Event",
        "source": "aws.events", "account": account, "time": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region, "resources": [rule_arn], "detail": {},
    }


# --- SQS ---------------------------------------------------------------------------

def queue_arn(queue_name: str, region: str = REGION, account: str = ACCOUNT) -> str:
    return f"arn:aws:sqs:{region}:{account}:{queue_name}"


def _lambda_message_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """SQS API message attributes ({"StringValue", "DataType"}) as Lambda spells them."""
    out: dict[str, Any] = {}
    for name, attr in attributes.items():
        converted: dict[str, Any] = {"stringListValues": [], "binaryListValues": [], "dataType": attr["DataType"]}
        if "StringValue" in attr:
            converted["stringValue"] = attr["StringValue"]
        if "BinaryValue" in attr:
            raw = attr["BinaryValue"]
            converted["binaryValue"] = base64.b64encode(raw).decode() if isinstance(raw, bytes) else raw
        out[name] = converted
    return out


def sqs_record(body: str, queue_name: str, message_id: str | None = None, receive_count: int = 1, *,
               receipt_handle: str | None = None, attributes: Mapping[str, str] | None = None,
               message_attributes: Mapping[str, Any] | None = None, md5_of_message_attributes: str | None = None,
               source_arn: str | None = None, region: str = REGION) -> dict[str, Any]:
    """One record of an SQS event.  ``message_attributes`` are given as the SQS API returns them."""
    ident = message_id or str(uuid.uuid4())
    record_attributes = {"ApproximateReceiveCount": str(receive_count), "SentTimestamp": "1767225600000",
                         "SenderId": "AIDAEXAMPLE", "ApproximateFirstReceiveTimestamp": "1767225600000"}
    record_attributes.update(attributes or {})
    record: dict[str, Any] = {
        "messageId": ident,
        "receiptHandle": receipt_handle or "handle-" + (message_id or uuid.uuid4().hex),
        "body": body,
        "attributes": record_attributes,
        "messageAttributes": _lambda_message_attributes(message_attributes or {}),
        "md5OfBody": hashlib.md5(body.encode()).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": source_arn or queue_arn(queue_name, region),
        "awsRegion": region,
    }
    if md5_of_message_attributes:
        record["md5OfMessageAttributes"] = md5_of_message_attributes
    return record


def sqs_record_from_message(message: Mapping[str, Any], source_arn: str, region: str = REGION) -> dict[str, Any]:
    """A message from ReceiveMessage (AttributeNames and MessageAttributeNames "All") as a Lambda record."""
    return sqs_record(
        message["Body"], source_arn.rsplit(":", 1)[-1], message["MessageId"],
        int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1")),
        receipt_handle=message["ReceiptHandle"], attributes=message.get("Attributes", {}),
        message_attributes=message.get("MessageAttributes", {}),
        md5_of_message_attributes=message.get("MD5OfMessageAttributes"),
        source_arn=source_arn, region=region)


def sqs_event(*records: dict[str, Any]) -> dict[str, Any]:
    return {"Records": list(records)}


def batch_item_failures(response: Any) -> set[str] | None:
    """The item identifiers a handler reported as failed (ReportBatchItemFailures); None: no report.

    A malformed report fails the whole batch, as Lambda treats it.
    """
    if not isinstance(response, Mapping) or "batchItemFailures" not in response:
        return None
    failures = response["batchItemFailures"]
    if not isinstance(failures, list):
        raise ValueError("batchItemFailures must be a list")
    ids: set[str] = set()
    for failure in failures:
        ident = failure.get("itemIdentifier") if isinstance(failure, Mapping) else None
        if not isinstance(ident, str) or not ident:
            raise ValueError(f"batchItemFailures entry without an itemIdentifier: {failure!r}")
        ids.add(ident)
    return ids


# --- DynamoDB Streams ----------------------------------------------------------

def stream_arn(table: str, label: str = "2026-01-01T00:00:00.000", region: str = REGION,
               account: str = ACCOUNT) -> str:
    return f"arn:aws:dynamodb:{region}:{account}:table/{table}/stream/{label}"


def table_of_stream(arn: str) -> str:
    """The table name in a stream ARN (arn:aws:dynamodb:<region>:<account>:table/<name>/stream/<label>)."""
    return arn.split(":", 5)[5].split("/")[1]


def _lambda_attribute(value: Any) -> Any:
    """A DynamoDB JSON value as Lambda's JSON carries it (binary values base64-encoded)."""
    if isinstance(value, Mapping):
        return {k: _lambda_attribute(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_lambda_attribute(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    return value


def _epoch_seconds(moment: datetime | float | None) -> float:
    if moment is None:
        return float(int(datetime.now(UTC).timestamp()))
    if isinstance(moment, datetime):
        moment = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    return float(int(moment))  # Lambda delivers whole seconds


def stream_record(event_name: str, keys: AttributeMap, *, new_image: AttributeMap | None = None,
                  old_image: AttributeMap | None = None, sequence_number: str = "100000000000000000001",
                  source_arn: str | None = None, region: str = REGION,
                  view_type: str = "NEW_AND_OLD_IMAGES", created: datetime | float | None = None,
                  size_bytes: int | None = None, user_identity: Mapping[str, str] | None = None,
                  event_id: str | None = None) -> dict[str, Any]:
    """One record of a DynamoDB stream event.  ``keys`` and images are DynamoDB JSON.

    ``event_name`` is INSERT, MODIFY or REMOVE; images are kept as ``view_type``
    allows (KEYS_ONLY, NEW_IMAGE, OLD_IMAGE, NEW_AND_OLD_IMAGES).  A TTL deletion
    is a REMOVE with ``user_identity=TTL_USER_IDENTITY``.
    """
    if event_name not in ("INSERT", "MODIFY", "REMOVE"):
        raise ValueError(f"event_name must be INSERT, MODIFY or REMOVE, got {event_name!r}")
    data: dict[str, Any] = {
        "ApproximateCreationDateTime": _epoch_seconds(created),
        "Keys": _lambda_attribute(dict(keys)),
        "SequenceNumber": sequence_number,
        "StreamViewType": view_type,
    }
    if new_image is not None and event_name != "REMOVE" and view_type in ("NEW_IMAGE", "NEW_AND_OLD_IMAGES"):
        data["NewImage"] = _lambda_attribute(dict(new_image))
    if old_image is not None and event_name != "INSERT" and view_type in ("OLD_IMAGE", "NEW_AND_OLD_IMAGES"):
        data["OldImage"] = _lambda_attribute(dict(old_image))
    data["SizeBytes"] = size_bytes if size_bytes is not None else len(json.dumps(data, sort_keys=True))
    record: dict[str, Any] = {
        "eventID": event_id or uuid.uuid4().hex,
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": region,
        "dynamodb": data,
        "eventSourceARN": source_arn or stream_arn("timekeeper-tasks", region=region),
    }
    if user_identity is not None:
        record["userIdentity"] = dict(user_identity)
    return record


def stream_record_from_api(record: Mapping[str, Any], source_arn: str, region: str = REGION,
                           user_identity: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A record from DynamoDB Streams' GetRecords as Lambda delivers it."""
    data = record["dynamodb"]
    identity = user_identity or record.get("userIdentity")
    return stream_record(
        record["eventName"], data.get("Keys", {}), new_image=data.get("NewImage"), old_image=data.get("OldImage"),
        sequence_number=str(data["SequenceNumber"]), source_arn=source_arn, region=region,
        view_type=data.get("StreamViewType", "NEW_AND_OLD_IMAGES"), created=data.get("ApproximateCreationDateTime"),
        size_bytes=data.get("SizeBytes"), user_identity=identity, event_id=record.get("eventID"))


def stream_event(*records: dict[str, Any]) -> dict[str, Any]:
    return {"Records": list(records)}


def item_key(keys: AttributeMap) -> str:
    """A canonical text of a DynamoDB JSON key, to compare keys read from different places."""
    return json.dumps(_lambda_attribute(dict(keys)), sort_keys=True)

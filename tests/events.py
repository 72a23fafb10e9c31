"""Builders of the Lambda events the handlers receive, shaped as Lambda delivers them."""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime
from typing import Any


def scheduled_event(at: datetime, rule_arn: str = "arn:aws:events:us-east-1:123456789012:rule/timekeeper-dev")\
        -> dict[str, Any]:
    return {
        "version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events",
        "account": "123456789012", "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"), "region": "us-east-1",
        "resources": [rule_arn], "detail": {},
    }


def sqs_record(body: str, queue_name: str, message_id: str | None = None, receive_count: int = 1)\
        -> dict[str, Any]:
    return {
        "messageId": message_id or str(uuid.uuid4()),
        "receiptHandle": "handle-" + (message_id or uuid.uuid4().hex),
        "body": body,
        "attributes": {"ApproximateReceiveCount": str(receive_count), "SentTimestamp": "1767225600000",
                       "SenderId": "AIDAEXAMPLE", "ApproximateFirstReceiveTimestamp": "1767225600000"},
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(body.encode()).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{queue_name}",
        "awsRegion": "us-east-1",
    }


def sqs_event(*records: dict[str, Any]) -> dict[str, Any]:
    return {"Records": list(records)}

"""Seed 001's design for exact tasks, written from its description as the bench's baseline (never tuned).

The seed: items written to a table with a due timestamp produce stream records; a
stream consumer creates, record by record, a one-time EventBridge Scheduler
schedule ``at(<due>)`` per item (FlexibleTimeWindow OFF, ActionAfterCompletion
DELETE, a ClientToken for idempotency, a dead-letter queue) whose target -- a
Lambda function -- performs the action at that time.  Per task that is one
CreateSchedule, one Scheduler invocation and one invocation of the target.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

#: The seed's target: the function that sends the reminder, and the role Scheduler assumes to invoke it.
TARGET_ARN = "arn:aws:lambda:us-east-1:123456789012:function:seed-reminder"
ROLE_ARN = "arn:aws:iam::123456789012:role/seed-scheduler"
DLQ_ARN = "arn:aws:sqs:us-east-1:123456789012:seed-scheduler-dlq"

#: What the seed's design costs per task beyond the item write and the action.
CREATE_SCHEDULE_CALLS = 1
SCHEDULER_INVOCATIONS = 1
TARGET_INVOCATIONS = 1

_deserializer = TypeDeserializer()


def _due(image: dict[str, Any], due_attribute: str) -> datetime:
    value = _deserializer.deserialize(image[due_attribute])
    if isinstance(value, str) and not value.isdigit():
        due = datetime.fromisoformat(value)
        return due.replace(tzinfo=UTC) if due.tzinfo is None else due.astimezone(UTC)
    return datetime.fromtimestamp(float(value), UTC)


def handle_stream_batch(scheduler: Any, records: Sequence[dict[str, Any]], group: str,
                        due_attribute: str = "REMINDER_TIMESTAMP") -> int:
    """The seed's stream consumer: for each INSERT, parse the item and create its schedule, one after another.
    Returns the number of schedules created."""
    created = 0
    for record in records:
        if record.get("eventName") != "INSERT":
            continue
        image = record["dynamodb"]["NewImage"]
        due = _due(image, due_attribute)
        keys = json.dumps(record["dynamodb"]["Keys"], sort_keys=True)
        scheduler.create_schedule(
            Name="seed-" + hashlib.sha256(keys.encode()).hexdigest()[:40],
            GroupName=group,
            ScheduleExpression=f"at({due:%Y-%m-%dT%H:%M:%S})",
            ScheduleExpressionTimezone="UTC",
            FlexibleTimeWindow={"Mode": "OFF"},
            ActionAfterCompletion="DELETE",
            ClientToken=hashlib.sha256(str(record["eventID"]).encode()).hexdigest()[:64],
            Target={"Arn": TARGET_ARN, "RoleArn": ROLE_ARN, "Input": json.dumps(image),
                    "DeadLetterConfig": {"Arn": DLQ_ARN}},
        )
        created += 1
    return created

"""Builders of the Lambda events the handlers receive, shaped as Lambda delivers them.

One implementation, in local/events.py, shared with the offline runtime, so the
events the unit and functional tests build are the events ``make run`` delivers.
"""

from __future__ import annotations

from deploy.lambda_events import (
    ACCOUNT,
    REGION,
    TTL_USER_IDENTITY,
    batch_item_failures,
    item_key,
    queue_arn,
    scheduled_event,
    sqs_event,
    sqs_record,
    sqs_record_from_message,
    stream_arn,
    stream_event,
    stream_record,
    stream_record_from_api,
    table_of_stream,
)

__all__ = [
    "ACCOUNT",
    "REGION",
    "TTL_USER_IDENTITY",
    "batch_item_failures",
    "item_key",
    "queue_arn",
    "scheduled_event",
    "sqs_event",
    "sqs_record",
    "sqs_record_from_message",
    "stream_arn",
    "stream_event",
    "stream_record",
    "stream_record_from_api",
    "table_of_stream",
]

"""Seed 000's backup design, written from its description for the bench to measure (P1); never tuned.

A daily rule starts ``trigger``: one CreateBackup per selected table, then the
backups' ARNs go to an SQS queue in one message delayed by 300 s.  The queue's
consumer (``consume``) does one DescribeBackup per backup in the message, alerts
(SNS) on each one that failed, and sends the still-CREATING ones back to the
queue with the same delay; once none is left running it deletes the backups
older than 3 days: ListBackups pages (USER backups created before the cutoff)
and one DeleteBackup for each of a selected table.

Where the description leaves a choice, the kinder one is taken (fewer calls):
the ARNs travel in one message rather than one each, and the retention listing
asks ListBackups for the old backups only (TimeRangeUpperBound) instead of all.
The description filters retention by table and age only, not by name: a
hand-made or another tool's USER backup of a selected table older than 3 days
is deleted too (the bench reports how many).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient

DELAY_SECONDS = 300
RETENTION = timedelta(days=3)


def trigger(dynamodb: DynamoDBClient, sqs: SQSClient, queue_url: str, tables: Sequence[str],
            now: datetime) -> list[str]:
    """The daily rule's Lambda: CreateBackup per table, the ARNs to the queue; the ARNs."""
    arns = [dynamodb.create_backup(TableName=table, BackupName=f"{table}-{now:%Y%m%d%H%M%S}")
            ["BackupDetails"]["BackupArn"] for table in tables]
    sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps({"tables": list(tables), "backups": arns}),
                     DelaySeconds=DELAY_SECONDS)
    return arns


def _status(dynamodb: DynamoDBClient, arn: str) -> str | None:
    try:
        return str(dynamodb.describe_backup(BackupArn=arn)["BackupDescription"]["BackupDetails"]["BackupStatus"])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "BackupNotFoundException":
            return None
        raise


def consume(dynamodb: DynamoDBClient, sqs: SQSClient, sns: SNSClient, queue_url: str, topic_arn: str,
            body: str, now: datetime) -> str:
    """One delivery of the queue's message: "requeued" while backups run, then "complete"."""
    message: dict[str, Any] = json.loads(body)
    running: list[str] = []
    for arn in message["backups"]:
        status = _status(dynamodb, arn)
        if status == "CREATING":
            running.append(arn)
        elif status != "AVAILABLE":
            sns.publish(TopicArn=topic_arn, Subject="backup failed",
                        Message=json.dumps({"backup_arn": arn, "status": status}))
    if running:
        sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps({**message, "backups": running}),
                         DelaySeconds=DELAY_SECONDS)
        return "requeued"
    delete_old_backups(dynamodb, message["tables"], now)
    return "complete"


def delete_old_backups(dynamodb: DynamoDBClient, tables: Sequence[str], now: datetime) -> list[str]:
    """Delete the selected tables' USER backups created more than 3 days before ``now``; their ARNs."""
    selected = set(tables)
    kwargs: dict[str, Any] = {"BackupType": "USER", "TimeRangeUpperBound": now - RETENTION}
    doomed: list[str] = []
    while True:
        page = dynamodb.list_backups(**kwargs)
        doomed.extend(s["BackupArn"] for s in page.get("BackupSummaries", []) if s.get("TableName") in selected)
        last = page.get("LastEvaluatedBackupArn")
        if not last:
            break
        kwargs["ExclusiveStartBackupArn"] = last
    for arn in doomed:
        dynamodb.delete_backup(BackupArn=arn)
    return doomed

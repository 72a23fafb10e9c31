"""Replay the tasks-stream batches Lambda gave up on: ``python -m deploy.cli replay-stream-failures``.

When a stream batch keeps failing past STREAM_MAX_RECORD_AGE_SECONDS, Lambda
sends its on-failure queue (STREAM_ON_FAILURE_QUEUE, default TASK_DLQ) only
the batch's position, a ``DDBStreamBatchInfo`` (stream ARN, shard id, first
and last sequence number), and moves on. This reads each such message, reads
those records back from the stream (DynamoDB Streams keeps them 24 h), hands
them, shaped as Lambda delivers them, to the stream handler's entry point
(``chalicelib.tasks.stream.process_records``), and deletes the message only
when every record was processed. Other messages of the queue (the handler's
own dead letters, redriven due messages) are left as they were.

Reconcile, never rewind: Lambda has processed the later records of the same
items since, so a record is replayed as it is only while it is still the
item's latest state. When the item changed since, the record's new image is
replaced by the item as it is now (its old image kept), so the replay brings
the schedule, bucket or TTL to the item's current state instead of back to an
older one; when the item is gone, its removal's record decides, so an
INSERT or MODIFY is skipped. A REMOVE made by the TTL process (a lazy task
coming due) is always replayed: the executor checks the task before it runs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import Deps
from chalicelib.tasks import stream
from chalicelib.tasks.schedules import TTL_PRINCIPAL
from deploy import lambda_events as events

BATCH_INFO = "DDBStreamBatchInfo"
VISIBILITY_SECONDS = 900     # a message being replayed stays hidden from another replay this long
MAX_EMPTY_PAGES = 50         # GetRecords may answer empty pages before it reaches the records
RECORDS_PER_PAGE = 1000

Process = Callable[[Deps, Sequence[dict[str, Any]]], dict[str, Any]]


@dataclass
class ReplayReport:
    changes: list[str] = field(default_factory=list)   # batches replayed (their message deleted)
    problems: list[str] = field(default_factory=list)  # batches kept in the queue, and why
    other_messages: int = 0                            # messages that are not batch positions


def batch_info(body: str) -> dict[str, Any] | None:
    """The DDBStreamBatchInfo of an on-failure message, or None when the message is something else."""
    try:
        document = json.loads(body)
    except (TypeError, ValueError):
        return None
    info = document.get(BATCH_INFO) if isinstance(document, dict) else None
    keys = ("streamArn", "shardId", "startSequenceNumber", "endSequenceNumber")
    if not isinstance(info, dict) or not all(isinstance(info.get(k), str) and info[k] for k in keys):
        return None
    return info


def read_batch(streams: Any, info: dict[str, Any]) -> list[dict[str, Any]]:
    """The records from startSequenceNumber to endSequenceNumber (GetRecords' shape), in order.

    Raises ClientError (e.g. TrimmedDataAccessException once they are older than 24 h) and
    LookupError when the shard ends or answers nothing before the last one.
    """
    start, end = int(info["startSequenceNumber"]), int(info["endSequenceNumber"])
    iterator: str | None = streams.get_shard_iterator(
        StreamArn=info["streamArn"], ShardId=info["shardId"], ShardIteratorType="AT_SEQUENCE_NUMBER",
        SequenceNumber=info["startSequenceNumber"])["ShardIterator"]
    records: list[dict[str, Any]] = []
    empty = 0
    while iterator:
        page = streams.get_records(ShardIterator=iterator, Limit=RECORDS_PER_PAGE)
        found = page.get("Records", [])
        for record in found:
            number = int(record["dynamodb"]["SequenceNumber"])
            if number > end:
                return records
            if number >= start:
                records.append(dict(record))
        if records and int(records[-1]["dynamodb"]["SequenceNumber"]) == end:
            return records
        empty = 0 if found else empty + 1
        if empty >= MAX_EMPTY_PAGES:
            break
        iterator = page.get("NextShardIterator")
    if records and not iterator:
        return records  # the shard closed: nothing after its last record
    raise LookupError(f"records {start}..{end} not all found in {info['shardId']} of {info['streamArn']}")


def lambda_identity(record: dict[str, Any]) -> dict[str, str] | None:
    """The record's userIdentity as Lambda spells it: GetRecords says Type/PrincipalId, Lambda type/principalId."""
    identity = record.get("userIdentity")
    if not isinstance(identity, dict):
        return None
    return {"type": str(identity.get("Type", identity.get("type", ""))),
            "principalId": str(identity.get("PrincipalId", identity.get("principalId", "")))}


def _by_ttl(record: dict[str, Any]) -> bool:
    identity = lambda_identity(record) or {}
    return identity.get("type") == "Service" and identity.get("principalId") == TTL_PRINCIPAL


def reconcile(deps: Deps, record: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The record to replay for ``record`` (None: skip it) and what was done, from the item as it is now."""
    name = record.get("eventName")
    data = record["dynamodb"]
    if name == "REMOVE" and _by_ttl(record):
        return record, "as is"
    current = deps.clients.dynamodb.get_item(
        TableName=deps.settings.tasks_table, Key=data["Keys"], ConsistentRead=True).get("Item")
    if current is None:
        return (record, "as is") if name == "REMOVE" else (None, "skipped: the item is gone since")
    if name != "REMOVE" and data.get("NewImage") == current:
        return record, "as is"
    # The item changed since (or came back after this REMOVE): from this record's old state to now.
    now = {**data, "NewImage": current}
    reconciled = {**record, "dynamodb": now, "eventName": "MODIFY" if "OldImage" in data else "INSERT",
                  "eventID": f"{record.get('eventID', '')}-reconciled"}
    return reconciled, "reconciled with the item as it is now"


def replay_batch(deps: Deps, streams: Any, info: dict[str, Any],
                 process: Process = stream.process_records) -> tuple[int, dict[str, int]]:
    """Read and process one batch; returns (records read, counts of what was done with them).

    Raises RuntimeError when the handler reports records it could not process (transient failures).
    """
    records = read_batch(streams, info)
    shaped: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for record in records:
        replayed, what = reconcile(deps, record)
        counts[what] = counts.get(what, 0) + 1
        if replayed is not None:
            shaped.append(events.stream_record_from_api(replayed, info["streamArn"], deps.settings.region,
                                                        lambda_identity(replayed)))
    if shaped:
        failed = [f["itemIdentifier"] for f in process(deps, shaped).get("batchItemFailures", [])]
        if failed:
            raise RuntimeError(f"{len(failed)} record(s) still failing, from sequence number {failed[0]}")
    return len(records), counts


def replay_stream_failures(deps: Deps, streams: Any, queue_name: str,
                           process: Process = stream.process_records) -> ReplayReport:
    """Replay every batch position in ``queue_name``; delete each message once its batch went through."""
    sqs = deps.clients.sqs
    url = sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
    report = ReplayReport()
    kept: list[str] = []   # receipt handles of the messages left in the queue, made visible again at the end
    seen: set[str] = set()
    try:
        while True:
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                           VisibilityTimeout=VISIBILITY_SECONDS).get("Messages", [])
            fresh = [m for m in messages if m["MessageId"] not in seen]
            if not fresh:
                kept += [m["ReceiptHandle"] for m in messages]
                break
            for message in fresh:
                seen.add(message["MessageId"])
                info = batch_info(message.get("Body", ""))
                if info is None:
                    report.other_messages += 1
                    kept.append(message["ReceiptHandle"])
                    continue
                where = f"{info['shardId']} {info['startSequenceNumber']}..{info['endSequenceNumber']}"
                if events.table_of_stream(info["streamArn"]) != deps.settings.tasks_table:
                    report.problems.append(f"{where}: stream of another table ({info['streamArn']}); left")
                    kept.append(message["ReceiptHandle"])
                    continue
                try:
                    read, counts = replay_batch(deps, streams, info, process)
                except (ClientError, LookupError, RuntimeError) as exc:
                    report.problems.append(f"{where}: {exc}; message kept")
                    kept.append(message["ReceiptHandle"])
                    continue
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
                done = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
                report.changes.append(f"replayed {where}: {read} record(s) ({done})")
    finally:
        for handle in kept:
            with contextlib.suppress(ClientError):  # else visible again when VISIBILITY_SECONDS are over
                sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
    return report

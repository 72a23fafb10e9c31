"""Upgrade the data a previous version left, idempotently; run by ``provision()`` (so by ``make deploy``,
``make run`` and the tests' stages) after the tables exist.

The status index (``GET /tasks``) was a set of items ``TASKS#<STATUS>`` / ``<created_at>#<id>`` in the state
table, moved by the executor's transaction when a task ended.  It is now a sparse GSI over the task records
(``status``, ``listed``), which the executor's one write on the record moves with no write of its own.  For
each old entry, its record gets ``listed`` (only when it has none: a record the new code wrote wins) and the
entry is deleted.  An entry whose record is gone is deleted.  A run that stops half-way is finished by the
next, as every step is conditional or idempotent.

Tasks pending under the old layout need nothing: the executor reads the status the old one wrote on an item
(DONE, FAILED, RUNNING: see ``executor._legacy_claim``) and keeps its own state on the record.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import Clients
from chalicelib.settings import Settings
from chalicelib.tasks import items
from chalicelib.tasks.model import Status

PAGE = 100


def migrate(clients: Clients, settings: Settings) -> list[str]:
    """Move the old status index entries onto the records; what changed, for the deploy report."""
    moved = 0
    ddb = clients.dynamodb
    for status in (Status.PENDING, Status.RUNNING, Status.DONE, Status.FAILED, Status.CANCELLED):
        partition = items.LEGACY_INDEX_PREFIX + status.value
        start: dict[str, Any] | None = None
        while True:
            kwargs: dict[str, Any] = {"TableName": settings.state_table, "KeyConditionExpression": "PK = :pk",
                                      "ExpressionAttributeValues": {":pk": {"S": partition}}, "Limit": PAGE,
                                      "ConsistentRead": True}
            if start:
                kwargs["ExclusiveStartKey"] = start
            page = ddb.query(**kwargs)
            for entry in page.get("Items", []):
                _move(clients, settings, entry)
                moved += 1
            start = page.get("LastEvaluatedKey")
            if not start:
                break
    return [f"moved {moved} status index entries onto their task records"] if moved else []


def _move(clients: Clients, settings: Settings, entry: dict[str, Any]) -> None:
    listed = entry["SK"]["S"]
    task_id = entry.get("id", {}).get("S") or listed.split("#", 1)[-1]
    try:
        clients.dynamodb.update_item(
            TableName=settings.state_table, Key={"PK": {"S": items.RECORD_PREFIX + task_id}, "SK": {"S": items.RECORD_SK}},
            UpdateExpression="SET #l = :listed", ConditionExpression="attribute_exists(PK) AND attribute_not_exists(#l)",
            ExpressionAttributeNames={"#l": items.LISTED}, ExpressionAttributeValues={":listed": {"S": listed}})
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise
    clients.dynamodb.delete_item(TableName=settings.state_table, Key={"PK": entry["PK"], "SK": entry["SK"]})

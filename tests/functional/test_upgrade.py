"""Upgrading from the layout where the executor wrote outcomes on items and moved status-index entries."""

from __future__ import annotations

from typing import Any

from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from deploy.migrate import migrate
from tests.fixtures import Aws
from tests.functional.task_support import EMAIL_ACTION, put_item

CREATED = "2026-11-21T09:00:00Z"


def old_task(deps: Deps, task_id: str, status: str, created_at: str = CREATED) -> None:
    """An API task as the previous version left it: status on the item, a record, a status-index entry."""
    put_item(deps, {"PK": f"TASK#{task_id}", "SK": "TASK", "run_at": "2026-11-22T12:03:00Z", "strategy": "exact",
                    "action": EMAIL_ACTION, "status": status, "attempts": 1 if status == "DONE" else 0,
                    "created_at": created_at})
    for row in ({"PK": f"TASK#{task_id}", "SK": "RECORD", "id": task_id, "task_pk": f"TASK#{task_id}",
                 "task_sk": "TASK", "status": status, "run_at": "2026-11-22T12:03:00Z", "strategy": "exact",
                 "action": EMAIL_ACTION, "attempts": 0, "created_at": created_at, "fingerprint": "f"},
                {"PK": f"TASKS#{status}", "SK": f"{created_at}#{task_id}", "id": task_id}):
        deps.clients.dynamodb.put_item(TableName=deps.settings.state_table, Item=ddb.serialize(row))


def listed(client: Client, status: str) -> list[str]:
    body: dict[str, Any] = client.http.get(f"/tasks?status={status}").json_body
    return [t["id"] for t in body["tasks"]]


def test_the_old_status_index_entries_move_onto_the_records_once(client: Client, aws: Aws, deps: Deps) -> None:
    old_task(deps, "a", "PENDING")
    old_task(deps, "b", "DONE", "2026-11-21T10:00:00Z")
    assert listed(client, "PENDING") == []  # before the migration the new index does not know them
    assert migrate(aws.clients, aws.settings) == ["moved 2 status index entries onto their task records"]
    assert listed(client, "PENDING") == ["a"]
    assert listed(client, "DONE") == ["b"]
    rows = aws.clients.dynamodb.scan(TableName=deps.settings.state_table)["Items"]
    assert sorted(r["PK"]["S"] for r in rows) == ["TASK#a", "TASK#b"]  # the old entries are gone
    assert migrate(aws.clients, aws.settings) == []  # a second run finds nothing to do


def test_an_entry_whose_record_is_gone_is_dropped_and_a_newer_listing_is_kept(
        aws: Aws, deps: Deps) -> None:
    old_task(deps, "a", "PENDING")
    deps.clients.dynamodb.update_item(
        TableName=deps.settings.state_table, Key=ddb.serialize({"PK": "TASK#a", "SK": "RECORD"}),
        UpdateExpression="SET listed = :l", ExpressionAttributeValues={":l": {"S": "newer#a"}})
    deps.clients.dynamodb.put_item(TableName=deps.settings.state_table, Item=ddb.serialize(
        {"PK": "TASKS#DONE", "SK": f"{CREATED}#gone", "id": "gone"}))
    migrate(aws.clients, aws.settings)
    record = deps.clients.dynamodb.get_item(TableName=deps.settings.state_table,
                                            Key=ddb.serialize({"PK": "TASK#a", "SK": "RECORD"}))["Item"]
    assert record["listed"] == {"S": "newer#a"}
    assert [r["PK"]["S"] for r in aws.clients.dynamodb.scan(TableName=deps.settings.state_table)["Items"]] == [
        "TASK#a"]

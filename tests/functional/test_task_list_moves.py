"""GET /tasks over every status reads each status's index partitions one after another: a task that moves from
one status to the next meanwhile is found in both, and is listed once (BatchGetItem refuses a key twice)."""

from __future__ import annotations

from chalice.test import Client

from chalicelib import ddb
from chalicelib.tasks import items
from tests.faults import Faults
from tests.functional.task_support import EMAIL_ACTION, post_task

RUN_AT = "2026-11-22T12:10:00Z"


def test_a_task_that_moves_status_while_the_list_reads_is_listed_once(client: Client, faults: Faults) -> None:
    assert post_task(client, {"id": "moving", "run_at": RUN_AT, "action": EMAIL_ACTION}).status_code == 201
    [listed] = [t for t in client.http.get("/tasks?status=PENDING").json_body["tasks"] if t["id"] == "moving"]
    # the DONE partition of its shard, read after the PENDING ones, already holds it: it finished meanwhile
    done_key = items.status_key("moving", "DONE")
    row = ddb.serialize({"PK": items.RECORD_PREFIX + "moving", "SK": "RECORD", items.STATUS_KEY: done_key,
                         items.LISTED: f"{listed['created_at']}#moving"})
    faults.inject("dynamodb.Query", "answer", answer={"Items": [row], "Count": 1, "ScannedCount": 1},
                  match=lambda p: p.get("ExpressionAttributeValues", {}).get(":key") == {"S": done_key})
    response = client.http.get("/tasks")
    assert response.status_code == 200, response.json_body
    assert [t["id"] for t in response.json_body["tasks"]] == ["moving"]

from __future__ import annotations

import json

from chalice.test import Client

from chalicelib.aws import Deps
from tests import events
from tests.fixtures import Aws, FakeClock, use_settings


def test_scheduled_run_backs_up_listed_tables_and_monitor_completes(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    for name in ("orders", "users"):
        aws.clients.dynamodb.create_table(
            TableName=name, BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])
    use_settings(deps, backup_tables=("orders", "users"))
    client.lambda_.invoke("backup_trigger", events.scheduled_event(clock.now))
    msgs = aws.sent(deps.settings.backup_monitor_queue)
    assert len(msgs) == 1
    body, delay = msgs[0]
    assert delay == 300
    assert json.loads(body)["poll"] == 0
    client.lambda_.invoke("backup_monitor", events.sqs_event(events.sqs_record(body, "q")))
    run_id = json.loads(body)["run_id"]
    response = client.http.get(f"/backups/runs/{run_id}")
    assert response.status_code == 200, response.body
    assert response.json_body["status"] == "COMPLETE"
    print(aws.alerts())

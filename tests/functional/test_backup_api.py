"""The backup routes through Chalice's test client."""

from __future__ import annotations

import json
import re

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.backup_support import create_tables, monitor_messages

# ListBackups pages and honours its time bounds as on AWS; backups carry the injected clock's time.

JSON = {"Content-Type": "application/json"}


def test_post_backups_starts_a_run_now_and_answers_202(aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    create_tables(deps, ["orders", "users"])
    use_settings(deps, backup_tables=("orders", "users"))

    response = client.http.post("/backups", headers=JSON, body=json.dumps({"tables": ["users"]}))

    assert response.status_code == 202
    run_id = response.json_body["run_id"]
    assert response.json_body["tables"] == ["users"]
    (body, delay), = monitor_messages(aws, deps)
    assert json.loads(body)["run_id"] == run_id and delay == 300
    shown = client.http.get(f"/backups/runs/{run_id}")
    assert shown.status_code == 200
    assert shown.json_body["status"] == "RUNNING"
    assert [t["table"] for t in shown.json_body["tables"]] == ["users"]
    assert shown.json_body["tables"][0]["status"] == "PENDING"


def test_post_backups_without_a_body_uses_the_configured_selection(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    create_tables(deps, ["orders", "users"])
    use_settings(deps, backup_tables=("orders",))

    response = client.http.post("/backups")

    assert response.status_code == 202 and response.json_body["tables"] == ["orders"]


def test_runs_are_listed_newest_first(aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    create_tables(deps, ["orders"])
    use_settings(deps, backup_tables=("orders",))
    ids = []
    for _ in range(3):
        ids.append(client.http.post("/backups", headers=JSON, body='{"tables": ["orders"]}').json_body["run_id"])
        clock.advance(hours=1)

    listed = client.http.get("/backups/runs?limit=2")

    assert listed.status_code == 200
    assert [r["run_id"] for r in listed.json_body["runs"]] == [ids[2], ids[1]]


@pytest.mark.parametrize(("body", "field"), [
    ("{not json", "body"),
    ("[1, 2]", "body"),
    ('{"tables": "orders"}', "tables"),
    ('{"tables": []}', "tables"),
    ('{"tables": [1]}', "tables"),
    ('{"tables": ["orders", "nope"]}', "tables"),
    ('{"tables": ["orders"], "extra": 1}', "extra"),
    ('{"tables": ["a b"]}', "tables"),
    ('{"tables": ["ab"]}', "tables"),
    ('{"tables": [' + ", ".join(f'"t{i:03d}"' for i in range(101)) + "]}", "tables"),
])
def test_bad_input_is_a_400_naming_the_field(
        aws: Aws, deps: Deps, client: Client, body: str, field: str) -> None:
    create_tables(deps, ["orders"])
    use_settings(deps, backup_api_tables=("orders", "nope"))  # "nope" is allowed but does not exist

    response = client.http.post("/backups", headers=JSON, body=body)

    assert response.status_code == 400
    assert response.json_body["field"] == field
    assert response.json_body["error"]
    assert monitor_messages(aws, deps) == []


@pytest.mark.parametrize(("selection", "table"), [
    ({}, "orders"),                                                               # nothing selected
    ({"backup_tables": ("users",)}, "orders"),
    ({"backup_table_pattern": re.compile(r"ord")}, "orders"),                     # the whole name must match
    ({"backup_table_pattern": re.compile(r".*")}, "timekeeper-state"),           # the app's own state table
    ({"backup_table_pattern": re.compile(r".*")}, "timekeeper-tasks"),           # and its tasks table
    ({"backup_table_tag": ("backup", "daily")}, "orders"),                         # not tagged
    ({"backup_table_tag": ("backup", "daily")}, "timekeeper-state"),
])
def test_post_backups_refuses_a_table_outside_the_stages_selection_naming_it(
        aws: Aws, deps: Deps, client: Client, selection: dict[str, object], table: str) -> None:
    create_tables(deps, ["orders", "users"], tags={"users": {"backup": "daily"}})
    use_settings(deps, backup_api_tables=("users",), **selection)  # a table allowed, and one not

    response = client.http.post("/backups", headers=JSON, body=json.dumps({"tables": ["users", table]}))

    assert response.status_code == 400
    assert response.json_body["field"] == "tables"
    assert response.json_body["error"].endswith(f": {table}")
    assert monitor_messages(aws, deps) == [] and aws.clients.dynamodb.list_backups()["BackupSummaries"] == []


@pytest.mark.parametrize(("selection", "tables"), [
    ({"backup_tables": ("orders",)}, ["orders"]),
    ({"backup_table_pattern": re.compile(r"ord.*")}, ["orders"]),
    ({"backup_table_tag": ("backup", "daily")}, ["users"]),
    ({"backup_api_tables": ("orders",), "backup_tables": ("users",)}, ["orders", "users"]),
    ({"backup_api_tables": ("timekeeper-state",)}, ["timekeeper-state"]),           # listed by name: allowed
])
def test_post_backups_accepts_the_stages_selection_and_its_allow_list(
        aws: Aws, deps: Deps, client: Client, selection: dict[str, object], tables: list[str]) -> None:
    create_tables(deps, ["orders", "users"], tags={"users": {"backup": "daily"}})
    use_settings(deps, **selection)

    response = client.http.post("/backups", headers=JSON, body=json.dumps({"tables": tables}))

    assert response.status_code == 202, response.json_body
    assert response.json_body["tables"] == sorted(tables)


@pytest.mark.parametrize("query", ["limit=0", "limit=abc", "limit=101", "since=yesterday", "limit=%C2%B2", "limit=-1"])
def test_bad_list_query_is_a_400(aws: Aws, deps: Deps, client: Client, query: str) -> None:
    response = client.http.get(f"/backups/runs?{query}")
    assert response.status_code == 400 and response.json_body["field"] in ("limit", "since")


@pytest.mark.parametrize("run_id", ["20260101T000000Z-missing", "not-a-run-id"])
def test_an_unknown_run_is_a_404(aws: Aws, deps: Deps, client: Client, run_id: str) -> None:
    response = client.http.get(f"/backups/runs/{run_id}")
    assert response.status_code == 404
    assert run_id in response.json_body["error"]


def test_health(client: Client) -> None:
    response = client.http.get("/health")
    assert response.status_code == 200 and response.json_body["status"] == "ok"

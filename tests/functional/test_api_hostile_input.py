"""Input that once answered 500 (or was stored): every one is now a 4xx with the error shape, and nothing is kept."""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks import items
from tests.functional.api_support import KeyLimits, table_contents
from tests.functional.task_support import EMAIL_ACTION, JSON, post_task

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now


def body(**changes: Any) -> dict[str, Any]:
    return {"id": "standup", "run_at": RUN_AT, "action": EMAIL_ACTION, **changes}


def assert_refused(response: Any, status: int, field: str) -> None:
    assert response.status_code == status, response.body
    assert set(response.json_body) == {"error", "field"}, response.json_body
    assert isinstance(response.json_body["error"], str) and response.json_body["field"] == field


@pytest.fixture
def limits(deps: Deps) -> KeyLimits:
    return KeyLimits(deps)


# --- bodies that broke the JSON parser --------------------------------------------------

@pytest.mark.parametrize("raw", [
    '{"id": "standup", "run_at": ' + "1" * 5000 + "}",          # over Python's 4300-digit limit
    '{"id": "standup", "x": ' + "[" * 30000 + "]" * 30000 + "}",  # RecursionError, under 64 KB
    '{"id": "standup", "x": ' + "[" * 40 + "]" * 40 + "}",        # deeper than any task needs
    '{"id": "standup", "run_at": "\\ud800"}',                     # a lone surrogate: not UTF-8
])
def test_a_body_python_cannot_hold_is_a_400_naming_the_body(client: Client, deps: Deps, raw: str) -> None:
    before = table_contents(deps)
    assert_refused(post_task(client, raw), 400, "body")
    assert_refused(client.http.request("PATCH", "/tasks/standup", body=raw.encode(), headers=JSON), 400, "body")
    assert table_contents(deps) == before


# --- due times and recurrences that overflowed ---------------------------------------------

@pytest.mark.parametrize("run_at", [
    "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", 10**400, "2026-11-22T12:10:00\u0000",
    "2026-11-22T12:10:00Z\n", "\u0661\u0668" + "\u0660" * 8,  # 1800000000 in Arabic-Indic digits
])
def test_a_run_at_out_of_range_or_with_control_characters_is_a_400_on_post_and_patch(
        client: Client, deps: Deps, run_at: Any) -> None:
    before = table_contents(deps)
    assert_refused(post_task(client, body(run_at=run_at)), 400, "run_at")
    patch = json.dumps({"run_at": run_at}).encode()
    assert_refused(client.http.request("PATCH", "/tasks/nobody-has-this-id", body=patch, headers=JSON),
                   400, "run_at")
    assert table_contents(deps) == before


@pytest.mark.parametrize("recurrence", [
    "rate(99999999999999999999 days)", "rate(36501 days)", "cron(\u00b2 * * * ? *)", "cron(0 1/\u00b2 * * ? *)",
    "cron(0 12 * * ? *)\n", "rate(\u0661 minute)",
])
def test_a_recurrence_with_huge_or_non_ascii_numbers_is_a_400(client: Client, deps: Deps, recurrence: str) -> None:
    before = table_contents(deps)
    assert_refused(post_task(client, body(recurrence=recurrence)), 400, "recurrence")
    assert table_contents(deps) == before


@pytest.mark.parametrize("timezone", ["../../etc/passwd", "Europe/Paris\n", "x" * 5000, "UTC\u0000"])
def test_a_timezone_that_is_no_zone_name_is_a_400(client: Client, deps: Deps, timezone: str) -> None:
    assert_refused(post_task(client, body(timezone=timezone, recurrence="cron(0 9 * * ? *)")), 400, "timezone")


# --- ids and keys ------------------------------------------------------------------------

@pytest.mark.parametrize("task_id", ["x\n", "standup\n", "\u0661\u0662"])
def test_an_id_with_a_final_newline_or_foreign_digits_is_refused_and_not_stored(
        client: Client, deps: Deps, task_id: str) -> None:
    before = table_contents(deps)
    assert_refused(post_task(client, body(id=task_id)), 400, "id")
    assert table_contents(deps) == before


@pytest.mark.parametrize("task_id", [
    "P" * 2100 + "|S",                   # a partition key over 2048 bytes
    "P|" + "S" * 1100,                   # a sort key over 1024 bytes
    "P" * 2045 + "|S",                   # fits the tasks table, not its record's TASK#<PK>|<SK> in the state table
    "\u00e9" * 1100 + "|S",              # 1100 characters, 2200 bytes of UTF-8
])
def test_an_id_over_dynamodbs_key_limits_is_a_404_before_it_reaches_dynamodb(
        client: Client, limits: KeyLimits, task_id: str) -> None:
    path = "/tasks/" + quote(task_id, safe="")
    assert_refused(client.http.get(path), 404, "id")
    assert_refused(client.http.delete(path), 404, "id")
    patch = json.dumps({"run_at": RUN_AT}).encode()
    assert_refused(client.http.request("PATCH", path, body=patch, headers=JSON), 404, "id")
    assert limits.refused == []


def test_a_next_token_with_a_key_over_dynamodbs_limits_is_a_400_before_it_reaches_dynamodb(
        client: Client, limits: KeyLimits) -> None:
    token = items.encode_token(0, "PENDING", "2026-11-22T12:00:00Z#" + "x" * 1100)
    assert_refused(client.http.get(f"/tasks?status=PENDING&next_token={token}"), 400, "next_token")
    assert_refused(client.http.get("/tasks?next_token=" + "A" * 5000), 400, "next_token")
    assert limits.refused == []


def test_a_next_token_that_decodes_to_deeply_nested_json_is_a_400(client: Client) -> None:
    token = base64.urlsafe_b64encode(("[" * 1500 + "]" * 1500).encode()).decode().rstrip("=")
    assert_refused(client.http.get(f"/tasks?next_token={token}"), 400, "next_token")


@pytest.mark.parametrize("run_id", ["20260101T000000Z-x\n", "\u0662" * 8 + "T000000Z-x", "R" * 3000])
def test_a_backup_run_id_not_of_our_shape_is_a_404_before_it_reaches_dynamodb(
        client: Client, limits: KeyLimits, run_id: str) -> None:
    assert_refused(client.http.get("/backups/runs/" + quote(run_id, safe="")), 404, "id")
    assert limits.refused == []

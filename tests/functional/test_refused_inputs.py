"""Inputs AWS would refuse, or that name no time the app can run at, are refused before anything is stored or
scheduled: at the API a 400 naming the field, at the stream one dead letter naming it -- never three failed
attempts and an alert later.  The OpenAPI document says the same of each."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks.model import TaskKey
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.api_support import table_contents
from tests.functional.openapi_support import load_document, request_problems
from tests.functional.stream_support import Table, stream
from tests.functional.task_support import EMAIL_ACTION, post_task

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
DOCUMENT = load_document()


def email(**changes: str) -> dict[str, str]:
    return {**EMAIL_ACTION, **changes}


# (field, the task body's changes): one of each kind AWS would refuse (tests/unit/test_refused_inputs.py has them all).
REFUSED_BY_AWS: list[tuple[str, dict[str, Any]]] = [
    ("action.to", {"action": email(to="ada\x9b@example.com")}),
    ("action.subject", {"action": email(subject="Standup\u2028now")}),
    ("action.message", {"action": {"type": "sqs", "queue_url": QUEUE, "message": "m\ufffe"}}),
    ("timezone", {"timezone": "localtime", "recurrence": "cron(0 9 * * ? *)"}),
]


@pytest.fixture
def allow_any_target(deps: Deps) -> None:
    use_settings(deps, task_action_target_arns=("*",))


@pytest.mark.parametrize("field, changes", REFUSED_BY_AWS, ids=[repr(c)[:60] for _, c in REFUSED_BY_AWS])
def test_a_value_aws_would_refuse_is_a_400_naming_the_field_and_the_document_refuses_it_too(
        client: Client, deps: Deps, allow_any_target: None, field: str, changes: dict[str, Any]) -> None:
    body = {"id": "standup", "run_at": RUN_AT, "action": EMAIL_ACTION, **changes}
    before = table_contents(deps)
    response = post_task(client, body)
    assert response.status_code == 400, response.body
    assert response.json_body["field"] == field
    assert table_contents(deps) == before
    assert request_problems(DOCUMENT, "POST", "/tasks", json.dumps(body).encode()) != []


@pytest.mark.parametrize("run_at", [0.5, 1e-130, "1970-01-01T00:00:00.5Z"])
def test_a_due_time_before_the_first_second_of_1970_is_a_400_that_names_the_range(
        client: Client, deps: Deps, run_at: Any) -> None:
    before = table_contents(deps)
    response = post_task(client, {"id": "standup", "run_at": run_at, "action": EMAIL_ACTION})
    assert response.status_code == 400, response.body
    assert response.json_body["field"] == "run_at"
    assert "out of range (1970-01-01T00:00:01Z to 9999-12-31T23:59:59Z)" in response.json_body["error"]
    assert table_contents(deps) == before
    patch = client.http.request("PATCH", "/tasks/nobody", body=json.dumps({"run_at": run_at}).encode(),
                                headers={"Content-Type": "application/json"})
    assert patch.status_code == 400 and "out of range" in patch.json_body["error"], patch.body


def only_dead_letter(aws: Aws, deps: Deps) -> dict[str, Any]:
    assert aws.sent(deps.settings.due_queue) == []
    [(body, _)] = aws.sent(deps.settings.task_dlq)
    letter: dict[str, Any] = json.loads(body)
    return letter


@pytest.mark.parametrize("strategy, run_at", [("exact", Decimal("1E-130")), ("interval", Decimal("0.5")),
                                              ("exact", "1970-01-01T00:00:00.5Z")])
def test_an_item_due_before_the_first_second_of_1970_is_dead_lettered_naming_the_range(
        aws: Aws, deps: Deps, client: Client, strategy: str, run_at: Any) -> None:
    key = TaskKey("USER#ada", "REMINDER#x")
    record = Table(deps).put({"PK": key.pk, "SK": key.sk, "strategy": strategy, "run_at": run_at,
                              "email": "ada@example.com"})
    assert stream(client, record) == []
    letter = only_dead_letter(aws, deps)
    assert "run_at is out of range (1970-01-01T00:00:01Z to 9999-12-31T23:59:59Z)" in letter["reason"]


@pytest.mark.parametrize("field, changes", REFUSED_BY_AWS[::2], ids=[repr(c)[:60] for _, c in REFUSED_BY_AWS[::2]])
def test_an_item_holding_a_value_aws_would_refuse_is_dead_lettered_naming_the_field(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, allow_any_target: None, field: str,
        changes: dict[str, Any]) -> None:
    key = TaskKey("USER#ada", "REMINDER#x")
    item = {"PK": key.pk, "SK": key.sk, "run_at": (clock.now + timedelta(minutes=5)).isoformat(),
            "action": EMAIL_ACTION, **changes}
    assert stream(client, Table(deps).put(item)) == []
    letter = only_dead_letter(aws, deps)
    assert f"(field {field})" in letter["reason"]

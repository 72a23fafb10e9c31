"""Property-based fuzzing of every route: hostile bodies, path parameters and query strings.

Whatever a client sends, the API never answers 5xx; every 4xx body is exactly
``{"error": <str>, "field": <str>}``; and a rejected request stores nothing (the
tasks and state tables are as they were).  The requests go through Chalice's
test client, the app runs against moto with DynamoDB's key limits enforced.

``FUZZ_EXAMPLES`` sets the examples in all, shared by the six tests below
(default 240, about 30 s); ``make soak-fuzz`` runs 10,000 with random seeds.
Without it the run is derandomized, so the normal suite is reproducible.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from chalice.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.aws import Deps
from chalicelib.tasks import items
from tests.functional.api_support import KeyLimits, table_contents
from tests.functional.task_support import EMAIL_ACTION, JSON, post_task

TESTS = 6  # the @fuzz tests of this module
EXAMPLES = max(1, int(os.environ.get("FUZZ_EXAMPLES", "240")) // TESTS)
fuzz = settings(max_examples=EXAMPLES, deadline=None, database=None,
                derandomize="FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.large_base_example])

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now
EXISTING = "standup"

# --- hostile JSON, as text (so it can hold what json.dumps cannot: 5000-digit numbers, lone surrogates) ----

HOSTILE_TEXT = [
    "", " ", "\x00", "2026-11-22T12:10:00\x00", "x\n", "standup\n", "\u00b2", "\u0661\u0662\u0663",
    "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "9999-12-31T23:59:59Z", "1970-01-01T00:00:00Z",
    "rate(99999999999999999999 days)", "rate(1 minute)", "rate(5 minutes)", "cron(\u00b2 * * * ? *)",
    "cron(0 12 * * ? *)", "cron(0 12 * * ? *)\n", "cron(0/0 * * * ? *)", "cron(* * L-99 * ? *)", "at(2030-01-01T00:00:00)",
    "Europe/Paris", "../../etc/passwd", "Etc/GMT+14", "exact", "interval", "lazy", "email", "sqs", "sns",
    "PENDING", "DONE", "pending", "ada@example.com", "ada@example.com\n", "a@b.c", "\ud800",
    "https://sqs.us-east-1.amazonaws.com/123456789012/q", "https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo",
    "http://localhost:5000/123456789012/q\n", "arn:aws:sns:us-east-1:123456789012:t",
    "arn:aws:sns:us-east-1:999999999999:t", "arn:aws:sns:us-east-1:123456789012:t.fifo",
    "P" * 2100 + "|S", "x" * 70_000, "1763812800", "17638128001763812800", "1e400", "-1", "NaN",
]


def _raw_string(text: str) -> str:
    """A JSON string literal, lone surrogates written as escapes (as a client may)."""
    return json.dumps(text)


leaf_json = st.one_of(
    st.sampled_from(["null", "true", "false", "0", "-0", "1e400", "-1e400", "1.5", "1763812800", "[]", "{}"]),
    st.integers().map(str),
    st.integers(min_value=10, max_value=6000).map(lambda n: "9" * n),        # up to 6000 digits
    st.floats(allow_nan=False, allow_infinity=False).map(json.dumps),
    st.sampled_from(HOSTILE_TEXT).map(_raw_string),
    st.text(max_size=40).map(_raw_string),
    st.integers(min_value=1, max_value=40_000).map(lambda n: "[" * n + "]" * n),  # nesting, 30,000 deep too
)


def _array(values: list[str]) -> str:
    return "[" + ",".join(values) + "]"


def _object(fields: dict[str, str]) -> str:
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in fields.items()) + "}"


any_json = st.recursive(leaf_json, lambda inner: st.one_of(
    st.lists(inner, max_size=4).map(_array),
    st.dictionaries(st.text(max_size=12), inner, max_size=4).map(_object)), max_leaves=12)

ACTIONS = [
    {"type": "email", "to": "ada@example.com", "subject": "Standup", "body": "In five minutes."},
    {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "message": "m"},
    {"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "message": "m"},
]


@st.composite
def mutated(draw: st.DrawFn, valid: dict[str, Any], extra_fields: list[str]) -> str:
    """A valid object with some fields replaced by hostile JSON, dropped, or unknown ones added; as JSON text."""
    fields = {k: json.dumps(v) for k, v in valid.items()}
    for name in draw(st.lists(st.sampled_from([*valid, *extra_fields]), max_size=3, unique=True)):
        choice = draw(st.sampled_from(["replace", "replace", "drop"]))
        if choice == "drop":
            fields.pop(name, None)
        elif name == "action":
            fields[name] = draw(st.one_of(any_json, action_json()))
        else:
            fields[name] = draw(any_json)
    if draw(st.integers(min_value=0, max_value=3)) == 0:  # an unknown field, now and then
        fields[draw(st.text(max_size=20))] = draw(any_json)
    return _object(fields)


def action_json() -> st.SearchStrategy[str]:
    return st.sampled_from(ACTIONS).flatmap(lambda action: mutated(action, ["type", "to", "queue_url", "extra"]))


task_body = st.one_of(
    mutated({"id": EXISTING, "run_at": RUN_AT, "action": EMAIL_ACTION},
            ["id", "run_at", "strategy", "action", "recurrence", "timezone"]),
    mutated({"run_at": RUN_AT, "strategy": "interval", "action": EMAIL_ACTION, "recurrence": "rate(5 minutes)",
             "timezone": "Europe/Paris"}, ["id", "run_at", "strategy", "action", "recurrence", "timezone"]),
    any_json,
    st.binary(max_size=64),
)
patch_body = st.one_of(mutated({"run_at": RUN_AT}, ["run_at", "action"]),
                       mutated({"action": EMAIL_ACTION}, ["run_at", "action"]), any_json, st.binary(max_size=64))
backup_body = st.one_of(mutated({"tables": ["timekeeper-tasks"]}, ["tables"]), any_json, st.binary(max_size=64))

path_param = st.one_of(
    st.text(min_size=1, max_size=60),
    st.sampled_from([EXISTING, "P|S", "TASK#standup|TASK", "20260101T000000Z-x", "%2F", "%00", "..", "a|",
                     "\u0661\u0662", "standup\n", "x\n"]),
    st.integers(min_value=1, max_value=4000).map(lambda n: "P" * n + "|" + "S" * (n // 2)),
    st.integers(min_value=1, max_value=3000).map(lambda n: "\u00e9" * n),
)
query_value = st.one_of(st.text(max_size=40), st.sampled_from(
    ["PENDING", "done", "1", "50", "51", "0", "\u00b2", "5\n", "9" * 5000, "", "A" * 5000,
     items.encode_token(0, "PENDING", "x" * 1100), items.encode_token(9, "DONE", None)]))
query = st.dictionaries(st.one_of(st.sampled_from(["status", "limit", "next_token"]), st.text(max_size=10)),
                        query_value, max_size=3)


def encoded(value: str) -> str:
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def as_bytes(body: str | bytes) -> bytes:
    return body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")


def check(deps: Deps, send: Any) -> None:
    """Send one request; assert the answer's shape, and that a refused request left the tables as they were."""
    before = table_contents(deps)
    response = send()
    assert response.status_code < 500, response.body[:500]
    if 400 <= response.status_code < 500:
        body = json.loads(response.body)
        assert isinstance(body, dict) and set(body) == {"error", "field"}, body
        assert isinstance(body["error"], str) and isinstance(body["field"], str), body
        assert table_contents(deps) == before, f"{response.status_code} {body} but the tables changed"


@pytest.fixture
def api(client: Client, deps: Deps) -> Client:
    """The test client, DynamoDB's key limits enforced, with one pending task (EXISTING) to change."""
    KeyLimits(deps)
    assert post_task(client, {"id": EXISTING, "run_at": RUN_AT, "action": EMAIL_ACTION}).status_code == 201
    return client


@fuzz
@given(body=task_body)
def test_post_tasks_never_fails_on_any_body(api: Client, deps: Deps, body: str | bytes) -> None:
    check(deps, lambda: api.http.post("/tasks", body=as_bytes(body), headers=JSON))


@fuzz
@given(task_id=path_param, body=patch_body)
def test_patch_tasks_never_fails_on_any_id_or_body(api: Client, deps: Deps, task_id: str, body: str | bytes) -> None:
    check(deps, lambda: api.http.request("PATCH", f"/tasks/{encoded(task_id)}", body=as_bytes(body), headers=JSON))


@fuzz
@given(task_id=path_param, method=st.sampled_from(["GET", "DELETE"]))
def test_show_and_cancel_never_fail_on_any_id(api: Client, deps: Deps, task_id: str, method: str) -> None:
    check(deps, lambda: api.http.request(method, f"/tasks/{encoded(task_id)}"))


@fuzz
@given(params=query)
def test_list_tasks_never_fails_on_any_query(api: Client, deps: Deps, params: dict[str, str]) -> None:
    path = "/tasks?" + urlencode({k: v.encode("utf-8", "surrogatepass") for k, v in params.items()})
    check(deps, lambda: api.http.get(path))


@fuzz
@given(body=backup_body)
def test_post_backups_never_fails_on_any_body(api: Client, deps: Deps, body: str | bytes) -> None:
    check(deps, lambda: api.http.post("/backups", body=as_bytes(body), headers=JSON))


@fuzz
@given(run_id=path_param, params=query)
def test_backup_runs_never_fail_on_any_id_or_query(api: Client, deps: Deps, run_id: str,
                                                   params: dict[str, str]) -> None:
    path = "/backups/runs?" + urlencode({k: v.encode("utf-8", "surrogatepass") for k, v in params.items()})
    check(deps, lambda: api.http.get(path))
    check(deps, lambda: api.http.get(f"/backups/runs/{encoded(run_id)}"))

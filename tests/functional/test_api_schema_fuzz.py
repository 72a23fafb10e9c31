"""Property-based fuzzing driven by the OpenAPI document itself (chalicelib/openapi.json).

schemathesis derives every operation's requests from the document: path parameters, query parameters and
request bodies, both instances of the document's schemas and schema-violating mutations of them.  Each goes
through Chalice's test client to the app on moto (DynamoDB's key limits and AWS's item limits enforced, as in
test_api_fuzz.py), and every answer must:

- never be 5xx;
- have a status the document lists for the operation, and a body valid under that status's schema
  (openapi_support.problems, which also fails a 2xx for a request the document says is not valid);
- if 4xx, be exactly ``{"error": <str>, "field": <str>}``, and leave the tables as they were;
- if the request is valid under the document, not be a 400 -- unless the refusal is one of
  ``BEYOND_THE_SCHEMA``, the few rules no JSON Schema can state (a time in the past, an opaque token).

``SCHEMA_FUZZ_EXAMPLES`` sets the examples in all, shared by the operations (default 200, derandomized);
``make soak-fuzz`` runs 5,000 with random seeds.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any
from urllib.parse import quote, urlencode

import pytest
import schemathesis
from chalice.test import Client
from hypothesis import HealthCheck, Phase, assume, event, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core import NOT_SET

from chalicelib.aws import Deps
from tests.fixtures import use_settings
from tests.functional.api_support import KeyLimits, table_contents
from tests.functional.openapi_support import load_document, operations, problems, request_problems
from tests.functional.task_support import EMAIL_ACTION, JSON, post_task

DOCUMENT = load_document()
SCHEMA = schemathesis.openapi.from_dict(DOCUMENT)
# The console's page and files (GET /console, /console/{asset}) are static text, not JSON operations to fuzz:
# tests/unit/test_console_files.py and the browser test cover them.
OPERATIONS = sorted(op for op in operations(DOCUMENT) if not op[0].startswith("/console"))
EXAMPLES = max(1, int(os.environ.get("SCHEMA_FUZZ_EXAMPLES", "200")) // len(OPERATIONS))
fuzz = settings(max_examples=EXAMPLES, deadline=None, database=None,
                derandomize="SCHEMA_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=list(HealthCheck), phases=[p for p in Phase if p is not Phase.explain])

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now
EXISTING = "standup"

# Refusals of a request the document calls valid that no JSON Schema can state: (operation, field, message).
BEYOND_THE_SCHEMA: list[tuple[str, str, re.Pattern[str]]] = [
    *[(operation, field, pattern) for operation in ("POST /tasks", "PATCH /tasks/{task_id}") for field, pattern in (
        # The clock: a due time a minute in the past is refused, tomorrow's is not.
        ("run_at", re.compile(r"is in the past")),
        # The range of a time written as text (the document bounds numbers; an offset moves a text's bounds).
        ("run_at", re.compile(r"is out of range \(.*\): '")),
        # Action types registered at run time (the document describes the built-in ones).
        ("action.type", re.compile(r"^action\.type must be one of ")),
        # The app's own queues and topics, which no action may feed.
        ("action.queue_url", re.compile(r"is one of this app's own queues")),
        ("action.topic_arn", re.compile(r"is one of this app's own queues")),
        # ... nor its functions (or buses).
        ("action.function_arn", re.compile(r"is one of this app's own queues")),
        ("action.event_bus_arn", re.compile(r"is one of this app's own queues")),
        # ... nor another stage's (named as every stage's are), unless the stage lists it exactly.
        *[(f"action.{name}", re.compile(r"another stage's")) for name in ("queue_url", "topic_arn", "function_arn")],
        # A JSON field as DynamoDB keeps it, at any depth (the document states its limits in words).
        *[(f"action.{name}", re.compile(r"holds an empty key|nested more than|DynamoDB cannot hold|bytes as JSON"))
          for name in ("payload", "detail", "input")],
        # The stage's webhook origins and signing secrets (TASK_WEBHOOK_ORIGINS, TASK_WEBHOOK_SECRETS), and what
        # a URL's host resolves to.
        ("action.url", re.compile(r"origin this stage allows webhooks|resolves to|is not a public address")),
        # ... and a URL's grammar (the document states it in words).
        ("action.url", re.compile(r"is longer than|printable ASCII|https:// URL|user name or password|#fragment|"
                                  r"has no host|is not a URL|[Pp]ort|Invalid IPv6 URL")),
        ("action.secret", re.compile(r"TASK_WEBHOOK_SECRETS")),
        # A webhook's body is JSON text (a grammar the document states in words).
        ("action.body", re.compile(r"must be JSON text")),
        # A webhook's headers: one name twice in two cases, and their size in all.
        ("action.headers", re.compile(r"twice, in another case|bytes of names and values")),
    )],
    # A recurring task's end and count, a window and a retry count, which the document relates to other fields
    # in words: only with a recurrence, not before run_at, only on an exact task, max_retries = max_attempts - 1.
    ("POST /tasks", "end_at", re.compile(r"is for a recurring task|is before the task's first due time|"
                                         r"is out of range \(.*\): '|is in the past")),
    ("POST /tasks", "max_occurrences", re.compile(r"is for a recurring task")),
    ("POST /tasks", "window_seconds", re.compile(r"is for an exact task")),
    ("POST /tasks", "retry.max_retries", re.compile(r"must be max_attempts - 1")),
    ("PATCH /tasks/{task_id}", "run_at", re.compile(r"is after the task's end_at")),
    # The grammar of rate(...) and cron(...) (field ranges, units), and the IANA time zone database.
    ("POST /tasks", "recurrence", re.compile(r"^recurrence: ")),
    ("POST /tasks", "timezone", re.compile(r"is not an IANA time zone name")),
    # An opaque token is valid only if the API issued it.
    ("GET /tasks", "next_token", re.compile(r"next_token")),
    # The catalog's time window: after before before (two fields no JSON Schema relates); an opaque token.
    ("GET /backups", "after", re.compile(r"^after must be earlier than before")),
    ("GET /backups", "next_token", re.compile(r"next_token")),
    # The stage's configuration and AWS's state: which tables this stage backs up, and which exist.
    ("POST /backups", "tables", re.compile(r"^(tables this stage does not back up|unknown tables)")),
    # A restore: the stage's RESTORE_TARGET_PATTERN, selection and own tables, AWS's backups and windows, and the
    # ISO-8601 grammar of a point in time.
    ("POST /backups/restores", "target", re.compile(r"RESTORE_TARGET_PATTERN|one of the app's own tables|not the source")),
    ("POST /backups/restores", "table", re.compile(r"is not one this stage backs up|^unknown table")),
    ("POST /backups/restores", "backup_arn", re.compile(r"^no backup|^the backup ")),
    ("POST /backups/restores", "latest", re.compile(r"^no AVAILABLE backup")),
    ("POST /backups/restores", "point_in_time", re.compile(r"must be an ISO-8601 time|recovery is off|outside the source")),
]

# A task's callbacks (on_success, on_failure) are actions: refused by the same rules, naming their own field.
BEYOND_THE_SCHEMA += [("POST /tasks", field.replace("action.", f"{name}.", 1), pattern)
                      for operation, field, pattern in list(BEYOND_THE_SCHEMA)
                      if operation == "POST /tasks" and field.startswith("action.") for name in ("on_success", "on_failure")]


def _strategy(path: str, method: str) -> st.SearchStrategy[Any]:
    operation = SCHEMA[path][method]
    return st.one_of(operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
                     operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))


STRATEGIES = {op: _strategy(*op) for op in OPERATIONS}


def _query_text(value: Any) -> list[str]:
    if isinstance(value, list):
        return [t for v in value for t in _query_text(v)]
    if isinstance(value, str):
        return [value]
    return [json.dumps(value)]


def request_of(case: Any, known_id: bool) -> tuple[str, bytes]:
    """(URL, body) of a schemathesis case: path parameters URL-encoded, query values as text."""
    path: str = case.path
    for name, value in (case.path_parameters or {}).items():
        text = EXISTING if known_id and name == "task_id" else value if isinstance(value, str) else json.dumps(value)
        assume(text != "")  # an empty path parameter is another route (Chalice answers it itself)
        path = path.replace("{" + name + "}", quote(text.encode("utf-8", "surrogatepass"), safe=""))
    query = [(k, v.encode("utf-8", "surrogatepass")) for k, value in (case.query or {}).items()
             for v in _query_text(value)]
    url = path + ("?" + urlencode(query) if query else "")
    body = case.body
    if body is NOT_SET:
        raw = b""
    elif isinstance(body, bytes):
        raw = body
    else:
        raw = json.dumps(body).encode()
    return url, raw


def _beyond_the_schema(where: str, answer: dict[str, Any]) -> bool:
    return any(where == operation and answer.get("field") == field and pattern.search(str(answer.get("error")))
               for operation, field, pattern in BEYOND_THE_SCHEMA)


@pytest.fixture
def api(client: Client, deps: Deps) -> Client:
    """The test client, DynamoDB's key limits enforced, one pending task (EXISTING) to change; actions may send to
    any queue or topic but the app's own (the stage's allow-list is configuration, not the document)."""
    KeyLimits(deps)
    use_settings(deps, task_action_target_arns=("*",))
    assert post_task(client, {"id": EXISTING, "run_at": RUN_AT, "action": EMAIL_ACTION}).status_code == 201
    return client


@fuzz
@given(data=st.data(), known_id=st.booleans())
@pytest.mark.parametrize(("path", "method"), OPERATIONS, ids=[f"{m} {p}" for p, m in OPERATIONS])
def test_every_operation_answers_what_the_document_says(api: Client, deps: Deps, path: str, method: str,
                                                        data: st.DataObject, known_id: bool) -> None:
    case = data.draw(STRATEGIES[(path, method)], label="case")
    url, body = request_of(case, known_id)
    before = table_contents(deps)
    response = api.http.request(method, url, body=body, headers=JSON)
    where = f"{method} {path}"
    assert response.status_code < 500, f"{where} -> {response.status_code}: {response.body[:500]!r}"
    found = problems(DOCUMENT, method, url, body, response.status_code, response.body)
    assert not found, "\n".join(found)
    valid = not request_problems(DOCUMENT, method, url, body)
    outcome = f"{'valid' if valid else 'invalid'} request -> {response.status_code}"
    if 400 <= response.status_code < 500:
        answer = json.loads(response.body)
        assert isinstance(answer, dict) and set(answer) == {"error", "field"}, answer
        assert isinstance(answer["error"], str) and isinstance(answer["field"], str), answer
        assert table_contents(deps) == before, f"{where} -> {response.status_code} {answer} but the tables changed"
        outcome += f" ({answer['field']})"
        if response.status_code == 400 and valid:
            assert _beyond_the_schema(where, answer), (
                f"{where}: the document says this request is valid, the API refused it: {answer}\n"
                f"url={url[:300]!r} body={body[:500]!r}")
    event(outcome)  # pytest --hypothesis-show-statistics shows how often each outcome came


def test_a_refusal_of_what_a_looser_document_calls_valid_is_a_finding(api: Client) -> None:
    """The check above is not vacuous: with the document as it was (any 1-6 digits for limit), GET /tasks?limit=0
    is valid under it, the API refuses it, and no rule beyond the schema excuses that."""
    looser = load_document()
    [limit] = [p for p in looser["paths"]["/tasks"]["get"]["parameters"] if p["name"] == "limit"]
    limit["schema"] = {"type": "string", "pattern": "^[0-9]{1,6}$"}
    response = api.http.get("/tasks?limit=0")
    assert response.status_code == 400
    assert request_problems(looser, "GET", "/tasks?limit=0", b"") == []
    assert not _beyond_the_schema("GET /tasks", json.loads(response.body))
    assert request_problems(DOCUMENT, "GET", "/tasks?limit=0", b"") != []  # the document now says so itself

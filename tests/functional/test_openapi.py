"""The API describes itself: chalicelib/openapi.json lists exactly app.routes, is valid OpenAPI 3, is served
without credentials, and describes what the routes answer (every functional test's client checks that too:
tests/functional/conftest.py)."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from chalice.test import Client
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

import app as app_module
from chalicelib.auth import PUBLIC_ROUTES
from chalicelib.aws import Deps
from chalicelib.tasks.model import TASK_ID
from tests.fixtures import use_settings
from tests.functional.backup_support import create_tables
from tests.functional.openapi_support import CheckedClient, load_document, operations, problems
from tests.functional.task_support import EMAIL_ACTION

RUN_AT = "2026-11-22T12:10:00Z"
JSON = {"Content-Type": "application/json"}


def routes() -> set[tuple[str, str]]:
    return {(path, method) for path, methods in app_module.app.routes.items() for method in methods}


def test_the_document_describes_exactly_the_routes_of_app() -> None:
    documented = operations(load_document())
    assert documented - routes() == set(), "documented but not routes of app.py"
    assert routes() - documented == set(), "routes of app.py missing from chalicelib/openapi.json"


def test_a_route_missing_from_the_document_is_seen() -> None:
    document = load_document()
    del document["paths"]["/backups/runs"]
    assert operations(document) != routes()


def test_the_document_is_valid_openapi_3() -> None:
    validate(load_document())


def test_a_document_whose_path_parameter_is_not_declared_is_not_valid() -> None:
    document = load_document()
    del document["paths"]["/tasks/{task_id}"]["parameters"]
    with pytest.raises(OpenAPIValidationError):
        validate(document)


def test_the_document_takes_the_task_ids_the_code_takes() -> None:
    pattern = load_document()["components"]["schemas"]["TaskRequest"]["properties"]["id"]["pattern"]
    assert pattern == "^" + TASK_ID.pattern.replace(r"\Z", "$") + "$"
    for task_id in ("standup", "a.b", ".x", "x..", "a:b-c_d", ".", "..", "." * 128, "x" * 128, "x" * 129, "a b"):
        assert bool(re.search(pattern, task_id)) == bool(TASK_ID.fullmatch(task_id)), task_id


def test_every_protected_operation_names_the_security_schemes_of_api_auth() -> None:
    document = load_document()
    schemes = set(document["components"]["securitySchemes"])
    assert schemes == {"sigv4", "apiKey", "cognito", "bearerToken"}
    for path, method in operations(document):
        security = document["paths"][path][method.lower()]["security"]
        if (path, method) in PUBLIC_ROUTES:
            assert security == [], (method, path)
        else:
            assert {name for requirement in security for name in requirement} == schemes, (method, path)


def test_the_document_is_served_without_credentials(client: Client) -> None:
    response = client.http.get("/openapi.json")
    assert response.status_code == 200
    assert response.json_body == load_document()


def test_every_operation_answers_its_successes_and_errors_as_documented(deps: Deps, client: Client) -> None:
    """The client checks each exchange (openapi_support); this test makes one of each kind per route."""
    create_tables(deps, ["orders"])
    use_settings(deps, backup_api_tables=("orders",))
    http = client.http
    task = {"id": "standup", "run_at": RUN_AT, "action": EMAIL_ACTION}
    answers = [
        http.post("/tasks", body=json.dumps(task), headers=JSON).status_code,
        http.post("/tasks", body=json.dumps(task), headers=JSON).status_code,
        http.post("/tasks", body=json.dumps({**task, "run_at": "tomorrow"}), headers=JSON).status_code,
        http.post("/tasks", body=json.dumps({**task, "run_at": "2026-11-22T12:20:00Z"}), headers=JSON).status_code,
        http.post("/tasks", body=b"x" * (65 * 1024), headers=JSON).status_code,
        http.get("/tasks?status=PENDING&limit=1").status_code,
        http.get("/tasks?limit=0").status_code,
        http.get("/tasks/standup").status_code,
        http.get("/tasks/nope").status_code,
        http.request("PATCH", "/tasks/standup", body=json.dumps({"run_at": "2026-11-22T12:30:00Z"}).encode(),
                     headers=JSON).status_code,
        http.request("PATCH", "/tasks/standup", body=b'{"colour": "red"}', headers=JSON).status_code,
        http.delete("/tasks/standup").status_code,
        http.request("PATCH", "/tasks/standup", body=json.dumps({"run_at": RUN_AT}).encode(),
                     headers=JSON).status_code,
        http.post("/backups", body=json.dumps({"tables": ["orders"]}), headers=JSON).status_code,
        http.post("/backups", body=json.dumps({"tables": ["nope-table"]}), headers=JSON).status_code,
        http.get("/backups/runs?limit=5").status_code,
        http.get("/backups/runs?limit=none").status_code,
        http.get("/backups/runs/20991231T000000Z-none").status_code,
        http.get("/health").status_code,
        http.get("/openapi.json").status_code,
    ]
    assert answers == [201, 200, 400, 409, 413, 200, 400, 200, 404, 200, 400, 200, 409,
                       202, 400, 200, 400, 404, 200, 200]
    run_id = client.http.get("/backups/runs").json_body["runs"][0]["run_id"]
    assert client.http.get(f"/backups/runs/{run_id}").status_code == 200


def wrong(document: dict[str, Any]) -> dict[str, Any]:
    """The document with one field of a task left out of its schema."""
    changed = copy.deepcopy(document)
    del changed["components"]["schemas"]["Task"]["properties"]["attempts"]
    changed["components"]["schemas"]["Task"]["required"].remove("attempts")
    return changed


def test_a_response_shape_the_document_does_not_describe_fails(deps: Deps) -> None:
    with CheckedClient(app_module.app, wrong(load_document())) as client, pytest.raises(AssertionError) as failed:
        client.http.post("/tasks", body=json.dumps({"run_at": RUN_AT, "action": EMAIL_ACTION}), headers=JSON)
    assert "attempts" in str(failed.value)


def test_a_status_the_document_does_not_list_fails() -> None:
    document = load_document()
    assert problems(document, "GET", "/tasks/x", b"", 418, b"{}") == [
        "GET /tasks/{task_id} -> 418: the document lists no 418 for this operation"]


def test_an_accepted_request_the_document_does_not_describe_fails() -> None:
    document = load_document()
    found = problems(document, "POST", "/backups", b'{"tables": "orders"}', 202,
                     b'{"run_id": "r", "status": "RUNNING", "tables": [], "href": "/backups/runs/r"}')
    assert found and all("request body" in p for p in found), found

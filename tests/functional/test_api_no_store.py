"""Every JSON answer of the API says ``Cache-Control: no-store``: they hold task payloads, which no browser
or proxy may keep.  The routes are app.routes, each asked with a body it refuses and with one it takes."""

from __future__ import annotations

import json
import re

import pytest
from chalice.app import Chalice, Response
from chalice.test import Client

import app as app_module
from chalicelib import console
from chalicelib.aws import Deps
from chalicelib.web import no_store
from tests.functional.task_support import EMAIL_ACTION, JSON

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now
ROUTES = sorted((path, method) for path, methods in app_module.app.routes.items() for method in methods)


def is_json(headers: dict[str, str]) -> bool:
    return headers.get("Content-Type", "application/json").split(";")[0] == "application/json"


@pytest.mark.parametrize(("path", "method"), ROUTES)
def test_every_json_answer_of_every_route_says_no_store(deps: Deps, path: str, method: str) -> None:
    task = {"id": "standup", "run_at": RUN_AT, "action": EMAIL_ACTION}
    with Client(app_module.app) as client:
        assert client.http.post("/tasks", body=json.dumps(task), headers=JSON).status_code == 201
        for value, body, query in (("standup", json.dumps(task), ""), ("nope", "{}", ""), ("nope", "x", "?limit=x")):
            concrete = re.sub(r"\{[^}]+\}", value, path) + query
            response = client.http.request(method, concrete, headers=JSON,
                                           body=body.encode() if method in ("POST", "PATCH") else b"")
            if is_json(response.headers):
                assert response.headers.get("Cache-Control") == "no-store", (method, concrete, response.status_code)
            else:  # only the console's files are not JSON
                assert response.headers["Content-Type"] in console.ASSETS.values(), (method, concrete)


def test_an_error_the_route_raises_or_a_middleware_raises_says_no_store() -> None:
    app = Chalice(app_name="no-store")
    app.register_middleware(no_store, "http")

    def failing_middleware(request: object, get_response: object) -> Response:
        raise RuntimeError("a middleware failed")

    @app.route("/fails")
    def fails() -> Response:
        raise RuntimeError("the route failed")

    @app.route("/text")
    def text() -> Response:
        return Response(body="plain", headers={"Content-Type": "text/plain"})

    with Client(app) as client:
        assert client.http.get("/text").headers.get("Cache-Control") is None
        answer = client.http.get("/fails")
        assert (answer.status_code, answer.headers["Cache-Control"]) == (500, "no-store")
        app.register_middleware(failing_middleware, "http")
        answer = client.http.get("/fails")
        assert (answer.status_code, answer.headers["Cache-Control"]) == (500, "no-store")

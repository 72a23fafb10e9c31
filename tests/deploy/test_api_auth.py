"""Every route but GET /health and GET /openapi.json needs credentials, whichever API_AUTH a stage chooses.

Chalice attaches a route's authorizer when app.py is imported, so each test
imports a fresh copy of app.py with the API_AUTH it is about (the suite's own
app runs with API_AUTH=none, for the other features' tests).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from chalice.app import ChaliceAuthorizer, CognitoUserPoolAuthorizer, IAMAuthorizer, RouteEntry
from chalice.test import Client

from chalicelib.auth import bearer_token
from chalicelib.aws import Deps
from tests.fixtures import use_settings

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-token-for-tests-32-characters"  # a stage other than local takes at least 32
# Liveness, the API's description and the console's page and files (its data calls carry the token).
PUBLIC = {("/health", "GET"), ("/openapi.json", "GET"), ("/console", "GET"), ("/console/{asset}", "GET")}
POOL_ARN = "arn:aws:cognito-idp:us-east-1:123456789012:userpool/us-east-1_example"


def import_app(monkeypatch: pytest.MonkeyPatch, **env: str) -> ModuleType:
    """A fresh copy of app.py, imported with ``env`` set (as Lambda imports it on a stage)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location(f"app_{env.get('API_AUTH', 'none')}", ROOT / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def routes(module: ModuleType) -> list[tuple[str, str, RouteEntry]]:
    return [(path, method, entry)
            for path, methods in module.app.routes.items() for method, entry in methods.items()]


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "20260101T000000Z-example", path)


@pytest.fixture
def token_app(monkeypatch: pytest.MonkeyPatch, deps: Deps) -> Iterator[ModuleType]:
    module = import_app(monkeypatch, API_AUTH="token", API_TOKEN=TOKEN)
    use_settings(deps, api_auth="token", api_token=TOKEN)
    module.container.use(deps)
    yield module
    module.container.use(None)


@pytest.mark.parametrize("api_auth, extra, kind", [
    ("iam", {}, IAMAuthorizer),
    ("cognito", {"COGNITO_USER_POOL_ARN": POOL_ARN}, CognitoUserPoolAuthorizer),
])
def test_every_route_but_health_carries_the_chosen_authorizer(
        monkeypatch: pytest.MonkeyPatch, api_auth: str, extra: dict[str, str], kind: type) -> None:
    module = import_app(monkeypatch, API_AUTH=api_auth, **extra)
    for path, method, entry in routes(module):
        if (path, method) in PUBLIC:
            assert entry.authorizer is None and not entry.api_key_required, (method, path)
        else:
            assert isinstance(entry.authorizer, kind), f"{method} {path} lacks **protected"


def test_api_key_mode_requires_a_key_on_every_route_but_health(monkeypatch: pytest.MonkeyPatch) -> None:
    module = import_app(monkeypatch, API_AUTH="api_key")
    for path, method, entry in routes(module):
        assert bool(entry.api_key_required) is ((path, method) not in PUBLIC), (method, path)


@pytest.mark.parametrize("api_auth, extra", [("iam", {}), ("token", {"API_TOKEN": TOKEN})])
def test_no_mode_deploys_a_lambda_authorizer(monkeypatch: pytest.MonkeyPatch, api_auth: str,
                                             extra: dict[str, str]) -> None:
    module = import_app(monkeypatch, API_AUTH=api_auth, **extra)
    assert module.app.builtin_auth_handlers == []
    assert not any(isinstance(entry.authorizer, ChaliceAuthorizer) for _, _, entry in routes(module))


def test_in_token_mode_the_consoles_page_and_files_need_no_token(token_app: ModuleType) -> None:
    """The page asks the operator for the token; its data calls carry it (tests/e2e/test_console_browser.py)."""
    with Client(token_app.app) as client:
        for path in ("/console", "/console/app.js", "/console/app.css"):
            assert client.http.get(path).status_code == 200, path
        assert client.http.get("/tasks").status_code == 401


def test_in_token_mode_a_route_added_without_protected_is_protected_all_the_same(token_app: ModuleType) -> None:
    def forgotten() -> dict[str, str]:
        return {"secret": "yes"}

    token_app.app.route("/forgotten", methods=["GET"])(forgotten)

    with Client(token_app.app) as client:
        response = client.http.get("/forgotten")
    assert response.status_code == 401
    assert set(response.json_body) == {"error", "field"}


def test_requests_without_a_token_get_401_with_the_error_shape_on_every_route_but_health(token_app: ModuleType) -> None:
    with Client(token_app.app) as client:
        for path, method, _ in routes(token_app):
            if (path, method) in PUBLIC:
                continue
            response = client.http.request(method, concrete(path), headers={"Content-Type": "application/json"})
            assert response.status_code == 401, (method, path, response.body)
            assert response.headers["Cache-Control"] == "no-store", (method, path)
            assert response.json_body == {"error": "credentials are required: Authorization: Bearer <token>",
                                          "field": "Authorization"}


@pytest.mark.parametrize("header", [f"Bearer {TOKEN}x", "Bearer ", f"Basic {TOKEN}", TOKEN])
def test_requests_with_a_wrong_token_get_403_with_the_error_shape_on_every_route_but_health(
        token_app: ModuleType, header: str) -> None:
    with Client(token_app.app) as client:
        for path, method, _ in routes(token_app):
            if (path, method) in PUBLIC:
                continue
            response = client.http.request(method, concrete(path), headers={"Authorization": header})
            assert response.status_code == 403, (method, path, response.body)
            assert response.json_body == {
                "error": "the Authorization header does not carry a valid bearer token", "field": "Authorization"}


NEAR_TOKENS = [
    f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN[:1]}",              # a prefix of the token
    f"Bearer {TOKEN}{TOKEN}", f"Bearer {TOKEN}-",               # the token and more
    "Bearer", "Bearer  ",                                       # an empty one
    f"Bearer {TOKEN.upper()}", f"Bearer {TOKEN.capitalize()}",  # another case
]


def test_a_prefix_of_the_api_token_a_longer_one_an_empty_one_or_another_case_is_refused(
        token_app: ModuleType) -> None:
    with Client(token_app.app) as client:
        for header in NEAR_TOKENS:
            response = client.http.request("GET", "/tasks/standup", headers={"Authorization": header})
            assert (response.status_code, response.json_body["field"]) == (403, "Authorization"), header
        found = client.http.request("GET", "/tasks/standup", headers={"Authorization": f"Bearer {TOKEN}"})
        assert found.status_code == 404  # the token itself passes


def test_requests_with_the_token_reach_every_route(token_app: ModuleType) -> None:
    with Client(token_app.app) as client:
        for path, method, _ in routes(token_app):
            response = client.http.request(method, concrete(path), body=b"{}", headers={
                "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
            assert response.status_code not in (401, 403), (method, path, response.body)


def test_health_needs_no_credentials(token_app: ModuleType) -> None:
    with Client(token_app.app) as client:
        assert client.http.get("/health").status_code == 200


def test_a_token_changed_in_the_running_settings_takes_effect(token_app: ModuleType, deps: Deps) -> None:
    use_settings(deps, api_token="rotated")
    with Client(token_app.app) as client:
        [path, method] = next((p, m) for p, m, _ in routes(token_app) if (p, m) not in PUBLIC)
        old = client.http.request(method, concrete(path), headers={"Authorization": f"Bearer {TOKEN}"})
        new = client.http.request(method, concrete(path), body=b"{}", headers={
            "Authorization": "Bearer rotated", "Content-Type": "application/json"})
    assert old.status_code == 403
    assert new.status_code not in (401, 403)


@pytest.mark.parametrize("header, token", [
    ("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Bearer ", None), ("Basic abc", None), ("abc", None)])
def test_bearer_token_reads_only_the_bearer_scheme(header: str, token: str | None) -> None:
    assert bearer_token(header) == token

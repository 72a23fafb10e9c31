"""The OpenAPI document as a check on every exchange of the functional tests' API client.

``CheckedClient`` is ``chalice.test.Client`` whose HTTP client checks each response of a documented
operation against chalicelib/openapi.json: its status must be one the operation lists and its body must
validate against that response's schema; a request the API accepted (2xx) must fit the operation's request
body and query parameter schemas. A mismatch fails the test that made the request.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from chalice.app import Chalice
from chalice.config import Config
from chalice.test import Client, HTTPResponse, TestHTTPClient
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import best_match  # type: ignore[import-untyped]

from chalicelib.openapi import DOCUMENT

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def load_document() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    return loaded


def operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    """(path, METHOD) of every operation the document describes."""
    return {(path, method.upper()) for path, item in document["paths"].items() for method in item if method in METHODS}


def _template_of(document: dict[str, Any], path: str) -> str | None:
    """The path template ``path`` is an instance of; of several (``/tasks/{source}/retry`` and
    ``/tasks/{source}/{key}``), the one with the most literal parts, as API Gateway and Chalice route."""
    found: list[tuple[int, str]] = []
    for template in map(str, document["paths"]):
        parts = re.split(r"(\{[^}]+\})", template)
        pattern = "".join(r"[^/]+" if part.startswith("{") else re.escape(part) for part in parts)
        if re.fullmatch(pattern, path):
            found.append((-sum(1 for part in template.split("/") if part and not part.startswith("{")), template))
    return min(found)[1] if found else None


def _valid(document: dict[str, Any], schema: dict[str, Any], value: Any) -> list[str]:
    """What is wrong with ``value`` under ``schema``, whose $refs point into the document's components."""
    validator = Draft202012Validator({**schema, "components": document["components"]})
    found = []
    for error in validator.iter_errors(value):
        error = best_match(error.context) if error.context else error  # oneOf: the alternative closest to fit
        found.append(f"{'/'.join(map(str, error.absolute_path)) or '(root)'}: {error.message[:300]}")
    return found


def problems(document: dict[str, Any], method: str, url: str, request_body: bytes,
             status: int, response_body: bytes) -> list[str]:
    """What the document does not describe of one exchange; [] for a path or method it does not document
    (Chalice answers those itself; test_openapi compares the documented operations with app.routes)."""
    parts = urlsplit(url)
    template = _template_of(document, parts.path)
    operation = document["paths"].get(template, {}).get(method.lower()) if template else None
    if operation is None:
        return []
    where = f"{method} {template} -> {status}"
    response = operation["responses"].get(str(status))
    if response is None:
        return [f"{where}: the document lists no {status} for this operation"]
    found: list[str] = []
    schema = response.get("content", {}).get("application/json", {}).get("schema")
    if schema is not None:
        try:
            body = json.loads(response_body)
        except ValueError:
            return [f"{where}: the response is not JSON: {response_body[:200]!r}"]
        found += [f"{where} response {p}" for p in _valid(document, schema, body)]
    if 200 <= status < 300:
        found += [f"{where} request {p}" for p in _request_problems(document, operation, parts.query, request_body)]
    return found


def request_problems(document: dict[str, Any], method: str, url: str, body: bytes) -> list[str]:
    """What is not valid under the document in a request to a documented operation: its path parameters,
    query parameters and body ([] for an operation the document does not describe)."""
    parts = urlsplit(url)
    template = _template_of(document, parts.path)
    item = document["paths"].get(template, {}) if template else {}
    operation = item.get(method.lower())
    if template is None or operation is None:
        return []
    found: list[str] = []
    parameters = {p["name"]: p for p in [*item.get("parameters", []), *operation.get("parameters", [])]
                  if p["in"] == "path"}
    names = re.findall(r"\{([^}]+)\}", template)
    values = re.fullmatch("".join(r"([^/]+)" if part.startswith("{") else re.escape(part)
                                  for part in re.split(r"(\{[^}]+\})", template)), parts.path)
    assert values is not None
    for name, value in zip(names, values.groups(), strict=True):
        found += [f"path {name}: {p}" for p in _valid(document, parameters[name]["schema"], unquote(value))]
    try:
        return found + _request_problems(document, operation, parts.query, body)
    except ValueError as exc:  # a body that is not JSON
        return [*found, f"body is not JSON: {exc}"]


def _request_problems(document: dict[str, Any], operation: dict[str, Any], query: str, body: bytes) -> list[str]:
    found: list[str] = []
    parameters = {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "query"}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name not in parameters:
            found.append(f"query parameter {name!r} is not documented")
        else:
            found += [f"query {name}: {p}" for p in _valid(document, parameters[name]["schema"], value)]
    request_body = operation.get("requestBody")
    if body.strip():
        if request_body is None:
            found.append("a body the document does not describe")
        else:
            schema = request_body["content"]["application/json"]["schema"]
            found += [f"body {p}" for p in _valid(document, schema, json.loads(body))]
    elif request_body is not None and request_body.get("required"):
        found.append("no body, which the document requires")
    return found


class CheckedHTTPClient(TestHTTPClient):
    def __init__(self, app: Chalice, config: Config, document: dict[str, Any]) -> None:
        super().__init__(app, config)
        self.document = document
        self.checked: list[tuple[str, str, int]] = []

    def request(self, method: str, path: str, headers: dict[str, str] | None = None,
                body: bytes = b"") -> HTTPResponse:
        response = super().request(method, path, headers=headers, body=body)
        raw = body.encode() if isinstance(body, str) else bytes(body or b"")
        found = problems(self.document, method, path, raw, response.status_code, response.body)
        assert not found, "the API answered what chalicelib/openapi.json does not describe:\n" + "\n".join(found)
        self.checked.append((method, urlsplit(path).path, response.status_code))
        return response


class CheckedClient(Client):
    """A ``chalice.test.Client`` whose ``http`` checks every exchange against the OpenAPI document."""

    def __init__(self, app: Chalice, document: dict[str, Any] | None = None) -> None:
        super().__init__(app)
        self._document = document if document is not None else load_document()

    @property
    def http(self) -> CheckedHTTPClient:
        if not isinstance(self._http_client, CheckedHTTPClient):
            self._http_client = CheckedHTTPClient(self._app, self._chalice_config, self._document)
        return self._http_client

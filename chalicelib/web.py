"""HTTP plumbing shared by the routes: JSON bodies, errors that name the field."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from chalice.app import Request, Response

from chalicelib.log import logger

MAX_BODY_BYTES = 64 * 1024


class ApiError(Exception):
    """An error the client can fix: an HTTP status, a message and the field it concerns."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.message}
        if self.field is not None:
            body["field"] = self.field
        return body


def bad_request(field: str, message: str) -> ApiError:
    return ApiError(400, message, field)


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(404, f"{what} {ident!r} not found", "id")


def raw_body(request: Request | None) -> bytes:
    raw = request.raw_body if request is not None else b""
    return raw.encode() if isinstance(raw, str) else bytes(raw or b"")


def query(request: Request | None) -> dict[str, str]:
    params = request.query_params if request is not None else None
    return {k: params[k] for k in params} if params else {}


def json_body(raw: bytes | None, required: bool = False) -> dict[str, Any] | None:
    """The request body as a JSON object (None when empty and not required)."""
    raw = raw or b""
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, f"body is {len(raw)} bytes; at most {MAX_BODY_BYTES} are accepted", "body")
    if not raw.strip():
        if required:
            raise bad_request("body", "a JSON object body is required")
        return None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request("body", f"body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise bad_request("body", f"body must be a JSON object, got {type(data).__name__}")
    return data


def reject_unknown(data: dict[str, Any], allowed: set[str]) -> None:
    for key in sorted(data):
        if key not in allowed:
            raise bad_request(key, f"unknown field {key!r}; allowed: {', '.join(sorted(allowed))}")


def respond(call: Callable[[], tuple[int, Any]]) -> Response:
    """Run a route's domain call; turn its (status, body) or an ApiError into a JSON response."""
    try:
        status, body = call()
    except ApiError as exc:
        logger.info("request rejected", extra={"status": exc.status, "error": exc.message, "field": exc.field})
        return Response(body=exc.body(), status_code=exc.status, headers={"Content-Type": "application/json"})
    return Response(body=body, status_code=status, headers={"Content-Type": "application/json"})

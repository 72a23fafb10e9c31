"""HTTP plumbing shared by the routes: JSON bodies, errors that name the field."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from chalice.app import Request, Response

from chalicelib.log import logger

MAX_BODY_BYTES = 64 * 1024
MAX_JSON_DEPTH = 32  # objects and arrays nested in the body; ours need 3
MAX_QUERY_VALUE_BYTES = 4096
JSON = "application/json"
# Every JSON answer of the API (they hold task payloads): no browser or proxy keeps a copy.
NO_STORE = {"Cache-Control": "no-store"}


class ApiError(Exception):
    """An error the client can fix: an HTTP status, a message and the field it concerns."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

    def body(self) -> dict[str, str]:
        """Every error has the same shape: ``{"error", "field"}`` (the field is "request" when none is to blame)."""
        return {"error": self.message, "field": self.field if self.field is not None else "request"}


def bad_request(field: str, message: str) -> ApiError:
    return ApiError(400, message, field)


def not_found(what: str, ident: str, field: str = "id") -> ApiError:
    shown = repr(ident) if len(ident) <= 100 else repr(ident[:100]) + "..."
    return ApiError(404, f"{what} {shown} not found", field)


def raw_body(request: Request | None) -> bytes:
    raw = request.raw_body if request is not None else b""
    return raw.encode() if isinstance(raw, str) else bytes(raw or b"")


def query(request: Request | None) -> dict[str, str]:
    params = request.query_params if request is not None else None
    found = {k: params[k] for k in params} if params else {}
    for name, value in found.items():
        if len(value.encode("utf-8", "replace")) > MAX_QUERY_VALUE_BYTES:
            raise bad_request(name, f"{name} is longer than {MAX_QUERY_VALUE_BYTES} bytes")
    return found


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
    except RecursionError as exc:
        raise bad_request("body", f"body is nested more than {MAX_JSON_DEPTH} levels deep") from exc
    except ValueError as exc:  # not JSON, not UTF-8, or a number of more than 4300 digits
        raise bad_request("body", f"body is not valid JSON: {str(exc)[:200]}") from exc
    if not isinstance(data, dict):
        raise bad_request("body", f"body must be a JSON object, got {type(data).__name__}")
    _check_json(data)
    return data


def _check_json(data: Any) -> None:
    """At most MAX_JSON_DEPTH levels of nesting, and text that is UTF-8 (JSON may spell a lone surrogate,
    ``"\\ud800"``, which no store or AWS call can take). Iterative: no recursion limit to hit."""
    pending: list[tuple[Any, int]] = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise bad_request("body", f"body is nested more than {MAX_JSON_DEPTH} levels deep")
            children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            pending.extend((child, depth + 1) for child in children)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise bad_request("body", "body holds text that is not UTF-8 (a lone surrogate)") from exc


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


def no_store(request: Request, get_response: Callable[[Request], Response]) -> Response:
    """The outermost HTTP middleware: every JSON answer (errors included) says ``Cache-Control: no-store``.

    Chalice turns a route's exception into its 500 inside the middleware; one raised by a middleware
    within this one is turned into the same 500 here, so that answer says it too."""
    try:
        response = get_response(request)
    except Exception:
        logger.exception("unhandled error in the HTTP middleware")
        response = Response(body={"Code": "InternalServerError", "Message": "An internal server error occurred."},
                            status_code=500, headers={"Content-Type": JSON})
    content_type = next((str(value) for name, value in response.headers.items() if name.lower() == "content-type"),
                        JSON)  # Chalice answers JSON when a response names no type
    if content_type.split(";")[0].strip().lower() == JSON:
        for name in [name for name in response.headers if name.lower() == "cache-control"]:
            del response.headers[name]
        response.headers.update(NO_STORE)
    return response

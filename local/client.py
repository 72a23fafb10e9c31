"""Driving the offline stage from outside, as a user would: HTTP to the API, reads of moto's state.

Used by ``make demo`` and the end-to-end tests; every wait is bounded polling.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


class TimedOut(AssertionError):
    pass


def wait_until(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy; TimedOut (naming ``what``) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimedOut(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


@dataclass(frozen=True)
class Response:
    status: int
    body: Any


class ApiClient:
    """JSON over HTTP to the app's API (a Bearer token when the stage's API_AUTH is token)."""

    def __init__(self, base_url: str, token: str = "") -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token

    def request(self, method: str, path: str, body: Any = None) -> Response:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return Response(response.status, _json(response.read()))
        except urllib.error.HTTPError as error:
            return Response(error.code, _json(error.read()))

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def post(self, path: str, body: Any = None) -> Response:
        return self.request("POST", path, body if body is not None else {})

    def delete(self, path: str) -> Response:
        return self.request("DELETE", path)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except json.JSONDecodeError:
        return raw.decode(errors="replace")


def moto_state(endpoint: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{endpoint}/moto-api/data.json", timeout=10) as response:
        data: dict[str, Any] = json.load(response)
    return data


def sent_emails(endpoint: str) -> list[dict[str, Any]]:
    """Every email moto's SES (v1 or v2 API) has accepted: {source, destinations, subject, body}."""
    return list(moto_state(endpoint).get("ses", {}).get("Message", []))


def emails_to(endpoint: str, address: str) -> list[dict[str, Any]]:
    return [m for m in sent_emails(endpoint) if address in (m.get("destinations") or {}).get("ToAddresses", [])]

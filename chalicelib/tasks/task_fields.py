"""The parts of a task's contract that the task sources share with the task model (chalicelib/tasks/model.py,
which re-exports them): its error, the retry policy's parser, how values and times are shown. Pure, no I/O.

They lie below the settings, which read the task sources' retry policies at import.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

MAX_RETRIES = 185  # EventBridge Scheduler's RetryPolicy limits: MaximumRetryAttempts 0-185 counts retries
MAX_RETRY_ATTEMPTS = MAX_RETRIES + 1  # max_attempts counts attempts: the first one and its retries
RETRY_AGE_SECONDS = (60, 86400)


class InvalidTask(ValueError):
    """A task (item or API body) that cannot be used; ``field`` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def shown(value: Any, limit: int = 60) -> str:
    """A short repr of a client's value for an error message; never fails (a huge int has no repr)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return "<a number too large to show>"
    text = type(value).__name__ if isinstance(value, dict | list) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def iso(at: datetime) -> str:
    """UTC ISO-8601 with a Z, seconds precision (milliseconds when present)."""
    at = at.astimezone(UTC)
    text = at.isoformat(timespec="milliseconds" if at.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def parse_retry(value: Any, where: str = "retry") -> dict[str, int] | None:
    """A task's ``retry`` ({"max_retries": 0-185 | "max_attempts": 1-186, "max_age_seconds": 60-86400}, any may
    be left out), or None when absent: ``max_retries`` counts retries as EventBridge Scheduler's
    MaximumRetryAttempts does, ``max_attempts`` the attempts (max_retries + 1; both given: they must agree).
    Returned with ``max_attempts`` only (one meaning; ``retry_shown`` adds ``max_retries``).  InvalidTask names
    the field at fault."""
    if value is None:
        return None
    if not isinstance(value, dict) or not value or set(value) - set(RETRY_FIELDS):
        raise InvalidTask(where, f"{where} must be an object with max_retries (0-{MAX_RETRIES}) or max_attempts "
                                 f"(1-{MAX_RETRY_ATTEMPTS}) and/or max_age_seconds "
                                 f"({RETRY_AGE_SECONDS[0]}-{RETRY_AGE_SECONDS[1]}), got {shown(value)}")
    policy: dict[str, int] = {}
    for name, (low, high) in RETRY_FIELDS.items():
        if name not in value:
            continue
        number = value[name]
        if isinstance(number, bool) or not isinstance(number, int | float) or number != int(number) \
                or not low <= number <= high:
            raise InvalidTask(f"{where}.{name}", f"{where}.{name} must be a whole number from {low} to {high}, "
                                                 f"got {shown(number)}")
        policy[name] = int(number)
    if "max_retries" in policy:
        retries = policy.pop("max_retries")
        if policy.setdefault("max_attempts", retries + 1) != retries + 1:
            raise InvalidTask(f"{where}.max_retries", f"{where}.max_retries must be max_attempts - 1 "
                                                      f"({policy['max_attempts'] - 1}), got {retries}: give one of them")
    return policy


RETRY_FIELDS = {"max_retries": (0, MAX_RETRIES), "max_attempts": (1, MAX_RETRY_ATTEMPTS),
                "max_age_seconds": RETRY_AGE_SECONDS}

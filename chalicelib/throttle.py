"""Client-side pacing and retry for AWS calls with per-second quotas.

botocore's retry modes already retry throttled calls; this adds what they
cannot: a steady rate under a documented quota (CreateBackup 50/s,
DeleteBackup 10/s) and a retry loop whose sleep is injected, so tests move a
clock instead of waiting.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from botocore.exceptions import ClientError

from chalicelib.aws import Clock, Sleep

T = TypeVar("T")

THROTTLE_CODES = frozenset({
    "ThrottlingException", "Throttling", "TooManyRequestsException",
    "RequestLimitExceeded", "ProvisionedThroughputExceededException",
})


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_rate_limit(exc: ClientError) -> bool:
    """Throttling, or a LimitExceededException that speaks of a rate (not a quota)."""
    code = error_code(exc)
    if code in THROTTLE_CODES:
        return True
    if code == "LimitExceededException":
        message = str(exc.response.get("Error", {}).get("Message", "")).lower()
        return any(word in message for word in ("rate", "throttl", "too many requests", "per second"))
    return False


@dataclass
class Pacer:
    """Spaces calls at most ``rate`` per second, measured on the injected clock."""

    rate: float
    clock: Clock
    sleep: Sleep
    _next: float | None = field(default=None, init=False)

    def wait(self) -> None:
        now = self.clock().timestamp()
        if self._next is not None and now < self._next:
            self.sleep(self._next - now)
            now = self._next
        self._next = now + 1.0 / self.rate


def backoff_delay(rng: random.Random, attempt: int, base: float, cap: float, floor: float = 0.0) -> float:
    """The sleep after failed attempt number ``attempt`` (0 for the first): a draw uniform between ``floor``
    and ``min(cap, base * 2**attempt)``; full jitter when ``floor`` is 0."""
    return rng.uniform(floor, min(cap, base * 2**attempt))


def retry(
    call: Callable[[], T],
    sleep: Sleep,
    *,
    retryable: Callable[[Exception], bool],
    attempts: int,
    base: float,
    cap: float,
    floor: float = 0.0,
    rng: random.Random | None = None,
) -> T:
    """Run ``call``, up to ``attempts`` times in all while it fails with an error ``retryable`` accepts, sleeping
    ``backoff_delay`` between attempts; the last error, or one not retryable, is raised.  The jitter's generator
    is made at the first retry: seeding one from the OS costs some 10 us, and almost every call succeeds at once
    (this wraps most AWS calls the app makes: docs/benchmarks.md, P2)."""
    for attempt in range(attempts):
        try:
            return call()
        except Exception as exc:
            if attempt == attempts - 1 or not retryable(exc):
                raise
            rng = rng or random.Random()
            sleep(backoff_delay(rng, attempt, base, cap, floor))
    raise AssertionError("unreachable")


def with_backoff(
    call: Callable[[], T],
    sleep: Sleep,
    attempts: int = 8,
    base: float = 0.2,
    cap: float = 10.0,
    retryable: Callable[[ClientError], bool] = is_rate_limit,
    rng: random.Random | None = None,
) -> T:
    """Run ``call``, retrying rate-limit errors with full-jitter exponential backoff (``retry``)."""
    return retry(call, sleep, retryable=lambda exc: isinstance(exc, ClientError) and retryable(exc),
                 attempts=attempts, base=base, cap=cap, rng=rng)

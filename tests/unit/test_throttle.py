"""Which AWS errors are rate limits (retried) and which are not (recorded against the table)."""

from __future__ import annotations

import itertools
import random

import pytest
from botocore.exceptions import ClientError

from chalicelib.throttle import Pacer, is_rate_limit, with_backoff


def error(code: str, message: str = "") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "CreateBackup")


@pytest.mark.parametrize(("code", "message", "expected"), [
    ("ThrottlingException", "Rate exceeded", True),
    ("ProvisionedThroughputExceededException", "", True),
    ("TooManyRequestsException", "", True),
    ("LimitExceededException", "Rate of requests exceeds the allowed throughput", True),
    ("LimitExceededException", "Too many requests per second", True),
    ("LimitExceededException", "There is a limit of 50 concurrent backups per account", False),
    ("LimitExceededException", "Subscriber limit exceeded", False),
    ("TableNotFoundException", "", False),
    ("ResourceInUseException", "Table is being deleted", False),
    ("ValidationException", "rate", False),
])
def test_is_rate_limit(code: str, message: str, expected: bool) -> None:
    assert is_rate_limit(error(code, message)) is expected


def test_rate_limits_are_retried_with_backoff_and_other_errors_are_not() -> None:
    slept: list[float] = []
    failures = iter([error("ThrottlingException"), error("LimitExceededException", "rate exceeded")])

    def call() -> str:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return "ok"

    assert with_backoff(call, slept.append, rng=random.Random(1)) == "ok"
    assert len(slept) == 2

    def quota() -> str:
        raise error("LimitExceededException", "There is a limit of 50 concurrent backups")

    with pytest.raises(ClientError):
        with_backoff(quota, slept.append)
    assert len(slept) == 2  # not retried


def test_backoff_gives_up_after_its_attempts() -> None:
    calls: list[int] = []

    def always() -> str:
        calls.append(1)
        raise error("ThrottlingException")

    with pytest.raises(ClientError):
        with_backoff(always, lambda _s: None, attempts=4)
    assert len(calls) == 4


def test_the_pacer_spaces_calls_on_the_injected_clock() -> None:
    from datetime import UTC, datetime, timedelta

    now = [datetime(2026, 1, 1, tzinfo=UTC)]

    def sleep(seconds: float) -> None:
        now[0] += timedelta(seconds=seconds)

    pacer = Pacer(8.0, lambda: now[0], sleep)
    stamps = []
    for _ in range(5):
        pacer.wait()
        stamps.append(now[0].timestamp())
    assert [round(b - a, 6) for a, b in itertools.pairwise(stamps)] == [0.125] * 4


def test_a_call_that_succeeds_at_once_seeds_no_jitter_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeding a generator from the OS costs some 10 us, on most of the app's AWS calls: made at the first retry."""
    made: list[int] = []

    class Counted(random.Random):
        def __init__(self, seed: int | None = None) -> None:
            made.append(1)
            super().__init__(seed)

    monkeypatch.setattr(random, "Random", Counted)
    assert with_backoff(lambda: "ok", lambda _s: None) == "ok"
    assert made == []
    failures = iter([error("ThrottlingException"), error("ThrottlingException")])

    def throttled_twice() -> str:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return "ok"

    slept: list[float] = []
    assert with_backoff(throttled_twice, slept.append) == "ok"
    assert len(made) == 1 and len(slept) == 2  # one generator for the call's retries

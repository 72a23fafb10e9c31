"""Which AWS errors are rate limits (retried) and which are not (recorded against the table); the one retry loop."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from unittest.mock import Mock

import pytest
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.aws import Clients, Deps
from chalicelib.backups.retry import is_transient, retry_transient
from chalicelib.settings import Settings
from chalicelib.tasks import interval
from chalicelib.tasks.model import DueMessage, TaskKey
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


# The two retry loops the app had before ``throttle.retry`` served both, and send_batch's delay, as they were:
# the reference the one loop must sleep the same as, draw for draw.
def _old_with_backoff(call: Callable[[], str], sleep: Callable[[float], None], attempts: int = 8, base: float = 0.2,
                      cap: float = 10.0, rng: random.Random | None = None) -> str:
    for attempt in range(attempts):
        try:
            return call()
        except ClientError as exc:
            if attempt == attempts - 1 or not is_rate_limit(exc):
                raise
            rng = rng or random.Random()
            sleep(rng.uniform(0, min(cap, base * 2**attempt)))
    raise AssertionError("unreachable")


def _old_retry_transient(call: Callable[[], str], sleep: Callable[[float], None], attempts: int = 5,
                         rng: random.Random | None = None) -> str:
    for attempt in range(attempts):
        try:
            return call()
        except (ClientError, BotoCoreError) as exc:
            if attempt == attempts - 1 or not is_transient(exc):
                raise
            rng = rng or random.Random()
            sleep(rng.uniform(0.5 / 2, min(5.0, 0.5 * 2**attempt)))
    raise AssertionError("unreachable")


FAILURES: dict[str, Callable[[], Exception]] = {
    "throttled": lambda: error("ThrottlingException"),
    "5xx": lambda: error("ServiceUnavailable"),
    "unreachable": lambda: EndpointConnectionError(endpoint_url="https://dynamodb"),
    "quota": lambda: error("LimitExceededException", "There is a limit of 50 concurrent backups"),
    "bug": lambda: ValueError("not an AWS error"),
}


def _run(loop: Callable[..., str], failures: list[str], seed: int, attempts: int | None) -> tuple[object, ...]:
    """What ``loop`` returns or raises over a call failing with ``failures`` in turn, its calls and its sleeps."""
    pending = iter(failures)
    calls: list[int] = []
    slept: list[float] = []

    def call() -> str:
        calls.append(1)
        failure = next(pending, None)
        if failure is not None:
            raise FAILURES[failure]()
        return "ok"

    kwargs: dict[str, Any] = {"rng": random.Random(seed)} | ({} if attempts is None else {"attempts": attempts})
    try:
        outcome: object = loop(call, slept.append, **kwargs)
    except Exception as exc:  # the outcome compared, whatever it is
        outcome = (type(exc), str(exc))
    return outcome, len(calls), slept


@settings(max_examples=40, deadline=None)
@given(failures=st.lists(st.sampled_from(sorted(FAILURES)), max_size=10), seed=st.integers(0, 2**32),
       attempts=st.none() | st.integers(1, 9))
def test_the_one_retry_loop_sleeps_and_raises_as_each_old_loop_did(
        failures: list[str], seed: int, attempts: int | None) -> None:
    assert _run(with_backoff, failures, seed, attempts) == _run(_old_with_backoff, failures, seed, attempts)
    assert _run(retry_transient, failures, seed, attempts) == _run(_old_retry_transient, failures, seed, attempts)


SETTINGS = Settings.from_env({})
FAILED_ROUND = {"Successful": [], "Failed": [{"Id": "0", "SenderFault": False, "Code": "InternalError"}]}


@settings(max_examples=10, deadline=None)
@given(failed_rounds=st.integers(0, interval.SEND_ATTEMPTS), seed=st.integers(0, 2**32))
def test_send_batch_sleeps_as_it_did_before_sharing_the_backoff_delay(failed_rounds: int, seed: int) -> None:
    clients = Mock(spec=Clients)
    clients.sqs.send_message_batch.side_effect = [FAILED_ROUND] * failed_rounds + [{"Successful": [{"Id": "0"}]}]
    slept: list[float] = []
    deps = Deps(SETTINGS, clients, sleep=slept.append, _queue_urls={SETTINGS.due_queue: "https://queue"})
    try:
        interval.send_batch(deps, [DueMessage(TaskKey("T#1", "TASK"), datetime(2026, 1, 1, tzinfo=UTC))],
                            rng=random.Random(seed))
    except interval.SendFailed:
        assert failed_rounds == interval.SEND_ATTEMPTS
    reference = random.Random(seed)
    assert slept == [reference.uniform(0, min(5.0, 0.2 * 2**attempt))
                     for attempt in range(min(failed_rounds, interval.SEND_ATTEMPTS))]


def test_a_transient_error_is_retried_5_times_in_all_each_wait_drawn_from_a_quarter_second_up_to_its_ceiling() -> None:
    """docs/backups-guarantees.md, Errors and lost answers: 0.25 s to 0.5, 1, 2, then 4 s."""
    from botocore.exceptions import EndpointConnectionError

    from chalicelib.backups.retry import retry_transient

    drawn: list[tuple[float, float]] = []

    class Bounds(random.Random):
        def uniform(self, a: float, b: float) -> float:
            drawn.append((a, b))
            return b

    calls: list[int] = []

    def down() -> str:
        calls.append(1)
        raise EndpointConnectionError(endpoint_url="https://dynamodb")

    slept: list[float] = []
    with pytest.raises(EndpointConnectionError):
        retry_transient(down, slept.append, rng=Bounds())
    assert len(calls) == 5 and drawn == [(0.25, 0.5), (0.25, 1.0), (0.25, 2.0), (0.25, 4.0)]
    assert slept == [0.5, 1.0, 2.0, 4.0]

"""The executor's AWS calls per task, and a batch's messages handled at once."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from botocore.exceptions import ClientError
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks.model import TaskKey, parse_due
from tests.fixtures import FakeClock, use_settings
from tests.functional.task_support import (
    deliver,
    due_body,
    emails_sent,
    get_item,
    put_item,
    seed_item,
    state_of,
    use_client,
)

DUE = "2026-11-22T12:03:00Z"


def keys(n: int) -> list[TaskKey]:
    return [TaskKey(f"USER#{i}", "REMINDER#standup") for i in range(n)]


def arrange(deps: Deps, n: int) -> list[str]:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP")
    bodies = []
    for key in keys(n):
        put_item(deps, {**seed_item(DUE, email=f"{key.pk[5:]}@example.com"), "PK": key.pk})
        bodies.append(due_body(key, parse_due(DUE)))
    return bodies


def count_calls(deps: Deps) -> Counter[str]:
    """Every AWS call the app's clients make from now on, by operation."""
    calls: Counter[str] = Counter()

    def note(model: Any, **_: Any) -> None:
        calls[model.name] += 1
    for client in (deps.clients.dynamodb, deps.clients.sqs, deps.clients.sns, deps.clients.ses):
        client.meta.events.register("before-call", note)
    return calls


def test_a_one_time_task_costs_a_read_a_claim_and_a_settle_and_its_item_is_not_written(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    [body] = arrange(deps, 1)
    before = get_item(deps, keys(1)[0])
    clock.advance(minutes=3)
    calls = count_calls(deps)
    assert deliver(client, body) == set()
    assert calls == Counter({"GetItem": 1, "UpdateItem": 2, "SendEmail": 1})
    assert get_item(deps, keys(1)[0]) == before


def test_a_full_batch_reads_its_items_in_one_call(client: Client, deps: Deps, clock: FakeClock) -> None:
    bodies = arrange(deps, 10)
    clock.advance(minutes=3)
    calls = count_calls(deps)
    assert deliver(client, *bodies) == set()
    assert calls == Counter({"BatchGetItem": 1, "UpdateItem": 20, "SendEmail": 10})
    assert len(emails_sent()) == 10
    assert all(state_of(deps, key)["status"] == "DONE" for key in keys(10))


def test_a_batch_whose_read_fails_reads_item_by_item(client: Client, deps: Deps, clock: FakeClock) -> None:
    bodies = arrange(deps, 3)
    clock.advance(minutes=3)

    class NoBatchReads:
        def __init__(self, real: Any) -> None:
            self._real = real

        def batch_get_item(self, **kwargs: Any) -> Any:
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "no"}},
                              "BatchGetItem")

        def __getattr__(self, name: str) -> Any:
            return getattr(self._real, name)
    use_client(deps, "dynamodb", NoBatchReads(deps.clients.dynamodb))
    assert deliver(client, *bodies) == set()
    assert len(emails_sent()) == 3


def test_the_messages_of_a_batch_are_handled_at_once(client: Client, deps: Deps, clock: FakeClock) -> None:
    """Two actions that each wait for the other to start: handled one after the other they could not both
    finish (each would give up after its wait and fail); at once they do."""
    bodies = arrange(deps, 2)
    clock.advance(minutes=3)
    started = [threading.Event(), threading.Event()]
    ses = deps.clients.ses

    class Rendezvous:
        def send_email(self, **kwargs: Any) -> Any:
            me = 0 if kwargs["Destination"]["ToAddresses"] == ["0@example.com"] else 1
            started[me].set()
            if not started[1 - me].wait(timeout=10):
                raise ClientError({"Error": {"Code": "Throttling", "Message": "alone"}}, "SendEmail")
            return ses.send_email(**kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(ses, name)
    use_settings(deps, task_max_attempts=1)
    use_client(deps, "ses", Rendezvous())
    assert deliver(client, *bodies) == set()
    assert [state_of(deps, key)["status"] for key in keys(2)] == ["DONE", "DONE"]


def test_no_more_than_executor_concurrency_messages_run_at_once(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    bodies = arrange(deps, 6)
    clock.advance(minutes=3)
    use_settings(deps, executor_concurrency=2)
    ses, lock, running, peak = deps.clients.ses, threading.Lock(), [0], [0]
    release = threading.Event()

    class Counting:
        def send_email(self, **kwargs: Any) -> Any:
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
                if running[0] == 2:
                    release.set()
            release.wait(timeout=5)
            try:
                return ses.send_email(**kwargs)
            finally:
                with lock:
                    running[0] -= 1

        def __getattr__(self, name: str) -> Any:
            return getattr(ses, name)
    use_client(deps, "ses", Counting())
    assert deliver(client, *bodies) == set()
    assert peak[0] == 2
    assert len(emails_sent()) == 6



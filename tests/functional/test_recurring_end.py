"""A recurring task's end (docs/tasks.md): ``end_at`` (EventBridge Scheduler's EndDate) and ``max_occurrences``.
The task is walked through its last occurrence to DONE by the whole pipeline at the stage's settings (stream,
due queue with SQS's duplicates, executor, interval processor), and no occurrence is armed after it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks import interval
from chalicelib.tasks.model import TaskKey, iso
from tests.fixtures import Aws, FakeClock
from tests.functional.lambda_sim import LambdaSim
from tests.functional.task_support import (
    EMAIL_ACTION,
    emails_sent,
    get_item,
    get_task,
    patch_task,
    post_task,
    put_item,
    state_of,
)

DUPLICATES = (timedelta(0), timedelta(seconds=90))  # SQS's at-least-once: a copy at once, a late one


def running_sim(deps: Deps, client: Client, clock: FakeClock, **options: Any) -> LambdaSim:
    """The pipeline of a stage whose processor has been running: its first tick reads the minute now, not the hour
    before (the first run's look-back is the interval processor's tests')."""
    interval.save_progress(deps, int(clock.now.timestamp()) - 1)
    return LambdaSim(deps, client, clock, **options)


@pytest.mark.parametrize("strategy", ["exact", "interval", "lazy"])
@pytest.mark.parametrize("end", ["max_occurrences", "end_at"])
def test_a_recurring_task_ends_done_after_its_last_occurrence_and_nothing_more_is_armed(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, strategy: str, end: str) -> None:
    first = clock.now + timedelta(minutes=1)
    limit = {"max_occurrences": 3} if end == "max_occurrences" else {"end_at": iso(first + timedelta(minutes=2))}
    created = post_task(client, {"id": "thrice", "strategy": strategy, "recurrence": "rate(1 minute)",
                                 "run_at": iso(first), "action": EMAIL_ACTION, **limit})
    assert created.status_code == 201, created.body
    assert {name: created.json_body[name] for name in limit} == limit
    sim = running_sim(deps, client, clock, due_duplicates=DUPLICATES)
    sim.run(until=lambda: False, limit=timedelta(minutes=10))
    assert len(emails_sent()) == 3  # +1, +2, +3 min: the last one's next time is past its end
    shown = get_task(client, "thrice")
    assert (shown["status"], shown["run_at"], shown["occurrences"]) == ("DONE", iso(first + timedelta(minutes=2)), 3)
    assert shown["finished_at"] is not None
    assert sim.queue(deps.settings.due_queue).messages == [] and sim.queue(deps.settings.due_queue).dead == []
    if strategy != "lazy":  # the item stays at its last occurrence (a lazy one expired at it)
        item = get_item(deps, TaskKey.for_id("thrice"))
        assert item is not None and item["due_epoch"] == int((first + timedelta(minutes=2)).timestamp())


def test_a_recurring_task_without_an_end_goes_on(aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    first = clock.now + timedelta(minutes=1)
    assert post_task(client, {"id": "on", "recurrence": "rate(1 minute)", "run_at": iso(first),
                              "action": EMAIL_ACTION}).status_code == 201
    running_sim(deps, client, clock).run(until=lambda: False, limit=timedelta(minutes=5, seconds=30))
    shown = get_task(client, "on")
    assert (shown["status"], len(emails_sent())) == ("PENDING", 5)
    assert "end_at" not in shown and "max_occurrences" not in shown


def test_a_paused_task_whose_end_passed_cannot_resume(aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    first = clock.now + timedelta(minutes=1)
    assert post_task(client, {"id": "short", "recurrence": "rate(1 minute)", "run_at": iso(first),
                              "end_at": iso(first + timedelta(minutes=1)), "action": EMAIL_ACTION}).status_code == 201
    assert client.http.post("/tasks/short/pause").status_code == 200
    clock.advance(minutes=5)
    resumed = client.http.post("/tasks/short/resume")
    assert (resumed.status_code, resumed.json_body["field"]) == (409, "recurrence")


@pytest.mark.parametrize(("extra", "field"), [
    ({"recurrence": "rate(1 hour)", "end_at": "2026-11-22T12:09:59Z"}, "end_at"),  # before its first due time
    ({"recurrence": "rate(1 hour)", "end_at": "yesterday"}, "end_at"),
    ({"recurrence": "rate(1 hour)", "max_occurrences": 0}, "max_occurrences"),
    ({"recurrence": "rate(1 hour)", "max_occurrences": 1.5}, "max_occurrences"),
    ({"recurrence": "rate(1 hour)", "max_occurrences": True}, "max_occurrences"),
    ({"end_at": "2026-11-23T12:00:00Z"}, "end_at"),  # a one-time task has no occurrences to end
    ({"max_occurrences": 2}, "max_occurrences"),
])
def test_a_bad_end_is_a_400_naming_its_field(client: Client, extra: dict[str, object], field: str) -> None:
    refused = post_task(client, {"run_at": "2026-11-22T12:10:00Z", "action": EMAIL_ACTION, **extra})
    assert (refused.status_code, refused.json_body["field"]) == (400, field), refused.body


def test_a_move_past_its_end_is_a_400_and_the_same_end_is_the_same_request(client: Client) -> None:
    body = {"id": "ends", "run_at": "2026-11-22T12:10:00Z", "recurrence": "rate(1 hour)", "action": EMAIL_ACTION,
            "end_at": "2026-11-22T15:10:00Z", "max_occurrences": 2}
    assert post_task(client, body).status_code == 201
    assert post_task(client, {**body, "end_at": "2026-11-22T16:10:00+01:00"}).status_code == 200  # the same time
    assert post_task(client, {**body, "max_occurrences": 3}).status_code == 409
    moved = patch_task(client, "ends", {"run_at": "2026-11-22T15:10:01Z"})
    assert (moved.status_code, json.loads(moved.body)["field"]) == (400, "run_at")
    assert patch_task(client, "ends", {"run_at": "2026-11-22T15:10:00Z"}).status_code == 200


def test_an_item_written_again_after_its_end_counts_its_occurrences_anew(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    """A program's recurring item that ended DONE and is written again is a new task: max_occurrences again."""
    key = TaskKey("USER#ada", "REMINDER#twice")

    def write(first: datetime) -> None:
        put_item(deps, {"PK": key.pk, "SK": key.sk, "run_at": iso(first), "email": "ada@example.com",
                        "recurrence": "rate(1 minute)", "max_occurrences": 2})

    sim = running_sim(deps, client, clock)
    write(clock.now + timedelta(minutes=1))
    sim.run(until=lambda: False, limit=timedelta(minutes=5))
    assert (len(emails_sent()), state_of(deps, key)["status"]) == (2, "DONE")
    write(clock.now + timedelta(minutes=1))
    sim.run(until=lambda: False, limit=timedelta(minutes=5))
    shown = state_of(deps, key)
    assert (len(emails_sent()), shown["status"], shown["occurrences"]) == (4, "DONE", 2)

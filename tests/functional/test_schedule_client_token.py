"""Every CreateSchedule / UpdateSchedule the stream scheduler sends carries its own idempotency token.

moto ignores ClientToken, so nothing else in the suite would notice a call without one
(botocore would then fill in a random token, and a retried call would not be idempotent
on AWS).  The requests are captured as the app hands them to botocore
(``provide-client-params``, before botocore fills in a missing idempotency token).
AWS's rule for ClientToken: 1 to 64 characters of ``[a-zA-Z0-9-_]``.

The token is derived from the stream record (its stream, sequence number and event
id): a redelivered record sends the same token again, so AWS treats the repeat as the
same request; a later record (another due time) sends another, so AWS never mistakes
a real change for a replay and skips it.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks.model import TaskKey
from chalicelib.tasks.schedules import schedule_name
from tests.fixtures import FakeClock, use_settings
from tests.functional.stream_support import Table, schedule_of, stream

ADA = TaskKey("USER#ada", "REMINDER#standup")
TOKEN = re.compile(r"[a-zA-Z0-9_-]{1,64}")
WRITES = ("CreateSchedule", "UpdateSchedule")


class SchedulerRequests:
    """The parameters of every CreateSchedule / UpdateSchedule the app asks the scheduler client for."""

    def __init__(self, deps: Deps) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        events = deps.clients.scheduler.meta.events
        for operation in WRITES:
            events.register(f"provide-client-params.scheduler.{operation}", self._capture)

    def _capture(self, params: dict[str, Any], model: Any, **kwargs: Any) -> None:
        self.sent.append((model.name, dict(params)))

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        taken, self.sent = self.sent, []
        return taken

    def tokens(self, requests: list[tuple[str, dict[str, Any]]]) -> list[str]:
        """Each request's ClientToken, checked against AWS's rule."""
        found = []
        for operation, params in requests:
            assert "ClientToken" in params, f"{operation} {params.get('Name')} was sent without a ClientToken"
            token = params["ClientToken"]
            assert isinstance(token, str) and TOKEN.fullmatch(token), f"{operation}: {token!r} breaks AWS's rule"
            found.append(token)
        return found


@pytest.fixture
def table(deps: Deps) -> Table:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP", past_horizon="scheduler")
    return Table(deps)


def seed(due_in: timedelta, clock: FakeClock) -> dict[str, Any]:
    return {"PK": ADA.pk, "SK": ADA.sk, "REMINDER_TIMESTAMP": int((clock.now + due_in).timestamp()),
            "email": "ada@example.com"}


def test_creating_a_schedule_sends_a_client_token_of_at_most_64_allowed_characters(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    requests = SchedulerRequests(deps)
    assert stream(client, table.put(seed(timedelta(hours=3), clock))) == []
    sent = requests.take()
    assert [operation for operation, _ in sent] == ["CreateSchedule"]
    assert len(requests.tokens(sent)) == 1


def test_a_redelivered_record_leaves_one_schedule_and_repeats_the_same_token(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    requests = SchedulerRequests(deps)
    insert = table.put(seed(timedelta(hours=3), clock))
    assert stream(client, insert) == []
    [first] = requests.tokens(requests.take())
    assert stream(client, insert) == []           # Lambda delivers the same record again
    again = requests.take()
    assert again, "the redelivered record sent no CreateSchedule / UpdateSchedule"
    assert set(requests.tokens(again)) == {first}
    names = [s["Name"] for s in deps.clients.scheduler.list_schedules(
        GroupName=deps.settings.schedule_group)["Schedules"]]
    assert names == [schedule_name(ADA)]


def test_moving_the_due_time_updates_with_a_new_token_and_its_redelivery_repeats_that_token(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    requests = SchedulerRequests(deps)
    assert stream(client, table.put(seed(timedelta(hours=3), clock))) == []
    [created] = requests.tokens(requests.take())
    modify = table.put(seed(timedelta(days=1, hours=2), clock))
    assert stream(client, modify) == []
    update = requests.take()
    assert [operation for operation, _ in update] == ["UpdateSchedule"]
    [updated] = requests.tokens(update)
    assert updated != created                      # not a replay of the create: AWS must apply it
    assert stream(client, modify) == []            # redelivered
    assert set(requests.tokens(requests.take())) == {updated}
    schedule = schedule_of(deps, ADA)
    assert schedule is not None and schedule["ScheduleExpression"] == "at(2026-11-23T13:59:00)"


def test_recreating_a_schedule_that_already_fired_sends_a_token_too(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    requests = SchedulerRequests(deps)
    assert stream(client, table.put(seed(timedelta(hours=3), clock))) == []
    requests.take()
    # The one-time schedule fired and deleted itself (ActionAfterCompletion DELETE) before the next change.
    deps.clients.scheduler.delete_schedule(Name=schedule_name(ADA), GroupName=deps.settings.schedule_group)
    assert stream(client, table.put(seed(timedelta(days=2), clock))) == []
    sent = requests.take()
    assert [operation for operation, _ in sent] == ["UpdateSchedule", "CreateSchedule"]
    assert len(set(requests.tokens(sent))) == 1    # one record, one token, whichever call carries it
    assert schedule_of(deps, ADA) is not None

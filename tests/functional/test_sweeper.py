"""The sweeper under moto (PAST_HORIZON=sweeper): exact tasks past the horizon kept as entries, sent to the due
queue by the processor's minute with their delay, once near; late, repeated and failed ticks; moved and
cancelled tasks; a stream that wrote into a slice already swept."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks import interval, lifecycle, sweep_plan, sweeper
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import DueMessage, TaskKey
from chalicelib.tasks.schedules import MAX_DELAY_SECONDS
from tests import events
from tests.configured_lambda import ConfiguredLambdaClient
from tests.faults import Faults
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.stream_support import Table, stream
from tests.functional.task_support import deliver, emails_sent, record_of, use_client

ADA = TaskKey("USER#ada", "REMINDER#standup")


@pytest.fixture
def table(deps: Deps, clock: FakeClock) -> Table:
    # no horizon of its own: tasks due more than sweep_plan.SWEEP_FROM_SECONDS (12 min) ahead wait for the sweeper
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP", past_horizon="sweeper", sweep_shards=2,
                 direct_queue_horizon_seconds=0)
    for key in (sweep_plan.PROGRESS_KEY, interval.PROGRESS_KEY):  # the processor has been running
        interval.save_progress(deps, int(clock.now.timestamp()) - 1, key)
    return Table(deps)


def seed(key: TaskKey, due: datetime) -> dict[str, Any]:
    return {"PK": key.pk, "SK": key.sk, "REMINDER_TIMESTAMP": int(due.timestamp()), "email": "ada@example.com",
            "strategy": "exact"}


def tick(client: Client, clock: FakeClock) -> None:
    # the function's own time in its context (Chalice's test client gives 3 s, under which a tick stops at once)
    response = ConfiguredLambdaClient.of(client).invoke("interval_processor", events.scheduled_event(clock.now))
    assert response.payload is None, response.payload


def sent(aws: Aws, deps: Deps, clock: FakeClock) -> list[tuple[DueMessage, int]]:
    """The due messages sent since the last look, with their delays: none early, none over SQS's 900 s."""
    out = []
    for body, delay in aws.sent(deps.settings.due_queue):
        message = DueMessage.from_json(body)
        assert 0 <= delay <= MAX_DELAY_SECONDS
        assert clock.now + timedelta(seconds=delay) >= message.due, f"early: {message} with {delay} s at {clock.now}"
        out.append((message, delay))
    return out


def entries(deps: Deps) -> int:
    scan = deps.clients.dynamodb.scan(TableName=deps.settings.state_table)["Items"]
    return sum(1 for item in scan if item["PK"]["S"].startswith(sweep_plan.ENTRY_PREFIX))


def at(clock: FakeClock, when: datetime) -> None:
    clock.now = when


def test_a_task_past_the_horizon_is_one_entry_no_schedule_then_sent_with_its_delay_once_near(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    start = clock.now
    due = start + timedelta(minutes=15)
    assert stream(client, table.put(seed(ADA, due))) == []
    assert entries(deps) == 1 and sent(aws, deps, clock) == []
    assert deps.clients.scheduler.list_schedules(GroupName=deps.settings.schedule_group)["Schedules"] == []
    tick(client, clock)
    at(clock, due - timedelta(minutes=11))
    tick(client, clock)  # its minute starts 11 minutes ahead: not yet
    assert sent(aws, deps, clock) == []
    at(clock, due - timedelta(minutes=10))
    tick(client, clock)
    [(message, delay)] = sent(aws, deps, clock)
    assert (message.key, message.due, delay) == (ADA, due, 600)
    tick(client, clock)  # repeated at the same time: sent once
    assert sent(aws, deps, clock) == []
    at(clock, due)
    deliver(client, message.to_json())
    assert [m.destinations["ToAddresses"] for m in emails_sent()] == [["ada@example.com"]]


def test_missed_ticks_are_caught_up_by_one_late_tick_every_task_once_none_early(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    start = clock.now
    keys = {TaskKey(f"USER#{i}", "R"): start + timedelta(minutes=13, seconds=37 * i) for i in range(30)}
    assert stream(client, *[table.put(seed(k, d)) for k, d in keys.items()]) == []
    sweeper.sweep(deps)  # swept through 12:10
    assert sent(aws, deps, clock) == []
    at(clock, start + timedelta(minutes=20, seconds=30))  # 20 minutes of ticks missed
    sweeper.sweep(deps)
    late = sent(aws, deps, clock)
    reach = sweep_plan.slice_of(clock.now.timestamp() + sweep_plan.LOOKAHEAD_SECONDS) + sweep_plan.SLICE_SECONDS
    assert sorted(m.key for m, _ in late) == sorted(k for k, d in keys.items() if d.timestamp() < reach)
    assert all(delay == 0 for m, delay in late if m.due <= clock.now)  # past due: at once
    at(clock, clock.now + timedelta(minutes=1))
    sweeper.sweep(deps)
    rest = sent(aws, deps, clock)
    assert sorted(m.key for m, _ in late + rest) == sorted(keys)  # each once


def test_a_tick_that_fails_before_saving_its_progress_sends_the_slice_again_and_the_task_runs_once(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    due = clock.now + timedelta(minutes=15)
    assert stream(client, table.put(seed(ADA, due))) == []
    at(clock, due - timedelta(minutes=10))
    interval.save_progress(deps, sweep_plan.slice_of(due) - 1, sweep_plan.PROGRESS_KEY)  # swept up to its minute
    Faults(deps.clients).inject("dynamodb.PutItem", "error",  # the progress's save, once
                                match=lambda p: p.get("Item", {}).get("SK") == {"S": "sweeper"})
    with pytest.raises(ClientError):
        sweeper.sweep(deps)
    [(first, _)] = sent(aws, deps, clock)
    sweeper.sweep(deps)
    [(again, _)] = sent(aws, deps, clock)
    assert again == first
    at(clock, due)
    deliver(client, first.to_json())
    deliver(client, again.to_json())
    assert len(emails_sent()) == 1
    assert sweeper.sweep(deps).sent == 0


def test_a_stream_that_stalled_past_the_sweep_of_its_slice_sends_the_task_directly(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    due = clock.now + timedelta(minutes=31)
    record = table.put(seed(ADA, due))

    class Stalling:
        def __init__(self, real: Any, stall: Callable[[], None]) -> None:
            self.real, self.stall = real, stall

        def put_item(self, **kwargs: Any) -> Any:
            if kwargs["Item"]["PK"]["S"].startswith(sweep_plan.ENTRY_PREFIX):
                self.stall()
            return self.real.put_item(**kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

    use_client(deps, "dynamodb", Stalling(deps.clients.dynamodb, lambda: clock.advance(minutes=25)))
    assert stream(client, record) == []
    [(message, delay)] = sent(aws, deps, clock)  # planned for the sweeper at 12:00, written at 12:25
    assert (message.due, delay) == (due, 360)
    assert entries(deps) == 1


def test_a_moved_task_is_swept_at_its_new_time_and_its_old_message_skipped_a_cancelled_one_not_run(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    start = clock.now
    old, new = start + timedelta(minutes=15), start + timedelta(minutes=30)
    assert stream(client, table.put(seed(ADA, old))) == []
    assert stream(client, table.put(seed(ADA, new))) == []  # moved an hour on
    assert entries(deps) == 2
    at(clock, old - timedelta(minutes=10))
    sweeper.sweep(deps)
    [(stale, _)] = sent(aws, deps, clock)
    at(clock, old)
    deliver(client, stale.to_json())
    assert emails_sent() == []  # skipped: rescheduled
    assert stream(client, table.delete(ADA)) == []  # cancelled
    at(clock, new - timedelta(minutes=10))
    sweeper.sweep(deps)
    [(message, delay)] = sent(aws, deps, clock)
    assert (message.due, delay) == (new, 600)
    at(clock, new)
    deliver(client, message.to_json())
    assert emails_sent() == []
    assert lifecycle.state_of(record_of(deps, ADA)) is State.CANCELLED


def test_a_busy_minute_goes_out_ten_to_a_batch(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    due = clock.now + timedelta(minutes=15, seconds=20)
    keys = [TaskKey(f"USER#{i}", "R") for i in range(25)]
    assert stream(client, *[table.put(seed(k, due)) for k in keys]) == []
    batches: list[int] = []
    deps.clients.sqs.meta.events.register(
        "provide-client-params.sqs.SendMessageBatch", lambda params, **_: batches.append(len(params["Entries"])))
    at(clock, due - timedelta(minutes=10))
    sweeper.sweep(deps)
    assert sorted(batches, reverse=True) == [10, 10, 5]
    assert sorted(m.key for m, _ in sent(aws, deps, clock)) == sorted(keys)


def test_a_tick_out_of_time_in_a_large_minute_is_resumed_where_it_stopped(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    use_settings(deps, sweep_shards=1)
    due = clock.now + timedelta(minutes=15)
    keys = [TaskKey(f"USER#{i}", "R") for i in range(23)]
    assert stream(client, *[table.put(seed(k, due)) for k in keys]) == []
    at(clock, due - timedelta(minutes=10))
    interval.save_progress(deps, sweep_plan.slice_of(due) - 1, sweep_plan.PROGRESS_KEY)  # swept up to its minute
    left = iter([60.0, 1.0])
    run = sweeper.sweep(deps, seconds_left=lambda: next(left), page_limit=5)
    assert run.stopped and run.sent == 5
    first = [m.key for m, _ in sent(aws, deps, clock)]
    run = sweeper.sweep(deps, page_limit=5)
    rest = [m.key for m, _ in sent(aws, deps, clock)]
    assert not run.stopped and sorted(first + rest) == sorted(keys)  # each once: resumed after the first page

"""DIRECT_QUEUE_HORIZON_SECONDS past SQS's 900 s delay, end to end under moto (the stream, the due queue's delays,
Scheduler, the executor, on the injected clock): an exact task due within the horizon takes the due queue and
is sent back once by the executor, which is cheaper than a schedule (docs/benchmarks.md#the-due-queues-horizon);
one due later gets a schedule; a task moved while its message is on its first hop runs once, at its new time."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.settings import Settings, SettingsError
from chalicelib.tasks import interval, sweep_plan
from tests.fixtures import Emitted, FakeClock, use_settings
from tests.functional.lambda_sim import LambdaSim
from tests.functional.task_support import put_item


def put_exact(deps: Deps, due: datetime) -> None:
    put_item(deps, {"PK": "HORIZON#1", "SK": "TASK", "run_at": due.isoformat(), "strategy": "exact",
                    "action": {"type": "email", "to": "ada@example.com", "subject": "s", "body": "b"}})


def run_until_executed(sim: LambdaSim, emitted: Emitted, limit: timedelta) -> None:
    """Until the task ran, then until the due queue is empty (what is left in it plays out)."""
    step = timedelta(minutes=10)  # the emulation jumps to its next event: nothing else happens meanwhile
    sim.run(until=lambda: emitted.total("TasksExecuted", Strategy="exact") >= 1, limit=limit, idle_step=step)
    sim.run(until=lambda: not sim.queue(sim.deps.settings.due_queue).messages, limit=limit, idle_step=step)


def test_a_task_25_minutes_ahead_takes_the_due_queue_is_sent_back_once_and_runs_once_at_its_time(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    assert deps.settings.direct_queue_horizon_seconds == 1800
    put_exact(deps, clock.now + timedelta(minutes=25, seconds=0.4))
    sim = LambdaSim(deps, client, clock, processor_period=timedelta(days=1))
    run_until_executed(sim, emitted, timedelta(minutes=40))
    assert sim.schedules_fired == 0
    assert sim.queue(deps.settings.due_queue).delivered == 2  # at 15 min (sent back) and at its time
    assert emitted.total("TasksExecuted", Strategy="exact") == 1
    [late] = emitted.values("TaskLateness", Strategy="exact")
    assert 0 <= late < 1000  # never early, within the second


def test_a_task_31_minutes_ahead_gets_a_schedule_with_past_horizon_scheduler(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    use_settings(deps, past_horizon="scheduler")
    put_exact(deps, clock.now + timedelta(minutes=31))
    sim = LambdaSim(deps, client, clock, processor_period=timedelta(days=1))
    run_until_executed(sim, emitted, timedelta(minutes=40))
    assert sim.schedules_fired == 1
    assert emitted.total("TasksExecuted", Strategy="exact") == 1


def test_by_default_a_task_31_minutes_ahead_is_swept_by_the_processors_minute_and_runs_once_within_the_second(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    use_settings(deps, sweep_shards=1)  # (fewer queries a tick: the same path)
    interval.save_progress(deps, int(clock.now.timestamp()) - 1, sweep_plan.PROGRESS_KEY)  # it has been sweeping
    put_exact(deps, clock.now + timedelta(minutes=31, seconds=0.4))
    sim = LambdaSim(deps, client, clock, processor_period=timedelta(minutes=10), sweeping=True)  # 0-10 min ahead
    run_until_executed(sim, emitted, timedelta(minutes=40))
    assert sim.schedules_fired == 0
    assert deps.clients.scheduler.list_schedules(GroupName=deps.settings.schedule_group)["Schedules"] == []
    assert sim.queue(deps.settings.due_queue).delivered == 1  # swept with its delay: no re-queue hop
    assert emitted.total("TasksExecuted", Strategy="exact") == 1
    [late] = emitted.values("TaskLateness", Strategy="exact")
    assert 0 <= late < 1000  # never early, within the second


def test_a_task_moved_while_its_message_is_on_its_first_hop_runs_once_at_its_new_time(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    start = clock.now
    put_exact(deps, start + timedelta(minutes=25))
    sim = LambdaSim(deps, client, clock, processor_period=timedelta(days=1))
    sim.run(until=lambda: False, limit=timedelta(minutes=5), idle_step=timedelta(minutes=5))  # its message: 900 s out
    put_exact(deps, start + timedelta(minutes=28))  # moved: a message of its own, the first one now stale
    run_until_executed(sim, emitted, timedelta(minutes=40))
    assert emitted.total("TasksExecuted", Strategy="exact") == 1
    assert emitted.total("TasksSkippedRescheduled", Strategy="exact") == 1  # the stale one, at the old time
    [late] = emitted.values("TaskLateness", Strategy="exact")
    assert 0 <= late < 1000  # at the new time (the old one was 3 minutes earlier)
    assert sim.schedules_fired == 0


def test_the_horizon_allows_one_re_queue_hop_at_most() -> None:
    assert Settings.from_env({"DIRECT_QUEUE_HORIZON_SECONDS": "1800"}).direct_queue_horizon_seconds == 1800
    with pytest.raises(SettingsError) as error:  # two hops past SQS's 900 s: a schedule is cheaper
        Settings.from_env({"DIRECT_QUEUE_HORIZON_SECONDS": "1801"})
    assert error.value.name == "DIRECT_QUEUE_HORIZON_SECONDS"

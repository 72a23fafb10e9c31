"""An exact task due past DIRECT_QUEUE_HORIZON_SECONDS, end to end under moto on the injected clock: the stream
makes its one-time schedule, Scheduler fires it SCHEDULE_LEAD_SECONDS early (up to 59 s late: its 60-second
precision), the executor sends the early message back with the rest of the delay, then runs the task once.
The app's calls a task on this path, by operation, are the cost bench's (bench/task_cost.py, P4)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from tests.fixtures import Emitted, FakeClock, use_settings
from tests.functional.backup_support import CallCounter
from tests.functional.lambda_sim import LambdaSim
from tests.functional.task_support import emails_sent, put_item

#: The schedule itself (created once, deleted by Scheduler: ActionAfterCompletion DELETE), the early message sent
#: back once, then what every exact task costs: the read, the claim, the settle, and the action.
CALLS_A_TASK = {"scheduler:CreateSchedule": 1, "sqs:SendMessage": 1, "dynamodb:GetItem": 1,
                "dynamodb:UpdateItem": 2, "sesv2:SendEmail": 1}


@pytest.mark.parametrize("late", [0, 59], ids=["scheduler on time", "scheduler 59 s late"])
def test_a_task_via_scheduler_runs_once_within_the_second_of_its_time_with_one_hop_and_no_other_call(
        late: int, client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    use_settings(deps, past_horizon="scheduler")  # not the default (the sweeper's path: test_due_horizon.py)
    due = clock.now + timedelta(minutes=40, seconds=0.37)
    put_item(deps, {"PK": "SCHEDULED#1", "SK": "TASK", "run_at": due.isoformat(), "strategy": "exact",
                    "action": {"type": "email", "to": "ada@example.com", "subject": "via scheduler", "body": "b"}})
    c = deps.clients
    counter = CallCounter().watch(c.dynamodb, c.sqs, c.scheduler, c.ses, c.sns)
    sim = LambdaSim(deps, client, clock, processor_period=None,
                    schedule_lateness=timedelta(seconds=late))
    sim.run(until=lambda: emitted.total("TasksExecuted", Strategy="exact") == 1, limit=timedelta(minutes=50))
    for _ in range(3):  # anything else the path would still do
        clock.now += timedelta(minutes=15)
        sim.step()

    assert [m.subject for m in emails_sent()] == ["via scheduler"]
    assert sim.schedules_fired == 1
    [lateness] = emitted.values("TaskLateness", Strategy="exact")
    assert 0 <= lateness < 1000  # never early, less than a second late (TASK_PRECISION second)
    assert clock.slept == 0  # no Lambda billed to wait
    assert Counter(counter.calls) == CALLS_A_TASK

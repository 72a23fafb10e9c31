"""TASK_PRECISION end to end under moto (the stream, the due queue's delays, Scheduler, the executor, on the
injected clock): never early at either precision; `second` runs less than a second late without sleeping,
`subsecond` sleeps out the last fraction and runs on time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from tests.fixtures import Emitted, FakeClock, use_settings
from tests.functional.lambda_sim import LambdaSim
from tests.functional.task_support import put_item

# Due at arbitrary fractions of a second: four through the due queue's delay, one through a Scheduler schedule
# (40 minutes ahead: past DIRECT_QUEUE_HORIZON_SECONDS, PAST_HORIZON=scheduler), whose message the executor
# re-queues.  The sweeper's: test_due_horizon.py.
AHEAD = (timedelta(minutes=2), timedelta(minutes=2, seconds=7.3), timedelta(minutes=2, seconds=11.999),
         timedelta(minutes=40, seconds=0.25))


@pytest.mark.parametrize("precision", ["second", "subsecond"])
def test_no_task_runs_early_and_second_runs_within_the_second_without_waiting(
        precision: str, client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    use_settings(deps, task_precision=precision, past_horizon="scheduler")
    start = clock.now
    for i, ahead in enumerate(AHEAD):
        put_item(deps, {"PK": f"PRECISION#{i}", "SK": "TASK", "run_at": (start + ahead).isoformat(),
                        "strategy": "exact",
                        "action": {"type": "email", "to": "ada@example.com", "subject": f"t{i}", "body": "b"}})
    sim = LambdaSim(deps, client, clock, processor_period=timedelta(days=1))  # no interval task here
    sim.run(until=lambda: emitted.total("TasksExecuted", Strategy="exact") == len(AHEAD),
            limit=timedelta(minutes=50))
    lateness = emitted.values("TaskLateness", Strategy="exact")
    assert len(lateness) == len(AHEAD)
    assert min(lateness) >= 0  # never early
    if precision == "second":
        assert max(lateness) < 1000
        assert clock.slept == 0  # no Lambda billed to wait
    else:
        assert max(lateness) == 0
        assert clock.slept > 1  # the last fractions, slept out

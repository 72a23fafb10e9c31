"""A task's flexible window (``window_seconds``, EventBridge Scheduler's FlexibleTimeWindow; docs/tasks.md): it
runs up to that late, never early, and tasks due close together arrive together and share the executor's batches
-- walked by the whole pipeline at the stage's settings (stream, due queue, executor)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks.model import TaskKey, iso, parse_due
from tests.fixtures import Aws, FakeClock
from tests.functional.lambda_sim import LambdaSim
from tests.functional.task_support import EMAIL_ACTION, emails_sent, get_task, post_task, record_of

TASKS = 10


def _run_ten(deps: Deps, clock: FakeClock, client: Client, window: dict[str, int]) -> tuple[LambdaSim, list[datetime]]:
    """Ten exact tasks due at scattered seconds over three minutes, run to the end."""
    dues = [clock.now + timedelta(seconds=61 + 17 * i) for i in range(TASKS)]
    for i, due in enumerate(dues):
        created = post_task(client, {"id": f"w{i}", "run_at": iso(due), "action": EMAIL_ACTION, **window})
        assert created.status_code == 201, created.body
    sim = LambdaSim(deps, client, clock)
    sim.run(until=lambda: len(emails_sent()) == TASKS, limit=timedelta(minutes=15))
    assert len(emails_sent()) == TASKS
    return sim, dues


def test_tasks_with_a_window_share_one_batch_and_run_within_it_never_early(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    sim, dues = _run_ten(deps, clock, client, {"window_seconds": 300})
    assert sim.invocations["task_executor"] == 1  # one batch of ten at the window's slot
    for i, due in enumerate(dues):
        ran = parse_due(record_of(deps, TaskKey.for_id(f"w{i}"))["last_run_at"])  # type: ignore[index]
        assert due <= ran <= due + timedelta(seconds=300), (i, iso(due), iso(ran))
    assert get_task(client, "w0")["window_seconds"] == 300


def test_without_a_window_each_runs_at_its_own_time(aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    sim, dues = _run_ten(deps, clock, client, {})
    assert sim.invocations["task_executor"] == TASKS
    for i, due in enumerate(dues):
        ran = parse_due(record_of(deps, TaskKey.for_id(f"w{i}"))["last_run_at"])  # type: ignore[index]
        assert due <= ran < due + timedelta(seconds=1)


@pytest.mark.parametrize(("extra", "field"), [
    ({"window_seconds": 59}, "window_seconds"),
    ({"window_seconds": 86401}, "window_seconds"),
    ({"window_seconds": 90.5}, "window_seconds"),
    ({"window_seconds": "300"}, "window_seconds"),
    ({"window_seconds": 300, "strategy": "lazy"}, "window_seconds"),
    ({"window_seconds": 300, "strategy": "interval"}, "window_seconds"),
])
def test_a_bad_window_is_a_400_naming_it(client: Client, extra: dict[str, object], field: str) -> None:
    refused = post_task(client, {"run_at": "2026-11-22T12:10:00Z", "action": EMAIL_ACTION, **extra})
    assert (refused.status_code, refused.json_body["field"]) == (400, field), refused.body

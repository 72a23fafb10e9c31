"""With PAST_HORIZON=scheduler an exact task beyond the direct-queue horizon goes through EventBridge Scheduler, which
the runtime fires."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from chalicelib.tasks.model import TaskKey
from chalicelib.tasks.schedules import schedule_name
from local.client import emails_to, wait_until
from local.demo import DEMO_ENVIRONMENT, demo_for
from local.stage import LocalSettings, LocalStage, start_local_stage

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stage() -> Iterator[LocalStage]:
    local = LocalSettings(aws_port=0, api_port=0, scheduler_jitter_seconds=0, ttl_lag_seconds=1)
    overrides = {**DEMO_ENVIRONMENT, "PAST_HORIZON": "scheduler", "DIRECT_QUEUE_HORIZON_SECONDS": "0",
                 "SCHEDULE_LEAD_SECONDS": "2", "LOG_LEVEL": "INFO"}
    started = start_local_stage(local, overrides=overrides, out=lambda line: None)
    yield started
    started.stop()


def test_an_exact_task_is_scheduled_fired_by_scheduler_and_runs_at_its_time(stage: LocalStage) -> None:
    scheduler = boto3.client("scheduler", endpoint_url=stage.aws_endpoint)
    group = stage.environment["SCHEDULE_GROUP"]
    to = f"scheduled-{uuid.uuid4().hex[:6]}@example.com"
    due = (datetime.now(UTC) + timedelta(seconds=6)).replace(microsecond=0)
    created = demo_for(stage).api.post("/tasks", {
        "run_at": due.strftime("%Y-%m-%dT%H:%M:%SZ"), "strategy": "exact",
        "action": {"type": "email", "to": to, "subject": "via scheduler", "body": "b"}})
    assert created.status == 201, created.body

    # This task's schedule only: moto's backends are per process, so a stage started earlier in this pytest
    # worker may have left schedules of its own in the group.
    name = schedule_name(TaskKey.for_id(created.body["id"]))

    def schedules() -> list[Any]:
        return [s for s in scheduler.list_schedules(GroupName=group)["Schedules"] if s["Name"] == name]
    # Each wait returns as soon as its condition holds; under xdist on 2 cores a few seconds were too short.
    wait_until(schedules, 30, "the task's schedule")
    email = wait_until(lambda: emails_to(stage.aws_endpoint, to), 60, "the task's email")
    assert len(email) == 1
    assert datetime.now(UTC) >= due
    wait_until(lambda: not schedules(), 30, "the fired schedule to delete itself")

"""The whole `local` stage (in-process, free ports) under what broke it: a conflicting POST (a cancelled
transaction), 200 clients at once, and moto's memory of stream records."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator

import boto3
import pytest

from chalicelib.log import logger  # app.py sets the stage's level on it: shared by the process
from local import moto_speed
from local.client import ApiClient, emails_to, wait_until
from local.soak import burst, task_body
from local.sources.retention import MotoRetention
from local.stage import LocalSettings, LocalStage, start_local_stage

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stage() -> Iterator[LocalStage]:
    local = LocalSettings(aws_port=0, api_port=0, scheduler_jitter_seconds=0, ttl_lag_seconds=1)
    started = start_local_stage(local, out=lambda line: None)  # at the stage's LOG_LEVEL (INFO), as it runs
    yield started
    started.stop()


def api(stage: LocalStage) -> ApiClient:
    return ApiClient(stage.api_url, stage.environment["API_TOKEN"])


def email_task(task_id: str, to: str, lead: int = 2) -> dict[str, object]:
    body = task_body(task_id, "exact", "unused", lead)
    body["action"] = {"type": "email", "to": to, "subject": "load", "body": "load"}
    return body


def test_after_a_post_whose_transaction_was_cancelled_new_tasks_still_run(stage: LocalStage) -> None:
    tag = secrets.token_hex(3)
    boto3.client("dynamodb", endpoint_url=stage.aws_endpoint).put_item(
        TableName=stage.environment["TASKS_TABLE"],
        Item={"PK": {"S": f"TASK#taken-{tag}"}, "SK": {"S": "TASK"}, "note": {"S": "another program's item"}})
    conflict = api(stage).post("/tasks", email_task(f"taken-{tag}", f"taken-{tag}@example.com"))
    assert conflict.status == 409 and conflict.body["field"] == "id"

    created = api(stage).post("/tasks", email_task(f"after-{tag}", f"after-{tag}@example.com"))
    assert created.status == 201
    wait_until(lambda: emails_to(stage.aws_endpoint, f"after-{tag}@example.com"), 30, "the new task's email", 0.5)
    assert api(stage).get(f"/tasks/after-{tag}").body["status"] == "DONE"


def test_200_clients_posting_tasks_at_once_are_all_answered_201_with_their_own_task(stage: LocalStage) -> None:
    tag = secrets.token_hex(3)
    token = stage.environment["API_TOKEN"]
    result = burst(stage.api_url, token, 200,
                   lambda i: email_task(f"burst-{tag}-{i}", f"burst-{tag}@example.com", lead=3600))
    assert result.resets == 0 and not result.errors, result.describe()
    assert result.statuses == {201: 200}, result.describe()
    assert sorted(result.ids) == sorted(f"burst-{tag}-{i}" for i in range(200))


def test_stream_records_every_poller_has_read_are_dropped_from_moto(stage: LocalStage) -> None:
    tag = secrets.token_hex(3)
    for i in range(5):
        assert api(stage).post("/tasks", email_task(f"trim-{tag}-{i}", f"trim-{tag}@example.com")).status == 201
    wait_until(lambda: len(emails_to(stage.aws_endpoint, f"trim-{tag}@example.com")) == 5, 30, "five emails", 0.5)
    retention = next(s for s in stage.runtime.sources if isinstance(s, MotoRetention))
    shard = moto_speed.stream_shards("123456789012", "us-east-1")[stage.environment["TASKS_TABLE"]]
    written = shard.starting_sequence_number + len(shard.items)

    retention.keep_newest = 0
    try:
        wait_until(lambda: retention.trim() and shard.starting_sequence_number >= written, 20,
                   "the records read to be dropped", 0.5)
    finally:
        retention.keep_newest = 1000
    created = api(stage).post("/tasks", email_task(f"trim-{tag}-after", f"trim-{tag}-after@example.com"))
    assert created.status == 201
    wait_until(lambda: emails_to(stage.aws_endpoint, f"trim-{tag}-after@example.com"), 30, "the next email", 0.5)


def test_a_stage_started_at_another_level_gives_the_process_its_logger_level_back_when_it_stops() -> None:
    before = logger.log_level
    local = LocalSettings(aws_port=0, api_port=0, scheduler_jitter_seconds=0, ttl_lag_seconds=1)
    started = start_local_stage(local, overrides={"LOG_LEVEL": "ERROR"}, out=lambda line: None)
    try:
        assert logger.log_level == logging.ERROR != before
    finally:
        started.stop()
    assert logger.log_level == before

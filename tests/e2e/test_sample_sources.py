"""`make run`'s sample task sources: one table of each seed's shape, written to as the seeds' own loops do.

The local stage (in-process, free ports) declares the three sources; the items are written with plain
PutItem against the local endpoint, exactly as docs/task-sources.md's AWS CLI commands do."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import boto3
import pytest

from local.client import emails_to, wait_until
from local.sample_sources import SAMPLE_SOURCES
from local.stage import LocalSettings, LocalStage, start_local_stage

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stage() -> Iterator[LocalStage]:
    local = LocalSettings(aws_port=0, api_port=0, scheduler_jitter_seconds=0, ttl_lag_seconds=1)
    started = start_local_stage(local, out=lambda line: None)
    yield started
    started.stop()


def test_the_local_stage_runs_a_stream_function_per_sample_source(stage: LocalStage) -> None:
    names = {s.name for s in stage.runtime.sources}
    assert {"source_appointments", "source_sessions", "source_slots"} <= names


def test_each_seeds_items_written_as_the_seed_does_end_in_one_email_each(stage: LocalStage) -> None:
    ddb = boto3.client("dynamodb", endpoint_url=stage.aws_endpoint)
    tag = secrets.token_hex(3)
    now = int(time.time())
    for i in range(10):  # the exact seed's ten-item loop
        ddb.put_item(TableName=SAMPLE_SOURCES["appointments"][0], Item={
            "PK": {"S": f"USER#{tag}-{i}"}, "SK": {"S": f"REMINDER#{i}"},
            "REMINDER_TIMESTAMP": {"N": str(now + 3)}, "email": {"S": f"exact{i}-{tag}@example.com"}})
    ddb.put_item(TableName=SAMPLE_SOURCES["sessions"][0], Item={
        "email": {"S": f"lazy-{tag}@example.com"}, "expires_at": {"N": str(now + 2)}})
    minute = datetime.now(UTC).strftime("%Y-%m-%d#%H:%M")
    ddb.put_item(TableName=SAMPLE_SOURCES["slots"][0], Item={
        "id": {"S": f"slot-{tag}"}, "taskDateTime": {"S": minute}, "email": {"S": f"interval-{tag}@example.com"}})
    addresses = [f"exact{i}-{tag}@example.com" for i in range(10)] + [
        f"lazy-{tag}@example.com", f"interval-{tag}@example.com"]
    wait_until(lambda: all(emails_to(stage.aws_endpoint, a) for a in addresses), 60, "every seed item's email", 0.5)
    assert [len(emails_to(stage.aws_endpoint, a)) for a in addresses] == [1] * 12
    slot = ddb.get_item(TableName=SAMPLE_SOURCES["slots"][0], Key={"id": {"S": f"slot-{tag}"}})["Item"]
    assert slot["taskDateTime"] == {"S": minute}  # the user's own bucket, never rewritten

"""`make run`'s sample task sources: one table of each seed's shape, written to as the seeds' own loops do.

The local stage (in-process, free ports) declares the three sources; the items are written with plain
PutItem against the local endpoint, exactly as docs/task-sources.md's AWS CLI commands do."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import boto3
import pytest

from local.aws import load_chalice_config, stage_environment
from local.client import emails_to, wait_until
from local.sample_sources import SAMPLE_SOURCES
from local.stage import PROJECT_DIR, LocalSettings, LocalStage, start_local_stage

pytestmark = pytest.mark.e2e


# A user's own sources, declared next to the samples: tables make run has not heard of, one it made already
# (a sample table, adopted), and one whose key nobody declared.
OWN_SOURCES = {
    "mine": {"table": "my-reminders", "due_attribute": "at", "key": ["id"]},
    "my_sessions": {"table": "my-sessions", "strategy": "lazy", "ttl_attribute": "ttl", "key": ["user"]},
    "my_slots": {"table": "my-slots", "strategy": "interval", "bucket_index": "when-index",
                 "bucket_attribute": "when", "key": ["id"]},
    "orders": {"table": "sample-orders", "due_attribute": "due"},
    "keyless": {"table": "my-keyless", "due_attribute": "at"},
}


@pytest.fixture(scope="module")
def stage() -> Iterator[LocalStage]:
    local = LocalSettings(aws_port=0, api_port=0, scheduler_jitter_seconds=0, ttl_lag_seconds=1)
    samples = json.loads(stage_environment(load_chalice_config(PROJECT_DIR, "local"))["TASK_SOURCES"])
    started = start_local_stage(local, out=lambda line: None,
                                overrides={"TASK_SOURCES": json.dumps({**samples, **OWN_SOURCES})})
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


def test_a_users_own_source_tables_are_made_on_moto_and_run_like_the_samples(stage: LocalStage) -> None:
    ddb = boto3.client("dynamodb", endpoint_url=stage.aws_endpoint)
    names = {s.name for s in stage.runtime.sources}
    assert {"source_mine", "source_my_sessions", "source_my_slots", "source_orders"} <= names
    slots = ddb.describe_table(TableName="my-slots")["Table"]
    assert [i["IndexName"] for i in slots["GlobalSecondaryIndexes"]] == ["when-index"]
    assert slots["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    ttl = ddb.describe_time_to_live(TableName="my-sessions")["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", "ttl")
    banner = "\n".join(stage.sources)
    assert "      made on moto: key user (strings), stream, TTL ttl" in banner, banner
    assert "      adopted the existing table; NEW_AND_OLD_IMAGES stream enabled" in banner, banner

    tag, now = secrets.token_hex(3), int(time.time())
    ddb.put_item(TableName="my-reminders", Item={
        "id": {"S": f"r-{tag}"}, "at": {"N": str(now + 2)}, "email": {"S": f"mine-{tag}@example.com"}})
    ddb.put_item(TableName="my-sessions", Item={
        "user": {"S": f"u-{tag}"}, "ttl": {"N": str(now + 1)}, "email": {"S": f"session-{tag}@example.com"}})
    ddb.put_item(TableName="my-slots", Item={
        "id": {"S": f"s-{tag}"}, "when": {"S": datetime.now(UTC).strftime("%Y-%m-%d#%H:%M")},
        "email": {"S": f"slot-{tag}@example.com"}})
    ddb.put_item(TableName="sample-orders", Item={
        "PK": {"S": f"order#{tag}"}, "SK": {"S": "row"}, "due": {"N": str(now + 2)},
        "email": {"S": f"order-{tag}@example.com"}})
    addresses = [f"{who}-{tag}@example.com" for who in ("mine", "session", "slot", "order")]
    wait_until(lambda: all(emails_to(stage.aws_endpoint, a) for a in addresses), 60, "an email per own source", 0.5)
    assert [len(emails_to(stage.aws_endpoint, a)) for a in addresses] == [1] * 4


def test_a_source_whose_table_make_run_cannot_make_says_in_one_line_what_to_do(stage: LocalStage) -> None:
    [line] = [line for line in stage.sources if "my-keyless" in line and "not run" in line]
    assert ('add "key": ["<hash key>"] (or ["<hash key>", "<range key>"]) to source \'keyless\' in TASK_SOURCES '
            "and restart make run") in line, line
    assert "source_keyless" not in {s.name for s in stage.runtime.sources}

"""The stream scheduler under moto: records in, schedules / due messages / item updates out."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.settings import DUE_EPOCH_ATTRIBUTE
from chalicelib.tasks.buckets import due_bucket
from chalicelib.tasks.model import DueMessage, TaskKey
from chalicelib.tasks.schedules import schedule_name
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.stream_support import Calls, InFlight, Table, schedule_of, stream
from tests.functional.task_support import use_client

ADA = TaskKey("USER#ada", "REMINDER#standup")
GRACE = TaskKey("grace@example.com", "reminder")


@pytest.fixture
def table(deps: Deps) -> Table:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP", past_horizon="scheduler")  # the sweeper's: test_sweeper.py
    return Table(deps)


def seed(key: TaskKey, due: datetime, **extra: Any) -> dict[str, Any]:
    """The reminder seed's item: PK, SK, REMINDER_TIMESTAMP (epoch seconds) and an email."""
    return {"PK": key.pk, "SK": key.sk, "REMINDER_TIMESTAMP": int(due.timestamp()), "email": "ada@example.com",
            **extra}


def lazy_seed(due: datetime) -> dict[str, Any]:
    """The lazy seed's item: keyed by the email, due when its expires_at TTL passes."""
    return {"PK": GRACE.pk, "SK": GRACE.sk, "email": "grace@example.com", "expires_at": int(due.timestamp())}


def all_schedules(deps: Deps) -> list[str]:
    pages = deps.clients.scheduler.get_paginator("list_schedules").paginate(GroupName=deps.settings.schedule_group)
    return [s["Name"] for page in pages for s in page["Schedules"]]


def queue_arn(aws: Aws, name: str) -> str:
    return aws.clients.sqs.get_queue_attributes(QueueUrl=aws.queue_url(name), AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]


# --- exact ---------------------------------------------------------------------------

def test_an_exact_insert_creates_one_schedule_a_lead_before_due_targeting_the_due_queue(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    due = clock.now + timedelta(hours=3)
    assert stream(client, table.put(seed(ADA, due))) == []
    schedule = schedule_of(deps, ADA)
    assert schedule is not None
    assert schedule["ScheduleExpression"] == "at(2026-11-22T14:59:00)"
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["GroupName"] == deps.settings.schedule_group
    target = schedule["Target"]
    assert target["Arn"] == queue_arn(aws, deps.settings.due_queue)
    assert target["RoleArn"] == deps.settings.scheduler_role_arn
    assert target["DeadLetterConfig"] == {"Arn": deps.settings.scheduler_dlq_arn}
    assert target["RetryPolicy"]["MaximumRetryAttempts"] > 0
    assert DueMessage.from_json(target["Input"]) == DueMessage(ADA, due)
    assert aws.sent(deps.settings.due_queue) == []


def test_changing_the_due_time_updates_the_schedule(deps: Deps, clock: FakeClock, client: Client,
                                                    table: Table) -> None:
    stream(client, table.put(seed(ADA, clock.now + timedelta(hours=3))))
    later = clock.now + timedelta(days=1, hours=2)
    assert stream(client, table.put(seed(ADA, later))) == []
    schedule = schedule_of(deps, ADA)
    assert schedule is not None
    assert schedule["ScheduleExpression"] == "at(2026-11-23T13:59:00)"
    assert DueMessage.from_json(schedule["Target"]["Input"]).due == later
    assert all_schedules(deps) == [schedule_name(ADA)]


def test_a_status_or_attempts_change_makes_no_aws_call(deps: Deps, clock: FakeClock, client: Client,
                                                       table: Table) -> None:
    item = seed(ADA, clock.now + timedelta(hours=3))
    stream(client, table.put(item))
    running = table.put({**item, "status": "RUNNING", "attempts": 1})
    calls = Calls(deps)
    assert stream(client, running) == []
    assert calls.total == 0, calls.counts


def test_a_replayed_insert_leaves_one_schedule(deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    insert = table.put(seed(ADA, clock.now + timedelta(hours=3)))
    stream(client, insert)
    calls = Calls(deps, ("scheduler",))
    assert stream(client, insert) == []
    # moto ignores ClientToken and answers ConflictException: the schedule is read back and already matches.
    assert calls.counts == {"scheduler.CreateSchedule": 1, "scheduler.GetSchedule": 1}
    assert all_schedules(deps) == [schedule_name(ADA)]


def test_a_replayed_insert_after_a_later_change_restores_what_that_record_wanted(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    insert = table.put(seed(ADA, clock.now + timedelta(hours=3)))
    stream(client, insert)
    deps.clients.scheduler.update_schedule(
        Name=schedule_name(ADA), GroupName=deps.settings.schedule_group, ScheduleExpression="at(2030-01-01T00:00:00)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": "arn:aws:sqs:us-east-1:123456789012:x", "RoleArn": "arn:aws:iam::123456789012:role/x"})
    stream(client, insert)
    schedule = schedule_of(deps, ADA)
    assert schedule is not None and schedule["ScheduleExpression"] == "at(2026-11-22T14:59:00)"


def test_a_cancel_deletes_the_schedule_and_a_second_delete_is_fine(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    stream(client, table.put(seed(ADA, clock.now + timedelta(hours=3))))
    remove = table.delete(ADA)
    assert stream(client, remove) == []
    assert schedule_of(deps, ADA) is None
    assert stream(client, remove) == []  # replayed: not found is fine


def test_an_items_own_status_cancelled_leaves_its_schedule_as_it_is(deps: Deps, clock: FakeClock, client: Client,
                                                                   table: Table) -> None:
    item = seed(ADA, clock.now + timedelta(hours=3))
    stream(client, table.put(item))
    stream(client, table.put({**item, "status": "CANCELLED"}))  # the program's data: a cancel is a delete
    assert schedule_of(deps, ADA) is not None


def test_an_exact_task_due_within_15_minutes_goes_to_the_due_queue_with_its_delay_and_no_schedule(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    due = clock.now + timedelta(minutes=10)
    assert stream(client, table.put(seed(ADA, due))) == []
    assert all_schedules(deps) == []
    [(body, delay)] = aws.sent(deps.settings.due_queue)
    assert delay == 600
    assert DueMessage.from_json(body) == DueMessage(ADA, due)


def test_a_schedule_moved_within_15_minutes_is_deleted_and_the_task_sent(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    item = seed(ADA, clock.now + timedelta(hours=3))
    stream(client, table.put(item))
    clock.advance(hours=2, minutes=50)
    stream(client, table.put({**item, "REMINDER_TIMESTAMP": int((clock.now + timedelta(seconds=90)).timestamp())}))
    assert all_schedules(deps) == []
    [(_, delay)] = aws.sent(deps.settings.due_queue)
    assert delay == 90


def test_records_of_one_key_in_a_batch_apply_in_stream_order(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    first = table.put(seed(ADA, clock.now + timedelta(hours=3)))
    second = table.put(seed(ADA, clock.now + timedelta(hours=5)))
    third = table.put(seed(ADA, clock.now + timedelta(hours=7)))
    others = [table.put(seed(TaskKey(f"USER#{i}", "REMINDER#x"), clock.now + timedelta(hours=1))) for i in range(20)]
    assert stream(client, first, *others[:10], second, *others[10:], third) == []
    schedule = schedule_of(deps, ADA)
    assert schedule is not None and schedule["ScheduleExpression"] == "at(2026-11-22T18:59:00)"
    assert len(all_schedules(deps)) == 21


def test_records_of_different_keys_run_concurrently_but_never_more_than_stream_concurrency_at_once(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    use_settings(deps, stream_concurrency=3)
    scheduler = InFlight(deps.clients.scheduler, "create_schedule", expected=3)
    use_client(deps, "scheduler", scheduler)
    keys = [TaskKey(f"USER#{i}", "REMINDER#x") for i in range(10)]
    assert stream(client, *[table.put(seed(key, clock.now + timedelta(hours=3))) for key in keys]) == []
    assert scheduler.calls == 10
    assert 1 < scheduler.peak <= 3
    assert sorted(all_schedules(deps)) == sorted(schedule_name(key) for key in keys)


# --- interval ----------------------------------------------------------------------

def test_an_interval_insert_without_a_bucket_gets_its_bucket_and_due_epoch(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    due = clock.now + timedelta(hours=1, seconds=30)
    stream(client, table.put(seed(ADA, due, strategy="interval")))
    item = table.get(ADA)
    assert item is not None
    assert item[deps.settings.bucket_attribute] == due_bucket(due, 1, deps.settings.bucket_shards, ADA)
    assert item[deps.settings.bucket_attribute].startswith("2026-11-22#13:00#")
    assert item[DUE_EPOCH_ATTRIBUTE] == int(due.timestamp())


def test_the_bucket_is_not_written_over_a_newer_due_time(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    insert = table.put(seed(ADA, clock.now + timedelta(hours=1), strategy="interval"))
    table.put(seed(ADA, clock.now + timedelta(hours=2), strategy="interval"))  # its record comes later
    stream(client, insert)
    item = table.get(ADA)
    assert item is not None and deps.settings.bucket_attribute not in item


# --- lazy ----------------------------------------------------------------------------

def test_a_lazy_insert_without_a_ttl_gets_its_due_time_as_ttl(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    due = clock.now + timedelta(days=3)
    stream(client, table.put(seed(ADA, due, strategy="lazy")))
    item = table.get(ADA)
    assert item is not None and item["expires_at"] == int(due.timestamp())


def test_a_ttl_remove_of_a_lazy_item_sends_it_to_the_due_queue_with_its_snapshot(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    due = clock.now - timedelta(minutes=20)
    item = lazy_seed(due)
    stream(client, table.put(item))
    assert aws.sent(deps.settings.due_queue) == []
    removed = table.delete(GRACE, by_ttl=True)
    assert stream(client, removed) == []
    [(body, delay)] = aws.sent(deps.settings.due_queue)
    assert delay == 0
    assert DueMessage.from_json(body) == DueMessage(GRACE, due, image=removed["dynamodb"]["OldImage"])


def test_a_user_delete_of_a_lazy_item_sends_nothing(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    stream(client, table.put(lazy_seed(clock.now + timedelta(hours=1))))
    assert stream(client, table.delete(GRACE)) == []
    assert aws.sent(deps.settings.due_queue) == []


def test_a_ttl_remove_of_an_exact_item_is_ignored(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    stream(client, table.put(seed(ADA, clock.now + timedelta(minutes=1))))
    aws.sent(deps.settings.due_queue)
    assert stream(client, table.delete(ADA, by_ttl=True)) == []
    assert aws.sent(deps.settings.due_queue) == []


# --- failures --------------------------------------------------------------------------

def test_a_bad_record_goes_to_the_task_dlq_and_the_rest_of_the_batch_is_processed(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    bad = table.put({"PK": "USER#bob", "SK": "REMINDER#x", "REMINDER_TIMESTAMP": "next tuesday",
                     "email": "bob@example.com"})
    garbage = {"eventID": "broken-1", "eventName": "INSERT", "dynamodb": {"SequenceNumber": "1"}}
    good = table.put(seed(ADA, clock.now + timedelta(hours=3)))
    assert stream(client, bad, garbage, good) == []
    assert schedule_of(deps, ADA) is not None
    dead = [json.loads(body) for body, _ in aws.sent(deps.settings.task_dlq)]
    assert sorted(d["event_id"] for d in dead) == sorted([bad["eventID"], "broken-1"])
    reasons = {d["event_id"]: d["reason"] for d in dead}
    assert "REMINDER_TIMESTAMP" in reasons[bad["eventID"]]
    assert "Keys" in reasons["broken-1"]
    assert all(d["source"] == "task_stream" and d["payload"]["eventID"] == d["event_id"] for d in dead)


@pytest.mark.parametrize("due", [
    {"S": "9999-12-31T23:59:59-01:00"},   # year 10000 in UTC
    {"S": "0001-01-01T00:00:00+01:00"},   # year 0 in UTC
    {"N": "1" + "0" * 400},               # more than a float holds
    {"N": "1E+125"},                      # DynamoDB's largest number
    {"S": "2026-11-22T15:00:00\x00"},     # a control character
])
def test_a_poison_due_time_is_dead_lettered_once_and_the_rest_of_the_batch_is_scheduled(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table, due: dict[str, str]) -> None:
    bob = TaskKey("USER#bob", "REMINDER#x")
    poison = table.record("INSERT", bob, new={"PK": bob.pk, "SK": bob.sk, "email": "bob@example.com"})
    poison["dynamodb"]["NewImage"]["REMINDER_TIMESTAMP"] = due
    before = table.put(seed(ADA, clock.now + timedelta(hours=3)))
    after = table.put(seed(GRACE, clock.now + timedelta(hours=4)))
    assert stream(client, before, poison, after) == []  # nothing for Lambda to retry
    assert schedule_of(deps, ADA) is not None and schedule_of(deps, GRACE) is not None
    [(body, _)] = aws.sent(deps.settings.task_dlq)
    dead = json.loads(body)
    assert dead["event_id"] == poison["eventID"]
    assert "REMINDER_TIMESTAMP" in dead["reason"] or "cannot be" in dead["reason"]


def test_a_transient_failure_reports_that_record_and_the_later_ones_of_its_key_only(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    bob = TaskKey("USER#bob", "REMINDER#x")
    bob_first = table.put(seed(bob, clock.now + timedelta(hours=3)))
    ada = table.put(seed(ADA, clock.now + timedelta(hours=3)))
    bob_second = table.put(seed(bob, clock.now + timedelta(hours=4)))

    def unavailable(params: dict[str, Any], **kwargs: Any) -> None:
        if params.get("Name") == schedule_name(bob):
            raise ClientError({"Error": {"Code": "InternalServerException", "Message": "try later"}}, "CreateSchedule")

    deps.clients.scheduler.meta.events.register("provide-client-params.scheduler.CreateSchedule", unavailable)
    failed = stream(client, bob_first, ada, bob_second)
    assert failed == [bob_first["dynamodb"]["SequenceNumber"], bob_second["dynamodb"]["SequenceNumber"]]
    assert schedule_of(deps, ADA) is not None and schedule_of(deps, bob) is None

    deps.clients.scheduler.meta.events.unregister("provide-client-params.scheduler.CreateSchedule", unavailable)
    assert stream(client, bob_first, ada, bob_second) == []  # Lambda's retry from the lowest one
    schedule = schedule_of(deps, bob)
    assert schedule is not None and schedule["ScheduleExpression"] == "at(2026-11-22T15:59:00)"


def test_a_schedule_aws_rejects_as_invalid_is_dead_lettered_not_retried(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    def invalid(params: dict[str, Any], **kwargs: Any) -> None:
        raise ClientError({"Error": {"Code": "ValidationException", "Message": "bad role"}}, "CreateSchedule")

    deps.clients.scheduler.meta.events.register("provide-client-params.scheduler.CreateSchedule", invalid)
    assert stream(client, table.put(seed(ADA, clock.now + timedelta(hours=3)))) == []
    [(body, _)] = aws.sent(deps.settings.task_dlq)
    assert "bad role" in json.loads(body)["reason"]


def test_throttled_calls_are_retried_with_the_injected_sleep(
        deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    throttles = iter([True, True])

    def throttled(params: dict[str, Any], **kwargs: Any) -> None:
        if next(throttles, False):
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "CreateSchedule")

    deps.clients.scheduler.meta.events.register("provide-client-params.scheduler.CreateSchedule", throttled)
    started = datetime.now(UTC)
    assert stream(client, table.put(seed(ADA, clock.now + timedelta(hours=3)))) == []
    assert schedule_of(deps, ADA) is not None
    assert clock.slept > 0 and datetime.now(UTC) - started < timedelta(seconds=5)


def test_a_bad_record_too_large_for_a_message_is_dead_lettered_by_its_key(
        aws: Aws, deps: Deps, client: Client, table: Table) -> None:
    big = table.put({"PK": "USER#bob", "SK": "REMINDER#x", "email": "bob@example.com", "notes": "x" * 300_000})
    assert stream(client, big) == []
    [(body, _)] = aws.sent(deps.settings.task_dlq)
    payload = json.loads(body)["payload"]
    assert payload["truncated"] and payload["dynamodb"]["Keys"] == big["dynamodb"]["Keys"]


def test_an_item_with_binary_attributes_is_scheduled_not_dead_lettered(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    due = clock.now + timedelta(days=3)
    assert stream(client, table.put({**lazy_seed(due), "strategy": "lazy", "avatar": b"\x89PNG"})) == []
    assert aws.sent(deps.settings.task_dlq) == []
    item = table.get(GRACE)
    assert item is not None and item["expires_at"] == int(due.timestamp())


def test_a_ttl_remove_too_large_for_a_message_sends_a_reference_to_the_image_kept_in_the_state_table(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    due = clock.now - timedelta(minutes=20)
    table.put({**lazy_seed(due), "notes": "x" * 300_000})
    removed = table.delete(GRACE, by_ttl=True)
    assert stream(client, removed) == []
    [(body, _)] = aws.sent(deps.settings.due_queue)
    message = DueMessage.from_json(body)
    assert (message.key, message.due, message.image, message.image_stored) == (GRACE, due, None, True)
    kept = deps.clients.dynamodb.get_item(TableName=deps.settings.state_table, Key={
        "PK": {"S": f"IMAGE#{GRACE.task_id}"}, "SK": {"S": "2026-11-22T11:40:00Z"}})["Item"]
    assert kept["image"]["M"]["notes"] == {"S": "x" * 300_000}
    assert aws.sent(deps.settings.task_dlq) == []

"""The stream scheduler's decisions, record by record (pure: no AWS)."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from chalicelib import ddb
from chalicelib.settings import DUE_EPOCH_ATTRIBUTE, Settings
from chalicelib.tasks import schedules
from chalicelib.tasks.buckets import due_bucket
from chalicelib.tasks.model import DueMessage, TaskKey, task_from_item
from chalicelib.tasks.schedules import (
    CancelRecord,
    Change,
    DeadLetter,
    DeleteSchedule,
    InvalidRecord,
    NotATask,
    PutSchedule,
    SendDue,
    SetBucket,
    SetTtl,
    SweepEntry,
)
from tests import events

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
# The Scheduler path's plan (PAST_HORIZON=scheduler); the default, the sweeper's: test_*_by_default_* below.
SETTINGS = replace(Settings.from_env(), due_attribute="REMINDER_TIMESTAMP", past_horizon="scheduler")
KEY = TaskKey("USER#42", "REMINDER#1")


def seed_item(due: datetime, **extra: Any) -> dict[str, Any]:
    """The reminder seed's shape: PK/SK, REMINDER_TIMESTAMP (epoch seconds), email."""
    return {"PK": KEY.pk, "SK": KEY.sk, "REMINDER_TIMESTAMP": int(due.timestamp()), "email": "ada@example.com",
            **extra}


def change(name: str, new: dict[str, Any] | None = None, old: dict[str, Any] | None = None,
           by_ttl: bool = False) -> Change:
    record = events.stream_record(
        name, ddb.serialize({"PK": KEY.pk, "SK": KEY.sk}),
        new_image=ddb.serialize(new) if new is not None else None,
        old_image=ddb.serialize(old) if old is not None else None,
        sequence_number="100000000000000000007", event_id="e1",
        user_identity=events.TTL_USER_IDENTITY if by_ttl else None)
    return schedules.change_from_record(record)


def plan(c: Change, settings: Settings = SETTINGS) -> list[schedules.Step]:
    return schedules.plan(c, settings, NOW)


# --- names, tokens, expressions -------------------------------------------------

@pytest.mark.parametrize("key", [
    KEY, TaskKey("TASK#abc", "TASK"), TaskKey("ada@example.com", "reminder"),
    TaskKey("x" * 1000, "y" * 1000), TaskKey("#/ü", "~"),
])
def test_schedule_names_are_at_most_64_safe_characters(key: TaskKey) -> None:
    name = schedules.schedule_name(key)
    assert re.fullmatch(r"[0-9a-zA-Z_.-]{1,64}", name), name


def test_schedule_names_are_deterministic_and_differ_by_key() -> None:
    assert schedules.schedule_name(KEY) == schedules.schedule_name(TaskKey("USER#42", "REMINDER#1"))
    assert schedules.schedule_name(KEY) != schedules.schedule_name(TaskKey("USER#42", "REMINDER#2"))
    # Keys that read the same once sanitised still get different names.
    assert schedules.schedule_name(TaskKey("a#b", "c")) != schedules.schedule_name(TaskKey("a_b", "c"))


def test_the_client_token_is_the_same_for_a_replayed_record_and_differs_between_records() -> None:
    first = change("INSERT", seed_item(NOW + timedelta(hours=1)))
    replayed = change("INSERT", seed_item(NOW + timedelta(hours=1)))  # the same record, read again
    assert replayed is not first and schedules.client_token(replayed) == schedules.client_token(first)
    other = replace(first, sequence="100000000000000000008")
    assert schedules.client_token(other) != schedules.client_token(first)
    assert re.fullmatch(r"[a-zA-Z0-9-_]{1,64}", schedules.client_token(first))


def test_at_expressions_are_utc_whole_seconds_never_later_than_asked() -> None:
    assert schedules.at_expression(datetime(2026, 7, 1, 12, 0, 0, 900000, tzinfo=UTC)) == "at(2026-07-01T12:00:00)"
    paris = datetime(2026, 7, 1, 14, 0, 0, tzinfo=ZoneInfo("Europe/Paris"))
    assert schedules.at_expression(paris) == "at(2026-07-01T12:00:00)"


@pytest.mark.parametrize(("seconds", "delay"), [(-5, 0), (0, 0), (0.5, 0), (61.9, 61), (899, 899), (5000, 900)])
def test_subsecond_delay_seconds_are_whole_never_late_and_at_most_900(seconds: float, delay: int) -> None:
    assert schedules.delay_seconds(NOW + timedelta(seconds=seconds), NOW, "subsecond") == delay


@pytest.mark.parametrize(("seconds", "delay"), [(-5, 0), (0, 0), (0.5, 1), (61.0, 61), (61.1, 62), (899.5, 900),
                                                (5000, 900)])
def test_second_delay_seconds_are_whole_never_early_and_at_most_900(seconds: float, delay: int) -> None:
    assert schedules.delay_seconds(NOW + timedelta(seconds=seconds), NOW, "second") == delay


def test_the_schedule_request_targets_the_due_queue_with_a_due_message() -> None:
    task = task_from_item(seed_item(NOW + timedelta(hours=2)), SETTINGS)
    request = schedules.schedule_request(task, task.due - timedelta(seconds=60), SETTINGS,
                                         "arn:aws:sqs:us-east-1:123456789012:timekeeper-due")
    assert request["ScheduleExpression"] == "at(2026-11-22T13:59:00)"
    assert request["ScheduleExpressionTimezone"] == "UTC"
    assert request["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert request["ActionAfterCompletion"] == "DELETE"
    assert request["GroupName"] == SETTINGS.schedule_group
    assert request["Target"]["RoleArn"] == SETTINGS.scheduler_role_arn
    assert request["Target"]["DeadLetterConfig"] == {"Arn": SETTINGS.scheduler_dlq_arn}
    assert request["Target"]["RetryPolicy"]["MaximumRetryAttempts"] > 0
    assert DueMessage.from_json(request["Target"]["Input"]) == DueMessage(KEY, task.due)


# --- reading records ------------------------------------------------------------

@pytest.mark.parametrize(("record", "reason"), [
    ({"eventName": "INSERT"}, "dynamodb"),
    ({"eventName": "UPSERT", "dynamodb": {"SequenceNumber": "1", "Keys": {}}}, "eventName"),
    ({"eventName": "INSERT", "dynamodb": {"SequenceNumber": "1", "Keys": {"PK": {"N": "1"}}}}, "Keys"),
    ({"eventName": "INSERT", "dynamodb": {"SequenceNumber": "1", "Keys": {"PK": {"S": "a"}, "SK": {"S": "b"}}}},
     "NewImage"),
    ({"eventName": "REMOVE", "dynamodb": {"SequenceNumber": "1", "Keys": {"PK": {"S": "a"}, "SK": {"S": "b"}},
                                          "NewImage": {}}}, "OldImage"),
    ({"eventName": "INSERT", "dynamodb": {"SequenceNumber": "1", "Keys": {"PK": {"S": "a"}, "SK": {"S": "b"}},
                                          "NewImage": {"x": {"Q": "?"}}}}, "DynamoDB JSON"),
])
def test_records_that_are_not_task_table_records_are_refused_with_a_reason(record: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidRecord, match=reason):
        schedules.change_from_record(record)


def _insert_of(image: dict[str, Any]) -> dict[str, Any]:
    return {"eventName": "INSERT", "dynamodb": {"SequenceNumber": "1", "Keys": {"PK": {"S": "a"}, "SK": {"S": "b"}},
                                                "NewImage": image}}


@pytest.mark.parametrize("position", [0, 2, 4])
def test_an_image_attribute_that_is_not_dynamodb_json_is_named_wherever_it_stands(position: int) -> None:
    attributes = [("PK", {"S": "a"}), ("SK", {"S": "b"}), ("n", {"N": "4.5"}), ("b", {"B": "AAE="})]
    attributes.insert(position, ("bad", {"N": "NaN"}))
    with pytest.raises(InvalidRecord, match=r"^NewImage attribute 'bad' is not DynamoDB JSON: ValueError"):
        schedules.change_from_record(_insert_of(dict(attributes)))


def test_an_image_reads_as_plain_values_binary_in_maps_and_sets_in_one_order() -> None:
    image = {"PK": {"S": "a"}, "SK": {"S": "b"}, "whole": {"N": "42"}, "half": {"N": "0.5"}, "b": {"B": "AAE="},
             "m": {"M": {"x": {"B": "AAI="}, "l": {"L": [{"N": "1"}, {"NULL": True}, {"BOOL": False}]}}},
             "ss": {"SS": ["b", "a"]}}
    assert schedules.change_from_record(_insert_of(image)).new == {
        "PK": "a", "SK": "b", "whole": 42, "half": 0.5, "b": b"\x00\x01",
        "m": {"x": b"\x00\x02", "l": [1, None, False]}, "ss": ["a", "b"]}


def test_only_a_service_remove_by_dynamodb_is_a_ttl_remove() -> None:
    old = seed_item(NOW)
    assert change("REMOVE", old=old, by_ttl=True).by_ttl
    assert not change("REMOVE", old=old).by_ttl
    user = events.stream_record("REMOVE", ddb.serialize({"PK": KEY.pk, "SK": KEY.sk}), old_image=ddb.serialize(old),
                                user_identity={"type": "Service", "principalId": "someone.amazonaws.com"})
    assert not schedules.change_from_record(user).by_ttl


# --- exact -------------------------------------------------------------------------

def test_exact_insert_later_than_the_horizon_creates_a_schedule_a_lead_ahead() -> None:
    due = NOW + timedelta(hours=3)
    steps = plan(change("INSERT", seed_item(due)))
    assert len(steps) == 1 and isinstance(steps[0], PutSchedule)
    assert steps[0].create and steps[0].fire_at == due - timedelta(seconds=SETTINGS.schedule_lead_seconds)


@pytest.mark.parametrize("seconds", [0, 30, 600, 900])
def test_exact_insert_within_the_horizon_goes_straight_to_the_due_queue(seconds: int) -> None:
    due = NOW + timedelta(seconds=seconds)
    assert plan(change("INSERT", seed_item(due))) == [SendDue(DueMessage(KEY, due), seconds)]


def test_exact_insert_past_due_is_sent_without_delay() -> None:
    due = NOW - timedelta(minutes=5)
    assert plan(change("INSERT", seed_item(due))) == [SendDue(DueMessage(KEY, due), 0)]


def test_exact_insert_whose_schedule_would_fire_in_the_past_is_sent_directly() -> None:
    settings = replace(SETTINGS, direct_queue_horizon_seconds=0, schedule_lead_seconds=300)
    due = NOW + timedelta(seconds=200)
    assert plan(change("INSERT", seed_item(due)), settings) == [SendDue(DueMessage(KEY, due), 200)]


HORIZON_RULE = "due at most `DIRECT_QUEUE_HORIZON_SECONDS` ahead (the horizon included)"


@pytest.mark.parametrize(("offset_ms", "path"), [(-1, SendDue), (0, SendDue), (1, PutSchedule)])
def test_an_exact_task_due_exactly_at_the_horizon_goes_by_the_due_queue_one_ms_later_by_scheduler(
        offset_ms: int, path: type) -> None:
    due = NOW + timedelta(seconds=SETTINGS.direct_queue_horizon_seconds, milliseconds=offset_ms)
    [step] = plan(change("INSERT", seed_item(due, REMINDER_TIMESTAMP=due.isoformat(timespec="milliseconds"))))
    assert isinstance(step, path)
    assert isinstance(step, PutSchedule) or (isinstance(step, SendDue) and step.message == DueMessage(KEY, due))
    docs = Path(__file__).resolve().parents[2] / "docs"
    for page in ("strategies.md", "configuration.md"):  # the rule, in the same words
        assert HORIZON_RULE in (docs / page).read_text(), page


def test_a_due_time_change_updates_the_schedule() -> None:
    old, new = seed_item(NOW + timedelta(hours=3)), seed_item(NOW + timedelta(hours=4))
    steps = plan(change("MODIFY", new, old))
    assert len(steps) == 1 and isinstance(steps[0], PutSchedule) and not steps[0].create
    assert steps[0].fire_at == NOW + timedelta(hours=4) - timedelta(seconds=60)


def test_an_action_change_updates_the_schedule() -> None:
    old = seed_item(NOW + timedelta(hours=3))
    new = {**old, "action": {"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "message": "hi"}}
    assert [type(s) for s in plan(change("MODIFY", new, old))] == [PutSchedule]


@pytest.mark.parametrize("changes", [{"status": "RUNNING"}, {"attempts": 2}, {"note": "x"},
                                     {"status": "DONE", "attempts": 1}, {"status": "FAILED"},
                                     {"status": "CANCELLED"}, {"status": "bogus"}])
def test_a_modify_of_nothing_a_schedule_depends_on_does_nothing(changes: dict[str, Any]) -> None:
    old = seed_item(NOW + timedelta(hours=3))
    assert plan(change("MODIFY", {**old, **changes}, old)) == []


def test_moving_a_scheduled_task_within_the_horizon_deletes_its_schedule_and_sends_it() -> None:
    old, new = seed_item(NOW + timedelta(hours=3)), seed_item(NOW + timedelta(minutes=5))
    assert plan(change("MODIFY", new, old)) == [DeleteSchedule(KEY), SendDue(DueMessage(KEY, NOW + timedelta(minutes=5)), 300)]


def test_a_task_given_a_new_time_is_scheduled_again() -> None:
    old = seed_item(NOW - timedelta(hours=1))
    new = seed_item(NOW + timedelta(hours=23))
    steps = plan(change("MODIFY", new, old))
    assert [type(s) for s in steps] == [PutSchedule]


def test_a_user_remove_of_an_exact_task_deletes_its_schedule_and_records_it_cancelled() -> None:
    old = seed_item(NOW + timedelta(hours=3))
    assert plan(change("REMOVE", old=old)) == [
        DeleteSchedule(KEY), CancelRecord(KEY, task_from_item(old, SETTINGS), "2026-11-22T12:00:00Z")]


def test_a_ttl_remove_of_an_exact_task_is_ignored() -> None:
    assert plan(change("REMOVE", old=seed_item(NOW + timedelta(hours=3)), by_ttl=True)) == []


def test_items_without_a_strategy_use_the_default_strategy() -> None:
    settings = replace(SETTINGS, default_strategy="interval")
    steps = plan(change("INSERT", seed_item(NOW + timedelta(hours=3))), settings)
    assert [type(s) for s in steps] == [SetBucket]


def test_changing_an_exact_task_to_interval_deletes_its_schedule_and_files_it_in_a_bucket() -> None:
    old = seed_item(NOW + timedelta(hours=3))
    steps = plan(change("MODIFY", {**old, "strategy": "interval"}, old))
    assert [type(s) for s in steps] == [DeleteSchedule, SetBucket]


# --- interval ---------------------------------------------------------------------

def test_an_interval_task_without_a_bucket_gets_one_conditional_on_what_was_seen() -> None:
    due = NOW + timedelta(hours=1, seconds=17)
    item = seed_item(due, strategy="interval")
    assert plan(change("INSERT", item)) == [SetBucket(
        KEY, due_bucket(due, SETTINGS.bucket_minutes, SETTINGS.bucket_shards, KEY), int(due.timestamp()),
        seen_due=int(due.timestamp()), seen_bucket=None)]


def test_an_interval_task_with_its_bucket_needs_nothing() -> None:
    due = NOW + timedelta(hours=1)
    item = seed_item(due, strategy="interval", **{
        SETTINGS.bucket_attribute: due_bucket(due, SETTINGS.bucket_minutes, SETTINGS.bucket_shards, KEY),
        DUE_EPOCH_ATTRIBUTE: int(due.timestamp())})
    assert plan(change("INSERT", item)) == []
    assert plan(change("MODIFY", {**item, "status": "RUNNING"}, item)) == []


def test_a_seed_bucket_without_a_shard_is_rewritten_in_the_sharded_form() -> None:
    settings = replace(SETTINGS, bucket_attribute="taskDateTime")
    due = NOW + timedelta(hours=1)
    item = seed_item(due, strategy="interval", taskDateTime="2026-11-22#13:00")
    steps = plan(change("INSERT", item), settings)
    assert len(steps) == 1 and isinstance(steps[0], SetBucket)
    assert steps[0].bucket.startswith("2026-11-22#13:00#") and steps[0].seen_bucket == "2026-11-22#13:00"


def test_an_interval_task_due_within_seconds_is_sent_directly_once() -> None:
    due = NOW + timedelta(seconds=schedules.INTERVAL_DIRECT_SECONDS - 1)
    item = seed_item(due, strategy="interval")
    assert plan(change("INSERT", item)) == [SendDue(DueMessage(KEY, due), schedules.INTERVAL_DIRECT_SECONDS - 1)]
    assert plan(change("MODIFY", {**item, "status": "RUNNING"}, item)) == []



# --- lazy --------------------------------------------------------------------------

def test_a_lazy_task_without_a_ttl_gets_its_due_time_as_ttl() -> None:
    due = NOW + timedelta(days=2)
    item = seed_item(due, strategy="lazy")
    assert plan(change("INSERT", item)) == [SetTtl(KEY, int(due.timestamp()), int(due.timestamp()), None)]


def test_an_email_keyed_item_with_only_expires_at_is_lazy_and_needs_nothing() -> None:
    item = {"PK": "ada@example.com", "SK": "reminder", "email": "ada@example.com",
            "expires_at": int((NOW + timedelta(days=1)).timestamp())}
    steps = schedules.plan(schedules.change_from_record(events.stream_record(
        "INSERT", ddb.serialize({"PK": item["PK"], "SK": item["SK"]}), new_image=ddb.serialize(item))),
        SETTINGS, NOW)
    assert steps == []


def test_a_ttl_remove_of_a_lazy_task_sends_it_with_the_old_image() -> None:
    due = NOW - timedelta(minutes=3)
    old = seed_item(due, strategy="lazy", expires_at=int(due.timestamp()), tags={"a", "b"}, blob=b"\x00\xff")
    assert plan(change("REMOVE", old=old, by_ttl=True)) == [
        SendDue(DueMessage(KEY, due, image=ddb.binary_as_text(ddb.serialize(old))), 0)]


def test_a_user_remove_of_a_lazy_task_sends_nothing_and_records_it_cancelled() -> None:
    old = seed_item(NOW, strategy="lazy", expires_at=int(NOW.timestamp()))
    assert plan(change("REMOVE", old=old)) == [CancelRecord(KEY, task_from_item(old, SETTINGS), "2026-11-22T12:00:00Z")]


LAZY_SEED = {"PK": KEY.pk, "SK": KEY.sk, "email": "ada@example.com"}  # due when its expires_at passes, if it has one


# --- an item's own status or attempts: the program's data, never the task's execution -------------------

OWN_ATTRIBUTES = [{"status": "DONE"}, {"status": "CANCELLED"}, {"status": "bogus"}, {"status": "FAILED", "attempts": 7},
                  {"attempts": "many"}]
LATER = NOW + timedelta(hours=3)
SOON = NOW + timedelta(minutes=5)


def _without_image(step: schedules.Step) -> schedules.Step:
    """A step, the item image a due message carries aside (it is the item, own attributes and all)."""
    return replace(step, message=replace(step.message, image=None)) if isinstance(step, SendDue) else step


@pytest.mark.parametrize("own", OWN_ATTRIBUTES)
@pytest.mark.parametrize(("name", "new", "old", "by_ttl"), [
    ("INSERT", seed_item(LATER), None, False),                                            # exact: a schedule
    ("INSERT", seed_item(SOON), None, False),                                             # exact: sent now
    ("MODIFY", seed_item(SOON), seed_item(LATER), False),                                 # moved: sent now
    ("MODIFY", seed_item(LATER, strategy="interval"), seed_item(LATER), False),           # another strategy
    ("INSERT", seed_item(LATER, strategy="interval"), None, False),                       # a bucket
    ("INSERT", seed_item(LATER, strategy="lazy"), None, False),                           # a TTL
    ("REMOVE", None, seed_item(NOW, strategy="lazy", expires_at=int(NOW.timestamp())), True),  # sent by its TTL
    ("REMOVE", None, seed_item(LATER), False),                                            # a user's cancel
    ("MODIFY", {**LAZY_SEED, "strategy": "lazy"}, {**LAZY_SEED, "strategy": "lazy",       # its TTL removed
                                                   "expires_at": int(LATER.timestamp())}, False),
])
def test_an_items_own_status_or_attempts_changes_nothing_the_stream_scheduler_does(
        own: dict[str, Any], name: str, new: dict[str, Any] | None, old: dict[str, Any] | None, by_ttl: bool) -> None:
    plain = plan(change(name, new, old, by_ttl))
    assert plain and not any(isinstance(step, DeadLetter) for step in plain)
    with_own = plan(change(name, {**new, **own} if new else None, {**old, **own} if old else None, by_ttl))
    assert [_without_image(step) for step in with_own] == [_without_image(step) for step in plain]


@pytest.mark.parametrize(("name", "new", "old"), [
    ("INSERT", {**LAZY_SEED, "strategy": "lazy"}, None),              # never had a due time
    ("MODIFY", {**LAZY_SEED, "strategy": "lazy", "note": "x"}, {**LAZY_SEED, "strategy": "lazy"}),
    ("REMOVE", None, {**LAZY_SEED, "strategy": "lazy"}),
    ("REMOVE", None, LAZY_SEED),                                          # its TTL was removed before
])
def test_a_lazy_item_without_a_due_time_is_no_task_and_nothing_is_done(
        name: str, new: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
    assert [type(s) for s in plan(change(name, new, old))] == [NotATask]


@pytest.mark.parametrize("strategy", [{}, {"strategy": "lazy"}])
def test_removing_a_lazy_items_ttl_cancels_its_task(strategy: dict[str, str]) -> None:
    old = {**LAZY_SEED, **strategy, "expires_at": int((NOW + timedelta(hours=1)).timestamp())}
    steps = plan(change("MODIFY", {**LAZY_SEED, **strategy}, old))
    assert [type(s) for s in steps] == [NotATask, CancelRecord]
    assert steps[1] == CancelRecord(KEY, task_from_item(old, SETTINGS), "2026-11-22T12:00:00Z")


@pytest.mark.parametrize("ttl", ["tomorrow", -5, 10**13, True])
def test_a_lazy_items_due_time_present_but_wrong_is_still_dead_lettered(ttl: Any) -> None:
    [step] = plan(change("INSERT", {**LAZY_SEED, "strategy": "lazy", "expires_at": ttl}))
    assert isinstance(step, DeadLetter)


# --- bad images -----------------------------------------------------------------------

@pytest.mark.parametrize("item", [
    {"PK": KEY.pk, "SK": KEY.sk, "email": "ada@example.com"},                         # no due time
    {"PK": KEY.pk, "SK": KEY.sk, "REMINDER_TIMESTAMP": "soon", "email": "a@b.co"},     # bad due time
    {"PK": KEY.pk, "SK": KEY.sk, "REMINDER_TIMESTAMP": 1795000000},                   # no action, no email
    {"PK": KEY.pk, "SK": KEY.sk, "REMINDER_TIMESTAMP": 1795000000, "email": "a@b.co", "strategy": "soonish"},
])
def test_an_image_that_is_not_a_task_is_dead_lettered_with_the_reason(item: dict[str, Any]) -> None:
    steps = plan(change("INSERT", item))
    assert len(steps) == 1 and isinstance(steps[0], DeadLetter)
    assert "NewImage is not a valid task" in steps[0].reason


def test_an_interval_seed_item_with_only_a_task_date_time_is_due_at_that_minute() -> None:
    settings = replace(SETTINGS, bucket_attribute="taskDateTime", default_strategy="exact")
    item = {"PK": KEY.pk, "SK": KEY.sk, "email": "ada@example.com", "taskDateTime": "2026-11-22#13:05"}
    due = datetime(2026, 11, 22, 13, 5, tzinfo=UTC)
    steps = plan(change("INSERT", item), settings)
    assert steps == [SetBucket(KEY, due_bucket(due, 1, settings.bucket_shards, KEY), int(due.timestamp()),
                               seen_due=None, seen_bucket="2026-11-22#13:05")]
    assert isinstance(steps[0], SetBucket)
    filed = {**item, "taskDateTime": steps[0].bucket, DUE_EPOCH_ATTRIBUTE: int(due.timestamp())}
    assert plan(change("MODIFY", filed, item), settings) == []


def test_an_exact_task_with_a_window_is_sent_for_its_slot_by_queue_and_by_schedule() -> None:
    near = plan(change("INSERT", seed_item(NOW + timedelta(seconds=70), window_seconds=300)))
    assert [(type(s).__name__, getattr(s, "delay_seconds", None)) for s in near] == [("SendDue", 300)]
    assert near[0].message.due == NOW + timedelta(seconds=70)  # type: ignore[union-attr]  # its execution's time
    far = plan(change("INSERT", seed_item(NOW + timedelta(hours=2, seconds=70), window_seconds=900)))
    [put] = far
    assert isinstance(put, PutSchedule)
    assert put.fire_at == NOW + timedelta(hours=2, minutes=15) - timedelta(seconds=SETTINGS.schedule_lead_seconds)


def test_by_default_an_exact_task_past_the_horizon_is_one_sweeper_entry_at_its_slot_and_no_schedule() -> None:
    settings = replace(SETTINGS, past_horizon=Settings.from_env().past_horizon)
    far, later = NOW + timedelta(hours=2, seconds=70), NOW + timedelta(hours=3)
    assert plan(change("INSERT", seed_item(far, window_seconds=900)), settings) == [
        SweepEntry(DueMessage(KEY, far), NOW + timedelta(hours=2, minutes=15))]
    assert plan(change("MODIFY", seed_item(later), seed_item(far)), settings) == [  # moved: its old entry skipped
        SweepEntry(DueMessage(KEY, later), later)]
    near = NOW + timedelta(minutes=5)  # moved within the horizon: sent, a schedule it may have had (PAST_HORIZON
    assert plan(change("MODIFY", seed_item(near), seed_item(later)), settings) == [  # was scheduler) deleted
        DeleteSchedule(KEY), SendDue(DueMessage(KEY, near), 300)]

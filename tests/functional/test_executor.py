"""The executor under moto: once, on time, retried, dead-lettered, recurring, from a snapshot."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks import lifecycle
from chalicelib.tasks.executor import WRITE_ATTEMPTS
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import DueMessage, TaskKey, parse_due
from tests import events
from tests.faults import Faults, WorkerCrash
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.stream_support import Table, stream
from tests.functional.task_support import (
    EMAIL_ACTION,
    BrokenReads,
    FlakySes,
    FlakySns,
    StrictConditions,
    deliver,
    due_body,
    emails_sent,
    get_item,
    lazy_seed_item,
    post_task,
    put_item,
    seed_item,
    state_of,
    use_client,
)

SEED_KEY = TaskKey("USER#ada", "REMINDER#standup")
DUE = "2026-11-22T12:03:00"  # the seed's sample: three minutes after the FakeClock's now, no zone (UTC)


def arrange_seed(deps: Deps, due: str = DUE, **extra: Any) -> datetime:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP")
    put_item(deps, seed_item(due, **extra))
    return parse_due(due)


def test_the_seeds_sample_item_ends_in_one_email_even_when_delivered_twice(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    due = arrange_seed(deps)
    clock.advance(minutes=3)
    body = due_body(SEED_KEY, due)
    assert deliver(client, body) == set()
    assert deliver(client, body) == set()
    sent = emails_sent()
    assert len(sent) == 1
    assert sent[0].destinations["ToAddresses"] == ["ada@example.com"]
    assert sent[0].subject == "Reminder"
    assert sent[0].source == "reminders@example.com"
    shown = state_of(deps, SEED_KEY)
    assert (shown["status"], shown["attempts"]) == ("DONE", 1)
    assert get_item(deps, SEED_KEY) == seed_item(DUE)  # the item is left exactly as its program wrote it


def test_a_duplicate_in_the_same_batch_runs_once(client: Client, deps: Deps, clock: FakeClock) -> None:
    due = arrange_seed(deps)
    clock.advance(minutes=3)
    assert deliver(client, due_body(SEED_KEY, due), due_body(SEED_KEY, due)) == set()
    assert len(emails_sent()) == 1


def test_an_early_message_goes_back_with_the_remaining_delay(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    due = arrange_seed(deps)
    clock.advance(seconds=59.6)  # a schedule fired SCHEDULE_LEAD_SECONDS early, plus some
    assert deliver(client, due_body(SEED_KEY, due)) == set()
    assert emails_sent() == []
    [(body, delay)] = aws.sent(deps.settings.due_queue)
    assert delay == 121  # 120.4 s left: whole seconds, rounded up at TASK_PRECISION=second (nothing to wait out)
    back = DueMessage.from_json(body)
    assert (back.key, back.due, back.hops) == (SEED_KEY, due, 1)


def test_a_far_message_hops_at_most_900_seconds(client: Client, aws: Aws, deps: Deps) -> None:
    due = arrange_seed(deps, "2026-11-22T15:00:00")
    deliver(client, due_body(SEED_KEY, due))
    assert [delay for _, delay in aws.sent(deps.settings.due_queue)] == [900]


def test_under_a_second_early_the_executor_waits_it_out(client: Client, deps: Deps, clock: FakeClock) -> None:
    due = arrange_seed(deps)
    clock.now = due - timedelta(milliseconds=400)
    deliver(client, due_body(SEED_KEY, due))
    assert abs(clock.slept - 0.4) < 1e-6
    assert clock.now >= due
    assert len(emails_sent()) == 1


def test_a_failing_action_is_retried_with_backoff_until_it_succeeds(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    due = arrange_seed(deps)
    clock.advance(minutes=3)
    flaky = FlakySes(deps.clients.ses, failures=2)
    use_client(deps, "ses", flaky)
    assert deliver(client, due_body(SEED_KEY, due)) == set()
    shown = state_of(deps, SEED_KEY)
    assert (shown["status"], shown["attempts"]) == ("DONE", 3)
    assert len(emails_sent()) == 1
    assert (1 + 2) / 2 <= clock.slept <= 1 + 2  # backoff 1 s then 2 s, each less up to half of it (jitter)


def test_an_action_that_always_fails_is_failed_dead_lettered_and_alerted(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    due = arrange_seed(deps)
    clock.advance(minutes=3)
    use_client(deps, "ses", FlakySes(deps.clients.ses, failures=99))
    body = due_body(SEED_KEY, due)
    assert deliver(client, body, ids=["m-1"]) == set()
    shown = state_of(deps, SEED_KEY)
    assert (shown["status"], shown["attempts"]) == ("FAILED", 3)
    assert "ServiceUnavailable" in shown["last_error"]
    assert "status" not in (get_item(deps, SEED_KEY) or {})
    [dead] = [json.loads(m["Body"]) for m in aws.drain(deps.settings.task_dlq)]
    assert (dead["event_id"], dead["payload"]) == ("m-1", json.loads(body))
    [alert] = aws.alerts()
    assert alert["message"]["task_id"] == SEED_KEY.task_id
    assert alert["message"]["attempts"] == 3
    assert deliver(client, body) == set()  # a redelivery does not try again
    assert emails_sent() == []


def test_a_recurring_task_gets_its_next_due_time(client: Client, deps: Deps, clock: FakeClock) -> None:
    due = arrange_seed(deps, recurrence="rate(1 day)", strategy="interval")
    clock.advance(minutes=3)
    deliver(client, due_body(SEED_KEY, due))
    item = get_item(deps, SEED_KEY)
    assert item is not None
    assert item["REMINDER_TIMESTAMP"] == "2026-11-23T12:03:00Z"
    assert item["due_epoch"] == int((due + timedelta(days=1)).timestamp())
    assert item["due_bucket"].startswith("2026-11-23#12:03#")
    assert "status" not in item and "attempts" not in item  # a recurring task writes only its next due time
    shown = state_of(deps, SEED_KEY)
    assert (shown["status"], shown["run_at"], shown["attempts"]) == ("PENDING", "2026-11-23T12:03:00Z", 1)
    assert len(emails_sent()) == 1


def test_a_recurring_cron_task_follows_its_time_zone(client: Client, deps: Deps, clock: FakeClock) -> None:
    due = arrange_seed(deps, "2026-11-22T08:00:00Z", recurrence="cron(0 9 * * ? *)", timezone="Europe/Paris")
    clock.now = due
    deliver(client, due_body(SEED_KEY, due))
    item = get_item(deps, SEED_KEY)
    assert item is not None
    assert item["REMINDER_TIMESTAMP"] == "2026-11-23T08:00:00Z"  # 09:00 in Paris


def test_a_rescheduled_tasks_old_message_is_skipped(client: Client, deps: Deps, clock: FakeClock) -> None:
    old = arrange_seed(deps)
    put_item(deps, seed_item("2026-11-22T13:00:00"))  # the program moved it
    clock.advance(minutes=3)
    assert deliver(client, due_body(SEED_KEY, old)) == set()
    assert emails_sent() == []
    item = get_item(deps, SEED_KEY)
    assert item is not None
    assert "status" not in item


def test_a_lazy_snapshot_message_runs_once(client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    expires = int(clock.now.timestamp()) + 180
    snapshot = lazy_seed_item(expires)  # TTL deleted the item; the stream sent its OldImage
    clock.advance(minutes=5)
    key = TaskKey("grace@example.com", "reminder")
    body = due_body(key, datetime.fromtimestamp(expires, clock.now.tzinfo), snapshot)
    assert deliver(client, body) == set()
    assert deliver(client, body) == set()
    assert [m.destinations["ToAddresses"] for m in emails_sent()] == [["grace@example.com"]]
    assert get_item(deps, key) is None  # a one-off lazy task is not put back
    record = ddb.deserialize(aws.clients.dynamodb.get_item(
        TableName=deps.settings.state_table, Key={"PK": {"S": "TASK#grace@example.com|reminder"},
                                                  "SK": {"S": "RECORD"}})["Item"])
    assert (lifecycle.state_of(record), record["attempts"]) == (State.DONE, 1)


def test_a_recurring_lazy_task_is_put_back_with_its_next_expiry(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    expires = int(clock.now.timestamp())
    snapshot = {**lazy_seed_item(expires), "recurrence": "rate(1 hour)"}
    key = TaskKey("grace@example.com", "reminder")
    deliver(client, due_body(key, datetime.fromtimestamp(expires, clock.now.tzinfo), snapshot))
    item = get_item(deps, key)
    assert item is not None
    assert item["expires_at"] == expires + 3600
    assert "status" not in item
    assert "run_at" not in item  # the seed's shape is kept: its TTL is its due time


def test_an_unreadable_message_is_dead_lettered_not_failed(client: Client, aws: Aws, deps: Deps) -> None:
    assert deliver(client, "not json", '{"pk": "x"}', ids=["bad-1", "bad-2"]) == set()
    dead = [json.loads(m["Body"]) for m in aws.drain(deps.settings.task_dlq)]
    assert sorted(d["event_id"] for d in dead) == ["bad-1", "bad-2"]


def test_only_the_message_that_failed_is_redelivered(client: Client, deps: Deps, clock: FakeClock) -> None:
    due = arrange_seed(deps)
    put_item(deps, {**seed_item(DUE), "PK": "USER#bob", "email": "bob@example.com"})
    clock.advance(minutes=3)
    use_client(deps, "dynamodb", BrokenReads(deps.clients.dynamodb, "USER#bob"))
    failed = deliver(client, due_body(SEED_KEY, due), due_body(TaskKey("USER#bob", SEED_KEY.sk), due),
                     ids=["ada", "bob"])
    assert failed == {"bob"}
    assert len(emails_sent()) == 1


def test_a_claim_held_by_a_live_worker_sends_the_message_back_until_its_lease_ends(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    due = arrange_seed(deps)
    clock.advance(minutes=3)
    body = due_body(SEED_KEY, due)
    deps.clients.dynamodb.put_item(TableName=deps.settings.state_table, Item=ddb.serialize({
        "PK": f"TASK#{SEED_KEY.task_id}", "SK": "RECORD", "exec_due": "2026-11-22T12:03:00Z",
        "exec_state": "RUNNING", "exec_owner": "another worker", "claimed_at": clock.now.timestamp() - 100,
        "status": "PENDING", "run_at": "2026-11-22T12:03:00Z"}))  # as a claim leaves it
    assert deliver(client, body) == set()
    assert [delay for _, delay in aws.sent(deps.settings.due_queue)] == [201]
    assert state_of(deps, SEED_KEY)["status"] == "RUNNING"
    clock.advance(seconds=201)  # the worker died: its lease ran out
    assert deliver(client, body) == set()
    assert len(emails_sent()) == 1
    assert state_of(deps, SEED_KEY)["status"] == "DONE"


def test_a_message_rounded_down_to_the_second_waits_for_the_exact_time(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    due = arrange_seed(deps, "2026-11-22T12:03:00.500Z", strategy="interval")
    clock.now = due.replace(microsecond=0)  # the interval processor sends due_epoch, whole seconds
    assert deliver(client, due_body(SEED_KEY, due.replace(microsecond=0))) == set()
    assert clock.now == due
    assert len(emails_sent()) == 1


# --- with the stream scheduler: the item written, the message it sends, the run ---

def test_the_seeds_sample_write_ends_in_one_email_through_the_stream(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP")
    table = Table(deps)
    assert stream(client, table.put(seed_item(DUE))) == []
    [(body, delay)] = aws.sent(deps.settings.due_queue)
    clock.advance(seconds=delay)
    before = table.get(SEED_KEY)
    assert deliver(client, body) == set()
    after = table.get(SEED_KEY)
    assert stream(client, table.record("MODIFY", SEED_KEY, new=after, old=before)) == []
    assert aws.sent(deps.settings.due_queue) == []  # recording the outcome schedules nothing
    assert deliver(client, body) == set()
    assert len(emails_sent()) == 1


def test_an_item_with_its_own_status_or_attempts_runs_once_as_any_other(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP")
    table = Table(deps)
    own: dict[str, dict[str, Any]] = {"done": {"status": "DONE"}, "cancelled": {"status": "CANCELLED", "attempts": 3},
           "bogus": {"status": "bogus", "attempts": "many"}}
    keys = {name: TaskKey(f"USER#{name}", "REMINDER#standup") for name in own}
    for name, attributes in own.items():
        assert stream(client, table.put({**seed_item(DUE, email=f"{name}@example.com"), **attributes,
                                         "PK": keys[name].pk, "SK": keys[name].sk})) == []
    sent = aws.sent(deps.settings.due_queue)
    assert len(sent) == 3  # each one sent (none dead-lettered, none taken for finished)
    clock.advance(seconds=max(delay for _, delay in sent))
    bodies = [body for body, _ in sent]
    assert deliver(client, *bodies) == set()
    assert deliver(client, *bodies) == set()
    assert sorted(m.destinations["ToAddresses"][0] for m in emails_sent()) == [
        "bogus@example.com", "cancelled@example.com", "done@example.com"]
    for name, key in keys.items():
        assert (state_of(deps, key)["status"], state_of(deps, key)["attempts"]) == ("DONE", 1)
        assert table.get(key) == {**seed_item(DUE, email=f"{name}@example.com"), **own[name],
                                  "PK": key.pk, "SK": key.sk}  # left as its program wrote it


def test_an_api_lazy_task_runs_when_its_ttl_expires(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    created = post_task(client, {"id": "water", "run_at": "2026-11-22T12:05:00Z", "strategy": "lazy",
                                 "action": EMAIL_ACTION})
    assert created.status_code == 201
    table = Table(deps)
    clock.advance(minutes=7)  # TTL deletes some time after the expiry
    assert stream(client, table.delete(TaskKey.for_id("water"), by_ttl=True)) == []
    [(body, _)] = aws.sent(deps.settings.due_queue)
    assert deliver(client, body) == set()
    assert deliver(client, body) == set()
    assert len(emails_sent()) == 1
    shown = client.http.get("/tasks/water").json_body
    assert (shown["status"], shown["attempts"]) == ("DONE", 1)


# --- review fixes: bucket-only items, lost alerts, re-run actions, lazy images ---

def test_a_bucket_only_interval_item_runs_where_dynamodb_never_matches_a_missing_value(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    use_settings(deps, bucket_attribute="taskDateTime")
    strict = StrictConditions(deps)
    put_item(deps, {"PK": SEED_KEY.pk, "SK": SEED_KEY.sk, "taskDateTime": "2026-11-22#12:03",
                    "email": "ada@example.com"})  # the interval seed's item: no due attribute
    clock.advance(minutes=3)
    assert deliver(client, due_body(SEED_KEY, parse_due(DUE))) == set()
    assert strict.refused == []
    assert len(emails_sent()) == 1
    shown_state = state_of(deps, SEED_KEY)
    assert (shown_state["status"], shown_state["attempts"]) == ("DONE", 1)
    shown = client.http.get("/tasks/USER%23ada%7CREMINDER%23standup")  # still a valid task once finished
    assert (shown.status_code, shown.json_body["status"], shown.json_body["run_at"]) == (
        200, "DONE", "2026-11-22T12:03:00Z")


def test_a_failure_alert_lost_to_an_sns_error_is_sent_on_the_redelivery_without_running_again(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    due = arrange_seed(deps)
    clock.advance(minutes=3)
    ses = FlakySes(deps.clients.ses, failures=99)
    use_client(deps, "ses", ses)
    use_client(deps, "sns", FlakySns(deps.clients.sns, failures=1))
    body = due_body(SEED_KEY, due)
    assert deliver(client, body, ids=["m-1"]) == {"m-1"}  # the alert failed: the message comes back
    assert aws.alerts() == []
    assert deliver(client, body, ids=["m-1"]) == set()
    [alert] = aws.alerts()
    assert alert["message"]["task_id"] == SEED_KEY.task_id
    assert len(aws.drain(deps.settings.task_dlq)) == 1  # dead-lettered once, not again by the redelivery
    assert ses.calls == 3  # the action's three attempts; the redelivery did not run it again
    assert state_of(deps, SEED_KEY)["status"] == "FAILED"


def _ttl_remove_record(deps: Deps, table: Table, key: TaskKey) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the item exactly as DynamoDB JSON, the stream record of its deletion by TTL)."""
    raw = deps.clients.dynamodb.get_item(TableName=deps.settings.tasks_table, Key=key.dynamo())["Item"]
    deps.clients.dynamodb.delete_item(TableName=deps.settings.tasks_table, Key=key.dynamo())
    record = events.stream_record("REMOVE", key.dynamo(), old_image=raw, sequence_number="400000000000000000001",
                                  created=deps.clock(), user_identity=events.TTL_USER_IDENTITY)
    return dict(raw), record


def test_a_recurring_lazy_item_is_put_back_exactly_with_its_sets_binary_and_numbers(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    key = TaskKey("grace@example.com", "reminder")
    expires = int(clock.now.timestamp())
    deps.clients.dynamodb.put_item(TableName=deps.settings.tasks_table, Item={
        **key.dynamo(), "email": {"S": "grace@example.com"}, "expires_at": {"N": str(expires)},
        "recurrence": {"S": "rate(1 hour)"}, "tags": {"SS": ["a", "b"]}, "blob": {"B": b"\x00\xff"},
        "amount": {"N": "0.100000000000000000000000000000000001"}, "sizes": {"NS": ["1", "2.5"]}})
    raw, record = _ttl_remove_record(deps, Table(deps), key)
    assert stream(client, record) == []
    [(body, _)] = aws.sent(deps.settings.due_queue)
    assert deliver(client, body) == set()
    assert len(emails_sent()) == 1
    back = deps.clients.dynamodb.get_item(TableName=deps.settings.tasks_table, Key=key.dynamo())["Item"]
    for name in ("email", "recurrence", "tags", "blob", "amount", "sizes"):
        assert back[name] == raw[name], name
    assert back["expires_at"] == {"N": str(expires + 3600)}


def test_a_lazy_item_too_large_for_a_message_is_kept_in_the_state_table_and_runs(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    key = TaskKey("grace@example.com", "reminder")
    put_item(deps, {**lazy_seed_item(int(clock.now.timestamp())), "notes": "x" * 300_000})
    _, record = _ttl_remove_record(deps, Table(deps), key)
    assert stream(client, record) == []
    [(body, _)] = aws.sent(deps.settings.due_queue)
    assert len(body.encode()) < 256 * 1024
    assert aws.sent(deps.settings.task_dlq) == []
    assert deliver(client, body) == set()
    assert deliver(client, body) == set()
    assert [m.destinations["ToAddresses"] for m in emails_sent()] == [["grace@example.com"]]
    assert client.http.get("/tasks/grace%40example.com%7Creminder").json_body["status"] == "DONE"


def test_a_due_message_of_the_older_plain_snapshot_form_still_runs(client: Client, clock: FakeClock) -> None:
    expires = int(clock.now.timestamp())
    body = json.dumps({"pk": "grace@example.com", "sk": "reminder", "due": expires,
                       "snapshot": lazy_seed_item(expires)})
    assert deliver(client, body) == set()
    assert len(emails_sent()) == 1


def test_a_failed_task_whose_message_is_too_large_to_dead_letter_is_dead_lettered_by_its_key(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    expires = int(clock.now.timestamp())
    key, due = TaskKey("grace@example.com", "reminder"), datetime.fromtimestamp(expires, clock.now.tzinfo)
    room = 249_950 - len(due_body(key, due, {**lazy_seed_item(expires), "notes": ""}))
    body = due_body(key, due, {**lazy_seed_item(expires), "notes": "x" * room})  # as large as the stream sends
    use_client(deps, "ses", FlakySes(deps.clients.ses, failures=99))
    assert deliver(client, body, ids=["m-1"]) == set()
    [dead] = [json.loads(m["Body"]) for m in aws.drain(deps.settings.task_dlq)]
    assert dead["payload"]["pk"] == "grace@example.com" and dead["payload"]["image_omitted"]


# --- faults at the claim's writes (tests/faults.py): the executor's own writes fail after botocore's retries ---

def _claim_write(params: Mapping[str, Any]) -> bool:
    return "claimed_at = :now" in str(params.get("UpdateExpression", ""))


def _outcome_on_claim(params: Mapping[str, Any]) -> bool:
    """The settle: the outcome written on the record, on the condition that the claim is still this worker's."""
    return "#exec_owner = :me" in str(params.get("ConditionExpression", ""))


def _redeliver_until_settled(client: Client, aws: Aws, deps: Deps, clock: FakeClock, body: str) -> int:
    """Deliver ``body`` as SQS would until it is handled: a failed or crashed delivery comes back after the
    visibility timeout, a message sent back comes back after its delay. Returns the number of deliveries."""
    deliveries, pending = 0, [(body, 0)]
    while pending and deliveries < 20:
        current, delay = pending.pop(0)
        clock.advance(seconds=delay)
        deliveries += 1
        try:
            failed = deliver(client, current, ids=["m-1"])
        except WorkerCrash:
            failed = {"m-1"}
        pending += aws.sent(deps.settings.due_queue)
        if failed:
            pending.append((current, 120))  # the due queue's visibility timeout
    return deliveries


def test_an_outcome_whose_claim_write_errors_is_retried_and_the_action_runs_once(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    due = arrange_seed(deps)
    clock.advance(minutes=3)
    faults.inject("dynamodb.UpdateItem", "error", match=_outcome_on_claim)
    _redeliver_until_settled(client, aws, deps, clock, due_body(SEED_KEY, due))
    assert len(emails_sent()) == 1
    shown = state_of(deps, SEED_KEY)
    assert (shown["status"], shown["attempts"]) == ("DONE", 1)


def test_an_outcome_write_applied_whose_response_was_lost_is_recognised_and_the_task_is_done(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    due = arrange_seed(deps)
    clock.advance(minutes=3)
    faults.inject("dynamodb.UpdateItem", "retried", match=_outcome_on_claim)  # botocore's retry fails its condition
    assert deliver(client, due_body(SEED_KEY, due)) == set()
    assert len(emails_sent()) == 1
    shown = state_of(deps, SEED_KEY)
    assert (shown["status"], shown["attempts"]) == ("DONE", 1)


def test_a_recurring_task_whose_outcome_response_was_lost_keeps_recurring(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    due = arrange_seed(deps, recurrence="rate(1 day)")
    clock.advance(minutes=3)
    faults.inject("dynamodb.UpdateItem", "lost", match=_outcome_on_claim)
    _redeliver_until_settled(client, aws, deps, clock, due_body(SEED_KEY, due))
    assert len(emails_sent()) == 1
    item = get_item(deps, SEED_KEY)
    assert item is not None and item["REMINDER_TIMESTAMP"] == "2026-11-23T12:03:00Z"
    assert state_of(deps, SEED_KEY)["status"] == "PENDING"


def test_a_claim_applied_whose_response_was_lost_runs_the_task_at_once_not_after_a_lease(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    due = arrange_seed(deps)
    clock.advance(minutes=3)
    faults.inject("dynamodb.UpdateItem", "lost", match=_claim_write)
    assert deliver(client, due_body(SEED_KEY, due)) == set()
    assert aws.sent(deps.settings.due_queue) == []  # not sent back to wait for its own claim's lease
    assert len(emails_sent()) == 1


def test_a_claim_whose_retry_failed_its_own_condition_runs_the_task_at_once(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    due = arrange_seed(deps)
    clock.advance(minutes=3)
    faults.inject("dynamodb.UpdateItem", "retried", match=_claim_write)
    assert deliver(client, due_body(SEED_KEY, due)) == set()
    assert aws.sent(deps.settings.due_queue) == []
    assert len(emails_sent()) == 1


def test_an_outcome_that_cannot_be_kept_on_its_claim_runs_again_only_after_the_lease(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    """The one window docs/executor.md's "Delivery is at least once per action call" documents: every attempt of the
    write that keeps the outcome on the claim failed, so the takeover after the lease runs the action again."""
    due = arrange_seed(deps)
    clock.advance(minutes=3)
    faults.inject("dynamodb.UpdateItem", "error", times=WRITE_ATTEMPTS, match=_outcome_on_claim)
    body = due_body(SEED_KEY, due)
    assert deliver(client, body) != set()
    assert len(emails_sent()) == 1
    clock.advance(seconds=120)  # redelivered within the lease: the claim is still held, nothing runs
    assert deliver(client, body) == set()
    [(_, delay)] = aws.sent(deps.settings.due_queue)
    assert len(emails_sent()) == 1
    clock.advance(seconds=delay)
    assert deliver(client, body) == set()
    assert len(emails_sent()) == 2
    assert state_of(deps, SEED_KEY)["status"] == "DONE"


def test_a_failure_alert_and_dead_letter_sent_again_after_a_crash_carry_the_same_dedupe_id(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    """docs/executor.md "Fail loudly": a worker that dies between sending the alert and noting it on the claim leaves
    the takeover to send it again; both copies carry one dedupe_id, and the dead letter noted before is not
    sent again."""
    due = arrange_seed(deps)
    clock.advance(minutes=3)
    use_client(deps, "ses", FlakySes(deps.clients.ses, failures=99))
    faults.inject("sns.Publish", "crash_after")
    _redeliver_until_settled(client, aws, deps, clock, due_body(SEED_KEY, due))
    first, second = aws.alerts()
    assert first["message"]["dedupe_id"] == second["message"]["dedupe_id"] == \
        f"task-failed:{SEED_KEY.task_id}:2026-11-22T12:03:00Z"
    [dead] = [json.loads(m["Body"]) for m in aws.drain(deps.settings.task_dlq)]
    assert dead["dedupe_id"] == first["message"]["dedupe_id"]
    assert state_of(deps, SEED_KEY)["status"] == "FAILED"

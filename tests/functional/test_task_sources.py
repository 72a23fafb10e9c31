"""Task sources: the seeds' own items, in tables of the seeds' own shapes, become tasks without being moved.

Each seed's item is written exactly as the seed writes it (plain PutItem of its attributes) to a table of
exactly the seed's shape; app.py binds one stream function per source (a fresh import on a stage declaring
them) and SourceSim delivers every stream, queue, schedule and TTL deletion as Lambda and AWS would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any
from urllib.parse import quote

import pytest
from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks import interval
from chalicelib.tasks.model import DueMessage, InvalidTask, TaskKey, parse_due
from tests import events
from tests.faults import Faults, Kind
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.source_support import (
    APPOINTMENTS_TABLE,
    SEED_SOURCES,
    SESSIONS_TABLE,
    SLOTS_TABLE,
    SourceSim,
    create_seed_tables,
    create_table,
    load_app,
)
from tests.functional.task_support import FlakySes, deliver, emails_sent, use_client


@dataclass
class Stage:
    deps: Deps
    sim: SourceSim
    app: ModuleType
    clock: FakeClock

    def put(self, table: str, item: dict[str, Any]) -> None:
        """What the seed's own code does: a plain PutItem."""
        self.deps.clients.dynamodb.put_item(TableName=table, Item=ddb.serialize(item))

    def get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        found = self.deps.clients.dynamodb.get_item(TableName=table, Key=ddb.serialize(key)).get("Item")
        return ddb.deserialize(found) if found else None

    def delete(self, table: str, key: dict[str, Any]) -> None:
        self.deps.clients.dynamodb.delete_item(TableName=table, Key=ddb.serialize(key))

    def run(self, **limit: float) -> None:
        """Everything AWS would deliver over the next ``limit`` of (fake) time."""
        self.sim.run(lambda: False, timedelta(**limit))

    def epoch(self, **ahead: float) -> int:
        return int((self.clock.now + timedelta(**ahead)).timestamp())


def emails_to(address: str) -> list[Any]:
    return [m for m in emails_sent() if address in m.destinations.get("ToAddresses", [])]


def _stage(monkeypatch: pytest.MonkeyPatch, deps: Deps, clock: FakeClock, sources: dict[str, Any],
           streams: dict[str, str]) -> Iterator[Stage]:
    module = load_app(monkeypatch, deps, sources, streams)
    # the processor has been running: its first tick reads the minute now, not the hour before (tested elsewhere)
    for key in [interval.PROGRESS_KEY, *(interval.source_progress_key(s) for s in deps.settings.task_sources
                                         if s.strategy == "interval")]:
        interval.save_progress(deps, int(clock.now.timestamp()) - 1, key)
    with Client(module.app) as client:
        yield Stage(deps, SourceSim(deps, client, clock), module, clock)
    module.container.use(None)


@pytest.fixture
def stage(aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stage]:
    yield from _stage(monkeypatch, deps, clock, SEED_SOURCES, create_seed_tables(deps))


# --- the exact seed: PK/SK, REMINDER_TIMESTAMP, email ---------------------------------------------------

def test_app_py_binds_one_stream_function_per_source_with_stable_names(stage: Stage) -> None:
    functions = {s.name: s.stream_arn for s in stage.app.app.event_sources if hasattr(s, "stream_arn")}
    assert {"task_stream", "source_appointments", "source_sessions", "source_slots"} <= set(functions)
    assert functions["source_appointments"].split("/")[1] == APPOINTMENTS_TABLE


def test_the_exact_seeds_item_sends_one_email_at_its_time_never_early(stage: Stage) -> None:
    due = stage.epoch(minutes=3)
    stage.put(APPOINTMENTS_TABLE, {"PK": "USER#ada", "SK": "REMINDER#standup", "REMINDER_TIMESTAMP": due,
                                   "email": "ada@example.com"})
    stage.run(minutes=2, seconds=59)
    assert emails_to("ada@example.com") == []
    stage.run(minutes=3)
    [email] = emails_to("ada@example.com")
    assert "REMINDER#standup" in json.dumps(email.body)
    item = stage.get(APPOINTMENTS_TABLE, {"PK": "USER#ada", "SK": "REMINDER#standup"})
    assert item == {"PK": "USER#ada", "SK": "REMINDER#standup", "REMINDER_TIMESTAMP": due,
                    "email": "ada@example.com"}  # nothing written to the user's item


def test_the_exact_seeds_ten_item_loop_ends_in_ten_emails(stage: Stage) -> None:
    due = stage.epoch(seconds=10)
    for i in range(10):
        stage.put(APPOINTMENTS_TABLE, {"PK": f"USER#seed-{i}", "SK": f"REMINDER#{i}", "REMINDER_TIMESTAMP": due,
                                       "email": f"seed{i}@example.com"})
    stage.run(minutes=5)
    assert [len(emails_to(f"seed{i}@example.com")) for i in range(10)] == [1] * 10


def test_a_users_delete_of_an_exact_item_cancels_it(stage: Stage) -> None:
    for minutes, who in ((3, "soon"), (40, "later")):  # the due-queue path and the Scheduler path
        stage.put(APPOINTMENTS_TABLE, {"PK": f"USER#{who}", "SK": "REMINDER#x",
                                       "REMINDER_TIMESTAMP": stage.epoch(minutes=minutes),
                                       "email": f"{who}@example.com"})
    stage.run(minutes=1)
    for who in ("soon", "later"):
        stage.delete(APPOINTMENTS_TABLE, {"PK": f"USER#{who}", "SK": "REMINDER#x"})
    stage.run(minutes=5)  # the deletes handled, past the due-queue one's time
    stage.clock.advance(minutes=40)  # past the Scheduler one's: nothing is due in between, no need to step through it
    stage.run(minutes=5)
    assert emails_to("soon@example.com") == [] and emails_to("later@example.com") == []
    schedules = stage.deps.clients.scheduler.list_schedules(GroupName=stage.deps.settings.schedule_group)
    assert schedules["Schedules"] == []


# --- the lazy seed: keyed by email, expires_at (TTL) --------------------------------------------------

def test_the_lazy_seeds_item_runs_when_its_ttl_expires_never_before(stage: Stage) -> None:
    expires = stage.epoch(minutes=10)
    stage.put(SESSIONS_TABLE, {"email": "grace@example.com", "expires_at": expires})
    stage.run(minutes=9, seconds=59)
    assert emails_to("grace@example.com") == []
    stage.run(minutes=5)
    assert len(emails_to("grace@example.com")) == 1
    assert stage.sim.source_ttl_deletes == 1


def test_a_users_delete_of_a_lazy_item_never_runs_it(stage: Stage) -> None:
    stage.put(SESSIONS_TABLE, {"email": "gone@example.com", "expires_at": stage.epoch(minutes=10)})
    stage.run(minutes=1)
    stage.delete(SESSIONS_TABLE, {"email": "gone@example.com"})
    stage.run(minutes=2)  # the delete's record handled
    stage.clock.advance(minutes=10)  # past its TTL: nothing is due in between, no need to step through it
    stage.run(minutes=5)
    assert emails_to("gone@example.com") == []


# --- the interval seed: taskDateTime with its own GSI --------------------------------------------------

def test_the_interval_seeds_item_runs_in_its_minute_and_keeps_its_task_date_time(stage: Stage) -> None:
    stage.put(SLOTS_TABLE, {"id": "slot-1", "taskDateTime": "2026-11-22#12:05", "email": "linus@example.com"})
    stage.run(minutes=4, seconds=59)
    assert emails_to("linus@example.com") == []
    stage.run(minutes=3)
    [email] = emails_to("linus@example.com")
    assert email.subject == "Slot 2026-11-22#12:05"
    assert stage.get(SLOTS_TABLE, {"id": "slot-1"}) == {
        "id": "slot-1", "taskDateTime": "2026-11-22#12:05", "email": "linus@example.com"}  # never rewritten
    found = stage.deps.clients.dynamodb.query(
        TableName=SLOTS_TABLE, IndexName="taskDateTime-index", KeyConditionExpression="taskDateTime = :t",
        ExpressionAttributeValues={":t": {"S": "2026-11-22#12:05"}})["Items"]
    assert len(found) == 1  # the user's own query on their index still finds it


def test_a_users_delete_of_an_interval_item_never_runs_it(stage: Stage) -> None:
    stage.put(SLOTS_TABLE, {"id": "slot-2", "taskDateTime": "2026-11-22#12:10", "email": "gone@example.com"})
    stage.run(minutes=2)
    stage.delete(SLOTS_TABLE, {"id": "slot-2"})
    stage.run(minutes=15)
    assert emails_to("gone@example.com") == []


# --- bad items ----------------------------------------------------------------------------------------

def test_a_bad_item_is_dead_lettered_naming_its_source_and_never_blocks_the_stream(
        stage: Stage, aws: Aws) -> None:
    stage.put(APPOINTMENTS_TABLE, {"PK": "USER#bad", "SK": "REMINDER#x", "REMINDER_TIMESTAMP": "tomorrow",
                                   "email": "bad@example.com"})
    stage.put(APPOINTMENTS_TABLE, {"PK": "USER#good", "SK": "REMINDER#x", "REMINDER_TIMESTAMP": stage.epoch(minutes=1),
                                   "email": "good@example.com"})
    stage.run(minutes=3)
    assert len(emails_to("good@example.com")) == 1
    [letter] = [json.loads(m["Body"]) for m in aws.drain(stage.deps.settings.task_dlq)]
    assert letter["source"] == "task_stream:appointments"
    assert "task source 'appointments'" in letter["reason"] and "REMINDER_TIMESTAMP" in letter["reason"]


# --- any key schema ------------------------------------------------------------------------------------

KEYED = {"type": "email", "to": "{owner}", "subject": "Due", "body": "Item {id} is due."}


def test_hash_only_tables_with_a_number_or_a_binary_key_work(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = {"numbered": create_table(deps, "numbered", [("id", "N")]),
               "binary": create_table(deps, "binary", [("id", "B")])}
    sources = {name: {"table": name, "due_attribute": "due_at", "action": KEYED} for name in streams}
    for stage in _stage(monkeypatch, deps, clock, sources, streams):
        due = "2026-11-22T12:02:00Z"
        stage.put("numbered", {"id": 42, "due_at": due, "owner": "n@example.com"})
        stage.put("binary", {"id": b"\x00\xffkey", "due_at": due, "owner": "b@example.com"})
        stage.run(minutes=5)
        assert len(emails_to("n@example.com")) == 1
        assert len(emails_to("b@example.com")) == 1


# --- two sources plus API tasks -------------------------------------------------------------------------

def test_two_sources_and_api_tasks_share_one_executor_without_cross_talk(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = {"first": create_table(deps, "first", [("PK", "S"), ("SK", "S")]),
               "second": create_table(deps, "second", [("PK", "S"), ("SK", "S")])}
    action = {"type": "email", "to": "{email}", "subject": "s", "body": "b"}
    sources = {name: {"table": name, "due_attribute": "at", "action": action} for name in streams}
    for stage in _stage(monkeypatch, deps, clock, sources, streams):
        same_key = {"PK": "USER#1", "SK": "R"}
        stage.put("first", {**same_key, "at": stage.epoch(minutes=2), "email": "first@example.com"})
        stage.put("second", {**same_key, "at": stage.epoch(minutes=2), "email": "second@example.com"})
        created = stage.sim.client.http.post("/tasks", body=json.dumps({
            "id": "api-1", "run_at": "2026-11-22T12:02:00Z",
            "action": {"type": "email", "to": "api@example.com", "subject": "s", "body": "b"}}),
            headers={"Content-Type": "application/json", "Authorization": "Bearer x"})
        assert created.status_code == 201, created.body
        stage.run(minutes=5)
        for who in ("first", "second", "api"):
            assert len(emails_to(f"{who}@example.com")) == 1, who
        records = [ddb.deserialize(r) for r in deps.clients.dynamodb.scan(TableName=deps.settings.state_table)["Items"]]
        claimed = sorted(r["id"] for r in records if r.get("exec_due"))
        assert claimed == ["api-1", 'first/{"PK":{"S":"USER#1"},"SK":{"S":"R"}}',
                           'second/{"PK":{"S":"USER#1"},"SK":{"S":"R"}}']


# --- recurrence -------------------------------------------------------------------------------------------

def test_a_recurring_sources_item_runs_again_with_its_due_time_in_its_own_form(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    # An hour apart, not a day: the interval processor's catch-up after a jump of the clock queries every bucket
    # shard passed (a day's was 5,760 queries, 20 s of the suite), and rate()'s units are schedule_expr's tests.
    streams = {"hourly": create_table(deps, "hourly", [("PK", "S"), ("SK", "S")])}
    sources = {"hourly": {"table": "hourly", "due_attribute": "REMINDER_TIMESTAMP", "recurrence": "rate(1 hour)",
                          "key": ["PK", "SK"]}}
    for stage in _stage(monkeypatch, deps, clock, sources, streams):
        use_settings(deps, past_horizon="scheduler")  # the next run, an hour on, by a schedule
        first = stage.epoch(minutes=2)
        stage.put("hourly", {"PK": "U", "SK": "R", "REMINDER_TIMESTAMP": first, "email": "hourly@example.com"})
        stage.run(minutes=5)
        assert len(emails_to("hourly@example.com")) == 1
        item = stage.get("hourly", {"PK": "U", "SK": "R"})
        assert item == {"PK": "U", "SK": "R", "REMINDER_TIMESTAMP": first + 3600, "email": "hourly@example.com"}
        stage.clock.advance(minutes=50)  # nothing happens in between: no need to step through it
        stage.run(minutes=15)
        assert len(emails_to("hourly@example.com")) == 2


# --- GET /tasks/{source}/{key} ----------------------------------------------------------------------------

def test_get_shows_a_source_items_due_time_state_and_last_outcome(stage: Stage, client: Client) -> None:
    due = stage.epoch(minutes=2)
    stage.put(APPOINTMENTS_TABLE, {"PK": "USER#ada", "SK": "REMINDER#standup", "REMINDER_TIMESTAMP": due,
                                   "email": "ada@example.com"})
    path = "/tasks/appointments/" + quote(json.dumps({"PK": "USER#ada", "SK": "REMINDER#standup"}), safe="")
    stage.run(seconds=30)
    pending = client.http.get(path)
    assert pending.status_code == 200, pending.body
    assert pending.json_body["key"] == {"PK": {"S": "USER#ada"}, "SK": {"S": "REMINDER#standup"}}
    assert (pending.json_body["task"]["status"], pending.json_body["task"]["run_at"]) == (
        "PENDING", "2026-11-22T12:02:00Z")
    stage.run(minutes=3)
    done = client.http.get(path).json_body["task"]
    assert (done["status"], done["attempts"], done["last_result"]["type"]) == ("DONE", 1, "email")


def test_a_failed_source_task_is_listed_by_its_source_and_retried_once_through_its_own_path(
        stage: Stage, client: Client, deps: Deps) -> None:
    stage.put(APPOINTMENTS_TABLE, {"PK": "USER#ada", "SK": "REMINDER#standup", "REMINDER_TIMESTAMP": stage.epoch(minutes=2),
                                   "email": "ada@example.com"})
    ses = deps.clients.ses
    use_client(deps, "ses", FlakySes(ses, failures=10**6))
    stage.run(minutes=2, seconds=30)
    use_client(deps, "ses", ses)
    [failed] = client.http.get("/tasks?status=FAILED&source=appointments").json_body["tasks"]
    assert (failed["source"], failed["attempts"]) == ("appointments", deps.settings.task_max_attempts)
    path = "/tasks/appointments/" + quote(json.dumps({"PK": "USER#ada", "SK": "REMINDER#standup"}), safe="") + "/retry"
    for expected in (202, 200):  # the same retry_id twice: one execution
        response = client.http.post(path, headers={"Content-Type": "application/json"}, body='{"retry_id": "r-1"}')
        assert response.status_code == expected, response.body
    stage.run(seconds=30)
    assert len(emails_to("ada@example.com")) == 1
    assert client.http.get("/tasks?status=FAILED&source=appointments").json_body["tasks"] == []
    [done] = client.http.get("/tasks?status=DONE&source=appointments").json_body["tasks"]
    assert done["attempts"] == 1


def test_a_sources_declared_retry_policy_gives_its_failing_item_up_after_its_retries_not_the_stages(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = {"appointments": create_table(deps, APPOINTMENTS_TABLE, [("PK", "S"), ("SK", "S")])}
    sources = {"appointments": {**SEED_SOURCES["appointments"], "retry": {"max_retries": 1}}}  # Scheduler's count
    assert deps.settings.task_max_attempts > 2
    for stage in _stage(monkeypatch, deps, clock, sources, streams):
        stage.put(APPOINTMENTS_TABLE, {"PK": "USER#ada", "SK": "REMINDER#standup",
                                       "REMINDER_TIMESTAMP": stage.epoch(minutes=2), "email": "ada@example.com"})
        ses = FlakySes(deps.clients.ses, failures=10**6)
        use_client(deps, "ses", ses)
        stage.run(minutes=2, seconds=30)
        client = stage.sim.client
        [failed] = client.http.get("/tasks?status=FAILED&source=appointments").json_body["tasks"]
        assert (failed["attempts"], ses.calls) == (2, 2)
        shown = client.http.get("/tasks/appointments/" + quote(json.dumps({"PK": "USER#ada", "SK": "REMINDER#standup"}),
                                                                safe="")).json_body["task"]
        assert (shown["status"], shown["retry"]) == ("FAILED", {"max_attempts": 2, "max_retries": 1})
        [alert] = aws.alerts()
        assert alert["subject"].endswith("failed after 2 attempts")


def test_get_of_an_unknown_source_or_a_bad_key_says_which(stage: Stage, client: Client) -> None:
    missing = client.http.get("/tasks/nope/" + quote('{"PK": "a", "SK": "b"}', safe=""))
    assert (missing.status_code, missing.json_body["field"]) == (404, "source")
    no_item = client.http.get("/tasks/appointments/" + quote('{"PK": "a", "SK": "b"}', safe=""))
    assert (no_item.status_code, no_item.json_body["field"]) == (404, "key")
    bad = client.http.get("/tasks/appointments/" + quote('{"PK": ["a"]}', safe=""))
    assert (bad.status_code, bad.json_body["field"]) == (400, "key")
    wrong = client.http.get("/tasks/appointments/" + quote('{"PK": "a"}', safe=""))
    assert (wrong.status_code, wrong.json_body["field"]) == (400, "key")  # not the table's key schema


def test_a_recurring_lazy_item_is_put_back_as_it_was_with_its_next_ttl_and_runs_again(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = {"hourly": create_table(deps, "hourly", [("email", "S")], ttl="expires_at")}
    sources = {"hourly": {"table": "hourly", "strategy": "lazy", "ttl_attribute": "expires_at",
                          "recurrence": "rate(1 hour)", "key": ["email"]}}
    for stage in _stage(monkeypatch, deps, clock, sources, streams):
        first = stage.epoch(minutes=5)
        stage.put("hourly", {"email": "hourly@example.com", "expires_at": first, "tags": {"a", "b"}})
        stage.run(minutes=10)
        assert len(emails_to("hourly@example.com")) == 1
        item = stage.get("hourly", {"email": "hourly@example.com"}) or {}
        assert (item.get("expires_at"), sorted(item.get("tags", []))) == (first + 3600, ["a", "b"])  # a set, kept
        stage.clock.advance(minutes=50)  # nothing happens in between: no need to step through it
        stage.run(minutes=10)
        assert len(emails_to("hourly@example.com")) == 2


def test_a_source_item_read_that_fails_is_redelivered_and_runs_once(
        stage: Stage, faults: Faults) -> None:
    stage.put(APPOINTMENTS_TABLE, {"PK": "USER#flaky", "SK": "R", "REMINDER_TIMESTAMP": stage.epoch(minutes=1),
                                   "email": "flaky@example.com"})
    faults.inject("dynamodb.GetItem", "error", times=2, match=lambda p: p.get("TableName") == APPOINTMENTS_TABLE)
    stage.run(minutes=10)
    assert len(emails_to("flaky@example.com")) == 1
    assert faults.injected["error"] == 2


@pytest.mark.parametrize("key", [
    "%", "%%41", "{", "[]", "null", '{"PK": {"S": ""}, "SK": {"S": "x"}}', '{"PK": {"N": "abc"}}',
    '{"PK": {"B": "!!"}}', '{"a": 1, "b": 2, "c": 3}', '{"PK": 1e400}', '{"PK": "\\u0000", "SK": "x"}',
    "x" * 5000, '{"PK": "' + "x" * 3000 + '", "SK": "y"}', '{"PK": true}', '{"PK": {"S": "a", "N": "1"}}',
    '{"PK": "\\ud800", "SK": "x"}', '{"PK": {"S": "a"}, "SK": {"S": "\\udfff"}}',  # lone surrogates: no UTF-8
    '{"PK": 1e400, "SK": "x"}', '{"PK": {"N": "Infinity"}, "SK": "x"}', '{"PK": {"B": [1]}, "SK": "x"}',
])
def test_get_of_a_source_item_never_fails_on_a_hostile_key(stage: Stage, client: Client, key: str) -> None:
    response = client.http.get("/tasks/appointments/" + quote(key, safe=""))
    assert response.status_code in (400, 404), response.body
    assert response.json_body["field"] == "key"


# --- hostile stream records -------------------------------------------------------------------------------

APPOINTMENT_KEY = {"PK": {"S": "USER#h"}, "SK": {"S": "R"}}


def _appointment(due: dict[str, Any], **extra: dict[str, Any]) -> dict[str, Any]:
    return {**APPOINTMENT_KEY, "REMINDER_TIMESTAMP": due, "email": {"S": "h@example.com"}, **extra}


@pytest.mark.parametrize(("keys", "image", "field"), [
    ({"PK": {"B": [1, 300]}, "SK": {"S": "R"}}, None, "PK"),           # binary that is not base64 text
    ({"PK": {"B": -1}, "SK": {"S": "R"}}, None, "PK"),
    ({"PK": {"N": "abc"}, "SK": {"S": "R"}}, None, "PK"),              # no number
    ({"PK": {"S": ""}, "SK": {"S": "R"}}, None, "PK"),                 # DynamoDB has no empty key
    ({"PK": {"S": 5}, "SK": {"S": "R"}}, None, "PK"),
    (APPOINTMENT_KEY, _appointment({"N": "Infinity"}), "REMINDER_TIMESTAMP"),
    (APPOINTMENT_KEY, _appointment({"N": "1e400"}), "REMINDER_TIMESTAMP"),   # beyond DynamoDB's numbers
    (APPOINTMENT_KEY, _appointment({"N": "1e-400"}), "REMINDER_TIMESTAMP"),
    (APPOINTMENT_KEY, _appointment({"N": "1" * 45}), "REMINDER_TIMESTAMP"),  # over 38 digits
    (APPOINTMENT_KEY, _appointment({"N": "1795352400"}, note={"N": "NaN"}), "note"),
])
def test_a_hostile_record_of_a_source_is_dead_lettered_once_naming_the_source_and_field(
        stage: Stage, aws: Aws, keys: dict[str, Any], image: dict[str, Any] | None, field: str) -> None:
    hostile = events.stream_record("INSERT", {}, new_image=image or _appointment({"N": "1795352400"}),
                                   sequence_number="100", source_arn=stage.sim.deps.settings.source(
                                       "appointments").stream_arn)  # type: ignore[union-attr]
    hostile["dynamodb"]["Keys"] = keys
    if image is None:
        hostile["dynamodb"]["NewImage"].update(keys)
    good = events.stream_record("INSERT", {"PK": {"S": "USER#ok"}, "SK": {"S": "R"}}, sequence_number="200",
                                new_image=_appointment({"N": str(stage.epoch(minutes=1))},
                                                       PK={"S": "USER#ok"}))
    response = stage.sim.client.lambda_.invoke("source_appointments", events.stream_event(hostile, good)).payload
    assert response == {"batchItemFailures": []}, response
    [letter] = [json.loads(m["Body"]) for m in aws.drain(stage.deps.settings.task_dlq)]
    assert "task source 'appointments'" in letter["reason"] and repr(field) in letter["reason"], letter["reason"]
    assert len(aws.sent(stage.deps.settings.due_queue)) == 1  # the good record went on


def _takes_as_a_task(source: str, key: dict[str, Any]) -> bool:
    try:
        TaskKey.of_source(source, key)
    except InvalidTask:
        return False
    return True


def test_the_longest_key_taken_as_a_task_runs_even_when_its_image_is_kept_in_the_state_table(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = {"big": create_table(deps, "big", [("id", "S")], ttl="expires_at")}
    sources = {"big": {"table": "big", "strategy": "lazy", "ttl_attribute": "expires_at", "key": ["id"],
                       "action": {"type": "email", "to": "{owner}", "subject": "Due", "body": "It is time."}}}
    for stage in _stage(monkeypatch, deps, clock, sources, streams):
        longest = "k" * max(n for n in range(1900, 2100) if _takes_as_a_task("big", {"id": {"S": "k" * n}}))
        item = {"id": longest, "expires_at": stage.epoch(minutes=-1), "owner": "big@example.com",
                "blob": "x" * 300_000}  # the image goes to the state table, not in the due message
        ttl_remove = events.stream_record(
            "REMOVE", ddb.serialize({"id": longest}), old_image=ddb.serialize(item), sequence_number="300",
            source_arn=streams["big"], user_identity=events.TTL_USER_IDENTITY)
        assert stage.sim.client.lambda_.invoke("source_big", events.stream_event(ttl_remove)).payload == {
            "batchItemFailures": []}
        stage.run(minutes=5)
        assert aws.drain(deps.settings.task_dlq) == []
        assert len(emails_to("big@example.com")) == 1


@pytest.mark.parametrize("spelled", ['{"id": 42}', '{"id": 42.0}', '{"id": {"N": "42.0"}}', '{"id": {"N": "4.2E1"}}',
                                     '{"id": {"N": "042"}}'])
def test_get_of_a_number_keyed_item_finds_its_task_however_the_number_is_spelled(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, spelled: str) -> None:
    streams = {"numbered": create_table(deps, "numbered", [("id", "N")])}
    sources = {"numbered": {"table": "numbered", "due_attribute": "due_at", "action": KEYED}}
    for stage in _stage(monkeypatch, deps, clock, sources, streams):
        stage.put("numbered", {"id": 42, "due_at": stage.epoch(minutes=1), "owner": "n@example.com"})
        stage.run(minutes=3)
        shown = stage.sim.client.http.get("/tasks/numbered/" + quote(spelled, safe=""),
                                          headers={"Authorization": "Bearer x"})
        assert shown.status_code == 200, shown.body
        assert shown.json_body["key"] == {"id": {"N": "42"}}
        assert (shown.json_body["task"]["status"], shown.json_body["task"]["attempts"]) == ("DONE", 1)


def test_an_interval_items_own_due_time_within_its_bucket_runs_it_once_at_that_time(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = {"slots": create_table(deps, SLOTS_TABLE, [("id", "S")], index=("taskDateTime-index", "taskDateTime"))}
    sources = {"slots": {**SEED_SOURCES["slots"], "due_attribute": "at",  # the index projects the keys only
                         "action": {"type": "email", "to": "{email}", "subject": "Slot", "body": "It is {at}."}}}
    for stage in _stage(monkeypatch, deps, clock, sources, streams):
        due = stage.clock.now + timedelta(minutes=5, seconds=30)
        stage.put(SLOTS_TABLE, {"id": "slot-at", "at": due.isoformat(), "email": "at@example.com"})
        stage.run(minutes=5, seconds=29)
        assert emails_to("at@example.com") == []  # never early
        stage.run(minutes=5)
        assert len(emails_to("at@example.com")) == 1


@pytest.mark.parametrize("kind", ["lost", "retried"])
@pytest.mark.parametrize("operation", ["dynamodb.UpdateItem", "dynamodb.PutItem"])
def test_a_write_to_a_users_item_whose_answer_was_lost_is_known_as_ours_and_the_item_runs_once_a_time(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, faults: Faults,
        operation: str, kind: Kind) -> None:
    # UpdateItem: the TTL the stream writes (the due time lives in "due"); PutItem: the item put back after it ran
    streams = {"hourly": create_table(deps, "hourly", [("email", "S")], ttl="expires_at")}
    sources = {"hourly": {"table": "hourly", "strategy": "lazy", "ttl_attribute": "expires_at", "due_attribute": "due",
                          "recurrence": "rate(1 hour)", "key": ["email"]}}
    for stage in _stage(monkeypatch, deps, clock, sources, streams):
        first = stage.epoch(minutes=5)
        stage.put("hourly", {"email": "hourly@example.com", "due": first})
        fault = faults.inject(operation, kind, match=lambda p: p.get("TableName") == "hourly")
        stage.run(minutes=10)
        assert fault.hits == 1
        assert len(emails_to("hourly@example.com")) == 1
        assert stage.get("hourly", {"email": "hourly@example.com"}) == {
            "email": "hourly@example.com", "due": first + 3600, "expires_at": first + 3600}
        stage.clock.advance(minutes=50)  # nothing happens in between: no need to step through it
        stage.run(minutes=10)
        assert len(emails_to("hourly@example.com")) == 2
        assert aws.drain(deps.settings.task_dlq) == []


# --- a lazy item without a due time is no task; a finished or cancelled task keeps its shape ---------------------

def _session_path(email: str) -> str:
    return "/tasks/sessions/" + quote(json.dumps({"email": email}), safe="")


def test_a_lazy_sources_item_that_never_expires_is_no_task_not_a_dead_letter(
        stage: Stage, aws: Aws, client: Client, error_lines: list[str]) -> None:
    stage.put(SESSIONS_TABLE, {"email": "forever@example.com", "token": "t"})  # no expires_at: never expires
    stage.run(minutes=2)
    stage.delete(SESSIONS_TABLE, {"email": "forever@example.com"})
    stage.run(minutes=1)
    assert aws.drain(stage.deps.settings.task_dlq) == []
    assert error_lines == []
    assert emails_to("forever@example.com") == []
    assert client.http.get(_session_path("forever@example.com")).status_code == 404  # never a task


def test_removing_a_lazy_items_ttl_cancels_its_task_and_a_later_delete_runs_nothing(
        stage: Stage, aws: Aws, client: Client, error_lines: list[str]) -> None:
    stage.put(SESSIONS_TABLE, {"email": "kept@example.com", "expires_at": stage.epoch(minutes=10)})
    stage.run(minutes=1)
    stage.deps.clients.dynamodb.update_item(  # how DynamoDB's guide says to stop an item's expiry
        TableName=SESSIONS_TABLE, Key=ddb.serialize({"email": "kept@example.com"}), UpdateExpression="REMOVE expires_at")
    removed_at = stage.clock.now
    stage.run(minutes=1)
    seen_by = stage.clock.now
    stage.clock.advance(minutes=10)  # past its old expiry (12:10): nothing else happens in between
    stage.run(minutes=2)
    assert stage.sim.source_ttl_deletes == 0  # the TTL's delete never comes
    shown = client.http.get(_session_path("kept@example.com")).json_body["task"]
    assert (shown["status"], shown["strategy"], shown["action"]["to"]) == ("CANCELLED", "lazy", "kept@example.com")
    assert removed_at <= parse_due(shown["finished_at"]) <= seen_by
    stage.delete(SESSIONS_TABLE, {"email": "kept@example.com"})  # a user's delete of the item, later
    stage.run(minutes=2)
    assert emails_to("kept@example.com") == []
    assert aws.drain(stage.deps.settings.task_dlq) == []
    assert error_lines == []
    assert client.http.get(_session_path("kept@example.com")).json_body["task"]["status"] == "CANCELLED"


def test_removing_a_recurring_lazy_items_ttl_cancels_its_pending_next_run(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, client: Client) -> None:
    streams = {"hourly": create_table(deps, "hourly", [("email", "S")], ttl="expires_at")}
    sources = {"hourly": {"table": "hourly", "strategy": "lazy", "ttl_attribute": "expires_at",
                          "recurrence": "rate(1 hour)", "key": ["email"]}}
    for stage in _stage(monkeypatch, deps, clock, sources, streams):
        stage.put("hourly", {"email": "hourly@example.com", "expires_at": stage.epoch(minutes=5)})
        stage.run(minutes=10)
        path = "/tasks/hourly/" + quote("hourly@example.com", safe="")
        assert client.http.get(path).json_body["task"]["status"] == "PENDING"  # its next run
        deps.clients.dynamodb.update_item(TableName="hourly", Key=ddb.serialize({"email": "hourly@example.com"}),
                                          UpdateExpression="REMOVE expires_at")
        stage.run(minutes=1)
        stage.clock.advance(minutes=55)  # past its next run (13:05): nothing else happens in between
        stage.run(minutes=2)
        assert len(emails_to("hourly@example.com")) == 1
        assert client.http.get(path).json_body["task"]["status"] == "CANCELLED"
        assert aws.drain(deps.settings.task_dlq) == []


@pytest.mark.parametrize("ttl", ["tomorrow", -5, 10**13])
def test_a_lazy_items_ttl_present_but_wrong_is_still_dead_lettered_once(stage: Stage, aws: Aws, ttl: Any) -> None:
    stage.put(SESSIONS_TABLE, {"email": "wrong@example.com", "expires_at": ttl})
    stage.run(minutes=2)
    [letter] = [json.loads(m["Body"]) for m in aws.drain(stage.deps.settings.task_dlq)]
    assert "expires_at" in letter["reason"], letter["reason"]


def test_a_lazy_sources_task_keeps_its_strategy_and_action_once_it_ran(stage: Stage, client: Client) -> None:
    stage.put(SESSIONS_TABLE, {"email": "ran@example.com", "expires_at": stage.epoch(minutes=5)})
    stage.run(seconds=30)
    pending = client.http.get(_session_path("ran@example.com")).json_body["task"]
    stage.run(minutes=6)
    assert len(emails_to("ran@example.com")) == 1
    done = client.http.get(_session_path("ran@example.com")).json_body["task"]
    assert done["status"] == "DONE"
    assert (done["strategy"], done["action"]) == (pending["strategy"], pending["action"]) == (
        "lazy", pending["action"])
    assert done["action"]["to"] == "ran@example.com"


def test_a_users_delete_of_a_source_item_shows_it_cancelled_and_when(stage: Stage, client: Client) -> None:
    stage.put(APPOINTMENTS_TABLE, {"PK": "USER#gone", "SK": "R", "REMINDER_TIMESTAMP": stage.epoch(minutes=40),
                                   "email": "gone@example.com"})
    stage.run(minutes=1)
    stage.delete(APPOINTMENTS_TABLE, {"PK": "USER#gone", "SK": "R"})
    deleted_at = stage.clock.now
    stage.run(minutes=1)
    response = client.http.get("/tasks/appointments/" + quote(json.dumps({"PK": "USER#gone", "SK": "R"}), safe=""))
    assert response.status_code == 200, response.body
    task = response.json_body["task"]
    assert (task["status"], task["strategy"], task["action"]["to"]) == ("CANCELLED", "exact", "gone@example.com")
    assert deleted_at <= parse_due(task["finished_at"]) <= stage.clock.now
    stage.clock.advance(minutes=40)  # past its due time: nothing else happens in between
    stage.run(minutes=2)
    assert emails_to("gone@example.com") == []


def test_an_item_deleted_and_written_again_with_the_same_due_time_runs_once(stage: Stage, client: Client) -> None:
    # Some programs change an item by deleting it and writing it again: the cancel was of the deleted one.
    item = {"PK": "USER#again", "SK": "R", "REMINDER_TIMESTAMP": stage.epoch(minutes=3), "email": "again@example.com"}
    path = "/tasks/appointments/" + quote(json.dumps({"PK": "USER#again", "SK": "R"}), safe="")
    stage.put(APPOINTMENTS_TABLE, item)
    stage.run(seconds=30)
    stage.delete(APPOINTMENTS_TABLE, {"PK": "USER#again", "SK": "R"})
    stage.run(seconds=30)
    assert client.http.get(path).json_body["task"]["status"] == "CANCELLED"
    stage.put(APPOINTMENTS_TABLE, item)
    stage.run(seconds=30)
    assert client.http.get(path).json_body["task"]["status"] == "PENDING"
    stage.run(minutes=3)
    assert len(emails_to("again@example.com")) == 1
    assert client.http.get(path).json_body["task"]["status"] == "DONE"


def test_an_item_filed_into_an_interval_sources_running_bucket_after_its_first_tick_still_runs(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = {"slots": create_table(deps, SLOTS_TABLE, [("id", "S")], index=("taskDateTime-index", "taskDateTime"))}
    sources = {"slots": {**SEED_SOURCES["slots"], "due_attribute": "at", "bucket_minutes": 5}}
    for stage in _stage(monkeypatch, deps, clock, sources, streams):
        stage.run(seconds=30)  # the 12:00 bucket's first tick, at 12:00:00
        due = stage.clock.now + timedelta(minutes=3)  # 12:03:30: in the running bucket, minutes ahead
        stage.put(SLOTS_TABLE, {"id": "late-filed", "at": due.isoformat(), "email": "late@example.com",
                                "taskDateTime": "2026-11-22#12:00"})
        stage.run(minutes=5, seconds=30)
        assert len(emails_to("late@example.com")) == 1


def test_a_source_key_names_one_task_whatever_the_order_of_its_attributes(
        aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = {"appointments": create_table(deps, APPOINTMENTS_TABLE, [("PK", "S"), ("SK", "S")])}
    item = {"PK": "USER#ada", "SK": "REMINDER#standup", "REMINDER_TIMESTAMP": int(clock.now.timestamp()) + 120,
            "email": "ada@example.com"}
    orders = [{"PK": item["PK"], "SK": item["SK"]}, {"SK": item["SK"], "PK": item["PK"]}]
    for stage in _stage(monkeypatch, deps, clock, {"appointments": SEED_SOURCES["appointments"]}, streams):
        stage.put(APPOINTMENTS_TABLE, item)
        client = stage.sim.client
        for i, keys in enumerate(orders):  # the record and its redelivery, its key's attributes in either order
            record = events.stream_record("INSERT", ddb.serialize(keys), new_image=ddb.serialize(item),
                                          sequence_number=f"10000000000000000000{i + 1}",
                                          source_arn=streams["appointments"], created=clock.now)
            client.lambda_.invoke("source_appointments", events.stream_event(record))
        messages = aws.sent(deps.settings.due_queue)
        assert {DueMessage.from_json(body).key for body, _ in messages} == {
            TaskKey.of_source("appointments", ddb.serialize(order)) for order in orders}
        clock.advance(minutes=2)
        for body, _ in messages:
            assert deliver(client, body) == set()
        shown = [client.http.get("/tasks/appointments/" + quote(json.dumps(order), safe="")).json_body["task"]
                 for order in orders]
        assert len(emails_to("ada@example.com")) == 1
        assert [(task["id"], task["status"], task["attempts"]) for task in shown] == [(shown[0]["id"], "DONE", 1)] * 2

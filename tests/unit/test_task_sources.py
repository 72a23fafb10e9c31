"""Task sources (TASK_SOURCES, TASK_SOURCES_FILE): parsing and validation at import, each error naming the source and the field."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from chalicelib.settings import Settings, SettingsError, SourceSettingsError
from chalicelib.sources import MissingAttribute, SourceError, parse_sources, render, template_names
from chalicelib.tasks.model import RetryPolicy, TaskKey, task_from_source_item

APPOINTMENTS = {"table": "appointments", "strategy": "exact", "due_attribute": "REMINDER_TIMESTAMP",
                "action": {"type": "email", "to": "{email}", "subject": "Reminder",
                           "body": "Your appointment {SK} is at {REMINDER_TIMESTAMP}."}}
SESSIONS = {"table": "sessions", "strategy": "lazy", "ttl_attribute": "expires_at", "key": ["email"]}
SLOTS = {"table": "slots", "strategy": "interval", "bucket_index": "taskDateTime-index",
         "bucket_attribute": "taskDateTime", "bucket_format": "%Y-%m-%d#%H:%M", "key": ["id"]}
STREAM = "arn:aws:dynamodb:us-east-1:123456789012:table/appointments/stream/2026-01-01T00:00:00.000"


def test_each_seed_shape_is_a_valid_source() -> None:
    sources = parse_sources(json.dumps({"appointments": APPOINTMENTS, "sessions": SESSIONS, "slots": SLOTS}),
                            json.dumps({"appointments": STREAM}))
    by_name = {s.name: s for s in sources}
    assert by_name["appointments"].due_attribute == "REMINDER_TIMESTAMP"
    assert by_name["appointments"].stream_arn == STREAM
    assert by_name["appointments"].function_name == "source_appointments"
    assert by_name["sessions"].action is None  # the stage's default email to {email}
    assert by_name["slots"].bucket_label(datetime(2026, 11, 23, 12, 44, tzinfo=UTC)) == "2026-11-23#12:44"
    assert by_name["slots"].bucket_start("2026-11-23#12:44") == datetime(2026, 11, 23, 12, 44, tzinfo=UTC)


def test_settings_read_the_sources_from_the_stage() -> None:
    settings = Settings.from_env({"TASK_SOURCES": json.dumps({"appointments": APPOINTMENTS})})
    assert [s.name for s in settings.task_sources] == ["appointments"]
    assert settings.source("appointments") is not None
    assert settings.source("nope") is None
    assert Settings.from_env({}).task_sources == ()


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = {**base, **changes}
    return {k: v for k, v in out.items() if v is not None}


@pytest.mark.parametrize(("name", "spec", "field"), [
    ("appointments", _with(APPOINTMENTS, table=None), "table"),
    ("appointments", _with(APPOINTMENTS, table="x"), "table"),
    ("appointments", _with(APPOINTMENTS, strategy="soon"), "strategy"),
    ("appointments", _with(APPOINTMENTS, due_attribute=None), "due_attribute"),
    ("appointments", _with(APPOINTMENTS, due_attribute="bad name"), "due_attribute"),
    ("appointments", _with(APPOINTMENTS, action={"type": "fax"}), "action.type"),
    ("appointments", _with(APPOINTMENTS, action={"type": "email", "to": "{email}", "subject": "s"}), "action.body"),
    ("appointments", _with(APPOINTMENTS, action={"type": "email", "to": "{email", "subject": "s", "body": "b"}),
     "action.to"),
    ("appointments", _with(APPOINTMENTS, action={"type": "email", "to": "not-an-address", "subject": "s",
                                                  "body": "b"}), "action.to"),
    ("appointments", _with(APPOINTMENTS, action={"type": "email", "to": "{email}", "subject": "s", "body": "b",
                                                  "cc": "x"}), "action.cc"),
    ("appointments", _with(APPOINTMENTS, action={"type": "sqs", "queue_url": "{q}", "message": "{x y}"}),
     "action.message"),
    ("appointments", _with(APPOINTMENTS, action={"type": "stepfunctions", "state_machine_arn": "{arn}", "input": {},
                                                  "target_deduplicates": "{flag}"}), "action.target_deduplicates"),
    ("appointments", _with(APPOINTMENTS, recurrence="every day"), "recurrence"),
    ("appointments", _with(APPOINTMENTS, timezone="Mars/Olympus"), "timezone"),
    ("appointments", _with(APPOINTMENTS, retry={"max_attempts": 0}), "retry.max_attempts"),
    ("appointments", _with(APPOINTMENTS, retry={"max_attempts": 2, "max_age_seconds": 30}), "retry.max_age_seconds"),
    ("appointments", _with(APPOINTMENTS, retry={"attempts": 2}), "retry"),
    ("appointments", _with(APPOINTMENTS, retry=2), "retry"),
    ("appointments", _with(APPOINTMENTS, colour="blue"), "colour"),
    ("appointments", _with(APPOINTMENTS, enable_stream="yes"), "enable_stream"),
    ("appointments", _with(APPOINTMENTS, ttl_attribute="expires_at"), "ttl_attribute"),
    ("appointments", _with(APPOINTMENTS, bucket_index="i"), "bucket_index"),
    ("sessions", _with(SESSIONS, ttl_attribute=None), "ttl_attribute"),
    ("sessions", _with(SESSIONS, key=None), "key"),
    ("appointments", _with(APPOINTMENTS, recurrence="rate(1 day)"), "key"),
    ("slots", _with(SLOTS, bucket_index=None), "bucket_index"),
    ("slots", _with(SLOTS, bucket_attribute=None), "bucket_attribute"),
    ("slots", _with(SLOTS, key=None), "key"),
    ("slots", _with(SLOTS, key=["a", "b", "c"]), "key"),
    ("slots", _with(SLOTS, bucket_format="%Y-%m-%d"), "bucket_format"),
    ("slots", _with(SLOTS, bucket_minutes=0), "bucket_minutes"),
    ("tasks", APPOINTMENTS, "name"),
    ("Bad-Name", APPOINTMENTS, "name"),
    ("appointments", ["not", "an", "object"], "source"),
])
def test_a_bad_source_fails_at_import_naming_the_source_and_the_field(name: str, spec: Any, field: str) -> None:
    with pytest.raises(SourceSettingsError) as error:
        Settings.from_env({"TASK_SOURCES": json.dumps({name: spec})})
    assert error.value.source == name
    assert error.value.field == field
    assert repr(name) in str(error.value) and repr(field) in str(error.value)


def test_a_sources_action_keeps_target_deduplicates_as_a_boolean_not_a_template() -> None:
    action = {"type": "webhook", "url": "https://hooks.example.com/{id}", "secret": "ssm:/s", "body": "{{}}",
              "target_deduplicates": True}
    [source] = parse_sources(json.dumps({"appointments": _with(APPOINTMENTS, action=action)}), "{}")
    assert source.action == action


def test_a_sources_retry_policy_is_read_once_and_every_item_of_it_takes_it_over_the_stages() -> None:
    settings = Settings.from_env({"TASK_SOURCES": json.dumps({
        "appointments": _with(APPOINTMENTS, retry={"max_attempts": 2}), "sessions": SESSIONS})})
    [appointments, sessions] = settings.task_sources
    assert (appointments.retry, sessions.retry) == ({"max_attempts": 2}, None)
    item = {"PK": "USER#ada", "SK": "REMINDER#1", "REMINDER_TIMESTAMP": 1795000000, "email": "ada@example.com",
            "retry": {"max_attempts": 9}}  # the user's data: never the task's policy
    task = task_from_source_item(item, TaskKey.of_source("appointments", {"PK": {"S": "USER#ada"},
                                                                          "SK": {"S": "REMINDER#1"}}),
                                 appointments, settings)
    assert task.retry_policy(settings) == RetryPolicy(2, settings.task_retry_max_age_seconds)
    lazy = task_from_source_item({"email": "ada@example.com", "expires_at": 1795000000},
                                 TaskKey.of_source("sessions", {"email": {"S": "ada@example.com"}}), sessions, settings)
    assert lazy.retry_policy(settings) == RetryPolicy(settings.task_max_attempts, settings.task_retry_max_age_seconds)


def test_a_bad_sources_retry_says_what_it_must_be() -> None:
    with pytest.raises(SourceSettingsError) as error:
        Settings.from_env({"TASK_SOURCES": json.dumps({"appointments": _with(APPOINTMENTS, retry={"max_retries": 186})})})
    assert str(error.value) == ("TASK_SOURCES is invalid: task source 'appointments', field 'retry.max_retries': "
                                "must be a whole number from 0 to 185, got 186")
    with pytest.raises(SourceSettingsError) as error:
        Settings.from_env({"TASK_SOURCES": json.dumps({"appointments": _with(APPOINTMENTS, retry={
            "max_retries": 2, "max_attempts": 2})})})
    assert "field 'retry.max_retries': must be max_attempts - 1 (1), got 2" in str(error.value)


def test_a_source_declares_scheduler_s_185_retries_as_186_attempts() -> None:
    settings = Settings.from_env({"TASK_SOURCES": json.dumps({"appointments": _with(APPOINTMENTS, retry={
        "max_retries": 185, "max_age_seconds": 600})})})
    [appointments] = settings.task_sources
    assert appointments.retry == {"max_attempts": 186, "max_age_seconds": 600}


def test_two_sources_may_not_share_a_table() -> None:
    with pytest.raises(SourceError) as error:
        parse_sources(json.dumps({"a": APPOINTMENTS, "b": APPOINTMENTS}))
    assert (error.value.source, error.value.field) == ("b", "table")


@pytest.mark.parametrize(("text", "streams", "field", "says"), [
    ("[1]", "", "TASK_SOURCES", "must be a JSON object of source name -> source"),
    ("{", "", "TASK_SOURCES", "is not JSON"),
    ('{"appointments": {}}', "[]", "TASK_SOURCE_STREAMS", "must be a JSON object of source name -> stream ARN"),
    ('{"appointments": {}}', "{", "TASK_SOURCE_STREAMS", "is not JSON")])
def test_task_sources_and_their_streams_must_be_json_objects(text: str, streams: str, field: str, says: str) -> None:
    with pytest.raises(SourceError) as error:
        parse_sources(text, streams)
    assert (error.value.source, error.value.field) == ("*", field)
    assert says in str(error.value)


def test_a_stream_arn_must_name_a_declared_source_and_be_a_stream() -> None:
    with pytest.raises(SourceError) as error:
        parse_sources(json.dumps({"appointments": APPOINTMENTS}), json.dumps({"other": STREAM}))
    assert (error.value.source, error.value.field) == ("other", "TASK_SOURCE_STREAMS")
    with pytest.raises(SourceError) as error:
        parse_sources(json.dumps({"appointments": APPOINTMENTS}), json.dumps({"appointments": "arn:nope"}))
    assert (error.value.source, error.value.field) == ("appointments", "stream_arn")


@pytest.mark.parametrize(("template", "item", "expected"), [
    ("{email}", {"email": "a@example.com"}, "a@example.com"),
    ("Due {REMINDER_TIMESTAMP} for {SK}", {"REMINDER_TIMESTAMP": 1700000000, "SK": "APPT#1"},
     "Due 1700000000 for APPT#1"),
    ("{{literal}} {n}", {"n": True}, "{literal} true"),
    ("{tags}", {"tags": {"b": 1, "a": [2]}}, '{"a": [2], "b": 1}'),
])
def test_templates_render_item_attributes(template: str, item: dict[str, Any], expected: str) -> None:
    assert render(template, item) == expected


def test_a_template_naming_a_missing_attribute_says_which() -> None:
    with pytest.raises(MissingAttribute) as error:
        render("to {email}", {"name": "x"})
    assert error.value.name == "email"


@pytest.mark.parametrize("template", ["{", "}", "{a b}", "{}", "{0}", "{x[0]}"])
def test_malformed_templates_are_refused(template: str) -> None:
    with pytest.raises(ValueError):
        template_names(template)


# --- TASK_SOURCES_FILE: a JSON file under chalicelib/, packaged with the app -------------------------------------

SEEDS_FILE = "task_sources/seeds.json"  # chalicelib/task_sources/seeds.json: docs/task-sources.md's seeds
CHALICELIB = Path(__file__).resolve().parents[2] / "chalicelib"


def test_a_stage_declares_its_sources_in_a_file_read_by_the_variables_parser() -> None:
    from_file = Settings.from_env({"TASK_SOURCES_FILE": SEEDS_FILE})
    assert from_file.task_sources == parse_sources((CHALICELIB / SEEDS_FILE).read_text())
    assert [s.name for s in from_file.task_sources] == ["appointments", "sessions", "slots"]
    assert from_file.task_sources_file == SEEDS_FILE


def test_the_seeds_file_is_the_declaration_docs_task_sources_shows() -> None:
    page = (CHALICELIB.parent / "docs" / "task-sources.md").read_text()
    shown = page.split("`chalicelib/task_sources/seeds.json`:\n\n```json\n", 1)[1].split("```", 1)[0]
    assert json.loads(shown) == json.loads((CHALICELIB / SEEDS_FILE).read_text())


def test_the_variable_and_the_file_declare_sources_together_but_never_one_twice() -> None:
    both = Settings.from_env({"TASK_SOURCES_FILE": SEEDS_FILE, "TASK_SOURCES": json.dumps({
        "orders": _with(APPOINTMENTS, table="orders")})})
    assert [s.name for s in both.task_sources] == ["orders", "appointments", "sessions", "slots"]
    with pytest.raises(SourceSettingsError) as error:
        Settings.from_env({"TASK_SOURCES_FILE": SEEDS_FILE, "TASK_SOURCES": json.dumps({
            "sessions": _with(SESSIONS, table="other_sessions")})})
    assert (error.value.name, error.value.source, error.value.field) == ("TASK_SOURCES_FILE", "sessions", "name")
    assert str(error.value) == ("TASK_SOURCES_FILE (chalicelib/task_sources/seeds.json) is invalid: task source "
                                "'sessions', field 'name': is declared in both TASK_SOURCES and "
                                "chalicelib/task_sources/seeds.json: declare it once")
    with pytest.raises(SourceSettingsError) as error:  # one source per table, wherever each is declared
        Settings.from_env({"TASK_SOURCES_FILE": SEEDS_FILE, "TASK_SOURCES": json.dumps({"mine": SLOTS})})
    assert (error.value.source, error.value.field, error.value.value) == (
        "slots", "table", "chalicelib/task_sources/seeds.json")


def test_a_bad_source_in_the_file_is_refused_naming_the_file_the_source_and_the_field() -> None:
    text = json.dumps({"appointments": APPOINTMENTS, "slots": _with(SLOTS, key=None)})
    with pytest.raises(SourceError) as error:
        parse_sources("", "", text, "task_sources/prod.json")
    assert (error.value.source, error.value.field, error.value.origin) == (
        "slots", "key", "chalicelib/task_sources/prod.json")
    refused = SourceSettingsError(error.value)
    assert (refused.name, refused.value, refused.source, refused.field) == (
        "TASK_SOURCES_FILE", "chalicelib/task_sources/prod.json", "slots", "key")
    assert str(refused).startswith("TASK_SOURCES_FILE (chalicelib/task_sources/prod.json) is invalid: task source "
                                   "'slots', field 'key': is required for an interval source")
    with pytest.raises(SourceError) as error:
        parse_sources("", "", "{", "task_sources/prod.json")
    assert (error.value.field, error.value.origin) == ("TASK_SOURCES_FILE", "chalicelib/task_sources/prod.json")
    assert "is not JSON" in str(error.value)


@pytest.mark.parametrize(("path", "says"), [
    ("task_sources/none.json", "there is no file chalicelib/task_sources/none.json"),
    ("../app.py", "relative to chalicelib/, inside it"),
    ("/etc/sources.json", "relative to chalicelib/, inside it"),
    ("task_sources/../../requirements.json", "relative to chalicelib/, inside it"),
    ("settings.py", "relative to chalicelib/, inside it")])
def test_a_file_path_outside_chalicelib_or_missing_is_refused_at_import(path: str, says: str) -> None:
    with pytest.raises(SettingsError) as error:
        Settings.from_env({"TASK_SOURCES_FILE": path})
    assert error.value.name == "TASK_SOURCES_FILE" and error.value.value == path
    assert says in str(error.value)

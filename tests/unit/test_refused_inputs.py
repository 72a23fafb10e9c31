"""Values AWS would refuse when a task runs (SES, SQS, SNS, the time zone database) and due times before the
first second of 1970 are refused where a task is read -- the API's body and the stream's items alike -- naming
the field; the OpenAPI document refuses each of them too, and what AWS takes stays accepted."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from chalicelib.settings import Settings
from chalicelib.sources import SourceError, parse_sources
from chalicelib.tasks import items
from chalicelib.tasks.model import InvalidTask, parse_due, task_from_item
from tests.functional.openapi_support import load_document, request_problems

SETTINGS = Settings.from_env({})
DOCUMENT = load_document()
RUN_AT = "2026-11-22T12:10:00Z"
EMAIL = {"type": "email", "to": "ada@example.com", "subject": "Standup", "body": "In five minutes."}
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
TOPIC = "arn:aws:sns:us-east-1:123456789012:orders"
CRON = "cron(0 9 * * ? *)"


def email(**changes: str) -> dict[str, str]:
    return {**EMAIL, **changes}


# (field, a task body's changes): each a value AWS would refuse when the task runs.
REFUSED_BY_AWS: list[tuple[str, dict[str, Any]]] = [
    *[("action.to", {"action": email(to=to)}) for to in (
        "ada\x00@example.com", "ada\x01@example.com", "ada\x7f@example.com", "ada\x9b@example.com",
        "ada@exa\x00mple.com", "ad\u00e1@example.com")],  # SES takes 7-bit addresses only
    *[("action.subject", {"action": email(subject=subject)}) for subject in (
        "Standup\x85now", "Standup\u2028now", "Standup\u2029now", "Standup\x00", "Standup\x1b[31m", "Standup\x7f",
        "Standup\x9b")],
    *[("action.message", {"action": {"type": "sqs", "queue_url": QUEUE, "message": message}}) for message in (
        "m\x00", "m\ufffe", "m\uffff", "m\x08", "m\x0b", "m\x1f")],
    *[("action.message", {"action": {"type": "sns", "topic_arn": TOPIC, "message": message}}) for message in (
        "m\x00", "m\ufffe")],
    *[("timezone", {"timezone": zone, "recurrence": CRON}) for zone in (
        "localtime", "Factory", "posixrules", "posix/Europe/Paris", "right/Europe/Paris", "europe/paris")],
]
IDS = [ascii(changes)[:70] for _, changes in REFUSED_BY_AWS]

# What AWS takes, refused by no rule above.
TAKEN: list[dict[str, Any]] = [
    {"action": email(to="o'brien+tag@sub.example.co.uk", subject="Standup \u00e9t\u00e9 \U0001f600 \u00a0")},
    {"action": {"type": "sqs", "queue_url": QUEUE, "message": "tab\there\r\nnewline \u00e9 \ud7ff \ue000 \ufffd \U0001f600"}},
    {"action": {"type": "sns", "topic_arn": TOPIC, "message": "\U0010fffd \x85 \u2028"}},
    *[{"timezone": zone, "recurrence": CRON} for zone in (
        "Europe/Paris", "America/Argentina/Buenos_Aires", "Etc/GMT+1", "EST5EDT", "UTC", "US/Eastern")],
    {"run_at": 1_800_000_000.5}, {"run_at": 1}, {"run_at": "1970-01-01T00:00:01Z"},
]


def body(**changes: Any) -> dict[str, Any]:
    return {"run_at": RUN_AT, "action": EMAIL, **changes}


@pytest.mark.parametrize("field, changes", REFUSED_BY_AWS, ids=IDS)
def test_a_value_aws_would_refuse_is_refused_naming_its_field_by_the_api_and_the_document(
        field: str, changes: dict[str, Any]) -> None:
    with pytest.raises(InvalidTask) as refused:
        items.parse_request(body(**changes), SETTINGS)
    assert refused.value.field == field
    assert request_problems(DOCUMENT, "POST", "/tasks", json.dumps(body(**changes)).encode()) != []


@pytest.mark.parametrize("field, changes", REFUSED_BY_AWS, ids=IDS)
def test_an_item_holding_a_value_aws_would_refuse_is_no_task(field: str, changes: dict[str, Any]) -> None:
    with pytest.raises(InvalidTask) as refused:
        task_from_item({"PK": "USER#ada", "SK": "REMINDER#x", **body(**changes)}, SETTINGS)
    assert refused.value.field == field


@pytest.mark.parametrize("changes", TAKEN, ids=[ascii(c)[:70] for c in TAKEN])
def test_what_aws_takes_is_still_a_task(changes: dict[str, Any]) -> None:
    items.parse_request(body(**changes), SETTINGS)
    assert request_problems(DOCUMENT, "POST", "/tasks", json.dumps(body(**changes)).encode()) == []


@pytest.mark.parametrize("zone", ["localtime", "Factory", "posix/Europe/Paris", "right/UTC"])
def test_a_task_source_declaring_a_zone_that_is_not_an_iana_name_stops_the_import(zone: str) -> None:
    declared = json.dumps({"mine": {"table": "mine", "due_attribute": "at", "recurrence": CRON, "timezone": zone,
                                    "key": ["id"]}})
    with pytest.raises(SourceError) as refused:
        parse_sources(declared)
    assert refused.value.field == "timezone"


@pytest.mark.parametrize("value", [0.5, 1e-130, Decimal("1E-130"), 0, "1970-01-01T00:00:00.5Z",
                                   "1970-01-01T00:00:00Z", "1970-01-01T01:00:00.999+01:00", float("nan")])
def test_a_due_time_before_the_first_second_of_1970_is_out_of_range_naming_it(value: Any) -> None:
    number = float(value) if isinstance(value, Decimal) else value  # as ddb.deserialize reads DynamoDB's numbers
    with pytest.raises(InvalidTask) as refused:
        parse_due(number, "REMINDER_TIMESTAMP")
    assert refused.value.field == "REMINDER_TIMESTAMP"
    assert "out of range (1970-01-01T00:00:01Z to 9999-12-31T23:59:59Z)" in refused.value.message


def test_an_interval_source_items_bucket_in_the_first_minute_of_1970_is_out_of_range() -> None:
    from chalicelib.tasks.model import TaskKey, task_from_source_item

    [source] = parse_sources(json.dumps({"slots": {
        "table": "slots", "strategy": "interval", "bucket_index": "by-slot", "bucket_attribute": "slot",
        "key": ["id"], "action": {"type": "email", "to": "{email}", "subject": "s", "body": "b"}}}))
    key = TaskKey.of_source("slots", {"id": {"S": "a"}})
    with pytest.raises(InvalidTask) as refused:
        task_from_source_item({"id": "a", "slot": "1970-01-01#00:00", "email": "ada@example.com"}, key, source,
                              SETTINGS)
    assert refused.value.field == "slot" and "out of range" in refused.value.message

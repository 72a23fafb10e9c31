"""The history's pure rules (chalicelib/tasks/history.py): bounded by entries and bytes, counted, shown with long
names; and who an operator is (chalicelib/auth.py ``caller``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from chalice.app import Request

from chalicelib.auth import caller
from chalicelib.tasks import history

DUE = datetime(2026, 11, 22, 12, 10, tzinfo=UTC)


def test_the_history_keeps_the_last_entries_within_its_bytes_and_counts_all() -> None:
    record: dict[str, Any] = {}
    for i in range(25):
        entry = history.run_entry(DUE, DUE + timedelta(seconds=i), DUE + timedelta(seconds=i, milliseconds=250), i + 1,
                                  "RETRYING", error="E" * 500, retry_at=DUE + timedelta(minutes=i))
        record.update(history.appended(record, entry))
        assert history.size(record[history.HISTORY]) <= history.MAX_BYTES
        assert len(record[history.HISTORY]) <= history.KEEP
        assert record[history.HISTORY][-1] == entry  # the newest is always kept
    shown = history.shown(record, "t")
    assert shown["total"] == 25 and shown["dropped"] == 25 - len(shown["entries"]) > 0
    assert [e["attempt"] for e in shown["entries"]] == list(range(26 - len(shown["entries"]), 26))
    assert shown["entries"][-1]["duration_ms"] == 250 and len(shown["entries"][-1]["error"]) == history.TEXT_CHARS
    small: dict[str, Any] = {}
    for _ in range(15):
        small.update(history.appended(small, history.operator_entry(history.PAUSE, "api", DUE)))
    assert (len(small[history.HISTORY]), small[history.COUNT]) == (history.KEEP, 15)


def test_an_executions_lateness_counts_from_its_own_due_time() -> None:
    retried = history.run_entry(DUE, DUE + timedelta(seconds=110), DUE + timedelta(seconds=111), 1, "DONE",
                                runs_from=DUE + timedelta(seconds=108))
    assert history.lateness_from(retried) == 2000
    assert history.lateness_from(history.run_entry(DUE, DUE + timedelta(seconds=3), DUE, 1, "DONE")) == 3000
    assert history.lateness_from(history.operator_entry(history.RETRY, "api", DUE)) is None


def request(context: dict[str, Any]) -> Request:
    return Request({"multiValueQueryStringParameters": None, "headers": {}, "pathParameters": None,
                    "requestContext": {"httpMethod": "GET", "resourcePath": "/tasks/{task_id}", **context},
                    "body": None, "isBase64Encoded": False, "stageVariables": None})


def test_the_caller_is_who_api_gateway_says_or_api() -> None:
    arn = "arn:aws:sts::123456789012:assumed-role/oncall/ada"
    assert caller(request({"identity": {"userArn": arn, "apiKeyId": "k"}})) == arn
    assert caller(request({"identity": {"userArn": None}, "authorizer": {"claims": {"cognito:username": "ada"}}})) == "ada"
    assert caller(request({"identity": {"apiKeyId": "key-1"}})) == "key-1"
    assert caller(request({"identity": {"sourceIp": "1.2.3.4"}})) == "api"
    assert caller(None) == "api"

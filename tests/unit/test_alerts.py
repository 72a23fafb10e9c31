"""SNS subjects: what SNS accepts, whatever a table name or task id holds; each alert's deduplication id."""

from __future__ import annotations

import re

import pytest

from chalicelib.alerts import dedup_id, sns_subject

VALID = re.compile(r"^[\x20-\x7e]{1,99}$")


@pytest.mark.parametrize("text", [
    "timekeeper: backup of " + "t" * 80 + " failed",   # a 255-char table name would be longer still
    "Task PK|line\nbreak failed after 3 attempts",
    "Task caf\u00e9-\u65e5\u672c failed",
    "\t\r\n",
    "x" * 99,
])
def test_every_subject_is_valid_for_sns(text: str) -> None:
    subject = sns_subject(text)
    assert VALID.match(subject), subject
    assert len(subject) < 100


def test_a_short_ascii_subject_is_unchanged() -> None:
    assert sns_subject("timekeeper: backup of orders failed") == "timekeeper: backup of orders failed"


def test_the_same_alert_has_the_same_dedup_id_and_other_alerts_other_ids() -> None:
    failed = ("timekeeper: backup of orders failed", {"run_id": "r1", "table": "orders", "reason": "gone"})
    same = ("timekeeper: backup of orders failed", {"reason": "gone", "table": "orders", "run_id": "r1"})
    others = [("timekeeper: backup of users failed", {"run_id": "r1", "table": "users", "reason": "gone"}),
              ("timekeeper: backup of orders failed", {"run_id": "r2", "table": "orders", "reason": "gone"})]
    assert dedup_id(*failed) == dedup_id(*same)
    assert len({dedup_id(*failed), *(dedup_id(*o) for o in others), dedup_id(*failed, kind="summary")}) == 4


def test_a_named_event_keeps_its_dedup_id_whatever_else_the_alert_says() -> None:
    first = dedup_id("Task t failed after 3 attempts", {"task_id": "t", "dedupe_id": "task-failed:t:2026-01-01"})
    again = dedup_id("Task t failed after 3 attempts", {"task_id": "t", "dedupe_id": "task-failed:t:2026-01-01",
                                                         "error": "another wording of the error"})
    later = dedup_id("Task t failed after 3 attempts", {"task_id": "t", "dedupe_id": "task-failed:t:2026-01-02"})
    assert first == again != later
    assert re.fullmatch(r"[0-9a-f]{32}", first)

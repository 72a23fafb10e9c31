"""Which due messages run, and what a run writes back: the executor's pure rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from chalicelib.settings import Settings
from chalicelib.tasks.executor import outcome_changes, skip_reason
from chalicelib.tasks.model import DueMessage, Status, Strategy, Task, TaskKey

SETTINGS = Settings.from_env({})
DUE = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
KEY = TaskKey("TASK#x", "TASK")


def task(status: Status = Status.PENDING, due: datetime = DUE, strategy: Strategy = Strategy.EXACT,
         **item: Any) -> Task:
    return Task(KEY, due, strategy, {"type": "email"}, status=status, item={"run_at": "x", **item})


def test_a_pending_task_at_its_time_runs() -> None:
    assert skip_reason(task(), DueMessage(KEY, DUE), None) is None


def test_a_message_for_another_time_is_skipped() -> None:
    assert skip_reason(task(due=DUE + timedelta(hours=1)), DueMessage(KEY, DUE), None) == "rescheduled"


def test_finished_tasks_are_skipped() -> None:
    for status in (Status.DONE, Status.FAILED, Status.CANCELLED):
        assert skip_reason(task(status), DueMessage(KEY, DUE), None) == status.value.lower()


def test_a_cancelled_record_stops_its_snapshot_but_not_a_later_one() -> None:
    record = {"status": "CANCELLED", "run_at": "2026-11-22T12:00:00Z"}
    assert skip_reason(task(), DueMessage(KEY, DUE, {"PK": {"S": "x"}}), record) == "cancelled"
    later = DUE + timedelta(days=1)
    assert skip_reason(task(due=later), DueMessage(KEY, later, {"PK": {"S": "x"}}), record) is None


def test_a_snapshot_already_done_is_skipped() -> None:
    record = {"status": "DONE", "run_at": "2026-11-22T12:00:00Z"}
    assert skip_reason(task(), DueMessage(KEY, DUE, {"PK": {"S": "x"}}), record) == "done"


def test_a_done_one_off_task_records_its_outcome_and_leaves_the_bucket_index() -> None:
    changes, removed = outcome_changes(task(), Status.DONE, 2, {"message_id": "m"}, None, None, DUE, SETTINGS)
    assert (changes["status"], changes["attempts"], changes["last_result"]) == ("DONE", 2, {"message_id": "m"})
    assert removed == ["due_bucket"]


def test_a_recurring_task_is_re_armed_for_its_next_time() -> None:
    nxt = DUE + timedelta(days=1)
    changes, removed = outcome_changes(task(strategy=Strategy.INTERVAL), Status.DONE, 1, {}, None, nxt, DUE,
                                       SETTINGS)
    assert (changes["status"], changes["attempts"]) == ("PENDING", 0)
    assert changes["run_at"] == "2026-11-23T12:00:00Z"
    assert changes["due_epoch"] == int(nxt.timestamp())
    assert changes["due_bucket"].startswith("2026-11-23#12:00#")
    assert removed == ["last_error"]


def test_a_failed_task_keeps_the_error() -> None:
    changes, _ = outcome_changes(task(), Status.FAILED, 3, None, "boom", None, DUE, SETTINGS)
    assert (changes["status"], changes["last_error"]) == ("FAILED", "boom")

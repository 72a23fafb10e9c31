"""Which due messages run, why a claim is refused, and what a task shows: the executor's pure rules."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chalicelib.settings import Settings
from chalicelib.tasks import items, lifecycle
from chalicelib.tasks.executor import settles_once, skip_reason
from chalicelib.tasks.model import DueMessage, Strategy, Task, TaskKey, iso, task_from_item
from chalicelib.tasks.store import Execution, due_ms, lost_reason

DUE = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
DUE_TEXT = "2026-11-22T12:00:00Z"
KEY = TaskKey("TASK#x", "TASK")
STALE = DUE.timestamp() - 300


def task(due: datetime = DUE, strategy: Strategy = Strategy.EXACT, **item: Any) -> Task:
    return Task(KEY, due, strategy, {"type": "email"}, item={"run_at": "x", **item})



def shown(task: Task, record: dict[str, Any] | None, now: datetime | None = None, lease: int = 0) -> str:
    """The status the API shows of ``task`` (``lifecycle.state_of`` at its item's due time)."""
    return lifecycle.state_of(record, iso(task.due), now, lease).value


def test_a_pending_task_at_its_time_runs() -> None:
    assert skip_reason(task(), DueMessage(KEY, DUE)) is None


def test_a_message_for_another_time_is_skipped() -> None:
    assert skip_reason(task(due=DUE + timedelta(hours=1)), DueMessage(KEY, DUE)) == "rescheduled"


def test_a_bucket_start_message_is_for_an_interval_source_task_due_later_in_that_bucket_only() -> None:
    slot = TaskKey.of_source("slots", {"id": {"S": "a"}})
    in_bucket = Task(slot, DUE + timedelta(seconds=30), Strategy.INTERVAL, {"type": "email"})
    assert skip_reason(in_bucket, DueMessage(slot, DUE), bucket_minutes=1) is None
    assert skip_reason(in_bucket, DueMessage(slot, DUE - timedelta(minutes=1)), bucket_minutes=1) == "rescheduled"
    next_bucket = replace(in_bucket, due=DUE + timedelta(seconds=90))
    assert skip_reason(next_bucket, DueMessage(slot, DUE), bucket_minutes=1) == "rescheduled"
    assert skip_reason(next_bucket, DueMessage(slot, DUE), bucket_minutes=5) is None
    exact = replace(in_bucket, strategy=Strategy.EXACT)
    assert skip_reason(exact, DueMessage(slot, DUE), bucket_minutes=1) == "rescheduled"


def test_a_status_on_the_item_is_not_read_the_record_decides() -> None:
    for own in ("DONE", "FAILED", "CANCELLED", "RUNNING", "bogus", 7):
        read = task_from_item({"PK": KEY.pk, "SK": KEY.sk, "run_at": DUE_TEXT, "email": "ada@example.com",
                               "status": own, "attempts": own}, Settings.from_env())
        assert skip_reason(read, DueMessage(KEY, DUE)) is None
        assert shown(read, None) == "PENDING"


def test_a_claim_is_refused_for_what_the_record_says() -> None:
    assert lost_reason(Execution(moved_from=DUE_TEXT), DUE_TEXT, STALE) == "rescheduled"
    assert lost_reason(Execution(recorded=lifecycle.State.CANCELLED, run_at=DUE_TEXT), DUE_TEXT, STALE) == "cancelled"
    assert lost_reason(Execution(DUE_TEXT, "RUNNING", "w", STALE + 1), DUE_TEXT, STALE) == "running"
    assert lost_reason(Execution(DUE_TEXT, "DONE", "w", STALE + 1), DUE_TEXT, STALE) == "done"
    assert lost_reason(Execution(DUE_TEXT, "FAILED", "w", STALE + 1), DUE_TEXT, STALE) == "failed"


def test_an_occurrence_older_than_the_one_claimed_last_is_superseded_a_newer_one_is_not() -> None:
    later = DUE + timedelta(minutes=1)
    claimed = Execution("2026-11-22T12:01:00Z", "DONE", "w", STALE + 1, due_ms=due_ms(later))
    assert lost_reason(claimed, DUE_TEXT, STALE, due_ms(DUE)) == "superseded"
    assert lost_reason(claimed, "2026-11-22T12:02:00Z", STALE, due_ms(later + timedelta(minutes=1))) == "changed"


def test_due_times_are_ordered_by_their_milliseconds_where_their_text_would_not_be() -> None:
    half = DUE + timedelta(milliseconds=500)
    assert DUE_TEXT > "2026-11-22T12:00:00.500Z"  # ISO text puts "." before "Z": the later time sorts first
    assert due_ms(DUE) < due_ms(half) == due_ms(half + timedelta(microseconds=999)) < due_ms(DUE + timedelta(seconds=1))


def test_a_later_cancellation_does_not_stop_an_earlier_execution_and_vice_versa() -> None:
    later = "2026-11-23T12:00:00Z"
    assert lost_reason(Execution(recorded=lifecycle.State.CANCELLED, run_at=later), DUE_TEXT, STALE) == "changed"


def test_the_status_comes_from_the_record_of_the_current_due_time() -> None:
    pending = task()
    assert shown(pending, None) == "PENDING"
    running = {"exec_due": DUE_TEXT, "exec_state": "RUNNING", "status": "PENDING"}
    assert shown(pending, running) == "RUNNING"
    done = {"exec_due": DUE_TEXT, "exec_state": "DONE", "status": "DONE"}
    assert shown(pending, done) == "DONE"
    recurring_done = {"exec_due": DUE_TEXT, "exec_state": "DONE", "status": "PENDING"}
    assert shown(pending, recurring_done) == "PENDING"
    an_earlier_run = {"exec_due": "2026-11-21T12:00:00Z", "exec_state": "DONE", "status": "DONE"}
    assert shown(pending, an_earlier_run) == "PENDING"  # the item was written again since
    assert shown(task(status="DONE"), None) == "PENDING"  # a status on the item is not the app's
    assert shown(pending, {"status": "CANCELLED"}) == "CANCELLED"


def test_a_view_takes_the_outcome_from_the_record_never_from_the_item() -> None:
    record = {"exec_due": DUE_TEXT, "exec_state": "FAILED", "status": "FAILED", "attempts": 3,
              "last_error": "boom", "finished_at": "2026-11-22T12:00:05Z"}
    view = items.view_of_task(task(), record)
    assert (view["status"], view["attempts"], view["last_error"]) == ("FAILED", 3, "boom")
    item_says = items.view_of_task(task(status="DONE", attempts=2, last_result={"type": "email"}), None)
    assert (item_says["status"], item_says["attempts"], item_says["last_result"]) == ("PENDING", 0, None)


MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:fulfil"
SFN = {"type": "stepfunctions", "state_machine_arn": MACHINE, "input": {}}
HOOK = {"type": "webhook", "url": "https://hooks.example.com/", "secret": "ssm:/s", "body": "{}"}


@pytest.mark.parametrize(("action", "strategy", "extra", "message", "once"), [
    ({**SFN, "target_deduplicates": True}, Strategy.EXACT, {}, DueMessage(KEY, DUE), True),
    ({**HOOK, "target_deduplicates": True}, Strategy.INTERVAL, {}, DueMessage(KEY, DUE), True),
    (SFN, Strategy.EXACT, {}, DueMessage(KEY, DUE), False),  # not declared: an Express one starts every repeat
    ({**SFN, "target_deduplicates": False}, Strategy.EXACT, {}, DueMessage(KEY, DUE), False),
    ({**HOOK, "target_deduplicates": "true"}, Strategy.EXACT, {}, DueMessage(KEY, DUE), False),  # true only
    ({"type": "email", "target_deduplicates": True}, Strategy.EXACT, {}, DueMessage(KEY, DUE), False),  # no flag
    ({**SFN, "target_deduplicates": True}, Strategy.EXACT, {"recurrence": "rate(1 day)"}, DueMessage(KEY, DUE),
     False),  # a pause is on the record alone
    ({**SFN, "target_deduplicates": True}, Strategy.LAZY, {}, DueMessage(KEY, DUE), False),  # so is its cancel
    ({**SFN, "target_deduplicates": True}, Strategy.EXACT, {}, DueMessage(KEY, DUE, image={"PK": {"S": "x"}}),
     False),  # the item gone, read from the message
    ({**SFN, "target_deduplicates": True}, Strategy.EXACT, {}, DueMessage(KEY, DUE, not_before=DUE), False),  # a retry
])
def test_only_a_first_run_of_a_one_time_task_whose_target_drops_a_repeat_settles_once(
        action: dict[str, Any], strategy: Strategy, extra: dict[str, Any], message: DueMessage, once: bool) -> None:
    assert settles_once(Task(KEY, DUE, strategy, action, **extra), message) is once

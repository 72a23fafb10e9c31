"""When the executor runs, retries and re-arms a task: pure rules, table-driven."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.settings import Settings
from chalicelib.tasks.model import InvalidTask, RetryPolicy, Strategy, Task, TaskKey, task_from_item
from chalicelib.tasks.timing import (
    PRECISIONS,
    RETRY_LATER_CAP_SECONDS,
    Arrival,
    arrival,
    backoff,
    claim_held_delay,
    next_due,
    next_retry,
    queue_delay,
    window_slot,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("ahead", "precision", "expected"), [
    (-5.0, "subsecond", Arrival("run")),
    (0.0, "subsecond", Arrival("run")),
    (0.25, "subsecond", Arrival("wait", 0.25)),
    (0.999, "subsecond", Arrival("wait", 0.999)),
    (1.0, "subsecond", Arrival("requeue", 1)),
    (60.7, "subsecond", Arrival("requeue", 60)),
    (900.0, "subsecond", Arrival("requeue", 900)),
    (86400.0, "subsecond", Arrival("requeue", 900)),
    (-5.0, "second", Arrival("run")),
    (0.0, "second", Arrival("run")),
    (0.25, "second", Arrival("wait", 0.25)),  # only clock skew brings a second's message this early
    (1.0, "second", Arrival("requeue", 1)),
    (60.7, "second", Arrival("requeue", 61)),
    (899.2, "second", Arrival("requeue", 900)),
    (86400.0, "second", Arrival("requeue", 900)),
])
def test_a_message_never_runs_before_its_due_time(ahead: float, precision: str, expected: Arrival) -> None:
    result = arrival(NOW + timedelta(seconds=ahead), NOW, precision)
    assert result.kind == expected.kind
    assert result.seconds == pytest.approx(expected.seconds)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 900_000_000), st.sampled_from(PRECISIONS))
def test_a_queue_delay_is_never_early_at_second_and_never_late_at_subsecond_each_within_a_second(
        microseconds: int, precision: str) -> None:
    remaining = timedelta(microseconds=microseconds).total_seconds()
    delay = queue_delay(remaining, precision)
    if precision == "second":
        assert remaining <= delay < remaining + 1  # it comes back at or after its time: nothing to wait out
    else:
        assert remaining - 1 < delay <= remaining  # it comes back before its time: the executor waits the rest


@pytest.mark.parametrize(("failures", "ceiling"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (10, 512.0), (11, 900.0),
                                                     (185, 900.0)])
def test_retries_back_off_exponentially_up_to_one_sqs_delay(failures: int, ceiling: float) -> None:
    assert backoff(failures, 0.0) == ceiling
    assert backoff(failures, 0.999999) == pytest.approx(ceiling / 2, rel=1e-5)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 400), st.floats(0, 1, exclude_max=True), st.floats(0, 1, exclude_max=True))
def test_the_jitter_keeps_the_backoff_between_half_and_all_of_its_ceiling_and_follows_the_draw(
        failures: int, draw: float, other: float) -> None:
    ceiling = min(RETRY_LATER_CAP_SECONDS, 2.0 ** min(20, failures - 1))
    assert ceiling / 2 <= backoff(failures, draw) <= ceiling
    if abs(draw - other) > 1e-6:  # a larger draw, a shorter wait: the draw spreads them
        assert (backoff(failures, draw) < backoff(failures, other)) == (draw > other)


POLICY = RetryPolicy(max_attempts=5, max_age_seconds=3600)


@pytest.mark.parametrize(("failed", "now_after", "hint", "slept", "kind", "seconds"), [
    (1, 0, None, 0.0, "sleep", 1.0),          # short waits are slept in the delivery
    (4, 0, None, 0.0, "sleep", 8.0),
    (4, 0, None, 10.0, "later", 8.0),         # ... up to 15 s of sleeping in one delivery
    (2, 0, 30.0, 0.0, "later", 30.0),         # the action's hint: no sooner than it says
    (2, 0, 0.5, 0.0, "sleep", 2.0),           # a hint shorter than the backoff: the backoff
    (5, 0, None, 0.0, "give_up", 0.0),        # max_attempts made
    (2, 3599, None, 0.0, "give_up", 2.0),     # the next attempt would be past max_age_seconds
    (2, 0, 7200.0, 0.0, "give_up", 7200.0),   # a hint beyond the budget: given up, not waited for
])
def test_the_retry_decision(failed: int, now_after: int, hint: float | None, slept: float, kind: str,
                            seconds: float) -> None:
    step = next_retry(POLICY, failed, NOW, NOW + timedelta(seconds=now_after), 0.0, hint, slept)
    assert (step.kind, step.seconds) == (kind, seconds)
    assert (step.reason != "") == (kind == "give_up")


def test_the_stage_policy_fills_what_a_task_leaves_out() -> None:
    stage = Settings.from_env()
    assert task(NOW).retry_policy(stage) == RetryPolicy(stage.task_max_attempts, stage.task_retry_max_age_seconds)
    own = Task(TaskKey("PK", "SK"), NOW, Strategy.EXACT, {"type": "email"}, retry={"max_attempts": 185})
    assert own.retry_policy(stage) == RetryPolicy(185, stage.task_retry_max_age_seconds)


def task(due: datetime, recurrence: str | None = None, timezone: str | None = None) -> Task:
    return Task(TaskKey("PK", "SK"), due, Strategy.EXACT, {"type": "email"}, recurrence=recurrence,
                timezone=timezone)


def test_a_one_off_task_has_no_next_time() -> None:
    assert next_due(task(NOW), NOW) is None


def test_a_rate_keeps_its_phase_from_the_due_time() -> None:
    assert next_due(task(NOW, "rate(1 hour)"), NOW + timedelta(seconds=3)) == NOW + timedelta(hours=1)


def test_missed_occurrences_are_not_replayed() -> None:
    late = NOW + timedelta(hours=5, minutes=30)
    assert next_due(task(NOW, "rate(1 hour)"), late) == NOW + timedelta(hours=6)


def test_the_last_occurrence_has_no_next_time_by_end_at_or_by_count() -> None:
    ends = replace(task(NOW, "rate(1 hour)"), end_at=NOW + timedelta(hours=1))
    assert next_due(ends, NOW) == NOW + timedelta(hours=1)  # at end_at: still an occurrence
    assert next_due(replace(ends, due=NOW + timedelta(hours=1)), NOW + timedelta(hours=1)) is None
    counted = replace(task(NOW, "rate(1 hour)"), max_occurrences=2)
    assert next_due(counted, NOW, occurrences=1) == NOW + timedelta(hours=1)
    assert next_due(counted, NOW, occurrences=2) is None


@given(st.integers(min_value=1, max_value=4_000_000_000), st.integers(min_value=60, max_value=86400))
def test_a_windows_slot_is_never_early_and_at_most_the_window_late_on_a_grid(due_epoch: int, window: int) -> None:
    due = datetime.fromtimestamp(due_epoch, UTC)
    slot = window_slot(due, window)
    assert due <= slot <= due + timedelta(seconds=window)
    assert slot.timestamp() % 60 == 0  # a minute boundary at least: tasks due close together meet there


def test_tasks_due_within_one_grid_step_share_a_slot_and_no_window_is_the_due_time() -> None:
    assert {window_slot(NOW + timedelta(seconds=s), 300) for s in (1, 77, 299, 300)} == {NOW + timedelta(minutes=5)}
    assert window_slot(NOW + timedelta(seconds=1), 299) == NOW + timedelta(minutes=1)  # the 1-minute grid fits
    assert window_slot(NOW + timedelta(seconds=7), None) == NOW + timedelta(seconds=7)


def test_an_items_end_is_read_and_checked_as_the_apis() -> None:
    stage = Settings.from_env()
    item = {"PK": "P", "SK": "S", "run_at": "2026-11-22T12:00:00Z", "email": "ada@example.com",
            "recurrence": "rate(1 day)", "end_at": 1796000000, "max_occurrences": 3}
    read = task_from_item(item, stage)
    assert (read.end_at, read.max_occurrences) == (datetime.fromtimestamp(1796000000, UTC), 3)
    for bad, field in (({"recurrence": None}, "end_at"), ({"end_at": None, "max_occurrences": 0}, "max_occurrences"),
                       ({"end_at": "2026-11-22T11:59:59Z"}, "end_at")):
        with pytest.raises(InvalidTask) as refused:
            task_from_item({**item, **bad}, stage)
        assert refused.value.field == field, bad


def test_cron_reads_wall_clock_time_in_the_task_time_zone() -> None:
    due = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)  # 09:00 in Paris
    assert next_due(task(due, "cron(0 9 * * ? *)", "Europe/Paris"), due) == datetime(2026, 11, 23, 8, 0, tzinfo=UTC)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize(("recurrence", "tz", "due", "ran_at", "expected"), [
    # spring forward: a recurrence whose local time does not exist that day skips the day (EventBridge's rule)
    ("cron(30 2 * * ? *)", "America/New_York", utc(2026, 3, 7, 7, 30), utc(2026, 3, 7, 7, 30, 2),
     utc(2026, 3, 9, 6, 30)),
    ("cron(30 1 * * ? *)", "Europe/London", utc(2026, 3, 28, 1, 30), utc(2026, 3, 28, 1, 30, 2),
     utc(2026, 3, 30, 0, 30)),
    ("cron(30 2 * * ? *)", "Australia/Sydney", utc(2026, 10, 2, 16, 30), utc(2026, 10, 2, 16, 30, 2),
     utc(2026, 10, 4, 15, 30)),
    ("cron(30 * * * ? *)", "America/New_York", utc(2026, 3, 8, 6, 30), utc(2026, 3, 8, 6, 30, 2),
     utc(2026, 3, 8, 7, 30)),
    # fall back: the repeated local time runs once, at its first occurrence, even when the run ends in the repeat
    ("cron(30 1 * * ? *)", "America/New_York", utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 5, 30, 2),
     utc(2026, 11, 2, 6, 30)),
    ("cron(30 1 * * ? *)", "America/New_York", utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 31),
     utc(2026, 11, 2, 6, 30)),
    ("cron(30 1 * * ? *)", "Europe/London", utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 0, 30, 2),
     utc(2026, 10, 26, 1, 30)),
    ("cron(30 2 * * ? *)", "Australia/Sydney", utc(2026, 4, 4, 15, 30), utc(2026, 4, 4, 15, 30, 2),
     utc(2026, 4, 5, 16, 30)),
    ("cron(30 * * * ? *)", "America/New_York", utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 5, 30, 2),
     utc(2026, 11, 1, 7, 30)),
    # no DST: the same local time every day
    ("cron(30 2 * * ? *)", "Asia/Kolkata", utc(2026, 3, 7, 21, 0), utc(2026, 3, 7, 21, 0, 2),
     utc(2026, 3, 8, 21, 0)),
    # rate() is elapsed time: 24 hours, whatever the zone's clocks did
    ("rate(1 day)", "America/New_York", utc(2026, 3, 7, 12, 0), utc(2026, 3, 7, 12, 0, 2),
     utc(2026, 3, 8, 12, 0)),
    ("rate(1 day)", "Australia/Sydney", utc(2026, 4, 4, 12, 0), utc(2026, 4, 4, 12, 0, 2),
     utc(2026, 4, 5, 12, 0)),
])
def test_a_recurring_task_is_rearmed_as_eventbridge_scheduler_would_fire_across_daylight_saving(
        recurrence: str, tz: str, due: datetime, ran_at: datetime, expected: datetime) -> None:
    assert next_due(task(due, recurrence, tz), ran_at) == expected


@pytest.mark.parametrize(("held_for", "delay"), [(0, 301), (100, 201), (299.5, 1), (1000, 1)])
def test_a_held_claim_is_retried_when_its_lease_ends(held_for: float, delay: int) -> None:
    assert claim_held_delay(NOW.timestamp() - held_for, 300, NOW) == delay

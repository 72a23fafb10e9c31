"""The sweeper's pure decisions: which slices a tick sweeps, which tasks wait for it, the entries' keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.tasks import sweep_plan
from chalicelib.tasks.model import DueMessage, TaskKey
from chalicelib.tasks.schedules import MAX_DELAY_SECONDS

EPOCH = datetime(2026, 11, 22, tzinfo=UTC)
times = st.integers(0, 10 * 86400).map(lambda s: EPOCH + timedelta(seconds=s))
fractions = st.integers(0, 999).map(lambda ms: timedelta(milliseconds=ms))
FAST = settings(max_examples=40, deadline=None)


@FAST
@given(times, st.lists(st.integers(1, 900), min_size=1, max_size=20), st.integers(1, 200))
def test_ticks_late_or_early_sweep_every_slice_once_in_order_and_none_more_than_the_lookahead_ahead(
        start: datetime, gaps: list[int], limit: int) -> None:
    progress: int | None = sweep_plan.slice_of(start) - 1
    now, swept = start, []
    for gap in gaps:
        now += timedelta(seconds=gap)
        slices = sweep_plan.plan_slices(progress, now, limit=limit)
        assert len(slices) <= limit
        assert all(s <= now.timestamp() + sweep_plan.LOOKAHEAD_SECONDS for s in slices)
        swept += slices
        if slices:
            progress = slices[-1] + sweep_plan.SLICE_SECONDS - 1
    assert swept == list(range(sweep_plan.slice_of(start), sweep_plan.slice_of(start) + len(swept) * 60, 60))


def test_the_first_tick_looks_back_an_hour() -> None:
    now = EPOCH + timedelta(hours=5, seconds=30)
    slices = sweep_plan.plan_slices(None, now)
    assert slices[0] == sweep_plan.slice_of(now) - 3600
    assert slices[-1] == sweep_plan.slice_of(now) + sweep_plan.LOOKAHEAD_SECONDS


@FAST
@given(times, fractions, st.integers(0, 1800), st.integers(1, 3 * 86400))
def test_a_task_kept_for_the_sweeper_is_in_a_slice_no_tick_so_far_has_swept(
        now: datetime, fraction: timedelta, horizon: int, ahead: int) -> None:
    runs_at = now + timedelta(seconds=ahead) + fraction
    if not sweep_plan.sweeps(runs_at, now, horizon):
        assert (runs_at - now).total_seconds() <= max(horizon, sweep_plan.SWEEP_FROM_SECONDS)
        return
    # a tick at now (even a margin's clock skew later) has swept at most up to here
    assert sweep_plan.plan_slices(None, now + timedelta(seconds=sweep_plan.MARGIN_SECONDS))[-1] < sweep_plan.slice_of(runs_at)
    assert not sweep_plan.may_be_swept(runs_at, now)


@FAST
@given(times, st.integers(0, 59), fractions)
def test_the_delay_of_a_swept_task_is_within_sqs_limit(now: datetime, second: int, fraction: timedelta) -> None:
    last = sweep_plan.plan_slices(None, now)[-1]  # the furthest slice a tick at ``now`` sweeps
    runs_at = datetime.fromtimestamp(last + second, UTC) + fraction
    ahead = (runs_at - now).total_seconds()
    assert ahead < sweep_plan.LOOKAHEAD_SECONDS + sweep_plan.SLICE_SECONDS <= MAX_DELAY_SECONDS


@FAST
@given(st.integers(0, 10**9).map(lambda n: f"USER#{n}"), times, fractions, fractions, st.integers(1, 100))
def test_an_entry_is_the_same_for_the_same_task_and_time_and_sorts_by_time(
        pk: str, at: datetime, fraction: timedelta, later: timedelta, shards: int) -> None:
    key = TaskKey(pk, "TASK")
    runs_at = at + fraction
    item = sweep_plan.entry_item(DueMessage(key, runs_at), runs_at, shards)
    assert item == sweep_plan.entry_item(DueMessage(key, runs_at), runs_at, shards)
    label, _, shard = item["PK"]["S"].rpartition("#")
    assert label == "SWEEP#" + at.strftime("%Y-%m-%d#%H:%M") and 0 <= int(shard) < shards
    moved = runs_at + later + timedelta(milliseconds=1)
    assert sweep_plan.entry_item(DueMessage(key, moved), moved, shards)["SK"]["S"] > item["SK"]["S"]
    assert abs(float(item["runs_at"]["N"]) - runs_at.timestamp()) < 0.001


def test_a_cursor_counts_only_for_its_own_slice() -> None:
    item = {"cursor_2": {"S": "1700000040|000001700000041#abc"}}
    assert sweep_plan.cursor_of(item, 1700000040, 2) == "000001700000041#abc"
    assert sweep_plan.cursor_of(item, 1700000100, 2) is None
    assert sweep_plan.cursor_of(item, 1700000040, 1) is None
    assert sweep_plan.cursor_of(None, 1700000040, 2) is None

"""`make soak` in small: the same driver, 30 tasks and a burst of 20, so that it cannot rot.  Its tasks are due 2 to
5 s after they are created (the soak's 3 to 12 s spread thousands of tasks over time; 30 need no spreading)."""

from __future__ import annotations

import pytest

from local.soak import run_soak

pytestmark = pytest.mark.e2e


def test_a_small_soak_runs_every_task_once_within_memory_and_stops_on_sigterm() -> None:
    lines: list[str] = []
    result = run_soak(tasks=30, burst_size=20, lead_seconds=(2, 5), out=lines.append)
    report = "\n".join(result.report())
    assert result.ok, report + "\n" + "\n".join(lines)
    assert result.burst is not None and result.burst.statuses == {201: 20} and result.burst.resets == 0
    assert len(result.expected) == 20 + 30 + 1 and set(result.ran) == result.expected
    assert all(count == 1 for count in result.ran.values())
    assert result.conflict_status == 409 and result.replay_status == 200 and result.cancelled_id not in result.ran
    assert 0 < result.peak_rss_mb < 600 and result.stop_seconds is not None and result.stop_seconds < 5
    assert report.endswith("SOAK PASSED") and "peak RSS (VmHWM)" in report

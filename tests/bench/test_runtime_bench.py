"""P3 (precision) and T (throughput) of `make bench` at tiny N, on the real offline runtime, so that
they cannot rot; and the pure pieces they count with."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import precision, throughput
from bench.core import FULL, TINY
from bench.offline import Lateness, Planned, peak_concurrency, webhook_times


def test_lateness_counts_the_first_copy_and_names_early_missing_and_doubled_tasks() -> None:
    tasks = [Planned("on-time", "exact", 100), Planned("late", "exact", 100), Planned("early", "exact", 100),
             Planned("twice", "exact", 100), Planned("never", "exact", 100)]
    sent = {"on-time": [100.2], "late": [103.0], "early": [99.5], "twice": [101.0, 100.5]}
    late = Lateness.of("exact", tasks, sent, cut=130.0)
    assert (late.early, late.missing, late.doubled) == (1, 1, 1)
    assert sorted(late.values) == pytest.approx([-0.5, 0.2, 0.5, 3.0])
    assert late.censored == [30.0]


def test_a_percentile_that_reaches_a_missing_task_is_only_a_lower_bound() -> None:
    tasks = [Planned(str(i), "exact", 0) for i in range(100)]
    sent = {str(i): [0.01 * i] for i in range(99)}  # task 99 never ran; 60 s had passed at the cut
    late = Lateness.of("exact", tasks, sent, cut=60.0)
    assert late.percentile(50)[0] == pytest.approx(0.49) and not late.percentile(50)[1]
    assert late.percentile(99)[0] == pytest.approx(0.98) and not late.percentile(99)[1]
    assert late.percentile(100) == (60.0, True)
    assert late.cell(100) == ">= 60.00" and late.cell(50) == "0.49"
    assert late.figures()["lower_bound"] is True


def test_peak_concurrency_counts_invocations_that_overlap_and_not_ones_that_touch() -> None:
    assert peak_concurrency([]) == 0
    assert peak_concurrency([(10.0, 1.0), (11.0, 1.0), (12.0, 1.0)]) == 1   # one after another
    assert peak_concurrency([(10.0, 2.0), (10.5, 2.0), (9.8, 0.5), (20.0, 1.0)]) == 3


def test_a_webhook_task_came_when_the_receiver_read_a_signed_post_of_its_path() -> None:
    received = [{"path": "/bench/a", "verified": True, "received_at": 100.25},
                {"path": "/bench/a", "verified": True, "received_at": 101.0},     # a second POST: doubled
                {"path": "/bench/b", "verified": False, "received_at": 100.5},    # unsigned: not the action
                {"path": "/demo", "verified": True, "received_at": 100.75}]       # not a bench task
    assert webhook_times(received) == {"a": [100.25, 101.0]}


def test_each_precision_has_its_own_exact_bound_named_in_its_target() -> None:
    # subsecond: the runtime's 1 s (the target before issue 25); second: that plus its rounding up, up to 1 s
    assert precision.exact_p99_bound("subsecond") == 1.0
    assert precision.exact_p99_bound("second") == 2.0
    late = precision.exact_target("exact via SQS delay, second", "second", 1000, 1.32)
    assert (late.limit, late.met) == (2.0, True)
    assert "TASK_PRECISION=second" in late.name and "1 s + 1 s of rounding" in late.name
    assert not precision.exact_target("exact via SQS delay, subsecond", "subsecond", 1000, 1.32).met
    phases = precision.phases(FULL)
    assert [p.precision for p in phases] == ["second", "second", "subsecond", "second", "second"]  # not the shell's
    assert [b.label for p in phases[:3] for b in p.batches if b.strategy == "exact"] == [
        f"{path}, {p}" for p in ("second", "subsecond") for path in (precision.SQS_PATH, precision.SCHEDULER_PATH)]
    # subsecond's SQS-delay batch within the horizon, its Scheduler batch past it by the stream's first seconds
    horizon = float(phases[2].env["DIRECT_QUEUE_HORIZON_SECONDS"])
    sqs, scheduler = phases[2].batches
    assert sqs.first + sqs.seconds <= horizon < scheduler.first - 10


@pytest.mark.e2e
def test_precision_at_tiny_scale_runs_every_task_of_every_path_once_never_early_and_plots_it(
        tmp_path: Path) -> None:
    [section] = precision.run(TINY, tmp_path)
    labels = [row[0] for row in section.rows]
    exact = {f"{path}, {p}": p for p in ("second", "subsecond")
             for path in (precision.SQS_PATH, precision.SCHEDULER_PATH)}
    assert labels == [*list(exact)[:2], precision.BASELINE, precision.INTERVAL_DIRECT, precision.LAZY,
                      precision.WEBHOOK_PATH, *list(exact)[2:]]
    assert [row[-2] for row in section.rows] == ["second"] * 6 + ["subsecond"] * 2  # each row's TASK_PRECISION
    for label in labels:
        figures = section.figures[label]
        assert figures["n"] > 0 and figures["ran"] == figures["n"], (label, figures, section.notes)
        assert (figures["early"], figures["missing"], figures["doubled"]) == (0, 0, 0), (label, figures)
        assert 0 <= figures["min_s"] <= figures["p50_s"] <= figures["p99_s"] <= figures["max_s"] < 30
        assert figures["lower_bound"] is False
    phases = section.figures["phases"]
    assert [p["env"]["TASK_PRECISION"] for p in phases] == ["second", "subsecond"]
    for phase, label in zip(phases, (f"{precision.SCHEDULER_PATH}, second", f"{precision.SCHEDULER_PATH}, subsecond"),
                            strict=True):
        assert phase["completed"] and phase["peak_rss_mb"] > 0
        # the Scheduler path was really taken: one delivery to the due queue per task
        assert phase["scheduler_deliveries"][precision.DUE_QUEUE_ARN] == section.figures[label]["n"]
    assert section.figures[precision.WEBHOOK_PATH]["n"] == 3   # through the runtime's receiver, signed
    bounds = {label: t.limit for t in section.targets for label in [*exact, precision.WEBHOOK_PATH]
              if t.name.startswith(label + ":")}
    assert bounds == {**{label: 2.0 if p == "second" else 1.0 for label, p in exact.items()},
                      precision.WEBHOOK_PATH: 2.0}
    assert [t.name for t in section.targets if t.name.startswith(("early", "missing", "doubled"))] == [
        "early, every strategy and path", "missing, every strategy and path", "doubled, every strategy and path"]
    assert all(t.met for t in section.targets if t.limit == 0)
    plot = tmp_path / "p3_lateness.png"
    assert section.plots == [str(plot)]
    assert plot.read_bytes().startswith(b"\x89PNG") and plot.stat().st_size > 10_000


@pytest.mark.e2e
def test_throughput_at_tiny_scale_executes_every_due_task_once_against_a_floor_and_reads_the_memory(
        tmp_path: Path) -> None:
    [section] = throughput.run(TINY, tmp_path)
    [round_] = section.figures["rounds"]
    assert round_["completed"], section.notes
    assert round_["written"] == round_["executed"] == round_["tasks"] == 10 and round_["doubled"] == 0
    assert round_["rate_per_s"] > 0 and round_["floor_rate_per_s"] > 0
    assert round_["ratio"] == pytest.approx(round_["rate_per_s"] / round_["floor_rate_per_s"])
    assert round_["floor_tasks"] > 0 and round_["floor_calls"] == 4 * round_["floor_tasks"]
    assert round_["concurrency"] >= 1 and round_["invocations"]["task_executor"] >= 1
    assert 0 < section.figures["idle_rss_mb"] <= section.figures["peak_rss_mb"] < 600
    assert [t.name for t in section.targets] == ["rate against the floor at 10 due tasks",
                                                 "peak RSS of local.run under the load"]

"""The Lambda memory model P4m prices each function's CPU with (bench/task_cost.py): CPU in proportion to memory,
a full vCPU at 1,769 MB, billed as the wait-bound duration plus the CPU stretched."""

from __future__ import annotations

import pytest

from bench import prices
from bench.task_cost import (
    FULL_VCPU_MB,
    MEMORY_SIZES,
    billed_seconds,
    choose_memory,
    cpu_stretch,
    duration_per_million,
)


def test_cpu_work_stretches_as_memory_shrinks_below_a_full_vcpu_and_never_speeds_up_above_it() -> None:
    assert FULL_VCPU_MB == 1769
    assert cpu_stretch(128) == pytest.approx(1769 / 128)
    assert cpu_stretch(1769) == 1.0
    assert cpu_stretch(3538) == 1.0  # one Python thread runs at a time: a second vCPU does not help it


def test_the_billed_duration_is_the_wait_bound_part_plus_the_cpu_stretched() -> None:
    assert billed_seconds(0.080, 0.005, 128) == pytest.approx(0.080 + 0.005 * 1769 / 128)
    assert billed_seconds(0.080, 0.005, 1769) == pytest.approx(0.085)
    assert billed_seconds(0.080, 0.0, 256) == pytest.approx(0.080)


def test_duration_dollars_are_the_billed_gb_seconds_at_the_architectures_price() -> None:
    assert duration_per_million(0.1, 0.0, 1024) == pytest.approx(0.1 * 0.0000166667 * 1e6)
    assert duration_per_million(0.1, 0.0, 1024, prices.LAMBDA_GB_SECOND_ARM64) == pytest.approx(
        0.1 * 0.0000133334 * 1e6)
    assert prices.LAMBDA_GB_SECOND_ARM64.usd / prices.LAMBDA_GB_SECOND.usd == pytest.approx(0.8, abs=1e-4)


def test_cpu_costs_the_same_at_every_size_up_to_a_vcpu_and_waiting_costs_in_proportion_to_memory() -> None:
    cpu_only = [duration_per_million(0.0, 0.006, m) for m in MEMORY_SIZES]
    assert cpu_only == pytest.approx([cpu_only[0]] * len(MEMORY_SIZES))
    assert duration_per_million(0.1, 0.0, 1024) == pytest.approx(8 * duration_per_million(0.1, 0.0, 128))


@pytest.mark.parametrize(("cpu_before_action", "budget", "chosen"), [
    (0.0, 0.1, 128),       # no action of its own: the cheapest
    (0.004, 0.1, 128),     # 55 ms stretched at 128 MB: within a tenth of a second
    (0.0435, 1.0, 128),    # a full batch's 0.60 s at 128 MB: within a second
    (0.0435, 0.1, 1024),   # 0.30 s at 256, 0.15 s at 512, 0.075 s at 1,024 MB
    (0.2, 0.1, 1769),      # nothing fits: the largest
])
def test_the_choice_is_the_cheapest_memory_whose_stretch_keeps_a_tasks_lateness_within_the_budget(
        cpu_before_action: float, budget: float, chosen: int) -> None:
    assert choose_memory(0.150, 0.006, cpu_before_action, budget) == chosen

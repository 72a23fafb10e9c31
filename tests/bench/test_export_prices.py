"""The export rows of the bench (bench/export_prices.py): arithmetic from bench/prices.py, no AWS."""

from __future__ import annotations

import pytest

from bench import export_prices, prices
from bench.core import TINY


def test_a_gb_month_of_protection_both_ways_from_the_listed_prices() -> None:
    weekly = {p.way: p.usd for p in export_prices.protection(made=52 / 12, kept=4)}
    assert weekly["on-demand backups (same account and region)"] == pytest.approx(4 * 0.10)
    assert weekly["AWS Backup, copied to another account/region"] == pytest.approx(8 * 0.10 + 52 / 12 * 0.02)
    assert weekly["exports, S3 Standard"] == pytest.approx(52 / 12 * 0.10 + 4 * 0.023)
    assert weekly["exports, Glacier IR, replicated to another region"] == pytest.approx(
        52 / 12 * (0.10 + 0.02) + 8 * 0.004)
    # kept in another region, weekly exports cost less than AWS Backup's copies and about their source alone
    assert weekly["exports, Glacier IR, replicated to another region"] < weekly[
        "AWS Backup, copied to another account/region"]


def test_an_export_runs_own_cost_at_2000_tables_is_cents_and_the_sections_render() -> None:
    cost = export_prices.run_cost(2000)
    assert cost["state writes"] == pytest.approx((2000 * 8 + 13 * 59) * prices.DYNAMODB_WRITE_UNIT.usd)
    assert sum(cost.values()) < 0.1
    protection, runs = export_prices.section(TINY)
    assert len(protection.rows) == len(export_prices.SCHEDULES) and all(t.met for t in runs.targets)
    assert [r[0] for r in runs.rows] == [10, 2000]


def test_an_incremental_export_costs_its_changed_data_with_10_mb_at_least_and_a_full_one_the_table() -> None:
    assert export_prices.export_cost(100) == pytest.approx(100 * 0.10)
    assert export_prices.export_cost(100, changed_gb=2) == pytest.approx(2 * 0.10)
    assert export_prices.export_cost(100, changed_gb=0.001) == pytest.approx(0.01 * 0.10)  # billed 10 MB
    # a day of 24 hourly incrementals of 50 MB each against one daily full export of a 100 GB table
    assert 24 * export_prices.export_cost(100, changed_gb=0.05) < export_prices.export_cost(100) / 50

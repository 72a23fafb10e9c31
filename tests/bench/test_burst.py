"""The burst model (bench/burst.py) against arithmetic done apart: a constant rate, a ramp solved as an
integral, a Scheduler-bound and an index-bound burst, the email target, and its inputs from results.json."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from bench import burst
from bench.burst import INF, Executor, OfflineRun, Quotas, Route
from bench.core import TINY
from deploy import stage

#: No DynamoDB and no email limit: only what a case names binds.
UNBOUND = Quotas(table_write_units_per_s=INF, partition_write_units_per_s=INF, email_per_s=INF)
#: 10 tasks in 0.5 s an invocation: 20 tasks a second for each invocation at once.
TWENTY = Executor(batch_size=10, seconds_per_batch=0.1, seconds_per_task=0.04)


def test_at_a_constant_concurrency_the_last_task_runs_when_the_rate_has_run_them_all() -> None:
    quotas = Quotas(lambda_initial=50, lambda_max=50, table_write_units_per_s=INF,
                    partition_write_units_per_s=INF, email_per_s=INF)
    outcome = burst.simulate(10_001, Route("all at once"), quotas, TWENTY)
    rate = 50 * 20  # tasks a second
    assert outcome.last == math.ceil(10_001 / rate) == 11
    assert outcome.p50 == math.ceil(5_001 / rate) == 6
    assert outcome.p99 == math.ceil(math.ceil(10_001 * 0.99) / rate)
    assert outcome.binding == "Lambda concurrency"


@pytest.mark.parametrize("tasks", [2_000, 100_000, 1_000_000])
def test_the_pollers_ramp_gives_the_integral_of_their_concurrency_to_within_a_step(tasks: int) -> None:
    """5 invocations at first, 300 more a minute, at most 1,000: the steps take each second's concurrency at its
    start, so they run a little less than the integral, never a step more than it."""
    closed = burst.closed_form_last(tasks, rate=TWENTY.tasks_per_invocation_second, initial=5,
                                    ramp_per_s=300 / 60, most=1_000)
    outcome = burst.simulate(tasks, Route("all at once"), UNBOUND, TWENTY)
    assert math.ceil(closed) <= outcome.last <= math.ceil(closed) + 1


def test_through_scheduler_the_last_message_comes_at_its_rate_less_the_lead() -> None:
    tasks, lead = 1_000_000, 60
    route = Route("Scheduler", rate=None, lead=lead, delayed=False)
    outcome = burst.simulate(tasks, route, replace_lambda(UNBOUND), TWENTY)
    assert outcome.last == tasks / 1_000 - lead == 940
    assert outcome.binding == "Scheduler invocations"


def test_one_status_key_drains_at_its_partitions_write_units_over_its_writes_per_task() -> None:
    quotas = replace_lambda(Quotas(table_write_units_per_s=INF, email_per_s=INF))
    outcome = burst.simulate(100_000, Route("all at once"), quotas, TWENTY)
    assert outcome.last == 100_000 / (1_000 / 2) == 200
    assert outcome.binding == "status index partition"
    sharded = burst.simulate(100_000, Route("all at once"), Quotas(
        lambda_initial=1_000, table_write_units_per_s=INF, index_shards=4, email_per_s=INF), TWENTY)
    assert sharded.last == 100_000 / (4 * 1_000 / 2) == 50


def test_a_million_emails_paced_at_fourteen_a_second_go_at_their_rank_over_the_rate() -> None:
    """Flow control: every email reserves its start when the executor reaches it and waits for it; the k-th goes at
    k / 14 s (in whole steps), whatever else binds, none failing."""
    outcome = burst.simulate(1_000_000, Route("all at once"), replace_lambda(Quotas(
        table_write_units_per_s=INF, partition_write_units_per_s=INF)), TWENTY)
    assert outcome.email_last == math.ceil(1_000_000 / 14) == 71_429
    assert outcome.email_p50 == math.ceil(500_000 / 14)
    assert outcome.email_p99 == math.ceil(990_000 / 14)


def test_emails_reach_their_start_no_faster_than_the_targets_item_takes_reservations() -> None:
    """A limited target's item takes 1,000 writes a second: at 10,000 emails a second allowed, the reservations
    bind, not the rate."""
    quotas = replace_lambda(Quotas(table_write_units_per_s=INF, partition_write_units_per_s=INF,
                                   email_per_s=10_000))
    outcome = burst.simulate(100_000, Route("all at once"), quotas, TWENTY)
    assert outcome.email_last == 100_000 / 1_000 == 100


def test_the_sweeper_sends_at_its_batch_calls_times_ten_with_no_scheduler_cap() -> None:
    slow = burst.Sweeper(calls_per_s=100, horizon_s=900, period_s=60)   # 1,000 messages a second
    route = slow.route()
    assert (route.rate, route.lead, route.delayed) == (1_000, 840, True)
    outcome = burst.simulate(1_000_000, route, replace_lambda(UNBOUND), TWENTY)
    assert outcome.last == 1_000_000 / 1_000 - 840 == 160   # the sweep binds: sent late, run as sent
    fast = burst.simulate(1_000_000, burst.Sweeper(calls_per_s=1_000).route(), replace_lambda(UNBOUND), TWENTY)
    assert fast.last == math.ceil(1_000_000 / (1_000 * 20))   # all visible at the due time: Lambda's rate alone


def test_each_path_is_modelled_and_the_deployed_stage_is_the_last() -> None:
    results = {name: burst.simulate(burst.TASKS, route, quotas, TWENTY)
               for name, route, quotas in burst.scenarios(TWENTY)}
    scheduler = results["Scheduler, default quotas"]
    assert (scheduler.last, scheduler.binding) == (940, "Scheduler invocations")   # 1,000/s less its 60 s lead
    assert burst.scenarios(TWENTY)[-1] == burst.deployed(burst.deployed_settings())
    measured = burst.scenarios(TWENTY, burst.Sweeper(calls_per_s=50))   # the lead plugs in the sweeper's figures
    assert measured[-1][1].rate == 500


def test_the_target_row_is_the_prod_stage_as_its_config_deploys_it_and_runs_a_million_within_five_minutes() -> None:
    """The state table's write units are prod's STATE_TABLE_WARM_WRITE_UNITS, read from .chalice/config.json; the
    same stage with it at 0 is a new on-demand table's 4,000 and misses the five minutes."""
    config = stage.load_config()
    prod = burst.deployed_settings(config)
    assert prod.past_horizon == "sweeper"   # the default: the sweeper's route is the target's
    [*_, deployed] = burst.section(Executor(), "defaults", None).rows
    section = burst.section(Executor(), "defaults", None, settings=prod)
    assert section.rows[-1] == deployed and section.rows[-1][0].startswith("prod as deployed: sweeper")
    assert [t.figure for t in section.targets] == deployed[2:5]
    assert all(t.met for t in section.targets), [t.describe() for t in section.targets]
    assert burst.deployed(prod)[2].table_write_units_per_s == prod.state_table_warm_write_units
    config["stages"]["prod"]["environment_variables"]["STATE_TABLE_WARM_WRITE_UNITS"] = "0"
    cold = burst.section(Executor(), "defaults", None, settings=burst.deployed_settings(config))
    assert burst.deployed(burst.deployed_settings(config))[2].table_write_units_per_s == 4_000
    assert cold.targets[-1].figure > burst.TARGET_SECONDS and not cold.targets[-1].met


def test_the_model_against_ts_offline_rounds_uses_their_floor_and_batch() -> None:
    rounds = [{"tasks": 1_000, "executed": 1_000, "completed": True, "seconds": 12.5, "concurrency": 8,
               "floor_rate_per_s": 80.0, "invocations": {"task_executor": 100}}]
    [check] = burst.throughput_check({"sections": [{"key": "T", "figures": {"rounds": rounds}}]})
    assert check["model_s"] == math.ceil(1_000 / 80) == 13 and check["ratio"] == pytest.approx(13 / 12.5)
    assert burst.throughput_check({"sections": []}) == []


def test_the_executors_times_are_the_line_through_p4s_two_batch_sizes() -> None:
    def workload(tasks: int, invocations: int, billed: float) -> dict[str, object]:
        return {"tasks": tasks, "invocations": {"task_executor": invocations},
                "billed_seconds": {"task_executor": billed}, "usage_per_task": {"write_units": 2.0}}
    results = {"sections": [{"key": "P4", "figures": {"call_seconds": 0.02, "workloads": {
        "exact via SQS delay": workload(50, 50, 3.0),
        "exact via SQS delay, 10 due together": workload(50, 5, 2.1)}}}]}
    executor, source = burst.measured_executor(results)
    assert executor.seconds_per_task == pytest.approx(0.04)
    assert executor.seconds_per_batch == pytest.approx(0.02)
    assert executor.invocation_seconds == pytest.approx(0.42) and "P4" in source
    assert burst.measured_executor({"sections": []}) == (Executor(), burst.measured_executor(None)[1])


def test_the_offline_model_uses_the_runs_concurrency_batch_and_invocation_time() -> None:
    run = OfflineRun(tasks=100, ran=100, lateness=[1.0] * 100, concurrency=2, invocations=10,
                     invocation_seconds=0.5, completed=True)
    model = burst.offline_model(run)
    assert model.last == math.ceil(100 / (2 * 10 / 0.5)) == 3


def test_the_section_at_tiny_scale_is_the_model_alone(tmp_path: Path) -> None:
    [section] = burst.run(TINY, tmp_path)
    assert section.key == "B" and len(section.rows) == len(burst.scenarios(Executor()))
    assert [t.figure for t in section.targets] == section.rows[-1][2:5]   # p50, p99, last of the deployed stage
    assert "71,429 s" not in " ".join(section.notes) and "19.8 h" in " ".join(section.notes)


def replace_lambda(quotas: Quotas) -> Quotas:
    """The pollers at their most from the start: only the other limits bind."""
    from dataclasses import replace
    return replace(quotas, lambda_initial=1_000)


def test_the_scale_pages_million_task_table_is_what_the_model_prints_on_the_committed_figures() -> None:
    """docs/scale.md's rows, by scenario name: p50, p99 and last as the model gives them on results.json's P4."""
    executor, _ = burst.measured_executor(burst.load_results())
    page = (Path(__file__).resolve().parents[2] / "docs" / "scale.md").read_text()
    rows = {cells[0]: cells[1:4] for line in page.splitlines() if line.startswith("| ")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}
    for name, route, quotas in burst.scenarios(executor):
        outcome = burst.simulate(burst.TASKS, route, quotas, executor)
        assert name in rows, f"docs/scale.md has no row {name!r}"
        shown = [float(re.match(r"[\d,.]+", cell).group().replace(",", "")) for cell in rows[name]]  # type: ignore[union-attr]
        assert shown == [round(outcome.p50), round(outcome.p99), round(outcome.last)], name

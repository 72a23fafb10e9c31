"""The stream-batch (P2) and cost (P4) sections of ``make bench``, run at tiny scale so that they cannot rot:
each figure they publish is checked against what it claims to count."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from bench import __main__ as bench_main
from bench import prices, task_cost
from bench.core import TINY, median, percentile
from chalicelib.settings import Settings


@pytest.fixture(scope="module")
def sections(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench")
    bench_main.run(["P2", "P4"], TINY, out / "results.json", out / "plots")
    results = json.loads((out / "results.json").read_text())
    return {section["key"]: section for section in results["sections"]}


def _batches(p2: dict[str, Any], path: str, name: str) -> list[dict[str, Any]]:
    batches: list[dict[str, Any]] = p2["figures"]["paths"][path][name]
    assert batches, f"no {name} batch measured on the {path} path"
    return batches


def test_the_seed_loop_makes_one_create_schedule_per_record_one_after_another(sections: dict[str, Any]) -> None:
    p2 = sections["P2"]
    records = p2["figures"]["records"]
    for path in ("SQS delay", "Scheduler"):
        for name in ("seed warm", "seed cold"):
            for batch in _batches(p2, path, name):
                assert batch["by_operation"] == {"scheduler:CreateSchedule": records}
                # One after another, each call at least one injected round trip.
                assert batch["round_trips"] >= records


def test_the_stream_handler_batches_due_messages_and_schedules_each_record_within_the_round_trips_its_threads_allow(
        sections: dict[str, Any]) -> None:
    p2 = sections["P2"]
    records = p2["figures"]["records"]
    concurrency = Settings.from_env().stream_concurrency
    for name in ("ours warm", "ours cold"):
        for batch in _batches(p2, "SQS delay", name):
            assert batch["by_operation"].get("sqs:SendMessageBatch") == math.ceil(records / 10), batch["by_operation"]
            assert "sqs:SendMessage" not in batch["by_operation"]
            assert batch["round_trips"] >= 1
        for batch in _batches(p2, "Scheduler", name):
            assert batch["by_operation"].get("scheduler:CreateSchedule") == records, batch["by_operation"]
            assert batch["round_trips"] >= math.ceil(records / concurrency)
            assert 0 < batch["moto_cpu_seconds"] <= batch["cpu_seconds"]  # moto's answers, within the process's
    warm = _batches(p2, "SQS delay", "ours warm")[0]["by_operation"]
    assert "sqs:GetQueueUrl" not in warm, "a warm container looks the due queue's URL up again"
    cold = _batches(p2, "Scheduler", "ours cold")[0]["by_operation"]
    # The stage's settings name the due queue's URL and ARN (provisioning sets them): a cold container looks
    # nothing up (tests/functional/test_stream_batches.py covers a stage without them: one look-up each).
    assert "sqs:GetQueueUrl" not in cold and "sqs:GetQueueAttributes" not in cold, cold


def test_the_stream_batch_targets_report_the_round_trips_of_the_table(sections: dict[str, Any]) -> None:
    p2 = sections["P2"]
    ours = {(row[0], row[2]): row[8] for row in p2["rows"] if row[1] == "timekeeper"}
    assert len(p2["targets"]) == 4
    for target in p2["targets"]:
        path, container = target["name"].split(":")[0].split(", ")
        batches = sorted(b["round_trips"] for b in _batches(p2, path, f"ours {container}"))
        assert target["figure"] == ours[(path, container)] == batches[math.ceil(0.9 * len(batches)) - 1]
        assert target["limit"] == 8
        assert target["met"] == (target["figure"] <= 8)


def test_the_round_trips_without_motos_cpu_are_the_wall_time_less_motos_shown_beside_the_targets_figure(
        sections: dict[str, Any]) -> None:
    p2 = sections["P2"]
    latency = p2["figures"]["latency_seconds"]
    rows = [row for row in p2["rows"] if row[1] == "timekeeper"]
    assert len(rows) == 4
    for row in rows:
        batches = _batches(p2, row[0], f"ours {row[2]}")
        without = [(b["seconds"] - b["moto_cpu_seconds"]) / latency for b in batches]
        assert [b["round_trips_without_moto"] for b in batches] == pytest.approx(without)
        assert row[13] == pytest.approx(median(without))
        assert row[14] == pytest.approx(percentile(without, 90))
        assert all(w < b["round_trips"] and b["full_gc_seconds"] >= 0 for w, b in zip(without, batches, strict=True))


def test_every_task_of_every_strategy_ran_its_action_exactly_once(sections: dict[str, Any]) -> None:
    workloads = sections["P4"]["figures"]["workloads"]
    assert set(workloads) == {"exact via SQS delay", "exact via Scheduler", task_cost.SWEPT, "interval", "lazy",
                              task_cost.DENSE,
                              task_cost.WINDOWED, task_cost.ONE_HOP, *(f"exact via SQS delay, {a} action"
                                for a in ("lambda", "eventbridge", "stepfunctions", "webhook")), *task_cost.ONE_WRITE}
    for name, w in workloads.items():
        assert (w["executed_once"], w["executed_twice_or_more"], w["missing"]) == (w["tasks"], 0, 0), name
        if w["action"] in task_cost.ACTION_CALL:  # a webhook's POST is no AWS call: its receiver counted it
            assert w["calls_by_operation"][task_cost.ACTION_CALL[w["action"]]] == w["tasks"], name


def test_tasks_with_a_window_take_fewer_executor_invocations_than_the_same_tasks_without(
        sections: dict[str, Any]) -> None:
    p4 = sections["P4"]
    workloads, window = p4["figures"]["workloads"], p4["figures"]["window"]["executor_invocations_per_task"]
    for name, key in (("exact via SQS delay", "without"), (task_cost.WINDOWED, "with")):
        assert window[key] == workloads[name]["invocations"]["task_executor"] / workloads[name]["tasks"]
    assert window["with"] < window["without"]
    assert any(note.startswith("window_seconds: task_executor invocations per task") for note in p4["notes"])


def test_past_sqss_delay_one_re_queue_hop_costs_less_than_a_schedule(sections: dict[str, Any]) -> None:
    workloads = sections["P4"]["figures"]["workloads"]
    hop, scheduler = workloads[task_cost.ONE_HOP], workloads["exact via Scheduler"]
    assert hop["schedules_fired"] == 0 and scheduler["schedules_fired"] == scheduler["tasks"]
    assert hop["calls_by_operation"]["sqs:SendMessage"] == hop["tasks"]  # each sent back once by the executor
    compared = sections["P4"]["figures"]["one_hop_vs_scheduler"]
    assert compared["one_hop"] == hop["dollars_per_million"] < scheduler["dollars_per_million"]


def test_a_task_whose_target_drops_a_repeat_costs_one_write_unit_and_no_claim(sections: dict[str, Any]) -> None:
    for name in task_cost.ONE_WRITE:
        w = sections["P4"]["figures"]["workloads"][name]
        # the settle alone, and what the indexes its record enters cost (bench/capacity.py)
        assert w["usage_per_task"]["write_units"] - w["index_write_units_per_task"] == 1.0, name
        assert w["calls_by_operation"]["dynamodb:UpdateItem"] == w["tasks"], name  # the settle alone


def test_each_action_types_row_lists_its_own_price_apart_from_the_apps_cost(sections: dict[str, Any]) -> None:
    p4 = sections["P4"]
    rows = {row[0]: row for row in p4["rows"]}
    column = p4["columns"].index("action's own $ per million (apart)")
    email = rows["exact via SQS delay"]
    for action, price in (("lambda", prices.LAMBDA_REQUEST), ("eventbridge", prices.EVENTBRIDGE_EVENT),
                          ("stepfunctions", prices.STEP_FUNCTIONS_TRANSITION)):
        row = rows[f"exact via SQS delay, {action} action"]
        assert row[column] == pytest.approx(price.usd * 1e6), action
        # the same path as the email's: the action changes its own call, not the app's (within a few percent)
        assert row[3] == pytest.approx(email[3], rel=0.1) and row[9] == pytest.approx(email[9], rel=0.25), action
    assert email[column] == pytest.approx(prices.SES_EMAIL.usd * 1e6)
    webhook = rows["exact via SQS delay, webhook action"]
    assert webhook[column] == 0  # the receiver is the user's: no AWS charge
    # the same path as the email's, less its SendEmail, plus the signing secret's GetParameter (a KMS Decrypt)
    # once a container and then every SECRET_TTL_SECONDS: at a few tasks a run, that read is a large share
    w = sections["P4"]["figures"]["workloads"]["exact via SQS delay, webhook action"]
    reads = w["calls_by_operation"].get("ssm:GetParameter", 0)
    assert 1 <= reads <= w["invocations"]["task_executor"]
    secret = prices.KMS_REQUEST.usd * 1e6 * reads / w["tasks"]
    assert webhook[9] - secret == pytest.approx(email[9], rel=0.25)


def test_the_cost_counts_the_app_calls_of_each_path(sections: dict[str, Any]) -> None:
    workloads = sections["P4"]["figures"]["workloads"]
    sqs, scheduler = workloads["exact via SQS delay"], workloads["exact via Scheduler"]
    n = sqs["tasks"]
    sends = sqs["calls_by_operation"]
    assert sends.get("sqs:SendMessage", 0) + sends.get("sqs:SendMessageBatch", 0) >= math.ceil(n / 10)
    assert "scheduler:CreateSchedule" not in sqs["calls_by_operation"]
    assert sqs["schedules_fired"] == 0
    assert scheduler["calls_by_operation"]["scheduler:CreateSchedule"] == n
    assert scheduler["schedules_fired"] == n  # a Scheduler invocation, not an app call
    assert scheduler["usage_per_task"]["scheduler_invocations"] == 1
    for name, w in workloads.items():
        assert w["calls_per_task"] == sum(w["calls_by_operation"].values()) / w["tasks"], name
        assert w["stream_records"] >= w["tasks"], name  # at least each item's own write
    lazy = workloads["lazy"]
    assert "scheduler:CreateSchedule" not in lazy["calls_by_operation"]
    assert lazy["stream_records"] >= 2 * lazy["tasks"]  # its write and TTL's delete at least


def test_the_dollars_are_the_usage_at_the_listed_prices_and_each_unit_has_its_call(sections: dict[str, Any]) -> None:
    p4 = sections["P4"]
    table = {p["name"]: p for p in p4["figures"]["prices"]}
    assert all(p["source"].startswith("https://") and p["read"] for p in table.values())
    for name, w in p4["figures"]["workloads"].items():
        usage, calls, n = w["usage_per_task"], w["calls_by_operation"], w["tasks"]
        expected = sum(usage[kind] * prices.PRICE_OF[kind].usd for kind in usage) * 1e6
        assert w["dollars_per_million"] == pytest.approx(expected), name
        assert w["dollars_per_million"] > 0, name
        if name == task_cost.SWEPT:  # its usage shares the processor's idle minute (calls: as made, unshared)
            idle = p4["figures"]["sweeper"]["idle_tick"]
            assert idle["read_units"] > 0 and idle["lambda_requests"] == 1, idle  # a query a shard, one invocation
            continue
        app_sqs = sum(c for op, c in calls.items() if op.startswith("sqs:"))
        assert usage["sqs_requests"] >= app_sqs / n, name
        writes = sum(c for op, c in calls.items() if op.split(":")[1] in ("PutItem", "UpdateItem", "DeleteItem"))
        writes += 2 * calls.get("dynamodb:TransactWriteItems", 0)  # two units at least: two items, twice each
        assert usage["write_units"] >= writes / n, name
        reads = sum(c for op, c in calls.items() if op.split(":")[1] in ("GetItem", "Query"))
        assert usage["read_units"] >= 0.5 * reads / n, name
        together = 10 if name in (task_cost.DENSE, *task_cost.ONE_WRITE) else 1  # the executor's batches
        assert usage["lambda_requests"] * together >= 1, name
        assert usage["lambda_gb_seconds"] + usage["lambda_arm64_gb_seconds"] > 0, name
        # Priced at the architecture the stage deploys (.chalice/config.json).
        assert usage["lambda_arm64_gb_seconds" if task_cost.lambda_architecture() == "arm64"
                     else "lambda_gb_seconds"] > 0, name
    seed = p4["figures"]["seed"]
    assert seed["dollars_per_million"] == pytest.approx(
        (seed["usage_per_task"]["scheduler_invocations"] * prices.SCHEDULER_INVOCATION.usd
         + seed["usage_per_task"]["lambda_requests"] * prices.LAMBDA_REQUEST.usd
         + seed["usage_per_task"]["lambda_gb_seconds"] * prices.LAMBDA_GB_SECOND.usd) * 1e6)
    assert seed["usage_per_task"]["scheduler_invocations"] == 1


def test_the_cost_targets_report_the_figures_of_the_table(sections: dict[str, Any]) -> None:
    p4 = sections["P4"]
    rows = {row[0]: row for row in p4["rows"]}
    targets = {t["name"]: t for t in p4["targets"]}
    for path, calls_limit in (("exact via SQS delay", 5), ("exact via Scheduler", 6)):
        assert targets[f"{path}: AWS calls per task"]["figure"] == rows[path][3]
        assert targets[f"{path}: AWS calls per task"]["limit"] == calls_limit
    for path, limit in (("exact via SQS delay", 3), ("exact via SQS delay, 10 due together", 2)):
        if path in rows:
            dollars = targets[f"{path}: $ per million tasks beyond the action"]
            assert dollars["figure"] == pytest.approx(p4["figures"]["workloads"][path]["dollars_per_million"])
            assert dollars["limit"] == limit
    # Past the horizon: one dollars target, the stage's PAST_HORIZON path's; the other path's figure, no target.
    default = Settings.from_env().past_horizon
    assert p4["figures"]["past_horizon"]["default"] == default == task_cost.past_horizon()
    paths = p4["figures"]["past_horizon"]["paths"]
    assert set(paths) == {"scheduler", "sweeper"} and set(paths.values()) <= set(rows)
    past = [t for t in p4["targets"] if t["name"].startswith("exact tasks due past the horizon")]
    assert [(t["name"], t["limit"]) for t in past] == [
        (f"exact tasks due past the horizon, the stage's default path (PAST_HORIZON={default}): $ per million tasks "
         "beyond the action", 4.5)]
    assert past[0]["figure"] == pytest.approx(p4["figures"]["workloads"][paths[default]]["dollars_per_million"])
    for value, path in paths.items():
        assert f"{path}: $ per million tasks beyond the action" not in targets, path
        if value != default:
            assert any(n.startswith(f"{path}, the optional path past the horizon") for n in p4["notes"]), path


def test_the_past_horizon_target_follows_the_stages_default_path_and_the_other_path_has_none() -> None:
    dollars = {"exact via Scheduler": 5.92, task_cost.SWEPT: 4.13, "exact via SQS delay": 2.99}
    for default, other in (("sweeper", "scheduler"), ("scheduler", "sweeper")):
        targets, notes = task_cost.past_horizon_targets(dollars, default)
        figure = dollars[task_cost.PAST_HORIZON_PATHS[default]]
        assert [(t.name, t.figure, t.limit) for t in targets] == [
            (f"exact tasks due past the horizon, the stage's default path (PAST_HORIZON={default}): $ per million "
             "tasks beyond the action", figure, task_cost.TARGET_PAST_HORIZON_DOLLARS)], default
        assert notes == [f"{task_cost.PAST_HORIZON_PATHS[other]}, the optional path past the horizon "
                         f"(PAST_HORIZON={other}; the stage's is {default}): ${dollars[task_cost.PAST_HORIZON_PATHS[other]]:.2f} "
                         "a million beyond the action, no target"], default
    # the paths are PAST_HORIZON's choices, each measured by its own workload
    assert sorted(task_cost.PAST_HORIZON_PATHS) == ["scheduler", "sweeper"]
    assert task_cost.PAST_HORIZON_PATHS["sweeper"] == task_cost.SWEPT


def test_the_dollars_count_schedulers_delivery_the_log_lines_and_the_records_kept(sections: dict[str, Any]) -> None:
    p4 = sections["P4"]
    workloads = p4["figures"]["workloads"]
    scheduler = workloads["exact via Scheduler"]
    n, calls = scheduler["tasks"], scheduler["calls_by_operation"]
    app_sqs = sum(c for op, c in calls.items() if op.startswith("sqs:"))
    executor_batches = scheduler["invocations"]["task_executor"]
    # The app's own, the poller's receive and delete per batch, and Scheduler's send of each due message.
    assert scheduler["usage_per_task"]["sqs_requests"] == pytest.approx(
        (app_sqs + 2 * executor_batches + scheduler["schedules_fired"]) / n)
    assert p4["figures"]["log_level"] == "INFO"
    retention = Settings.from_env().task_record_retention_days
    for name, w in workloads.items():
        usage = w["usage_per_task"]
        assert w["log_bytes_per_task"] > 100, name  # a few INFO lines and EMF at least
        # and Lambda's own START, END and REPORT lines, some 260 bytes an invocation
        assert w["platform_log_bytes_per_task"] >= 250 * usage["lambda_requests"], name
        if name != task_cost.SWEPT:  # the sweeper's usage shares the processor's idle minute; its lines as made
            assert usage["log_bytes"] == pytest.approx(w["log_bytes_per_task"] + w["platform_log_bytes_per_task"]), name
        assert w["record_bytes"] > 100 and w["record_days"] == retention, name
        # the record and its index entries, 100 bytes overhead each
        assert w["stored_bytes"] >= w["record_bytes"] + prices.ITEM_OVERHEAD_BYTES, name
        assert usage["stored_byte_months"] == pytest.approx(
            w["stored_bytes"] * retention * 24 / prices.HOURS_A_MONTH), name
        assert w["dollars_per_task"]["log_bytes"] > 0 and w["dollars_per_task"]["stored_byte_months"] > 0, name


def test_the_floor_ratios_divide_the_rows_dollars_by_the_exactly_once_floor_at_the_same_prices(
        sections: dict[str, Any]) -> None:
    p4 = sections["P4"]
    workloads, targets = p4["figures"]["workloads"], {t["name"]: t for t in p4["targets"]}
    # Two writes a task, the queue (ten sends a call, receive, delete and a Lambda request a batch) and no more.
    queue = prices.SQS_REQUEST.usd * (0.1 + 2 / 1) + prices.LAMBDA_REQUEST.usd
    assert workloads["exact via SQS delay"]["floor_dollars_per_million"] == pytest.approx(
        (2 * prices.DYNAMODB_WRITE_UNIT.usd + queue) * 1e6)
    dense = workloads[task_cost.DENSE]
    assert dense["tasks"] % 10 == 0 and dense["invocations"]["task_executor"] == dense["tasks"] / 10  # full batches
    assert dense["floor_dollars_per_million"] == pytest.approx(
        (2 * prices.DYNAMODB_WRITE_UNIT.usd + prices.SQS_REQUEST.usd * 0.3 + prices.LAMBDA_REQUEST.usd / 10) * 1e6)
    scheduler = workloads["exact via Scheduler"]["floor_dollars_per_million"]
    assert scheduler == pytest.approx(workloads["exact via SQS delay"]["floor_dollars_per_million"]
                                      + (prices.SCHEDULER_INVOCATION.usd + 0.9 * prices.SQS_REQUEST.usd) * 1e6)
    for name, density in (("exact via SQS delay", "one task per batch"), ("exact via Scheduler", "one task per batch"),
                          (task_cost.DENSE, "full batches of 10")):
        target = targets[f"{name}: $ per million / the exactly-once floor ({density})"]
        w = workloads[name]
        assert target["figure"] == pytest.approx(w["dollars_per_million"] / w["floor_dollars_per_million"]), name
        assert target["limit"] == 1.10 and target["figure"] > 1, name
        logged = targets[f"{name}: log and metric bytes per task at INFO"]
        assert (logged["figure"], logged["limit"]) == (w["log_bytes_per_task"], 300), name


def test_each_floor_rows_gap_adds_up_to_its_dollars_less_its_floor_and_the_headroom_is_the_allowance_spent(
        sections: dict[str, Any]) -> None:
    workloads = sections["P4"]["figures"]["workloads"]
    for name in ("exact via SQS delay", "exact via Scheduler", task_cost.DENSE):
        w = workloads[name]
        gap = w["above_floor_dollars_per_million"]
        assert sum(gap.values()) == pytest.approx(w["dollars_per_million"] - w["floor_dollars_per_million"]), name
        assert gap["read_units"] == pytest.approx(w["floor_read_dollars_per_million"]), name  # the read, apart
        room = w["headroom"]
        assert room["allowance"] == pytest.approx(0.10 * w["floor_dollars_per_million"]), name
        assert room["left"] == pytest.approx(
            room["allowance"] - room["read"] - room["duration_of_its_calls"] - room["hop"]), name
        assert (room["hop"] > 0) == (name == "exact via Scheduler"), name
    # At list prices, 128 MB arm64: the read and 3 x 20 ms leave $0.004 a million above a lone task's floor, 8 bytes
    # of log with no record kept; in full batches the read, strongly consistent, is a full unit a task too, and leaves
    # as much; the hop alone is above the Scheduler path's allowance (docs/benchmarks.md).
    lone = task_cost.headroom(task_cost.floor_usage(1), 1, True, 128)
    assert (round(lone["left"], 3), round(lone["log_bytes_left_with_no_record"])) == (0.004, 8)
    dense = task_cost.headroom(task_cost.floor_usage(10), 10, True, 128)
    assert (round(dense["allowance"], 3), round(dense["left"], 3), round(dense["log_bytes_left_with_no_record"])) == (
        0.139, 0.004, 8)
    hop = task_cost.headroom(task_cost.floor_usage(1, True), 1, True, 128, scheduler=True)
    assert round(hop["allowance"], 3) == 0.365 and hop["hop"] == pytest.approx(1.40) and hop["left"] < 0


def test_the_memory_table_prices_each_functions_measured_cpu_at_each_size_and_reports_the_choice(
        sections: dict[str, Any]) -> None:
    p4m = sections["P4m"]
    functions = p4m["figures"]["functions"]
    assert {"task_stream", "task_executor"} <= set(functions)
    for name, f in functions.items():
        assert f["cpu_seconds"] > 0, name  # the handler's own CPU, measured
        rows = {row[1]: row for row in p4m["rows"] if row[0] == name}
        assert sorted(rows) == list(task_cost.MEMORY_SIZES)
        for memory, row in rows.items():
            billed = task_cost.billed_seconds(f["wait_seconds"], f["cpu_seconds"], memory)
            assert row[5] == pytest.approx(billed * 1000)
            assert row[6] == pytest.approx(billed * memory / 1024 * prices.LAMBDA_GB_SECOND.usd * 1e6)
        for precision, budget in task_cost.LATENESS_BUDGET_SECONDS.items():
            assert f["chosen_mb"][precision] == task_cost.choose_memory(
                f["wait_seconds"], f["cpu_seconds"], f["cpu_before_action"], budget)
    executor = functions["task_executor"]
    assert executor["cpu_before_action"] > 0  # its action calls, timed
    assert functions["task_stream"]["cpu_before_action"] == 0  # no action of its own
    [target] = p4m["targets"]
    assert target["figure"] == pytest.approx(executor["cpu_before_action"] * task_cost.cpu_stretch(
        executor["configured_mb"]))


def test_every_services_requests_are_priced(sections: dict[str, Any]) -> None:
    for name, w in sections["P4"]["figures"]["workloads"].items():
        services = {op.split(":")[0] for op in w["calls_by_operation"]}
        assert services <= set(prices.SERVICE_PRICES), (name, services - set(prices.SERVICE_PRICES))
        assert w["usage_per_task"]["kms_requests"] == pytest.approx(
            w["calls_by_operation"].get("ssm:GetParameter", 0) / w["tasks"]), name  # a SecureString's Decrypt
    usage = sections["P4"]["figures"]["workloads"]["exact via SQS delay, webhook action"]["usage_per_task"]
    assert usage["kms_requests"] > 0  # the webhook's signing secret

"""chalicelib/metrics.py: EMF documents within CloudWatch's limits, one flush, never an exception."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from chalicelib.metrics import LINE_METRICS, LinePoints, Metrics, strategy_of_record
from tests import metric_filters


def documents(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines]


def values(document: dict[str, Any], name: str) -> list[float]:
    """A metric's values in a document as CloudWatch reads them: a number, or a list of numbers."""
    found = document.get(name, [])
    return found if isinstance(found, list) else [found]


def test_counters_add_up_to_one_value_per_flush_and_observations_stay_apart() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    for _ in range(3):
        metrics.count("TasksFailed", 1, Strategy="exact")
    metrics.observe("BackupRunDuration", "Milliseconds", 120, Strategy="exact")
    metrics.observe("BackupRunDuration", "Milliseconds", 80, Strategy="exact")
    assert metrics.flush() == 1
    [document] = documents(lines)
    assert document["TasksFailed"] == 3  # one value: a number, not a list of one (bytes are billed)
    assert document["BackupRunDuration"] == [120, 80]
    assert (document["Stage"], document["Strategy"]) == ("prod", "exact")
    assert "service" not in document  # the dimensions are exactly the documented ones


def test_each_dimension_set_is_its_own_document() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="dev")
    metrics.count("TasksFailed", 1, Strategy="exact")
    metrics.count("TasksFailed", 1, Strategy="lazy")
    metrics.count("BackupRunsCompleted")
    assert metrics.flush() == 3
    dimensions = sorted(tuple(d["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) for d in documents(lines))
    assert dimensions == [("Stage",), ("Stage", "Strategy"), ("Stage", "Strategy")]


def test_a_thousand_observations_are_split_into_documents_of_at_most_100_values() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    for i in range(1000):
        metrics.observe("BackupRunDuration", "Milliseconds", i, Strategy="interval")
    metrics.count("TasksFailed", 1000, Strategy="interval")
    metrics.flush()
    found = documents(lines)
    assert all(len(d["BackupRunDuration"]) <= 100 for d in found if "BackupRunDuration" in d)
    assert sorted(v for d in found for v in values(d, "BackupRunDuration")) == [float(i) for i in range(1000)]
    assert sum(v for d in found for v in values(d, "TasksFailed")) == 1000


def test_a_flush_emits_each_point_once() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    metrics.count("BackupRunsStarted", 1, Trigger="api")
    metrics.flush()
    assert metrics.flush() == 0
    assert len(lines) == 1


def test_points_recorded_from_many_threads_are_all_counted() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")

    def work() -> None:
        for _ in range(500):
            metrics.count("TasksFailed", 1, Strategy="exact")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    metrics.flush()
    assert values(documents(lines)[0], "TasksFailed") == [4000]


def test_an_emit_that_raises_is_logged_not_raised_and_its_points_are_dropped() -> None:
    def broken(line: str) -> None:
        raise BrokenPipeError("stdout")

    metrics = Metrics(emit=broken, stage="prod")
    metrics.count("TasksFailed", 1, Strategy="exact")
    assert metrics.flush() == 0
    assert metrics.pending() == {}


def test_a_value_the_emf_provider_refuses_is_logged_not_raised() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    metrics.observe("BackupRunDuration", "Parsecs", 1.0, Strategy="exact")  # not a CloudWatch unit
    assert metrics.flush() == 0
    assert lines == []


def test_powertools_metrics_disabled_turns_emission_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    metrics.count("TasksFailed", 1, Strategy="exact")
    assert metrics.flush() == 0
    assert lines == []


@pytest.mark.parametrize(("record", "strategy"), [
    ({"dynamodb": {"NewImage": {"strategy": {"S": "lazy"}}}}, "lazy"),
    ({"dynamodb": {"OldImage": {"strategy": {"S": "interval"}}}}, "interval"),
    ({"dynamodb": {"NewImage": {"strategy": {"S": "sometime"}}}}, None),
    ({"dynamodb": {"NewImage": {"strategy": {"N": "1"}}}}, None),
    ({"dynamodb": "garbage"}, None),
    ("not a record", None),
])
def test_a_dead_lettered_records_strategy_is_the_one_its_item_names(record: Any, strategy: str | None) -> None:
    assert strategy_of_record(record) == strategy


def test_a_carried_log_line_rides_on_the_first_document_which_then_names_the_invocation_once() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    line = {"level": "INFO", "message": "due message handled", "function_request_id": "r-1", "outcome": "done"}
    assert metrics.carry(line)
    assert not metrics.carry({**line, "outcome": "failed"})  # one a flush: the caller logs its own
    metrics.count("TasksFailed", 1, Strategy="exact")
    metrics.count("BackupRunsStarted", 1, Trigger="api")
    assert metrics.flush({"request_id": "r-1"}) == 2
    carrying, other = documents(lines)
    assert {k: carrying[k] for k in line} == line and "request_id" not in carrying
    assert carrying["TasksFailed"] == 1 and carrying["_aws"]["CloudWatchMetrics"][0]["Metrics"]
    assert other["request_id"] == "r-1" and "message" not in other


@pytest.mark.parametrize("disabled", [False, True])
def test_a_carried_line_with_no_metrics_to_ride_on_is_logged_alone(
        disabled: bool, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    metrics.carry({"level": "INFO", "message": "due message handled", "task_id": "t-1", "outcome": "skipped: gone"})
    if disabled:  # points recorded, none emitted
        monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
        metrics.count("TasksSkippedCancelled", 1, Strategy="unknown")
    with caplog.at_level("INFO", logger="timekeeper"):
        assert metrics.flush({"request_id": "r-1"}) == 0
    assert lines == []
    [record] = [r for r in caplog.records if r.getMessage() == "due message handled"]
    assert (record.__dict__["task_id"], record.__dict__["outcome"]) == ("t-1", "skipped: gone")


# --- line metrics: read from the executor's line by metric filters (tests/metric_filters.py) ------------------

def test_a_line_metric_is_never_recorded_as_emf() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    metrics.count("TasksExecuted", 1, Strategy="exact")
    metrics.observe("TaskLateness", "Milliseconds", 250, Strategy="exact")
    assert metrics.pending() == {} and metrics.flush() == 0 and lines == []


def test_a_carried_line_rides_only_on_a_document_its_line_metrics_dimensions_agree_with() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    points = LinePoints()
    points.record("TasksExecuted", "exact")
    line = {"level": "INFO", "message": "due message handled", "outcome": "done", **points.fields("prod")}
    metrics.carry(line)
    metrics.count("TasksDeadLettered", 1, Strategy="unknown")  # another strategy's: it would relabel the line
    metrics.count("TasksFailed", 1, Strategy="exact")
    assert metrics.flush({"request_id": "r-1"}) == 2
    unknown, exact = sorted(documents(lines), key=lambda d: "outcome" in d)
    assert "outcome" not in unknown and unknown["Strategy"] == "unknown"
    assert {k: exact[k] for k in line} == line


def test_an_executions_line_fields_are_its_line_metrics_and_their_dimensions_whole_numbers_short() -> None:
    points = LinePoints()
    assert points.fields("prod") == {}  # no execution: nothing for a filter to read
    points.record("TaskLateness", "interval", 250.0)
    points.record("TasksExecuted", "interval")
    assert json.dumps(points.fields("prod"), separators=(",", ":")) == \
        '{"Stage":"prod","Strategy":"interval","TaskLateness":250,"TasksExecuted":1}'
    points.record("TaskLateness", "interval", 12.3456789)
    assert points.fields("prod")["TaskLateness"] == 12.346
    with pytest.raises(ValueError, match="not a line metric"):
        points.record("TasksFailed", "exact")


def test_each_line_metric_filter_reads_the_field_the_executor_writes_with_the_metrics_contract() -> None:
    by_name = {metric.name: metric for metric in LINE_METRICS}
    assert set(by_name) == {"TaskLateness", "TasksExecuted"}
    assert by_name["TasksExecuted"].transformation() == {
        "metricName": "TasksExecuted", "metricNamespace": "Timekeeper", "metricValue": "1", "unit": "Count",
        "dimensions": {"Stage": "$.Stage", "Strategy": "$.Strategy"}}
    assert by_name["TaskLateness"].transformation()["metricValue"] == "$.TaskLateness"
    assert by_name["TaskLateness"].transformation()["unit"] == "Milliseconds"
    points = LinePoints()
    points.record("TaskLateness", "lazy", 120000)
    points.record("TasksExecuted", "lazy")
    event = {"level": "INFO", **points.fields("dev")}
    assert metric_filters.line_metric_values("TaskLateness", [event]) == [
        (120000.0, {"Stage": "dev", "Strategy": "lazy"})]
    assert metric_filters.line_metric_values("TasksExecuted", [event, {"level": "INFO", "outcome": "done"}]) == [
        (1.0, {"Stage": "dev", "Strategy": "lazy"})]


@pytest.mark.parametrize(("pattern", "event", "matched"), [
    ("{ $.TasksExecuted = 1 }", {"TasksExecuted": 1}, True),
    ("{ $.TasksExecuted = 1 }", {"TasksExecuted": 2}, False),
    ("{ $.TasksExecuted = 1 }", {"TasksExecuted": "1"}, False),  # a number compares with numbers only
    ("{ $.TasksExecuted = 1 }", {"outcome": "done"}, False),
    ("{ $.TaskLateness >= 0 }", {"TaskLateness": 0}, True),
    ("{ $.TaskLateness >= 0 }", {"TaskLateness": 12.5}, True),
    ("{ $.TaskLateness >= 0 }", {"TaskLateness": -1}, False),
    ("{ $.TaskLateness >= 0 && $.Strategy = \"exact\" }", {"TaskLateness": 3, "Strategy": "exact"}, True),
    ("{ $.TaskLateness >= 0 && $.Strategy = \"exact\" }", {"TaskLateness": 3, "Strategy": "lazy"}, False),
])
def test_the_filter_pattern_evaluator_reads_json_terms_as_cloudwatch_logs_does(
        pattern: str, event: dict[str, Any], matched: bool) -> None:
    assert metric_filters.matches(pattern, event) is matched

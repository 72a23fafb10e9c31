"""chalicelib/metrics.py: EMF documents within CloudWatch's limits, one flush, never an exception."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from chalicelib.metrics import Metrics, strategy_of_record


def documents(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines]


def test_counters_add_up_to_one_value_per_flush_and_observations_stay_apart() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    for _ in range(3):
        metrics.count("TasksExecuted", 1, Strategy="exact")
    metrics.observe("TaskLateness", "Milliseconds", 120, Strategy="exact")
    metrics.observe("TaskLateness", "Milliseconds", 80, Strategy="exact")
    assert metrics.flush() == 1
    [document] = documents(lines)
    assert document["TasksExecuted"] == [3.0]
    assert document["TaskLateness"] == [120.0, 80.0]
    assert (document["Stage"], document["Strategy"]) == ("prod", "exact")
    assert "service" not in document  # the dimensions are exactly the documented ones


def test_each_dimension_set_is_its_own_document() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="dev")
    metrics.count("TasksExecuted", 1, Strategy="exact")
    metrics.count("TasksExecuted", 1, Strategy="lazy")
    metrics.count("BackupRunsCompleted")
    assert metrics.flush() == 3
    dimensions = sorted(tuple(d["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) for d in documents(lines))
    assert dimensions == [("Stage",), ("Stage", "Strategy"), ("Stage", "Strategy")]


def test_a_thousand_observations_are_split_into_documents_of_at_most_100_values() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    for i in range(1000):
        metrics.observe("TaskLateness", "Milliseconds", i, Strategy="interval")
    metrics.count("TasksExecuted", 1000, Strategy="interval")
    metrics.flush()
    found = documents(lines)
    assert all(len(d["TaskLateness"]) <= 100 for d in found if "TaskLateness" in d)
    assert sorted(v for d in found for v in d.get("TaskLateness", [])) == [float(i) for i in range(1000)]
    assert sum(v for d in found for v in d.get("TasksExecuted", [])) == 1000


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
            metrics.count("TasksExecuted", 1, Strategy="exact")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    metrics.flush()
    assert sum(documents(lines)[0]["TasksExecuted"]) == 4000


def test_an_emit_that_raises_is_logged_not_raised_and_its_points_are_dropped() -> None:
    def broken(line: str) -> None:
        raise BrokenPipeError("stdout")

    metrics = Metrics(emit=broken, stage="prod")
    metrics.count("TasksExecuted", 1, Strategy="exact")
    assert metrics.flush() == 0
    assert metrics.pending() == {}


def test_a_value_the_emf_provider_refuses_is_logged_not_raised() -> None:
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    metrics.observe("TaskLateness", "Parsecs", 1.0, Strategy="exact")  # not a CloudWatch unit
    assert metrics.flush() == 0
    assert lines == []


def test_powertools_metrics_disabled_turns_emission_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    metrics.count("TasksExecuted", 1, Strategy="exact")
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

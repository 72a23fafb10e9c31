"""The alarms on the app's metrics and the stage dashboard: provisioned (moto), matching what the app emits."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from moto import mock_aws

from chalicelib import metrics as m
from chalicelib.aws import Clients
from chalicelib.metrics import Metrics
from chalicelib.settings import Settings
from deploy import observability
from deploy.provision import cloudwatch_client, logs_client, provision
from tests import metric_filters

STAGE_ENV = {"STAGE": "prod", "AWS_REGION": "us-east-1", "SENDER_EMAIL": "reminders@example.com",
             "LATENESS_ALARM_MS": "3000", "BACKUP_SCHEDULE": "rate(1 day)"}


@pytest.fixture
def provisioned() -> Iterator[tuple[Clients, str]]:
    with mock_aws():
        clients = Clients(Settings.from_env(STAGE_ENV))
        topic = provision(clients, clients.settings).environment["ALERT_TOPIC_ARN"]
        yield clients, topic


def alarms(clients: Clients) -> dict[str, dict[str, Any]]:
    return {a["AlarmName"]: dict(a) for a in cloudwatch_client(clients).describe_alarms()["MetricAlarms"]}


def emitted_dimensions(name: str, **dimensions: str) -> list[dict[str, str]]:
    """The dimensions the app's own metrics emit ``name`` with, as an alarm names them: from its EMF document, or
    for a line metric from what its metric filter reads on the executor's line."""
    if name in m.LINE_METRIC_NAMES:
        points = m.LinePoints()
        points.record(name, dimensions.get(m.STRATEGY))
        [(_, found)] = metric_filters.line_metric_values(name, [points.fields("prod")])
        return [{"Name": k, "Value": v} for k, v in found.items()]
    lines: list[str] = []
    metrics = Metrics(emit=lines.append, stage="prod")
    metrics.count(name, 1, **dimensions)
    metrics.flush()
    [document] = [json.loads(line) for line in lines]
    [directive] = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Timekeeper"
    return [{"Name": k, "Value": document[k]} for k in directive["Dimensions"][0]]


def test_a_task_failure_of_any_strategy_alarms_the_alert_topic(provisioned: tuple[Clients, str]) -> None:
    clients, topic = provisioned
    alarm = alarms(clients)["timekeeper-prod-task-failures"]
    assert alarm["AlarmActions"] == [topic] and alarm["ActionsEnabled"] is True
    queries = {q["Id"]: q for q in alarm["Metrics"]}
    for strategy in ("exact", "interval", "lazy"):
        metric = queries[f"failed_{strategy}"]["MetricStat"]["Metric"]
        assert metric["MetricName"] == "TasksFailed"
        assert metric["Dimensions"] == emitted_dimensions("TasksFailed", Strategy=strategy)
    [expression] = [q for q in alarm["Metrics"] if q.get("ReturnData")]
    assert expression["Expression"] == "FILL(failed_exact, 0) + FILL(failed_interval, 0) + FILL(failed_lazy, 0)"
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0.0)


def test_the_exact_strategys_p99_lateness_alarms_above_the_stage_setting(provisioned: tuple[Clients, str]) -> None:
    clients, topic = provisioned
    alarm = alarms(clients)["timekeeper-prod-exact-lateness-p99"]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["ExtendedStatistic"]) == (
        "Timekeeper", "TaskLateness", "p99")
    assert alarm["Dimensions"] == emitted_dimensions("TaskLateness", Strategy="exact")
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (3000.0, "GreaterThanThreshold")  # LATENESS_ALARM_MS
    assert (alarm["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (300, 2, 2)
    assert alarm["AlarmActions"] == [topic]


def test_an_overdue_backup_run_alarms(provisioned: tuple[Clients, str]) -> None:
    clients, topic = provisioned
    alarm = alarms(clients)["timekeeper-prod-backup-run-overdue"]
    assert (alarm["MetricName"], alarm["Statistic"], alarm["Threshold"]) == ("BackupRunsOverdue", "Sum", 0.0)
    assert alarm["Dimensions"] == emitted_dimensions("BackupRunsOverdue")
    assert alarm["AlarmActions"] == [topic]


def test_a_day_without_a_scheduled_run_started_in_36_hours_alarms_and_no_data_counts_as_missed(
        provisioned: tuple[Clients, str]) -> None:
    clients, topic = provisioned
    alarm = alarms(clients)["timekeeper-prod-backup-schedule-missed"]
    assert alarm["Dimensions"] == emitted_dimensions("BackupRunsStarted", Trigger="schedule")
    assert alarm["Period"] * alarm["EvaluationPeriods"] == 36 * 3600  # 1.5 x rate(1 day)
    assert alarm["DatapointsToAlarm"] == alarm["EvaluationPeriods"]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1.0, "LessThanThreshold")
    assert alarm["TreatMissingData"] == "breaching"
    assert alarm["AlarmActions"] == [topic]


@pytest.mark.parametrize(("schedule", "period"), [
    ("rate(1 minute)", timedelta(minutes=1)),
    ("rate(6 hours)", timedelta(hours=6)),
    ("cron(0 3 * * ? *)", timedelta(days=1)),
    ("cron(0 9 ? * MON-FRI *)", timedelta(days=3)),  # Friday to Monday
    ("cron(30 8-17 ? * MON-FRI *)", timedelta(days=2, hours=15)),  # Friday 17:30 to Monday 08:30
    ("cron(0 0,12 * * ? *)", timedelta(hours=12)),
    ("cron(0 0 1 * ? *)", timedelta(days=31)),
])
def test_a_schedules_period_is_its_longest_gap_between_two_firings(schedule: str, period: timedelta) -> None:
    assert observability.schedule_period(schedule) == period


@pytest.mark.parametrize(("schedule", "window"), [
    ("rate(1 minute)", (120, 1)),  # 90 s rounded up to whole minutes
    ("rate(1 hour)", (1800, 3)),
    ("rate(1 day)", (3600, 36)),
    ("cron(0 9 ? * MON-FRI *)", (3600, 108)),
    ("rate(25 hours)", (3600, 38)),  # 37.5 h: past a day CloudWatch needs periods of an hour or more
    ("rate(5 days)", None),  # 7.5 days: longer than any alarm can look back
])
def test_the_missed_schedule_window_is_one_and_a_half_periods_within_cloudwatchs_limits(
        schedule: str, window: tuple[int, int] | None) -> None:
    assert observability.missed_schedule_window(schedule) == window
    if window is not None:
        period, periods = window
        assert period % 60 == 0
        assert period * periods <= (604800 if period >= 3600 else 86400)


def test_a_schedule_too_long_to_watch_gets_no_missed_schedule_alarm() -> None:
    with mock_aws():
        clients = Clients(Settings.from_env({**STAGE_ENV, "BACKUP_SCHEDULE": "rate(7 days)"}))
        provision(clients, clients.settings)
        assert "timekeeper-prod-backup-schedule-missed" not in alarms(clients)
        assert "timekeeper-prod-task-failures" in alarms(clients)


def test_the_dashboard_shows_lateness_percentiles_executions_dlq_depths_and_backup_outcomes(
        provisioned: tuple[Clients, str]) -> None:
    clients, _ = provisioned
    body = json.loads(cloudwatch_client(clients).get_dashboard(DashboardName="timekeeper-prod")["DashboardBody"])
    widgets = {w["properties"]["title"]: w["properties"] for w in body["widgets"]}
    lateness = widgets["Task lateness (ms): p50, p90, p99 per strategy"]["metrics"]
    assert {(m[1], m[5], m[-1]["stat"]) for m in lateness} == {
        ("TaskLateness", s, p) for s in ("exact", "interval", "lazy") for p in ("p50", "p90", "p99")}
    executions = widgets["Task executions and failures"]["metrics"]
    assert {(m[1], m[5]) for m in executions} == {
        (n, s) for n in ("TasksExecuted", "TasksFailed") for s in ("exact", "interval", "lazy")}
    depths = widgets["Dead-letter queue depths"]["metrics"]
    assert sorted(m[3] for m in depths) == ["timekeeper-backup-monitor-dlq", "timekeeper-due-dlq",
                                            "timekeeper-due-scheduler-dlq", "timekeeper-task-dlq"]
    outcomes = widgets["Backup outcomes per run"]
    assert {m[1] for m in outcomes["metrics"]} == {
        "BackupTablesBackedUp", "BackupTablesFailed", "BackupTablesStuck", "BackupsDeleted", "BackupsVerified",
        "BackupVerificationsFailed"}
    assert outcomes["period"] == 86400  # one bar per daily run
    for properties in widgets.values():
        assert properties["region"] == "us-east-1"
        for metric in properties["metrics"]:
            if metric[0] == "Timekeeper":
                assert metric[2:4] == ["Stage", "prod"]


def test_every_metric_the_app_declares_is_on_the_dashboard(provisioned: tuple[Clients, str]) -> None:
    """Derived from chalicelib/metrics.py's declarations, not a second list: a metric added later is shown."""
    clients, _ = provisioned
    body = json.loads(cloudwatch_client(clients).get_dashboard(DashboardName="timekeeper-prod")["DashboardBody"])
    shown = {metric[1] for w in body["widgets"] for metric in w["properties"]["metrics"] if metric[0] == m.NAMESPACE}
    declared = {value for name, value in vars(m).items()
                if name.isupper() and name.startswith(("TASK", "BACKUP")) and isinstance(value, str)}
    assert len(declared) >= 18 and declared <= shown, sorted(declared - shown)


def test_the_metrics_of_the_executors_line_have_a_metric_filter_each_on_its_log_group(
        provisioned: tuple[Clients, str]) -> None:
    """TaskLateness and TasksExecuted are read from the executor's line (chalicelib/metrics.py LINE_METRICS): the
    filters provision put, applied to such a line, publish the metrics the alarm and the dashboard name."""
    clients, _ = provisioned
    group = "/aws/lambda/timekeeper-prod-task_executor"  # Chalice's name of the prod stage's executor
    assert [g["logGroupName"] for g in logs_client(clients).describe_log_groups(
        logGroupNamePrefix=group)["logGroups"]] == [group]
    filters = {f["filterName"]: f for f in logs_client(clients).describe_metric_filters(
        logGroupName=group)["metricFilters"]}
    assert set(filters) == {"TaskLateness", "TasksExecuted"}
    for name, unit, value in (("TaskLateness", "Milliseconds", "$.TaskLateness"), ("TasksExecuted", "Count", "1")):
        [transformation] = filters[name]["metricTransformations"]
        assert transformation == {"metricName": name, "metricNamespace": "Timekeeper", "metricValue": value,
                                  "unit": unit, "dimensions": {"Stage": "$.Stage", "Strategy": "$.Strategy"}}
    line = {"level": "INFO", "message": "due message handled", "outcome": "done", "Stage": "prod",
            "Strategy": "exact", "TaskLateness": 250, "TasksExecuted": 1}
    published = {name: metric_filters.extract(f["filterPattern"], f["metricTransformations"][0], [line])
                 for name, f in filters.items()}
    dimensions = {"Stage": "prod", "Strategy": "exact"}
    assert published == {"TaskLateness": [(250.0, dimensions)], "TasksExecuted": [(1.0, dimensions)]}
    lateness = alarms(clients)["timekeeper-prod-exact-lateness-p99"]
    assert lateness["Dimensions"] == [{"Name": k, "Value": v} for k, v in dimensions.items()]


def test_a_second_provision_leaves_the_alarms_dashboard_and_metric_filters_as_they_are(provisioned: tuple[Clients, str]) -> None:
    clients, _ = provisioned
    assert provision(clients, clients.settings).changes == []
    cloudwatch_client(clients).put_dashboard(DashboardName="timekeeper-prod", DashboardBody='{"widgets": []}')
    group = "/aws/lambda/timekeeper-prod-task_executor"
    logs_client(clients).put_metric_filter(logGroupName=group, filterName="TasksExecuted", filterPattern="{ $.x = 1 }",
                                           metricTransformations=[{"metricName": "TasksExecuted",
                                                                   "metricNamespace": "Timekeeper", "metricValue": "1"}])
    assert provision(clients, clients.settings).changes == [
        "updated dashboard timekeeper-prod", f"updated metric filter TasksExecuted on {group}"]
    assert provision(clients, clients.settings).changes == []

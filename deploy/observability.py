"""The stage's CloudWatch alarms on the app's own metrics and its dashboard, as provision() puts them and
deploy/template.py declares them (docs/operations.md lists them).

Alarms (each to the alert topic; the dead-letter queue alarms are deploy/provision.py's ``dlq_alarm``):

* ``<stage>-task-failures``: a task FAILED after its last attempt (TasksFailed, every strategy) in 5 minutes.
* ``<stage>-exact-lateness-p99``: the exact strategy's p99 TaskLateness above LATENESS_ALARM_MS in two
  5-minute periods in a row.
* ``<stage>-backup-run-overdue``: the monitor polled a backup run still not complete past its deadline
  (BackupRunsOverdue; monitor.run_deadline).
* ``<stage>-backup-schedule-missed``: no scheduled backup run started (BackupRunsStarted, Trigger=schedule)
  in 1.5 times BACKUP_SCHEDULE's period -- for a cron() expression, its longest gap between two firings
  over a year.  CloudWatch evaluates an alarm over 7 days at most, so a schedule whose window is longer
  gets no such alarm (``missed_schedule_window`` says None).

Names are ``timekeeper-<stage>-...``; the dashboard is ``timekeeper-<stage>``.
"""

from __future__ import annotations

import itertools
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from chalicelib import metrics as m
from chalicelib import schedule_expr
from chalicelib.settings import Settings

STRATEGIES = ("exact", "interval", "lazy")
FIVE_MINUTES = 300
HOUR = 3600
MAX_SHORT_RANGE = 86400  # an alarm with a period under an hour evaluates at most one day
MAX_RANGE = 604800  # and any alarm at most seven days
# The firing days of a cron() expression are followed over this span for its longest gap.
CRON_SPAN = timedelta(days=366)
CRON_FROM = datetime(2027, 1, 1, tzinfo=UTC)  # a fixed start: the rendered template does not change by the day


def alarm_prefix(settings: Settings) -> str:
    return f"timekeeper-{settings.stage}"


def dashboard_name(settings: Settings) -> str:
    return f"timekeeper-{settings.stage}"


def schedule_period(expression: str) -> timedelta:
    """The longest time between two firings of an EventBridge rate() or cron() expression."""
    parsed = schedule_expr.parse(expression)
    if isinstance(parsed, schedule_expr.Rate):
        return parsed.every
    if not isinstance(parsed, schedule_expr.Cron):  # at() is not a schedule of runs
        raise ValueError(f"{expression!r} is not a rate() or cron() expression")
    from chalicelib.schedule_fire import next_fire
    # Every firing day fires at the same times of day (UTC): the longest gap is the longest within a day or
    # from one firing day's last time to the next firing day's first, so one next_fire per firing day will do.
    times = sorted(h * 60 + minute for h in parsed.hours.values for minute in parsed.minutes.values)
    longest = max((timedelta(minutes=b - a) for a, b in itertools.pairwise(times)), default=timedelta(0))
    first = next_fire(parsed, CRON_FROM - timedelta(seconds=1))
    if first is None:
        return CRON_SPAN
    end = first + CRON_SPAN
    while first <= end:
        last = first.replace(hour=times[-1] // 60, minute=times[-1] % 60)
        following = next_fire(parsed, last)
        if following is None:
            break
        longest = max(longest, following - last)
        first = following
    return longest or CRON_SPAN


def missed_schedule_window(expression: str) -> tuple[int, int] | None:
    """(period seconds, periods) of the alarm that no run started in 1.5x the schedule's period: the window
    rounded up to whole minutes (to whole hours past a day); None when it passes CloudWatch's 7 days."""
    window = math.ceil(schedule_period(expression).total_seconds() * 1.5 / 60) * 60
    if window > MAX_SHORT_RANGE:
        window = math.ceil(window / HOUR) * HOUR
        return (HOUR, window // HOUR) if window <= MAX_RANGE else None
    period = next(p for p in (HOUR, 1800, 900, 600, FIVE_MINUTES, 120, 60) if window % p == 0)
    return period, window // period


def _dimensions(settings: Settings, **more: str) -> list[dict[str, str]]:
    return [{"Name": m.STAGE, "Value": settings.stage}, *({"Name": k, "Value": v} for k, v in more.items())]


def _alarm(settings: Settings, topic_arn: Any, suffix: str, description: str, **rest: Any) -> dict[str, Any]:
    return {"AlarmName": f"{alarm_prefix(settings)}-{suffix}", "AlarmDescription": description,
            "ActionsEnabled": True, "AlarmActions": [topic_arn], **rest}


def metric_alarms(settings: Settings, topic_arn: Any) -> list[dict[str, Any]]:
    """The alarms on the app's metrics, as PutMetricAlarm's arguments (and the template's properties)."""
    failures = [{"Id": f"failed_{s}", "ReturnData": False, "MetricStat": {
        "Metric": {"Namespace": m.NAMESPACE, "MetricName": m.TASKS_FAILED,
                   "Dimensions": _dimensions(settings, **{m.STRATEGY: s})},
        "Period": FIVE_MINUTES, "Stat": "Sum"}} for s in STRATEGIES]
    alarms = [
        _alarm(settings, topic_arn, "task-failures",
               "A task failed after its last attempt (TasksFailed, any strategy): see the alert, the task and TASK_DLQ",
               Metrics=[*failures, {"Id": "failed", "Label": "TasksFailed", "ReturnData": True,
                                    "Expression": " + ".join(f"FILL(failed_{s}, 0)" for s in STRATEGIES)}],
               EvaluationPeriods=1, DatapointsToAlarm=1, Threshold=0.0,
               ComparisonOperator="GreaterThanThreshold", TreatMissingData="notBreaching"),
        _alarm(settings, topic_arn, "exact-lateness-p99",
               f"The exact strategy's p99 lateness is above {settings.lateness_alarm_ms} ms (LATENESS_ALARM_MS) "
               "for 10 minutes: tasks run late (executor throttled or failing, Scheduler delays)",
               Namespace=m.NAMESPACE, MetricName=m.TASK_LATENESS,
               Dimensions=_dimensions(settings, **{m.STRATEGY: "exact"}), ExtendedStatistic="p99",
               Period=FIVE_MINUTES, EvaluationPeriods=2, DatapointsToAlarm=2,
               Threshold=float(settings.lateness_alarm_ms), ComparisonOperator="GreaterThanThreshold",
               TreatMissingData="notBreaching", Unit=m.MILLISECONDS),
        _alarm(settings, topic_arn, "backup-run-overdue",
               "A backup run is not complete past its deadline (BACKUP_DEADLINE_MINUTES plus a poll and a lease): "
               "see GET /backups/runs and the monitor's logs",
               Namespace=m.NAMESPACE, MetricName=m.BACKUP_RUNS_OVERDUE, Dimensions=_dimensions(settings),
               Statistic="Sum", Period=FIVE_MINUTES, EvaluationPeriods=1, DatapointsToAlarm=1, Threshold=0.0,
               ComparisonOperator="GreaterThanThreshold", TreatMissingData="notBreaching"),
    ]
    window = missed_schedule_window(settings.backup_schedule)
    if window is not None:
        period, periods = window
        alarms.append(_alarm(
            settings, topic_arn, "backup-schedule-missed",
            f"No scheduled backup run started in {period * periods // 60} minutes, 1.5 times BACKUP_SCHEDULE "
            f"{settings.backup_schedule}: see the backup_trigger function and its rule",
            Namespace=m.NAMESPACE, MetricName=m.BACKUP_RUNS_STARTED,
            Dimensions=_dimensions(settings, **{m.TRIGGER: "schedule"}), Statistic="Sum", Period=period,
            EvaluationPeriods=periods, DatapointsToAlarm=periods, Threshold=1.0,
            ComparisonOperator="LessThanThreshold", TreatMissingData="breaching"))
    return alarms


def _metric(settings: Settings, name: str, stat: str, label: str, **dims: str) -> list[Any]:
    return [m.NAMESPACE, name, m.STAGE, settings.stage, *[x for kv in dims.items() for x in kv],
            {"stat": stat, "label": label}]


def _widget(title: str, metrics: list[list[Any]], region: str, x: int, y: int, **properties: Any) -> dict[str, Any]:
    return {"type": "metric", "x": x, "y": y, "width": 12, "height": 6,
            "properties": {"title": title, "view": "timeSeries", "region": region, "metrics": metrics,
                           "period": FIVE_MINUTES, **properties}}


def dashboard_body(settings: Settings, dead_letter_queues: list[str], region: str) -> dict[str, Any]:
    """The stage's dashboard: lateness percentiles per strategy, executions and failures, dead-letter queue
    depths, backup outcomes per run."""
    lateness = [_metric(settings, m.TASK_LATENESS, p, f"{s} {p}", **{m.STRATEGY: s})
                for s in STRATEGIES for p in ("p50", "p90", "p99")]
    executions = [_metric(settings, name, "Sum", f"{s} {label}", **{m.STRATEGY: s})
                  for s in STRATEGIES for name, label in ((m.TASKS_EXECUTED, "executed"), (m.TASKS_FAILED, "failed"))]
    others = [_metric(settings, name, "Sum", f"{s} {label}", **{m.STRATEGY: s})
              for s in (*STRATEGIES, m.UNKNOWN_STRATEGY)
              for name, label in ((m.TASKS_RETRIED, "retried"), (m.TASKS_DEAD_LETTERED, "dead-lettered"),
                                  (m.TASKS_SKIPPED_CANCELLED, "skipped: cancelled"),
                                  (m.TASKS_SKIPPED_RESCHEDULED, "skipped: rescheduled"),
                                  (m.TASKS_RAN_AFTER_CHANGE, "ran after a cancel or move"),
                                  (m.TASKS_PACED, "paced"))
              if not (s == m.UNKNOWN_STRATEGY and name in (m.TASKS_RETRIED, m.TASKS_SKIPPED_RESCHEDULED,
                                                          m.TASKS_RAN_AFTER_CHANGE, m.TASKS_PACED))]
    depths = [["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", q, {"stat": "Maximum", "label": q}]
              for q in dead_letter_queues]
    run_period = min(int(schedule_period(settings.backup_schedule).total_seconds()) // 60 * 60 or 60, 86400)
    outcomes = [_metric(settings, name, "Sum", label) for name, label in (
        (m.BACKUP_TABLES_BACKED_UP, "tables backed up"), (m.BACKUP_TABLES_FAILED, "failed"),
        (m.BACKUP_TABLES_STUCK, "stuck"), (m.BACKUPS_DELETED, "deleted by retention"),
        (m.BACKUPS_VERIFIED, "verified"), (m.BACKUP_VERIFICATIONS_FAILED, "verifications failed"))]
    runs = [_metric(settings, m.BACKUP_RUNS_STARTED, "Sum", "started (schedule)", **{m.TRIGGER: "schedule"}),
            _metric(settings, m.BACKUP_RUNS_STARTED, "Sum", "started (api)", **{m.TRIGGER: "api"}),
            _metric(settings, m.BACKUP_RUNS_COMPLETED, "Sum", "completed"),
            _metric(settings, m.BACKUP_RUNS_OVERDUE, "Sum", "overdue polls"),
            [*_metric(settings, m.BACKUP_RUN_DURATION, "Maximum", "duration (s)")[:-1],
             {"stat": "Maximum", "label": "duration (s)", "yAxis": "right"}]]
    widgets = [
        _widget("Task lateness (ms): p50, p90, p99 per strategy", lateness, region, 0, 0),
        _widget("Task executions and failures", executions, region, 12, 0),
        _widget("Retries, dead letters and skipped due messages", others, region, 0, 6),
        _widget("Dead-letter queue depths", depths, region, 12, 6, period=60),
        _widget("Backup outcomes per run", outcomes, region, 0, 12, period=run_period, view="bar"),
        _widget("Backup runs", runs, region, 12, 12, period=run_period),
    ]
    return {"widgets": widgets}


def dashboard_json(settings: Settings, dead_letter_queues: list[str], region: str) -> str:
    return json.dumps(dashboard_body(settings, dead_letter_queues, region), sort_keys=True)
